"""Code completion (fill-in-the-middle) through ``/infill``: localspec serve, plain and
adaptive, beside llama.cpp's llama-server with the same GGUF files.

    .venv/bin/python benchmarks/fim_bench.py --llama-server PATH     # 50 HumanEval cuts
    .venv/bin/python benchmarks/fim_bench.py --cases 3               # a quick look, no peer

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

Written to benchmarks/results/fim-<machine>.json with the machine record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from local_server import free_port, localspec_serve, running

from localspec.api import resolve_pair
from localspec.bench.workloads import fim_cases
from localspec.llama.report import machine_line, machine_record

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
    request = urllib.request.Request(
        base + "/infill", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as r:
        return json.loads(r.read())


def _row(case, plain_server: str, adaptive_server: str, peer: str | None) -> dict:
    plain = infill(plain_server, case)
    adaptive = infill(adaptive_server, case)
    row = {
        "id": case.id,
        "plain_tps": plain["timings"]["predicted_per_second"],
        "adaptive_tps": adaptive["timings"]["predicted_per_second"],
        "same_text": plain["content"] == adaptive["content"],
        "starts_with_middle": adaptive["content"].startswith(case.middle),
        "content": adaptive["content"],
        "drafted": adaptive["timings"].get("draft_n_by_drafter", {}),
    }
    if peer is not None:
        answer = infill(peer, case)
        row["peer_tps"] = answer["timings"]["predicted_per_second"]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--llama-server", help="path of a llama-server binary to compare with (started here)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    pair = resolve_pair(None)
    path = Path(args.out) / f"fim-{record['cpu'].lower().replace(' ', '-')}.json"
    rows: list[dict] = []
    with ExitStack() as stack:
        plain_port, adaptive_port = free_port(), free_port()
        plain_server = stack.enter_context(running(localspec_serve(plain_port, "--draft", "none"), plain_port))
        adaptive_server = stack.enter_context(running(localspec_serve(adaptive_port), adaptive_port))
        peer = None
        if args.llama_server:
            port = free_port()
            command = [args.llama_server, "-m", str(pair.target), "-md", str(pair.draft), "--spec-type", "draft-simple"]
            peer = stack.enter_context(running([*command, "-c", "4096", "-np", "1", "--port", str(port)], port))
        for case in fim_cases(args.cases):
            rows.append(_row(case, plain_server, adaptive_server, peer))
            result = {"machine": record, "command": " ".join(["benchmarks/fim_bench.py", *sys.argv[1:]])}
            path.write_text(json.dumps({**result, "summary": summarise(rows), "rows": rows}, indent=1) + "\n")
            r = rows[-1]
            print(
                f"{case.id}: x{r['adaptive_tps'] / r['plain_tps']:.2f} middle {r['starts_with_middle']}",
                file=sys.stderr,
            )
    print(json.dumps(summarise(rows), indent=1))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
