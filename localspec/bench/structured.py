"""``localspec bench structured``: tool calls and JSON answers under speculation, through
``localspec serve`` and the openai client, beside llama.cpp's ``llama-server --jinja`` with
the same target GGUF.

    localspec bench structured --llama-server PATH      # BFCL simple_python 0-199, parallel 0-99
    localspec bench structured --simple 4 --parallel 2 --json 2   # a quick look, no peer
    localspec bench structured --tool-choice auto --simple 10 --parallel 0 --json 0 --free 0 \
        --llama-server PATH --out /tmp/auto   # does the model open a call by itself?

The cases are the Berkeley Function Calling Leaderboard's (``localspec.bench.bfcl``): each
case's functions go out as OpenAI ``tools`` with ``tool_choice: "required"`` (parallel
cases: ``parallel_tool_calls`` true), greedy, through the openai client.  Per case, one
after the other: a ``localspec serve --draft none`` (constrained plain), a ``localspec
serve`` with its adaptive default, the peer; on the first ``--free`` simple cases also the
same messages without tools on the plain server (free plain: the grammar mask's cost).  On the first
``--json`` simple cases, the call is also asked for as a JSON answer (``response_format``
json_schema ``{"name", "arguments"}``), plain and adaptive; the peer gets the first ``--peer-cases``
of each kind. Simple and parallel cases take turns, and the result file is rewritten after every
case. Plain and adaptive run on servers of their own so that the adaptive one's suffix drafter holds
only its own earlier answers, never the plain answer to the same case.

Decode speed is each server's own ``timings.predicted_per_second`` (tokens after the first
over the time after the first).  Reported: median ratios over the cases, the share of calls
that parse and validate against their function's schema, and BFCL's AST accuracy (every
expected call, any order, one to one).  ``--llama-server`` is the binary built from the
llama.cpp that llama-cpp-python vendors (build commands in :mod:`localspec.bench.serve`); it is
started here as ``llama-server -m TARGET.gguf --jinja -c 4096 -np 1``; ``--endpoint URL`` is
a peer already running instead (vLLM, or a llama-server started by hand).

Written to ``structured-<machine>-<date>-<commit>.json`` in ``--out``.
"""

from __future__ import annotations

import json
import statistics
import sys
from contextlib import ExitStack

from localspec.bench.bfcl import (
    CallCase,
    bfcl_cases,
    call_prompt,
    call_schema,
    calls_match,
    openai_tools,
)
from localspec.bench.cli import add_out, add_peers, add_smoke, positive
from localspec.bench.client import decode_tps, openai_client
from localspec.bench.results import Results
from localspec.bench.servers import base_url, free_port, llama_server, running, serving
from localspec.llama.report import machine_line, machine_record

NAME = "structured"
HELP = "BFCL tool calls and JSON answers through localspec serve, beside llama-server"

MAX_TOKENS = {"simple_python": 160, "parallel": 320}
FREE_TOKENS = 64


def _calls(response, case: CallCase) -> tuple[list[dict], bool]:
    """The response's calls as ``{"name", "arguments": dict}``, and whether every one parses
    and validates against its function's parameters."""
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in openai_tools(case)}
    import jsonschema

    calls, valid = [], True
    for call in response.choices[0].message.tool_calls or []:
        try:
            arguments = json.loads(call.function.arguments)
            jsonschema.validate(arguments, tools[call.function.name])
        except (ValueError, KeyError, jsonschema.ValidationError):
            valid, arguments = False, None
        calls.append({"name": call.function.name, "arguments": arguments})
    return calls, valid and bool(calls)


def _content_calls(text: str) -> list[dict]:
    """``{"name", "arguments"}`` objects written in ``text`` (one, or a JSON list of them)."""
    start, end = (
        min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1),
        max(text.rfind("}"), text.rfind("]")),
    )
    try:
        body = json.loads(text[start : end + 1]) if 0 <= start < end else None
    except ValueError:
        return []
    calls = body if isinstance(body, list) else [body]
    return [
        c
        for c in calls
        if isinstance(c, dict) and "name" in c and isinstance(c.get("arguments"), dict)
    ]


