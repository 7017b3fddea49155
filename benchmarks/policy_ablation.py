"""The adaptive policy's mechanisms switched off one at a time, in the offline replay.

    .venv/bin/python benchmarks/policy_ablation.py      # about a minute: 5 variants x every profile

Each variant replays the recorded traces (benchmarks/results/traces.json, as
``benchmarks/replay_policy.py`` does: answers in recorded order, policies carried across
them) under every machine profile, and reports per profile the worst and the geometric
mean over workloads of adaptive / best fixed in hindsight.  A mechanism earns its place
where switching it off lowers one of them by at least 1 %.

The replay has fixed costs: mechanisms that guard against a *measured* cost going wrong
(the plain probe after a stall, the cap on a batch's cost) cannot show a gain here; the
table says so, and their tests show the live failure they were added for.

Written to benchmarks/results/ablation.{json,md}.
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import ExitStack
from unittest import mock

from replay_policy import RESULTS

from localspec.decoding import calibration, policy, replay

VARIANTS = {
    "all on (the policy as shipped)": [],
    "no per-text trust": [mock.patch.object(calibration.TextTrust, "scale", lambda self, chance, group: chance)],
    "no depth groups in the calibration": [
        mock.patch.object(calibration.Calibration, "group", classmethod(lambda cls, d: 0))
    ],
    "no plain probe": [mock.patch.object(policy, "_PLAIN_PROBE_EVERY", 10**9)],
    "no cap on a batch's cost (_BATCH_MARGIN)": [mock.patch.object(policy, "_BATCH_MARGIN", math.inf)],
}
COST_GUARDS = {"no plain probe", "no cap on a batch's cost (_BATCH_MARGIN)"}


def ratios(traces, profile) -> dict[str, float]:
    """Workload -> adaptive / best fixed, for one profile."""
    session = {}
    replayed = [(t, replay.replay(t, profile, session=session)) for t in traces]
    out = {}
    for w in sorted({t.workload for t in traces}):
        runs = [r for t, r in replayed if t.workload == w]
        speedup = sum(r["plain_s"] for r in runs) / sum(r["time_s"] for r in runs)
        out[w] = speedup / replay.best_fixed([t for t in traces if t.workload == w], profile)[2]
    return out


def main() -> int:
    traces, _ = replay.load(RESULTS / "traces.json")
    seen = set()
    for t in traces:
        key = (t.n_prompt, tuple(t.answer))
        if t.workload == "first-turn" and key in seen:
            t.workload = "first-turn-again"
        seen.add(key)
    profiles = dict(replay.PROFILES)
    measured = RESULTS / "profiles.json"
    if measured.is_file():
        profiles.update({n: replay.Profile(**p) for n, p in json.loads(measured.read_text()).items()})
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
        ["Worst / geometric mean over workloads of adaptive ÷ best fixed in hindsight, per profile.", ""] + lines
    )
    print(text)
    (RESULTS / "ablation.md").write_text(text + "\n")
    (RESULTS / "ablation.json").write_text(json.dumps({"table": table, "verdicts": verdicts}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
