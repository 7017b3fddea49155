"""Side-by-side speed of every drafting strategy; same as ``localspec bench``.

    .venv/bin/python benchmarks/speed_bench.py --quick     # under 10 minutes on 2 cores
    .venv/bin/python benchmarks/speed_bench.py             # the full matrix (hours on 2 cores)

Writes benchmarks/results/bench-{quick,full}.{json,md,png}.
"""

import sys

from localspec.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
