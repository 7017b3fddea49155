"""llama.cpp's batch noise on this machine, on BFCL calls: how far the target's logprobs move
when the same answer is decoded in verify-sized batches rather than one token at a time,
beside the closest top-two margin in each answer (where greedy paths can part).

    .venv/bin/python benchmarks/batch_noise.py                 # simple_python 17 39 42 63 85 0 1 2
    .venv/bin/python benchmarks/batch_noise.py --cases 0 1 2   # others

Per case: the constrained plain answer (``tool_choice: "required"``, greedy, up to 40
tokens) is decoded after its prompt three ways, each from an empty cache: one token at a
time (plain decoding), in batches of 5 and in batches of 17 (verify batches).  For every
answer token, |Δ| is the difference of the logprob of the one-at-a-time row's top token
between the two; the margin is the one-at-a-time row's top-two gap.  Written to
benchmarks/results/batch-noise-<machine>-<date>-<commit>.json (localspec.bench.results).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench.bfcl import bfcl_cases, openai_tools
from localspec.bench.results import DEFAULT_OUT, Results
from localspec.llama.report import machine_line, machine_record

ANSWER_TOKENS = 40
BATCHES = (5, 17)


def _logprobs(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    top = row.max()
    return row - top - np.log(np.exp(row - top).sum())


def _rows(engine, prompt: list[int], answer: list[int], batch: int) -> list[np.ndarray]:
    """Logprob rows for each answer token's position, the answer decoded ``batch`` at a time."""
    engine.trim(0)
    engine.decode(prompt, [])
    rows = []
    for start in range(0, len(answer), batch):
        part = answer[start : start + batch]
        rows += [_logprobs(r) for r in engine.decode(part, range(len(part)))]
    return rows


def _case_row(model, case) -> dict:
    tools = openai_tools(case)
    answer = model.chat(
        list(case.messages), tools=tools, tool_choice="required", temperature=0, max_tokens=64
    )
    prompt, tokens = (
        model.target.chat_tokens(list(case.messages), tools),
        answer.tokens[:ANSWER_TOKENS],
    )
    one = _rows(model.target, prompt, tokens, 1)
    margins = [float(np.diff(np.sort(r)[-2:])[0]) for r in one]
    row = {"id": case.id, "tokens": len(tokens), "closest_margin": min(margins)}
    for batch in BATCHES:
        other = _rows(model.target, prompt, tokens, batch)
        row[f"delta_batch_{batch}"] = [
            abs(float(a[a.argmax()] - b[a.argmax()])) for a, b in zip(one, other)
        ]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, nargs="+", default=[17, 39, 42, 63, 85, 0, 1, 2])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    record = machine_record()
    print(f"machine: {machine_line(record)}")
    cases = bfcl_cases("simple_python", max(args.cases) + 1)
    pair = resolve_pair(None)
    with SpeculativeModel(pair.target, None, n_ctx=4096, strategy="none") as model:
        rows = [_case_row(model, cases[i]) for i in args.cases]
    summary = {}
    for batch in BATCHES:
        deltas = [d for r in rows for d in r[f"delta_batch_{batch}"]]
        summary[f"batch_{batch}"] = {
            "median": statistics.median(deltas),
            "p90": float(np.quantile(deltas, 0.9)),
            "max": max(deltas),
        }
    for r in rows:
        print(f"{r['id']}: closest top-two margin {r['closest_margin']:.3f} nats")
    for name, s in summary.items():
        print(
            f"{name}: |Δ logprob| median {s['median']:.4f}, p90 {s['p90']:.4f}, max {s['max']:.3f} nats"
        )
    results = Results(args.out, "batch-noise", record)
    results.write({"summary": summary, "cases": rows})
    results.done()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
