"""``localspec bench first-answer``: the first answer of a process, the adaptive default
against ``--draft none``, with the learned store warm and cold.

    localspec bench first-answer              # 5 prompts, 10 interleaved pairs each, warm and cold
    localspec bench first-answer --pairs 3    # fewer pairs
    localspec bench first-answer --prompts readme,code --stores warm   # some of them
    localspec bench first-answer --smoke      # the README prompt, 1 pair, 16 tokens

Every answer is the first of a fresh process (``python -c``, the library loaded as
``localspec run`` loads it: the default pair, ``n_ctx`` 4096; ``--draft none`` loads the
target only), greedy, ``--max-tokens`` tokens (default 128).  Its speed is decode t/s,
tokens after the first over the seconds after the first (the library's ``tokens_per_s``,
:func:`localspec.bench.client.decode_tps`'s figure), so neither the model load nor the
prompt read counts; the load's seconds and the time to the first token are written beside.

Prompts (:func:`first_prompts`): the README's ``localspec run`` example, and a HumanEval
problem (code), an MT-Bench writing question (prose), an edit of a HumanEval solution and a
BFCL call answered as JSON under its schema (``response_format``).

Stores (``LOCALSPEC_STORE``, :mod:`localspec.llama.machine_store`): *warm*, the store as
earlier runs left it (``--store DIR``, default the user's own store); *cold*, a fresh empty
directory for each process (costs measured again at load, acceptance from no prior).

Pairs are interleaved: pair by pair, prompt by prompt, store by store, default and plain
back to back, their order swapped every other time.  Per prompt and store: each pair's
ratio default / plain, their mean with its 95 % interval (:mod:`localspec.bench.ratios`),
median and worst; whether default's text was plain's.  And where default's time went against
plain's (:class:`~localspec.decoding.attribution.TimeAccount`, mean seconds per answer): its
rounds won and lost, the draft model's prompt read and catch-up, the policy's own time, and
what is left of the difference in decode seconds (the target's step with the draft model
loaded, and noise).

Written to ``first-answer-<machine>-<date>-<commit>.{json,md,png}`` in ``--out``
(``first-answer-smoke.*`` for ``--smoke``: no plot), rewritten after each pair.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from localspec.bench.cli import add_out, add_smoke, comma_names, positive
from localspec.bench.ratios import interval_text, mean_interval
from localspec.bench.results import Results

NAME = "first-answer"
HELP = (
    "the first answer of a fresh process, default vs --draft none, the learned store warm and cold"
)
KIND = "first-answer"
README_PROMPT = "Write a Python function that checks whether a number is prime."
MODES = ("default", "plain")
STORES = ("warm", "cold")


def first_prompts() -> dict[str, dict]:
    """The five first prompts by name: ``{"messages", "response_format"}`` each."""
    from localspec.bench.workloads import call_prompts, code_prompts, edit_prompts, mtbench_prompts

    chosen = {
        "code": code_prompts(1)[0],
        "prose": mtbench_prompts(1, ("writing",))[0],
        "edit": edit_prompts(1)[0],
        "json": call_prompts(1)[0],
    }
    out = {
        "readme": {
            "messages": [{"role": "user", "content": README_PROMPT}],
            "response_format": None,
        }
    }
    return out | {
        k: {"messages": p.messages, "response_format": p.response_format} for k, p in chosen.items()
    }


def child(spec: dict) -> dict:
    """Runs in the fresh process: load as ``localspec run`` does (``spec``'s ``target`` and
    ``draft``, default the default pair), answer once, the figures (t/s, seconds)."""
    from localspec.api import load

    started = time.perf_counter()
    plain = spec["mode"] == "plain"
    draft = None if plain else spec.get("draft", "auto")
    model = load(spec.get("target"), draft, n_ctx=4096, strategy="none" if plain else "auto")
    load_s = time.perf_counter() - started
    try:
        extra = {"response_format": spec["response_format"]} if spec["response_format"] else {}
        result = model.chat(spec["messages"], max_tokens=spec["max_tokens"], temperature=0, **extra)
    finally:
        model.close()
    s = result.stats
    return {
        "decode_tps": s.tokens_per_s,
        "tokens": s.generated_tokens,
        "ttft_s": s.ttft_s,
        "load_s": load_s,
        "drafted": s.drafted_tokens,
        "accepted": s.accepted_tokens,
        "decode_s": s.total_s - s.ttft_s,
        "against_plain": s.against_plain.to_dict(),
        "text": result.text,
    }


def run_child(spec: dict, store: str | None) -> dict:
    """:func:`child` in a fresh interpreter, ``LOCALSPEC_STORE`` set to ``store`` (None: as
    this process has it); RuntimeError with the child's last output when it fails."""
    from localspec.llama.machine_store import ENV_DIR

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if store is not None:
        env[ENV_DIR] = store
    code = (
        "import json, sys; from localspec.bench import first_answer as f; "
        "print(json.dumps(f.child(json.load(sys.stdin))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the first-answer child failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_run(spec: dict, store_kind: str, warm_store: str | None) -> dict:
    if store_kind == "warm":
        return run_child(spec, warm_store)
    cold = tempfile.mkdtemp(prefix="localspec-cold-store-")
    try:
        return run_child(spec, cold)
    finally:
        shutil.rmtree(cold, ignore_errors=True)


def ratios(pairs: list[dict]) -> dict:
    """Each pair's default / plain decode t/s, and their mean, median and worst (the least);
    ``same_text``: the pairs whose two answers were one text."""
    values = [
        p["default"]["decode_tps"] / p["plain"]["decode_tps"]
        for p in pairs
        if p["plain"]["decode_tps"]
    ]
    if not values:
        return {"ratios": [], "mean": None, "median": None, "worst": None, "same_text": 0}
    interval = mean_interval(values)
    return {
        "ratios": values,
        "mean": interval["mean"],
        "interval": [interval["low"], interval["high"]],
        "median": statistics.median(values),
        "worst": min(values),
        "same_text": sum(p["default"]["text"] == p["plain"]["text"] for p in pairs),
        "plain_tps_range": [
            min(p["plain"]["decode_tps"] for p in pairs),
            max(p["plain"]["decode_tps"] for p in pairs),
        ],
        "attribution": attribution(pairs),
    }


ACCOUNT = ("won_s", "lost_s", "catch_up_s", "draft_prompt_s", "policy_s", "net_s")


def attribution(pairs: list[dict]) -> dict:
    """Mean seconds per answer of default's :class:`~localspec.decoding.attribution.TimeAccount`
    parts, its decode seconds less plain's (``slower_s``), and what the account leaves of that
    (``unexplained_s`` = slower_s + net_s + draft_prompt_s, the prompt read being before the
    first token: the target's own step with the draft model loaded, and noise)."""
    got = [p["default"].get("against_plain") for p in pairs]
    if not pairs or any(a is None for a in got):
        return {}
    out = {k: statistics.fmean(a[k] for a in got) for k in ACCOUNT}
    out["slower_s"] = statistics.fmean(
        p["default"]["decode_s"] - p["plain"]["decode_s"] for p in pairs
    )
    # the draft model's prompt read comes before the first token, outside the decode seconds
    out["unexplained_s"] = out["slower_s"] + out["net_s"] + out["draft_prompt_s"]
    return out


def order(pair: int, slot: int) -> tuple[str, ...]:
    """Default first, then plain, swapped every other time (``pair + slot`` odd)."""
    return MODES if (pair + slot) % 2 == 0 else MODES[::-1]


def markdown(result: dict) -> str:
    from localspec.llama.report import machine_line

    lines = [
        f"Machine: {machine_line(result['machine'])}.",
        "",
        f"{result['max_tokens']} tokens, greedy, {result['pairs']} interleaved pairs per prompt "
        "and store; "
        f"warm store {result['warm_store']}.",
        "",
        "| prompt | store | default ÷ plain, mean [95 % interval] | median | worst | pairs | same "
        "text | plain t/s, range |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def f(x):
        return "" if x is None else f"{x:.2f}"

    for row in result["summary"]:
        span = row.get("plain_tps_range")
        plain = f"{span[0]:.1f}–{span[1]:.1f}" if span else ""
        low, high = row.get("interval") or (None, None)
        mean = interval_text({"mean": row["mean"], "low": low, "high": high})
        lines.append(
            f"| {row['prompt']} | {row['store']} | {mean} | {f(row['median'])} | "
            f"{f(row['worst'])} "
            f"| {len(row['ratios'])} | {row['same_text']} | {plain} |"
        )
    return "\n".join(lines + attribution_table(result["summary"])) + "\n"


def attribution_table(rows: list[dict]) -> list[str]:
    """Where default's time went against plain's, per prompt and store (mean seconds)."""
    lines = [
        "",
        "Where default's time went against plain's, mean seconds per answer (decode only; "
        "net: won − lost − catch-up − draft prompt − policy; unexplained: default's decode "
        "seconds less plain's, plus net):",
        "",
        "| prompt | store | won | lost | catch-up | draft prompt | policy | net | slower by "
        "| unexplained |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        a = row.get("attribution")
        if a:
            cells = " | ".join(f"{a[k]:+.2f}" for k in (*ACCOUNT, "slower_s", "unexplained_s"))
            lines.append(f"| {row['prompt']} | {row['store']} | {cells} |")
    return lines


def summary(runs: dict) -> list[dict]:
    return [
        {"prompt": p, "store": s, **ratios(got)}
        for p, by_store in runs.items()
        for s, got in by_store.items()
    ]


def plot(result: dict, path) -> None:
    """Every pair's ratio, by prompt, warm and cold side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["summary"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, row in enumerate(rows):
        ax.scatter(
            [i] * len(row["ratios"]),
            row["ratios"],
            s=14,
            color="C0" if row["store"] == "warm" else "C1",
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [f"{r['prompt']}\n{r['store']}" for r in rows], fontsize=7)
    ax.set_ylabel("decode t/s, default ÷ plain (each pair)")
    ax.set_title(f"first answer of a process; {result['max_tokens']} tokens, greedy", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--pairs", type=int, default=10, help="interleaved pairs per prompt and store (default 10)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=128, help="tokens per answer (default 128)"
    )
    parser.add_argument(
        "--store", metavar="DIR", help="the warm store's directory (default: the user's own store)"
    )
    parser.add_argument(
        "--prompts",
        default="readme,code,prose,edit,json",
        help="prompts, comma-separated (default all: readme,code,prose,edit,json)",
    )
    parser.add_argument(
        "--stores", default="warm,cold", help="learned stores, comma-separated (default warm,cold)"
    )
    add_smoke(parser, "the README prompt, 1 pair, 16 tokens, warm and cold")
    add_out(parser)


def check(args) -> None:
    from localspec.errors import InvalidOptionError

    positive("--pairs", args.pairs)
    positive("--max-tokens", args.max_tokens)
    for option, given, known in (
        ("--prompts", args.prompts, ("readme", "code", "prose", "edit", "json")),
        ("--stores", args.stores, STORES),
    ):
        names = comma_names(given)
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise InvalidOptionError(
                f"{option}: unknown {', '.join(unknown) or '(none given)'}; of {', '.join(known)}"
            )


def main(args) -> int:
    from localspec.llama.machine_store import store_dir
    from localspec.llama.report import machine_line, machine_record

    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    prompts = first_prompts()
    chosen = ["readme"] if args.smoke else comma_names(args.prompts)
    prompts = {name: prompts[name] for name in chosen}
    stores = STORES if args.smoke else tuple(comma_names(args.stores))
    pairs, max_tokens = (1, 16) if args.smoke else (args.pairs, args.max_tokens)
    warm = str(args.store) if args.store else None
    results = Results(args.out, KIND, record, smoke=args.smoke)
    result: dict = {
        "pairs": pairs,
        "max_tokens": max_tokens,
        "warm_store": str(warm or store_dir()),
    }
    runs: dict = {p: {s: [] for s in stores} for p in prompts}
    for i in range(pairs):
        for j, (name, prompt) in enumerate(prompts.items()):
            for k, store in enumerate(stores):
                got = {
                    m: one_run({**prompt, "mode": m, "max_tokens": max_tokens}, store, warm)
                    for m in order(i, j + k)
                }
                runs[name][store].append(got)
                d, p = got["default"]["decode_tps"], got["plain"]["decode_tps"]
                print(
                    f"pair {i + 1}/{pairs} {name} {store}: default {d:.1f} t/s, plain {p:.1f} "
                    f"t/s, ×{d / p:.2f}"
                    if p
                    else f"pair {i + 1}/{pairs} {name} {store}: plain answered one token",
                    file=sys.stderr,
                    flush=True,
                )
        result |= {"runs": runs, "summary": summary(runs)}
        results.write(result, markdown({**results.header(), **result}))
    text = markdown({**results.header(), **result})
    if not args.smoke:
        results.write(result, text, lambda path: plot(result, path))
    print(text)
    results.done()
    return 0
