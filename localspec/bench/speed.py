"""``localspec bench speed`` (and plain ``localspec bench``): every drafting strategy against
plain decoding on HumanEval, MT-Bench, edits, revisions and BFCL calls, side by side
(:mod:`localspec.bench.runner`); the table, and the plot of speed-ups by workload.

Writes ``bench-{quick,full}-<machine>-<date>-<commit>.{json,md,png}`` (``bench-smoke.{json,md}``
for ``--smoke``, no plot) into ``--out``."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from localspec.bench.results import DEFAULT_OUT, Results
from localspec.bench.runner import BenchConfig, chosen_strategies, run, workload_group
from localspec.errors import InvalidOptionError
from localspec.llama.report import machine_line

NAME = "speed"
HELP = "every drafting strategy against plain decoding, side by side (the default)"


def add_arguments(parser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        action="store_true",
        help="fewer prompts and strategies (one repetition: 4-15 minutes on 2 cores)",
    )
    mode.add_argument(
        "--smoke", action="store_true", help="a two-minute check that every part runs"
    )
    parser.add_argument("--reps", type=int, default=None, help="repetitions (median is reported)")
    parser.add_argument(
        "--strategies",
        default=None,
        metavar="NAMES",
        help="comma-separated strategies to run instead of the mode's, e.g. 'plain,suffix "
        "k=8,adaptive' "
        "(plain is always run: speed-ups are against it)",
    )
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"folder for JSON, Markdown and PNG results (default {DEFAULT_OUT})",
    )


def check(args) -> None:
    config_from_args(args)


def config_from_args(args) -> BenchConfig:
    """The benchmark configuration for ``localspec bench``'s parsed arguments; raises
    InvalidOptionError for a bad ``--reps`` / ``--strategies`` or a missing matplotlib."""
    config = (
        BenchConfig.smoke() if args.smoke else BenchConfig.quick() if args.quick else BenchConfig()
    )
    if args.reps is not None:
        if args.reps < 1:
            raise InvalidOptionError(f"--reps must be at least 1, got {args.reps}")
        config = replace(config, reps=args.reps)
    if args.strategies is not None:
        config = replace(config, strategies=chosen_strategies(args.strategies))
    if (
        not args.smoke and importlib.util.find_spec("matplotlib") is None
    ):  # checked before hours of work
        raise InvalidOptionError(
            "the benchmark's plot needs matplotlib: pip install -e '.[bench]' (or run --smoke, "
            "which writes no plot)"
        )
    return config


def main(args) -> int:
    config = config_from_args(args)
    started = time.perf_counter()
    result = run(config, log=lambda line: print(line, file=sys.stderr))
    result["wall_s"] = time.perf_counter() - started
    name = "bench" if args.smoke else "bench-quick" if args.quick else "bench-full"
    results = Results(args.out, name, result["machine"], smoke=args.smoke, benchmark=NAME)
    text = markdown(result)
    results.write(result, text, None if args.smoke else lambda path: plot(result, path))
    print(text)
    print(f"wrote {args.out}/{results.stem}.* in {result['wall_s']:.0f} s", file=sys.stderr)
    return 0


def _speedup_of(row: dict, rows: list[dict]) -> float | None:
    for base in rows:
        if base["strategy"] == "plain" and all(
            base[k] == row[k] for k in ("workload", "prompt", "temperature", "rep")
        ):
            key = "decode_tokens_per_s" if row["decode_tokens_per_s"] else "tokens_per_s"
            return row[key] / base[key] if base[key] else None
    return None


def markdown(result: dict) -> str:
    ceiling = result.get("ceiling") or {}
    lines = [
        f"Machine: {machine_line(result['machine'])}.",
        "",
        f"llama.cpp: {result['machine']['system_info']}.",
        "",
        f"Copy ceiling max_b b*c(1)/c(b): x{ceiling.get('speedup', float('nan')):.2f} at b = "
        f"{ceiling.get('batch')} "
        f"(verify ms by batch: {ceiling.get('verify_ms')}).",
        "",
        f"Config: {json.dumps(result['config'])}.",
        "",
        "| workload | T | strategy | t/s end to end | decode t/s | speed-up vs plain | share of "
        "ceiling | acceptance "
        "| mean accepted length | TTFT s | our ms per round |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, fmt):
        return "" if x is None else format(x, fmt)

    for s in result["summary"]:
        lines.append(
            f"| {s['workload']} | {s['temperature']} | {s['strategy']} | "
            f"{f(s['tokens_per_s'], '.1f')} | "
            f"{f(s['decode_tokens_per_s'], '.1f')} | "
            f"{f(s['speedup'], '.2f')} | {f(s.get('share_of_ceiling'), '.0%')} | "
            f"{f(s['acceptance_rate'], '.0%')} | "
            f"{f(s['mean_accepted_length'], '.2f')} | {f(s['ttft_s'], '.2f')} | "
            f"{f(s.get('overhead_ms_per_round'), '.2f')} |"
        )
    lines += ["", "Peers: " + "; ".join(f"{k}: {v}" for k, v in result["peers"].items()), ""]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    """Speed-up over plain by workload group and strategy, one panel per temperature."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    temps = sorted({s["temperature"] for s in result["summary"]})
    strategies = [
        s for s in dict.fromkeys(r["strategy"] for r in result["summary"]) if s != "plain"
    ]
    fig, axes = plt.subplots(1, len(temps), figsize=(7 * len(temps), 4.5), squeeze=False)
    for ax, temp in zip(axes[0], temps):
        by_group: dict[tuple, list[float]] = {}
        for r in result["rows"]:
            if r["temperature"] == temp and (x := _speedup_of(r, result["rows"])) is not None:
                by_group.setdefault((workload_group(r["workload"]), r["strategy"]), []).append(x)
        groups = sorted({g for g, _ in by_group})
        width = 0.8 / max(len(strategies), 1)
        for i, strategy in enumerate(strategies):
            values = [statistics.median(by_group.get((g, strategy), [0.0])) for g in groups]
            ax.bar(np.arange(len(groups)) + i * width, values, width, label=strategy)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(groups)) + width * (len(strategies) - 1) / 2, groups)
        ax.set_ylabel("decode speed-up over plain (median)")
        ax.set_title(f"temperature {temp}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
    fig.suptitle(
        f"localspec on {machine_line(result['machine'])}\nQwen2.5-Coder 1.5B target, 0.5B draft",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