def _tool_row(
    case: CallCase,
    category: str,
    plain_server,
    adaptive_server,
    peer,
    free: bool,
    tool_choice: str = "required",
) -> dict:
    """Constrained plain, adaptive, optionally free plain and the peer, on one case."""
    request = {
        "model": "m",
        "messages": list(case.messages),
        "tools": openai_tools(case),
        "tool_choice": tool_choice,
        "temperature": 0,
        "max_tokens": MAX_TOKENS[category],
    }
    if category == "parallel":
        request["parallel_tool_calls"] = True
    plain = plain_server.chat.completions.create(**request)
    adaptive = adaptive_server.chat.completions.create(**request)
    row = {"id": case.id, "plain_tps": decode_tps(plain), "adaptive_tps": decode_tps(adaptive)}
    for name, response in (("plain", plain), ("adaptive", adaptive)):
        row[f"{name}_calls"], row[f"{name}_valid"] = _calls(response, case)
        row[f"{name}_ast"] = row[f"{name}_valid"] and calls_match(case, row[f"{name}_calls"])
    row["same_calls"] = row["plain_calls"] == row["adaptive_calls"]
    row["drafted"] = adaptive.model_extra["timings"].get("draft_n_by_drafter", {})
    if free:
        answer = plain_server.chat.completions.create(
            model="m", messages=list(case.messages), temperature=0, max_tokens=FREE_TOKENS
        )
        row["free_tps"] = decode_tps(answer)
    if peer is not None:
        answer = peer.chat.completions.create(**request)
        row["peer_calls"], row["peer_valid"] = _calls(answer, case)
        row["peer_ast"] = row["peer_valid"] and calls_match(case, row["peer_calls"])
        row["peer_text"] = answer.choices[0].message.content
        # generous to the peer: a call written as JSON in the content (often in a code block)
        row["peer_content_ast"] = row["peer_ast"] or calls_match(
            case, _content_calls(row["peer_text"] or "")
        )
        row["peer_tps"] = decode_tps(answer)
    return row


def _json_row(case: CallCase, plain_server, adaptive_server) -> dict:
    schema = call_schema(case)
    request = {
        "model": "m",
        "messages": call_prompt(case),  # the functions in a system message
        "temperature": 0,
        "max_tokens": MAX_TOKENS["simple_python"],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "call", "schema": schema, "strict": True},
        },
    }
    plain = plain_server.chat.completions.create(**request)
    adaptive = adaptive_server.chat.completions.create(**request)
    row = {"id": case.id, "plain_tps": decode_tps(plain), "adaptive_tps": decode_tps(adaptive)}
    import jsonschema

    try:
        call = json.loads(adaptive.choices[0].message.content)
        jsonschema.validate(call, schema)
        row["valid"], row["ast"] = True, calls_match(case, [call])
    except (ValueError, jsonschema.ValidationError):
        row["valid"], row["ast"] = False, False
    row["same_text"] = plain.choices[0].message.content == adaptive.choices[0].message.content
    return row


