"""``localspec bench fim``: code completion (fill-in-the-middle) through ``/infill``:
localspec serve, plain and adaptive, beside llama.cpp's llama-server with the same GGUF files.

    localspec bench fim --llama-server PATH     # 50 HumanEval cuts
    localspec bench fim --cases 3               # a quick look, no peer

Each case (:func:`localspec.bench.workloads.fim_cases`: the middle third of a HumanEval
canonical solution, cut at line boundaries, the next two problems' solutions as
``input_extra``) goes to each server as llama.vscode sends it, greedy, ``n_predict`` 64,
one after the other: a ``localspec serve --draft none`` (plain decoding), a ``localspec
serve`` with its adaptive default, and the peer (started here as ``llama-server -m TARGET -md
DRAFT --spec-type draft-simple -c 4096 -np 1``: its own speculative defaults).  Decode speed
is each server's ``timings.predicted_per_second``.  Plain and adaptive run on servers of
their own so that the adaptive one's suffix drafter holds only its own earlier answers,
never the plain answer to the same case (one server would remember it and copy it).
Quality: the share of completions whose first characters are exactly the expected middle
(the models go on past it; an editor shows the first lines).

``--endpoint URL`` sends the same requests to a peer that is already running instead.
Written to ``fim-<machine>-<date>-<commit>.json`` in ``--out``.
"""

from __future__ import annotations

import json
import statistics
import sys
from contextlib import ExitStack

from localspec.bench.cli import add_out, add_peers, add_smoke, positive
from localspec.bench.client import decode_tps, post_json
from localspec.bench.results import Results
from localspec.bench.servers import base_url, free_port, llama_server, running, serving
from localspec.bench.workloads import fim_cases
from localspec.llama.report import machine_line, machine_record

NAME = "fim"
HELP = "code completion through /infill on HumanEval cuts, plain and adaptive, beside llama-server"

N_PREDICT = 64


def infill(base: str, case) -> dict:
    body = {
        "input_prefix": case.prefix,
        "input_suffix": case.suffix,
        "input_extra": list(case.extra),
        "n_predict": N_PREDICT,
        "temperature": 0,
        "cache_prompt": True,
    }
    return post_json(base + "/infill", body)


def _row(case, plain_server: str, adaptive_server: str, peer: str | None) -> dict:
    plain = infill(plain_server, case)
    adaptive = infill(adaptive_server, case)
    row = {
        "id": case.id,
        "plain_tps": decode_tps(plain),
        "adaptive_tps": decode_tps(adaptive),
        "same_text": plain["content"] == adaptive["content"],
        "starts_with_middle": adaptive["content"].startswith(case.middle),
        "content": adaptive["content"],
        "drafted": adaptive["timings"].get("draft_n_by_drafter", {}),
    }
    if peer is not None:
        answer = infill(peer, case)
        row["peer_tps"] = decode_tps(answer)
        row["peer_starts_with_middle"] = answer["content"].startswith(case.middle)
        row["peer_content"] = answer["content"]
    return row


def summarise(rows: list[dict]) -> dict:
    def share(key):
        return sum(bool(r[key]) for r in rows) / len(rows) if rows and key in rows[0] else None

    return {
        "cases": len(rows),
        "adaptive_over_plain": statistics.median(r["adaptive_tps"] / r["plain_tps"] for r in rows),
        "same_text_share": share("same_text"),
        "starts_with_middle": share("starts_with_middle"),
        "peer_starts_with_middle": share("peer_starts_with_middle"),
        "peer_over_adaptive_tps": statistics.median(r["peer_tps"] / r["adaptive_tps"] for r in rows)
        if rows and "peer_tps" in rows[0]
        else None,
        "adaptive_tps_median": statistics.median(r["adaptive_tps"] for r in rows),
        "plain_tps_median": statistics.median(r["plain_tps"] for r in rows),
    }


def add_arguments(parser) -> None:
    parser.add_argument("--cases", type=int, default=50, help="HumanEval cuts (from 0)")
    add_peers(parser)
    add_smoke(parser, "2 cuts, no peer")
    add_out(parser)


def check(args) -> None:
    positive("--cases", args.cases)


def main(args) -> int:
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    results = Results(args.out, NAME, record, smoke=args.smoke)
    rows: list[dict] = []
    with ExitStack() as stack:
        plain_server = stack.enter_context(serving("--draft", "none"))
        adaptive_server = stack.enter_context(serving())
        peer = None if args.smoke else _peer(stack, args)
        for case in fim_cases(2 if args.smoke else args.cases):
            rows.append(_row(case, plain_server, adaptive_server, peer))
            results.write({"summary": summarise(rows), "rows": rows})
            r = rows[-1]
            print(
                f"{case.id}: x{r['adaptive_tps'] / r['plain_tps']:.2f} middle "
                f"{r['starts_with_middle']}",
                file=sys.stderr,
            )
    print(json.dumps(summarise(rows), indent=1))
    results.done()
    return 0


def _peer(stack: ExitStack, args) -> str | None:
    """The peer's base URL: ``--endpoint``, else ``--llama-server`` started here (its own
    speculative defaults), else None."""
    if args.endpoint:
        return base_url(args.endpoint)
    if not args.llama_server:
        return None
    from localspec.api import resolve_pair

    pair = resolve_pair(None)
    port = free_port()
    command = llama_server(args.llama_server, port, "-m", str(pair.target), "-md", str(pair.draft))
    return stack.enter_context(
        running([*command, "--spec-type", "draft-simple", "-c", "4096", "-np", "1"], port)
    )
