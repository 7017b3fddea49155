"""How long a compatibility check takes on real files, from nothing to the verdict.

    .venv/bin/python benchmarks/compat_bench.py [MORE.gguf ...]

Times reading both GGUF headers (token lists included, no weights) and comparing them,
for the default Qwen2.5-Coder pair (151,936-token vocabularies) and for any extra files
given as drafts against the same target.  Median of 5 runs.  Written to
benchmarks/results/compat-<machine>-<date>-<commit>.json (localspec.bench.results).
"""

import statistics
import sys
import time
from pathlib import Path

from localspec.api import resolve_pair
from localspec.bench.results import DEFAULT_OUT, Results
from localspec.llama.report import machine_record
from localspec.models.compat import check_compatibility
from localspec.models.gguf_info import check_gguf_file

RUNS = 5


def time_check(target: Path, draft: Path) -> dict:
    read_s, compare_s = [], []
    for _ in range(RUNS):
        start = time.perf_counter()
        t_info, d_info = check_gguf_file(target), check_gguf_file(draft)
        read = time.perf_counter()
        verdict = check_compatibility(t_info, d_info)
        read_s.append(read - start)
        compare_s.append(time.perf_counter() - read)
    return {
        "target": target.name,
        "draft": draft.name,
        "n_vocab": [t_info.n_vocab, d_info.n_vocab],
        "compatible": verdict.compatible,
        "reasons": verdict.reasons,
        "read_headers_s": round(statistics.median(read_s), 4),
        "compare_s": round(statistics.median(compare_s), 4),
        "total_s": round(statistics.median(r + c for r, c in zip(read_s, compare_s)), 4),
    }


def main(extra: list[str]) -> None:
    pair = resolve_pair()
    results = [time_check(pair.target, pair.draft)] + [
        time_check(pair.target, Path(p)) for p in extra
    ]
    for r in results:
        print(
            f"{r['draft']} -> {r['target']}: {r['total_s'] * 1000:.0f} ms "
            f"(headers {r['read_headers_s'] * 1000:.0f} ms, compare {r['compare_s'] * 1000:.0f} ms), "
            f"compatible={r['compatible']}"
        )
    Results(DEFAULT_OUT, "compat", machine_record()).write({"results": results})


if __name__ == "__main__":
    main(sys.argv[1:])