def _median(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def _share(rows, key) -> float | None:
    """The share of the rows that have ``key`` where it is true (None: no row has it)."""
    having = [r for r in rows if key in r]
    return sum(bool(r[key]) for r in having) / len(having) if having else None


def summarise(tool_rows: dict[str, list[dict]], json_rows: list[dict]) -> dict:
    out: dict = {}
    for category, rows in tool_rows.items():
        out[category] = {
            "cases": len(rows),
            "adaptive_over_constrained_plain": _median(
                r["adaptive_tps"] / r["plain_tps"] for r in rows
            ),
            "constrained_plain_over_free_plain": _median(
                r["plain_tps"] / r["free_tps"] for r in rows if "free_tps" in r
            ),
            "valid_share": {k: _share(rows, f"{k}_valid") for k in ("plain", "adaptive", "peer")},
            "ast_accuracy": {
                k: _share(rows, f"{k}_ast") for k in ("plain", "adaptive", "peer", "peer_content")
            },
            "same_calls_share": _share(rows, "same_calls"),
            "peer_over_adaptive_tps": _median(
                r["peer_tps"] / r["adaptive_tps"] for r in rows if "peer_tps" in r
            ),
            "adaptive_ast_on_peer_cases": _share(
                [r for r in rows if "peer_ast" in r], "adaptive_ast"
            ),
            "grammar_tokens_drafted": sum(r["drafted"].get("grammar", 0) for r in rows),
        }
    if json_rows:
        out["json_answer"] = {
            "cases": len(json_rows),
            "adaptive_over_constrained_plain": _median(
                r["adaptive_tps"] / r["plain_tps"] for r in json_rows
            ),
            "valid_share": _share(json_rows, "valid"),
            "ast_accuracy": _share(json_rows, "ast"),
            "same_text_share": _share(json_rows, "same_text"),
        }
    return out


def _interleaved(n_simple: int, n_parallel: int):
    """(category, index, case): simple and parallel cases in turn, so that a run stopped
    early still holds both kinds."""
    simple, parallel = bfcl_cases("simple_python", n_simple), bfcl_cases("parallel", n_parallel)
    for i in range(max(len(simple), len(parallel))):
        for category, cases in (("simple_python", simple), ("parallel", parallel)):
            if i < len(cases):
                yield category, i, cases[i]


def add_arguments(parser) -> None:
    parser.add_argument("--simple", type=int, default=200, help="BFCL simple_python cases (from 0)")
    parser.add_argument("--parallel", type=int, default=100, help="BFCL parallel cases (from 0)")
    parser.add_argument(
        "--json", type=int, default=20, help="simple cases also asked as a JSON answer"
    )
    parser.add_argument(
        "--free", type=int, default=50, help="simple cases also asked with no tools (mask cost)"
    )
    parser.add_argument(
        "--peer-cases", type=int, default=10**6, help="cases of each kind also sent to the peer"
    )
    parser.add_argument(
        "--tool-choice",
        default="required",
        choices=("required", "auto"),
        help="sent with every call",
    )
    add_peers(parser)
    add_smoke(parser, "2 simple cases, 1 parallel, 1 JSON answer, 1 free, no peer")
    add_out(parser)


def check(args) -> None:
    for flag in ("simple", "parallel", "json", "free", "peer_cases"):
        positive("--" + flag.replace("_", "-"), getattr(args, flag), 0)


def main(args) -> int:
    if args.smoke:
        args.simple, args.parallel, args.json, args.free = 2, 1, 1, 1
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    tool_rows: dict[str, list[dict]] = {"simple_python": [], "parallel": []}
    json_rows: list[dict] = []
    results = Results(args.out, NAME, record, smoke=args.smoke)

    def write() -> dict:  # after every case, so a long run that is stopped keeps what it measured
        summary = summarise(tool_rows, json_rows)
        results.write({"summary": summary, "tools": tool_rows, "json": json_rows})
        return summary

    with ExitStack() as stack:
        plain = openai_client(stack.enter_context(serving("--draft", "none")), max_retries=2)
        adaptive = openai_client(stack.enter_context(serving()), max_retries=2)
        peer = _peer(stack, args)
        for category, i, case in _interleaved(args.simple, args.parallel):
            free = category == "simple_python" and i < args.free
            peer_here = peer if i < args.peer_cases else None
            row = _tool_row(case, category, plain, adaptive, peer_here, free, args.tool_choice)
            tool_rows[category].append(row)
            if category == "simple_python" and i < args.json:
                json_rows.append(_json_row(case, plain, adaptive))
            write()
            print(
                f"{case.id}: x{row['adaptive_tps'] / row['plain_tps']:.2f} ast "
                f"{row['adaptive_ast']} "
                f"peer {row.get('peer_ast')} drafted {row['drafted']}",
                file=sys.stderr,
                flush=True,
            )
    print(json.dumps(write(), indent=1))
    results.done()
    return 0


def _peer(stack: ExitStack, args):
    """The peer's client: ``--endpoint``, else ``--llama-server`` started here, else None."""
    if args.endpoint:
        return openai_client(base_url(args.endpoint), max_retries=2)
    if not args.llama_server:
        return None
    from localspec.api import resolve_pair

    port = free_port()
    command = llama_server(
        args.llama_server, port, "-m", str(resolve_pair(None).target), "--jinja", "-c", "4096"
    )
    return openai_client(stack.enter_context(running([*command, "-np", "1"], port)), max_retries=2)
