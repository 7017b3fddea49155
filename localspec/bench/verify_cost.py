"""``localspec bench verify-cost``: what one target decode costs by batch size, and one
draft-model token, on this machine.

    localspec bench verify-cost

These are the costs the adaptive policy calibrates at load (each the mean of 5 runs at
a 300-token context) and the reason draft lengths pay or not here.  Written to
``verify_cost-<machine>-<date>-<commit>.json`` in ``--out``.
"""

import json
import statistics

from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench.cli import add_out
from localspec.bench.results import Results
from localspec.decoding.policy import BATCH_SIZES
from localspec.llama.engine import default_threads
from localspec.llama.report import machine_record

NAME = "verify-cost"
HELP = "the target's decode cost by batch size and the draft model's per token"

BATCHES = BATCH_SIZES


def cost_ms(engine, batch, context=300, runs=5):
    engine.trim(0)
    engine.decode(list(range(1000, 1000 + context)))
    times = []
    for _ in range(runs):
        before = engine.decode_s
        engine.decode([100] * batch, range(batch))
        times.append(1000 * (engine.decode_s - before))
        engine.trim(context)
    return statistics.mean(times)


def add_arguments(parser) -> None:
    add_out(parser)


def main(args) -> int:
    pair = resolve_pair()
    with SpeculativeModel(
        pair.target, pair.draft, n_ctx=4096, n_threads=default_threads(), strategy="none"
    ) as m:
        target = {b: round(cost_ms(m.target, b), 1) for b in BATCHES}
        draft = round(cost_ms(m.drafter.engine, 1), 1)
    result = {"target_ms_by_batch": target, "draft_ms_per_token": draft}
    print(json.dumps(result, indent=1))
    results = Results(args.out, "verify_cost", machine_record(), benchmark=NAME)
    results.write(result)
    results.done()
    return 0
