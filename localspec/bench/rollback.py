"""``localspec bench rollback``: what going back after a rejected draft costs a model that
keeps a recurrent state, and what the target's own MTP block costs to draft, on this machine.

    localspec bench rollback             # LFM2-350M's and Qwen3.5-0.8B's dimensions, Q4_K_M
    localspec bench rollback --rounds 8  # fewer rounds
    localspec bench rollback --smoke     # the tests' tiny LFM2 and Qwen3.5, 4 rounds

Two GGUFs of real models' dimensions with random weights are written and quantized to Q4_K_M
by llama.cpp (the cost does not depend on the weights' values): LFM2-350M
(:data:`~localspec.llama.synthetic_hybrid.LFM2_350M`: short convolutions beside attention)
and Qwen3.5-0.8B (:data:`~localspec.llama.synthetic_hybrid.QWEN35_0_8B`: Gated DeltaNet
beside attention, and its MTP block).  Each is loaded twice: with recurrent-state snapshots
(llama.cpp's ``n_rs_seq``) and without (every rollback from a state saved before the verify,
then the kept tokens decoded again; :mod:`~localspec.llama.engine.rollback`).  After a
512-token prompt, each round is a verify of 5 tokens (the last one and a 4-token draft) of
which 1 is kept: 3 positions go back; on the Qwen3.5 the MTP block drafts the 4 tokens first,
as the ``mtp`` drafter does.  Reported per model and way: a one-token step, the verify, the
rollback (saving, restoring, decoding again) and its share of the round (rollback ÷ (verify +
rollback)), the MTP block's step per draft token, medians over ``--rounds``, with the
recurrent state's size per sequence; and the draft length the adaptive policy's cost model
(:class:`~localspec.decoding.policy.RoundPricing`) picks from these costs at a few
acceptance rates, with its expected speed against plain decoding.

Written to ``rollback-<machine>-<date>-<commit>.{json,md}`` in ``--out``
(``rollback-smoke.*`` for ``--smoke``).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from localspec.bench.cli import add_out, add_smoke, positive

NAME = "rollback"
HELP = (
    "what going back after a rejected draft costs a hybrid model (snapshots vs a saved state), "
    "and its MTP block's draft step"
)
KIND = "rollback"
PROMPT_TOKENS, DRAFT, KEPT = 512, 4, 1
WAYS = {"snapshots": None, "saved state": 0}  # EngineConfig.rs_snapshots
ACCEPTANCES = (0.5, 0.7, 0.9)  # the policy's choice is shown at these acceptance rates
MODELS = {  # architecture -> (its name in the table, the real model's shape's name)
    "lfm2": ("LFM2-350M's dimensions", "LFM2_350M"),
    "qwen35": ("Qwen3.5-0.8B's dimensions, with its MTP block", "QWEN35_0_8B"),
}


def model_file(folder: Path, architecture: str, smoke: bool) -> Path:
    """The benchmark's GGUF of ``architecture``: the tests' tiny one (smoke) or the real
    model's dimensions in Q4_K_M."""
    from localspec.llama import synthetic_hybrid
    from localspec.llama.quantize import quantize_q4_k_m

    if smoke:
        return synthetic_hybrid.write_hybrid_model(
            folder / f"{architecture}-tiny.gguf", 1, architecture
        )
    label, shape = MODELS[architecture]
    print(f"writing a GGUF of {label}...", file=sys.stderr, flush=True)
    f16 = synthetic_hybrid.write_hybrid_model(
        folder / f"{architecture}-f16.gguf", 1, architecture, getattr(synthetic_hybrid, shape)
    )
    q4k = folder / f"{architecture}-q4_k_m.gguf"
    print("quantizing it to Q4_K_M...", file=sys.stderr, flush=True)
    if not quantize_q4_k_m(f16, q4k):
        raise RuntimeError("llama.cpp could not quantize the benchmark's model")
    f16.unlink()
    return q4k


def measure(path: Path, snapshots: int | None, rounds: int, mtp: bool = False) -> dict:
    """Medians over ``rounds`` of a one-token step, a 5-token verify and the rollback of 3
    positions after it (ms), on an engine with ``snapshots`` (EngineConfig.rs_snapshots);
    with ``mtp``, the target's MTP block drafts each round's 4 tokens (its step per token)."""
    from localspec.llama.engine import Engine, EngineConfig, default_threads

    engine = Engine(path, EngineConfig(n_ctx=2048, rs_snapshots=snapshots, load_mtp=mtp))
    try:
        engine.decode([3 + i % 300 for i in range(PROMPT_TOKENS)], [PROMPT_TOKENS - 1])
        state = engine.recurrent_state_bytes()
        readings = [_round(engine, r) for r in range(rounds)]
        steps, verifies, backs, drafts = (list(column) for column in zip(*readings))
        got = {
            "n_rs_seq": engine.n_rs_seq,
            "threads": default_threads(),
            "state_kib": state / 1024,
            "step_ms": 1000 * statistics.median(steps),
            "verify_ms": 1000 * statistics.median(verifies),
            "rollback_ms": 1000 * statistics.median(backs),
            "rollback_share": statistics.median(
                b / (v + b) for v, b in zip(verifies, backs) if v + b > 0
            ),
            "ways": dict(engine.rollbacks),
        }
        if mtp:
            got["mtp_ms"] = 1000 * statistics.median(drafts) / DRAFT
        return got
    finally:
        engine.close()


