"""``localspec bench rollback``: what going back after a rejected draft costs a model that
keeps a recurrent state, on this machine.

    localspec bench rollback             # LFM2-350M's dimensions, Q4_K_M, random weights
    localspec bench rollback --rounds 8  # fewer rounds
    localspec bench rollback --smoke     # the tests' tiny LFM2, 4 rounds

A GGUF with LFM2-350M's dimensions (:data:`~localspec.llama.synthetic_hybrid.LFM2_350M`:
short convolutions beside attention) and random weights is written and quantized to Q4_K_M by
llama.cpp (the cost does not depend on the weights' values), then loaded twice: with
recurrent-state snapshots (llama.cpp's ``n_rs_seq``) and without (every rollback from a state
saved before the verify, then the kept tokens decoded again;
:mod:`~localspec.llama.engine.rollback`).  After a 512-token prompt, each round is a verify of
5 tokens (the last one and a 4-token draft) of which 1 is kept: 3 positions go back.  Reported
per way: a one-token step, the verify, the rollback (saving, restoring, decoding again) and its
share of the round (rollback ÷ (verify + rollback)), medians over ``--rounds``, with the
recurrent state's size per sequence.

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
HELP = "what going back after a rejected draft costs a hybrid model (snapshots vs a saved state)"
KIND = "rollback"
PROMPT_TOKENS, DRAFT, KEPT = 512, 4, 1
WAYS = {"snapshots": None, "saved state": 0}  # EngineConfig.rs_snapshots


def model_file(folder: Path, smoke: bool) -> Path:
    """The benchmark's GGUF: the tiny LFM2 (smoke) or LFM2-350M's dimensions in Q4_K_M."""
    from localspec.llama.quantize import quantize_q4_k_m
    from localspec.llama.synthetic_hybrid import LFM2_350M, TINY, write_hybrid_model

    if smoke:
        return write_hybrid_model(folder / "lfm2-tiny.gguf", 1, "lfm2", TINY)
    print("writing a GGUF of LFM2-350M's dimensions...", file=sys.stderr, flush=True)
    f16 = write_hybrid_model(folder / "lfm2-350m-f16.gguf", 1, "lfm2", LFM2_350M)
    q4k = folder / "lfm2-350m-q4_k_m.gguf"
    print("quantizing it to Q4_K_M...", file=sys.stderr, flush=True)
    if not quantize_q4_k_m(f16, q4k):
        raise RuntimeError("llama.cpp could not quantize the benchmark's model")
    f16.unlink()
    return q4k


def measure(path: Path, snapshots: int | None, rounds: int) -> dict:
    """Medians over ``rounds`` of a one-token step, a 5-token verify and the rollback of 3
    positions after it (ms), on an engine with ``snapshots`` (EngineConfig.rs_snapshots)."""
    from localspec.llama.engine import Engine, EngineConfig, default_threads

    engine = Engine(path, EngineConfig(n_ctx=2048, rs_snapshots=snapshots))
    try:
        engine.decode([3 + i % 300 for i in range(PROMPT_TOKENS)], [PROMPT_TOKENS - 1])
        state = engine.recurrent_state_bytes()
        steps, verifies, backs = [], [], []
        for r in range(rounds):
            before = engine.decode_s
            engine.decode([5 + r % 50], [0])
            steps.append(engine.decode_s - before)
            back_before = engine.rollback_time()
            engine.prepare_rollback(DRAFT)
            before = engine.decode_s
            engine.decode([7 + (r + i) % 50 for i in range(DRAFT + 1)], range(DRAFT + 1))
            verifies.append(engine.decode_s - before)
            engine.trim(len(engine.cache_tokens) - (DRAFT - KEPT))
            backs.append(engine.rollback_time() - back_before)
        return {
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
    finally:
        engine.close()


def markdown(result: dict) -> str:
    from localspec.llama.report import machine_line

    lines = [
        f"Machine: {machine_line(result['machine'])}.",
        "",
        f"{result['model']}; a {PROMPT_TOKENS}-token prompt, then {result['rounds']} rounds of a "
        f"{DRAFT + 1}-token verify keeping {KEPT} draft token ({DRAFT - KEPT} positions go back); "
        "medians.",
        "",
        "| way back | snapshots | state per sequence | one-token step | verify of 5 | rollback "
        "| rollback ÷ round |",
        "|---|---|---|---|---|---|---|",
    ]
    for way, got in result["ways"].items():
        lines.append(
            f"| {way} | {got['n_rs_seq']} | {got['state_kib']:.0f} KiB | {got['step_ms']:.1f} ms "
            f"| {got['verify_ms']:.1f} ms | {got['rollback_ms']:.2f} ms "
            f"| {100 * got['rollback_share']:.1f} % |"
        )
    return "\n".join(lines) + "\n"


def add_arguments(parser) -> None:
    parser.add_argument("--rounds", type=int, default=24, help="rounds per way (default 24)")
    add_smoke(parser, "the tests' tiny LFM2, 4 rounds")
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
    with tempfile.TemporaryDirectory(prefix="localspec-rollback-") as tmp:
        path = model_file(Path(tmp), args.smoke)
        model = "the tests' tiny LFM2" if args.smoke else "LFM2-350M's dimensions, Q4_K_M"
        result: dict = {"model": model, "rounds": rounds, "ways": {}}
        for way, snapshots in WAYS.items():
            result["ways"][way] = measure(path, snapshots, rounds)
            print(f"{way}: {result['ways'][way]}", file=sys.stderr, flush=True)
    text = markdown({**results.header(), **result})
    results.write(result, text)
    print(text)
    results.done()
    return 0
