"""``localspec bench report``: rewrite docs/benchmarks.md's tables from the result files.

A table in the page is written between two markers that name its kind and its file under
``benchmarks/results/``::

    <!-- table: concurrency concurrency-amd-epyc.json -->
    | clients | ... |
    <!-- /table -->

``localspec bench report`` renders every marked table from its file and writes the page
back; ``--check`` only says (exit 1) which tables differ from their files.  A new kind is one
function in :data:`RENDERERS` (JSON dict -> Markdown table)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

NAME = "report"
HELP = "rewrite docs/benchmarks.md's marked tables from the result files (--check: only compare)"
_ROOT = Path(__file__).resolve().parents[2]
MARKED = re.compile(r"(<!-- table: (\S+) (\S+) -->\n)(.*?)(<!-- /table -->)", re.S)
SPEED_PEERS = ("prompt-lookup k=8", "suffix k=8")


def add_arguments(parser) -> None:
    parser.add_argument(
        "--doc", default=str(_ROOT / "docs" / "benchmarks.md"), help="the page to rewrite"
    )
    parser.add_argument(
        "--results", default=str(_ROOT / "benchmarks" / "results"), help="the result files' folder"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a table differs from its file",
    )


def main(args) -> int:
    doc = Path(args.doc)
    text = doc.read_text()
    new, changed = render_page(text, Path(args.results))
    for kind, name in changed:
        print(
            f"{doc.name}: table {kind} {name} "
            f"{'differs from' if args.check else 'rewritten from'} its file"
        )
    if args.check:
        return 1 if changed else 0
    if new != text:
        doc.write_text(new)
    return 0


def render_page(text: str, results: Path) -> tuple[str, list[tuple[str, str]]]:
    """``text`` with every marked table rendered from its file, and the (kind, file) of
    the tables that changed.  KeyError for an unknown kind, OSError for a missing file."""
    changed = []

    def one(m: re.Match) -> str:
        kind, name = m.group(2), m.group(3)
        table = RENDERERS[kind](json.loads((results / name).read_text())) + "\n"
        if table != m.group(4):
            changed.append((kind, name))
        return m.group(1) + table + m.group(5)

    return MARKED.sub(one, text), changed


def _x(value: float | None) -> str:
    return "" if value is None else f"×{value:.2f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.0f} %"


def speed_table(result: dict) -> str:
    """Per workload and temperature: the free drafters' and adaptive's speed-ups over plain,
    adaptive's share of the ceiling, acceptance and mean accepted length, adaptive against the
    best fixed strategy where one beats plain, and our ms per round."""
    by = {(s["workload"], s["temperature"], s["strategy"]): s for s in result["summary"]}
    keys = sorted({(w, t) for w, t, _ in by}, key=lambda k: (k[0], k[1]))
    lines = [
        "| workload | T | prompt lookup k=8 | suffix k=8 | adaptive | adaptive share of ceiling "
        "| adaptive acceptance, mean accepted length | adaptive ÷ best fixed | acceptance, "
        "lookup / suffix "
        "| our ms per round, plain / adaptive |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w, t in keys:
        plain, ad = by[(w, t, "plain")], by[(w, t, "adaptive")]
        lookup, suffix = (by[(w, t, name)] for name in SPEED_PEERS)
        best = max((by[(w, t, n)]["speedup"] for n in SPEED_PEERS), default=0.0)
        over_best = f"{ad['speedup'] / best:.2f}" if best > 1 else ""
        lines.append(
            f"| {w} | {t} | {_x(lookup['speedup'])} | {_x(suffix['speedup'])} | "
            f"{_x(ad['speedup'])} | "
            f"{_pct(ad['share_of_ceiling'])} | {_pct(ad['acceptance_rate'])}, "
            f"{ad['mean_accepted_length']:.2f} | "
            f"{over_best} | {_pct(lookup['acceptance_rate'])} / "
            f"{_pct(suffix['acceptance_rate'])} | "
            f"{plain['overhead_ms_per_round']:.2f} / {ad['overhead_ms_per_round']:.2f} |"
        )
    return "\n".join(lines)


CONCURRENCY_COLUMNS = {
    "localspec plain": "localspec plain (`--draft none`)",
    "localspec adaptive": "localspec adaptive (default, `-np 4`)",
    "localspec -np 1 adaptive": "localspec `--parallel 1` adaptive",
    "llama-server plain": "llama-server `-np 4`",
    "llama-server -md": "llama-server `-np 4 -md`",
}


def concurrency_table(result: dict) -> str:
    """Aggregate t/s (TTFT p50) per number of clients, one column per server."""
    names = list(result["results"])
    levels = sorted({r["clients"] for rows in result["results"].values() for r in rows})
    header = [CONCURRENCY_COLUMNS.get(n, n) for n in names]
    lines = ["| clients | " + " | ".join(header) + " |", "|---" * (len(names) + 1) + "|"]
    for n in levels:
        cells = []
        for name in names:
            row = next((r for r in result["results"][name] if r["clients"] == n), None)
            cells.append(
                "" if row is None else f"{row['aggregate_tps']:.1f} ({_seconds(row['ttft_p50_s'])})"
            )
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s >= 10 else f"{s:.2f} s"


def protocols_table(result: dict) -> str:
    s = result["summary"]
    return "\n".join(
        [
            f"| path ÷ `/v1/chat/completions` (median {s['chat_tps_median']:.1f} t/s) | ratio "
            "(target ≥ 0.97) |",
            "|---|---|",
            f"| Anthropic `/v1/messages` | ×{s['messages_over_chat']:.2f} "
            f"({s['messages_over_chat']:.3f}) |",
            f"| OpenAI `/v1/responses` | ×{s['responses_over_chat']:.2f} |",
        ]
    )


def engine_table(result: dict) -> str:
    """The engine benchmark's table: the rows of its Markdown between the header and the ratio."""
    from localspec.bench.engine import table

    return table(result["summary"])


def agents_table(result: dict) -> str:
    from localspec.bench.agents import session_table

    return session_table(result)


RENDERERS: dict[str, Callable[[dict], str]] = {
    "agents": agents_table,
    "speed": speed_table,
    "concurrency": concurrency_table,
    "protocols": protocols_table,
    "engine": engine_table,
}