def _round(engine, r: int) -> tuple[float, float, float, float]:
    """One round's (step, verify, rollback, MTP draft) seconds: a plain one-token step, then
    the MTP block's draft of 4 (0 without one), a verify of 5 and 3 positions taken back."""
    before = engine.decode_s
    engine.decode([5 + r % 50], [0])
    step = engine.decode_s - before
    last, draft_s = 7 + r % 50, 0.0
    if engine.mtp is not None:
        before = engine.mtp.decode_s
        engine.mtp.draft(last, DRAFT, lambda logits: (int(logits.argmax()), 1.0, False))
        draft_s = engine.mtp.decode_s - before
    back_before = engine.rollback_time()
    engine.prepare_rollback(DRAFT)
    before = engine.decode_s
    engine.decode([last] + [9 + (r + i) % 50 for i in range(DRAFT)], range(DRAFT + 1))
    verify = engine.decode_s - before
    engine.trim(len(engine.cache_tokens) - (DRAFT - KEPT))
    return step, verify, engine.rollback_time() - back_before, draft_s


def policy_choice(got: dict) -> dict:
    """The draft length (0 to 4) the adaptive policy's pricing picks for the MTP block at
    each of :data:`ACCEPTANCES`, from the costs measured in ``got`` (a verify of 1 and of 5,
    the rollback counted in the verify as the loop counts it), and its expected speed
    against plain decoding: ``{acceptance: {"k", "speed"}}``."""
    from localspec.decoding.policy import RoundPricing, expected_tokens

    step_s = got["step_ms"] / 1000
    verify = {1: step_s, DRAFT + 1: (got["verify_ms"] + got["rollback_ms"]) / 1000}
    pricing, draft_s = RoundPricing(verify, step_s), got["mtp_ms"] / 1000
    plain = pricing.rate(1.0, 0.0, 0)
    choice = {}
    for alpha in ACCEPTANCES:
        rates = {
            k: pricing.rate(expected_tokens(alpha, k), k * draft_s, k) for k in range(DRAFT + 1)
        }
        best = max(rates, key=rates.get)
        choice[str(alpha)] = {"k": best, "speed": rates[best] / plain}
    return choice


def markdown(result: dict) -> str:
    from localspec.llama.report import machine_line

    lines = [
        f"Machine: {machine_line(result['machine'])}.",
        "",
        f"Random weights{'' if result['smoke'] else ', Q4_K_M'}; a {PROMPT_TOKENS}-token prompt, "
        f"then {result['rounds']} rounds of a {DRAFT + 1}-token verify keeping {KEPT} draft "
        f"token ({DRAFT - KEPT} positions go back); medians.",
        "",
        "| model | way back | snapshots | state per sequence | one-token step | MTP step "
        "| verify of 5 | rollback | rollback ÷ round |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model in result["models"].values():
        for way, got in model["ways"].items():
            mtp = f"{got['mtp_ms']:.1f} ms" if "mtp_ms" in got else "–"
            lines.append(
                f"| {model['label']} | {way} | {got['n_rs_seq']} | {got['state_kib']:.0f} KiB "
                f"| {got['step_ms']:.1f} ms | {mtp} | {got['verify_ms']:.1f} ms "
                f"| {got['rollback_ms']:.2f} ms | {100 * got['rollback_share']:.1f} % |"
            )
    return "\n".join(lines + _choice_lines(result)) + "\n"


def _choice_lines(result: dict) -> list[str]:
    """The policy's choice for each measured MTP block, per way back and acceptance."""
    lines = [
        "",
        "The MTP block's draft length the policy's pricing picks from these costs, and its "
        "expected speed against plain:",
        "",
        "| model | way back | " + " | ".join(f"acceptance {a}" for a in ACCEPTANCES) + " |",
        "|---|---|" + "---|" * len(ACCEPTANCES),
    ]
    rows = [
        f"| {model['label']} | {way} | "
        + " | ".join(f"k = {c['k']}, ×{c['speed']:.2f}" for c in got["policy_choice"].values())
        + " |"
        for model in result["models"].values()
        for way, got in model["ways"].items()
        if "policy_choice" in got
    ]
    return lines + rows if rows else []


def add_arguments(parser) -> None:
    parser.add_argument("--rounds", type=int, default=24, help="rounds per way (default 24)")
    add_smoke(parser, "the tests' tiny LFM2 and Qwen3.5, 4 rounds")
    add_out(parser)


def check(args) -> None:
    positive("--rounds", args.rounds)


def main(args) -> int:
    from localspec.bench.results import Results
    from localspec.llama.report import machine_line, machine_record

    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    rounds = 4 if args.smoke else args.rounds
    results = Results(args.out, KIND, record, smoke=args.smoke)
    result: dict = {"rounds": rounds, "smoke": args.smoke, "models": {}}
    with tempfile.TemporaryDirectory(prefix="localspec-rollback-") as tmp:
        for architecture, (label, _) in MODELS.items():
            path = model_file(Path(tmp), architecture, args.smoke)
            label = f"tiny {architecture}" if args.smoke else label
            result["models"][architecture] = {"label": label, "ways": {}}
            for way, snapshots in WAYS.items():
                got = measure(path, snapshots, rounds, mtp=architecture == "qwen35")
                if "mtp_ms" in got:
                    got["policy_choice"] = policy_choice(got)
                result["models"][architecture]["ways"][way] = got
                print(f"{label}, {way}: {got}", file=sys.stderr, flush=True)
                results.write(result, markdown({**results.header(), **result}))
    text = markdown({**results.header(), **result})
    results.write(result, text)
    print(text)
    results.done()
    return 0
