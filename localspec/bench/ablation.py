"""``localspec bench ablation``: the adaptive policy's mechanisms switched off one at a time,
in the offline policy_replay.

    localspec bench ablation      # about a minute: 5 variants x every profile

Each variant replays the recorded traces (traces.json in ``--out``, as ``localspec bench
replay`` does: answers in recorded order, policies carried across
them) under every machine profile, and reports per profile the worst and the geometric
mean over workloads of adaptive / best fixed in hindsight.  A mechanism earns its place
where switching it off lowers one of them by at least 1 %.

The replay has fixed costs: mechanisms that guard against a *measured* cost going wrong
(the plain probe after a stall, the cap on a batch's cost) cannot show a gain here; the
table says so, and their tests show the live failure they were added for.

Written to ``ablation-<machine>-<date>-<commit>.{json,md}`` in ``--out``.
"""

from __future__ import annotations

import math
import sys
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

from localspec.bench import policy_replay
from localspec.bench.cli import add_out
from localspec.bench.replay import load_profiles, load_traces
from localspec.bench.results import Results
from localspec.decoding.policy import costs, estimates, pricing
from localspec.llama.report import machine_record

NAME = "ablation"
HELP = "the adaptive policy's mechanisms switched off one at a time in the replay (a minute)"

VARIANTS = {
    "all on (the policy as shipped)": [],
    "no per-text trust": [
        mock.patch.object(estimates.TextTrust, "scale", lambda self, chance, group: chance)
    ],
    "no depth groups in the calibration": [
        mock.patch.object(estimates.Calibration, "group", classmethod(lambda cls, d: 0))
    ],
    "no plain probe": [mock.patch.object(costs, "PLAIN_PROBE_EVERY", 10**9)],
    "no cap on a batch's cost (_BATCH_MARGIN)": [
        mock.patch.object(pricing, "_BATCH_MARGIN", math.inf)
    ],
}
COST_GUARDS = {"no plain probe", "no cap on a batch's cost (_BATCH_MARGIN)"}


def ratios(traces, profile) -> dict[str, float]:
    """Workload -> adaptive / best fixed, for one profile."""
    session = {}
    replayed = [(t, policy_replay.replay(t, profile, session=session)) for t in traces]
    out = {}
    for w in sorted({t.workload for t in traces}):
        runs = [r for t, r in replayed if t.workload == w]
        speedup = sum(r["plain_s"] for r in runs) / sum(r["time_s"] for r in runs)
        out[w] = (
            speedup / policy_replay.best_fixed([t for t in traces if t.workload == w], profile)[2]
        )
    return out


def add_arguments(parser) -> None:
    add_out(parser)


def main(args) -> int:
    folder = Path(args.out)
    traces, _ = load_traces(folder)
    profiles = load_profiles(folder)
    table = {}
    for name, patches in VARIANTS.items():
        with ExitStack() as stack:
            for p in patches:
                stack.enter_context(p)
            table[name] = {}
            for pname, profile in profiles.items():
                r = ratios(traces, profile)
                table[name][pname] = {
                    "worst": min(r.values()),
                    "geomean": math.exp(sum(map(math.log, r.values())) / len(r)),
                }
        print(name, file=sys.stderr, flush=True)
    base = table["all on (the policy as shipped)"]
    lines = [
        "| switched off | " + " | ".join(profiles) + " | earns ≥ 1 % |",
        "|---|" + "---|" * (len(profiles) + 1),
    ]
    verdicts = {}
    for name, row in table.items():
        cells, earns = [], False
        for pname in profiles:
            v, b = row[pname], base[pname]
            earns |= v["worst"] <= 0.99 * b["worst"] or v["geomean"] <= 0.99 * b["geomean"]
            cells.append(f"{v['worst']:.3f} / {v['geomean']:.3f}")
        verdicts[name] = "—" if row is base else ("yes" if earns else "no")
        if name in COST_GUARDS and not earns:
            verdicts[name] = "no (replay costs never stall)"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {verdicts[name]} |")
    text = "\n".join(
        [
            "Worst / geometric mean over workloads of adaptive ÷ best fixed in hindsight, per "
            "profile.",
            "",
        ]
        + lines
    )
    print(text)
    results = Results(folder, NAME, machine_record())
    results.write({"table": table, "verdicts": verdicts}, text)
    results.done()
    return 0
