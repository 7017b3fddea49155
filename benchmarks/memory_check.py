"""The pair memory estimate (``localspec.models.memory``, GGUF metadata only) against what loading
the default pair really adds to this process's resident set (Linux ``VmRSS``).

    .venv/bin/python benchmarks/memory_check.py [--n-ctx 4096]

RSS is read before loading, then after loading and generating 32 tokens (so the weights'
pages, the KV cache touched so far and the compute buffers are resident); the KV cache is
allocated in full but only the pages written count, so the check uses a prompt plus answer
filling part of it and also reports the estimate without the untouched KV share.
Written to benchmarks/results/memory-<machine>-<date>-<commit>.json (localspec.bench.results).
"""

import argparse
from pathlib import Path

from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench.results import DEFAULT_OUT, Results
from localspec.llama.report import machine_line, machine_record
from localspec.models.memory import gib, pair_memory


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    pair = resolve_pair()
    est = pair_memory(pair.target, pair.draft, args.n_ctx)
    before = rss_bytes()
    with SpeculativeModel(pair.target, pair.draft, n_ctx=args.n_ctx) as m:
        m.chat(
            [{"role": "user", "content": "Write a Python function that reverses a string."}],
            max_tokens=32,
            strategy="draft-model",
            draft_max=4,
        )
        after = rss_bytes()
    added = after - before
    result = {
        "machine": machine_record(),
        "n_ctx": args.n_ctx,
        "estimate_bytes": est.total,
        "models": [m.__dict__ for m in est.models],
        "rss_added_bytes": added,
        "estimate_over_rss": est.total / added,
    }
    print(f"machine: {machine_line(result['machine'])}")
    print(est.describe())
    print(
        f"RSS added by loading and a 32-token answer: {gib(added)}; estimate / measured = {est.total / added:.3f}"
    )
    Results(args.out, "memory", result["machine"]).write(result)


if __name__ == "__main__":
    main()
