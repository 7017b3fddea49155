#!/usr/bin/env bash
# llama.cpp's idle OpenMP threads: GOMP_SPINCOUNT=1000 (what localspec sets) against 300000
# (libgomp's default), interleaved.  Decode t/s of `localspec run` (plain, then adaptive) for one
# process alone and for two processes at once.  Usage: bash benchmarks/spin_count.sh [pairs]
set -euo pipefail
cd "$(dirname "$0")/.."
prompt="Write a Python function that checks whether a number is prime."
tps() {
    GOMP_SPINCOUNT=$1 .venv/bin/localspec run --json --draft "$2" -n 128 "$prompt" 2>/dev/null |
        .venv/bin/python -c "import json, sys; print(round(json.load(sys.stdin)['stats']['tokens_per_s'], 1))"
}
for i in $(seq "${1:-5}"); do
    for spin in 1000 300000; do
        alone=$(tps "$spin" none)
        plain=$( { tps "$spin" none & tps "$spin" none & wait; } | tr '\n' ' ')
        auto=$( { tps "$spin" auto & tps "$spin" auto & wait; } | tr '\n' ' ')
        echo "pair $i GOMP_SPINCOUNT=$spin alone $alone t/s | two processes plain: $plain| auto: $auto"
    done
done
