"""``localspec bench agents``: the coding agents' recorded sessions sent again, request by
request, to ``localspec serve`` (adaptive and plain) and to llama-server on the same GGUFs.

    localspec bench agents --llama-server PATH              # four sessions, four servers
    localspec bench agents --servers default,plain          # localspec only
    localspec bench agents --sessions aider-0.86.2 -n 64    # one session, 64 tokens per turn
    localspec bench agents --smoke                          # aider's session, 16 tokens, default
    only

Sessions (``--sessions``, names of ``tests/data/agents``, see its README): the requests Claude
Code, Codex CLI, opencode and aider sent while creating ``hello.py`` in an empty folder,
captured from their own releases (:mod:`localspec.bench.agent_replay`).  Every body is sent
as the agent sent it (its path, query, headers and stream flag), made greedy and capped at
``--max-tokens`` generated tokens, so each server answers the same prompts.

Servers (``--servers``), each a fresh process with a ``-c 16384`` context, every session
replayed on it in order (so a session's second turn may find its first turn's prefix cached):
``default`` (``localspec serve``), ``plain`` (``localspec serve --draft none``),
``llama-server`` (``-m TARGET -c 16384 -np 1 --jinja``, plain) and ``llama-server-md`` (the
same with ``-md DRAFT``: llama.cpp's own draft-model speculation); the llama-server ones need
``--llama-server PATH`` (or ``llama-server`` on ``PATH``) and are skipped with a line without;
``--endpoint URL`` adds a server already running (llama-server, vLLM, ...) as ``endpoint``.

Reported per server and turn: HTTP status, prompt tokens read and cached (from the answer's
usage, or llama.cpp's ``timings``), time to the first generated event, decode t/s, seconds;
per session the wall time (the sum of its turns' seconds) and, for every server, its wall
÷ llama-server's.  A refused request (non-2xx) is recorded with its body, not retried.

Written to ``agents-<machine>-<date>-<commit>.{json,md}`` in ``--out`` (``agents-smoke.*``
for ``--smoke``), rewritten after each server.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from localspec.bench.cli import add_out, add_peers, add_smoke, positive

NAME = "agents"
HELP = (
    "coding agents' recorded sessions replayed request by request: localspec serve vs llama-server"
)
KIND = "agents"
SESSIONS = (
    "claude-code-2.1.332",
    "codex-0.171.0-workspace-write",
    "opencode-1.18.33",
    "aider-0.86.2",
)
SERVERS = ("default", "plain", "llama-server", "llama-server-md")
CONTEXT = "16384"
SMOKE_SESSION, SMOKE_TOKENS = "aider-0.86.2", 16
Starter = Callable[[], AbstractContextManager[str]]  # starts a server, yields its base URL


def starters(names: list[str], pair, binary: str | None) -> dict[str, Starter]:
    """A function that starts each named server fresh; llama-server ones left out without a
    binary."""
    from localspec.bench.fresh_clients import start_llama_server
    from localspec.bench.servers import serving

    peer = ["-m", str(pair.target), "-c", CONTEXT, "-np", "1", "--jinja"]
    known: dict[str, Starter] = {
        "default": lambda: serving("-c", CONTEXT),
        "plain": lambda: serving("-c", CONTEXT, "--draft", "none"),
    }
    if binary:
        known["llama-server"] = lambda: start_llama_server(binary, *peer)
        known["llama-server-md"] = lambda: start_llama_server(binary, *peer, "-md", str(pair.draft))
    return {name: known[name] for name in names if name in known}


def replay(base: str, sessions: dict[str, list], max_tokens: int, server: str) -> list[dict]:
    """Every turn of every session sent to ``base`` in order; one record per turn."""
    from localspec.bench.agent_replay import replayable, send

    records = []
    for turns in sessions.values():
        for turn in turns:
            got = send(base, turn, replayable(turn, max_tokens))
            print(f"{server}: {_turn_line(got)}", file=sys.stderr, flush=True)
            records.append(got.record())
    return records


def _turn_line(got) -> str:
    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    line = (
        f"{got.session} turn {got.turn} ({got.protocol}) {got.status}: prompt "
        f"{f(got.prompt_tokens, 'd')}, "
        f"cached {f(got.cached_tokens, 'd')}, generated {f(got.output_tokens, 'd')}, "
        f"ttft {f(got.ttft_s, '.1f')} s, {f(got.decode_tps, '.1f')} t/s, {got.duration_s:.1f} s"
    )
    return line + (f": {got.error}" if got.error else "")


def session_walls(turns: list[dict]) -> dict[str, dict]:
    """Per session of ``turns`` (records of one server): wall seconds (sum of its turns'),
    tokens read and cached over its turns, and whether every turn was answered 2xx."""
    out: dict[str, dict] = {}
    for t in turns:
        row = out.setdefault(
            t["session"], {"wall_s": 0.0, "read_tokens": 0, "cached_tokens": 0, "all_2xx": True}
        )
        row["wall_s"] += t["duration_s"]
        row["read_tokens"] += t["read_tokens"] or 0
        row["cached_tokens"] += t["cached_tokens"] or 0
        row["all_2xx"] = row["all_2xx"] and 200 <= t["status"] < 300
    return out


def summary(turns_by_server: dict[str, list[dict]]) -> list[dict]:
    """One row per session: each server's :func:`session_walls` figures and wall ÷
    llama-server's (where llama-server ran and answered every turn)."""
    walls = {server: session_walls(turns) for server, turns in turns_by_server.items()}
    sessions = dict.fromkeys(s for by_session in walls.values() for s in by_session)
    rows = []
    for session in sessions:
        row: dict = {
            "session": session,
            "servers": {k: v[session] for k, v in walls.items() if session in v},
        }
        peer = row["servers"].get("llama-server")
        if peer and peer["all_2xx"] and peer["wall_s"] > 0:
            row["over_llama_server"] = {
                k: v["wall_s"] / peer["wall_s"] for k, v in row["servers"].items()
            }
        rows.append(row)
    return rows


def markdown(result: dict) -> str:
    from localspec.llama.report import machine_line

    return (
        "\n".join(
            [
                f"Machine: {machine_line(result['machine'])}.",
                "",
                f"Greedy, at most {result['max_tokens']} tokens per turn, context {CONTEXT}; one "
                "fresh process per "
                "server, the sessions in order.  Session wall seconds (÷ llama-server's):",
                "",
                session_table(result),
                "",
                "Per turn: status, prompt tokens read / cached, TTFT s, decode t/s, seconds.",
                "",
                "| server | session | turn | status | read / cached | TTFT | t/s | s |",
                "|---|---|---|---|---|---|---|---|",
                *(_turn_row(server, t) for server, turns in result["turns"].items() for t in turns),
            ]
        )
        + "\n"
    )


def session_table(result: dict) -> str:
    """Per session, each server's wall seconds and its ratio to llama-server's (the table
    ``localspec bench report`` writes into docs/benchmarks.md)."""
    servers = list(result["turns"])
    lines = ["| session | " + " | ".join(servers) + " |", "|---|" + "---|" * len(servers)]
    for row in result["summary"]:
        cells = []
        for server in servers:
            got = row["servers"].get(server)
            ratio = (row.get("over_llama_server") or {}).get(server)
            cell = (
                ""
                if got is None
                else f"{got['wall_s']:.0f}" + ("" if got["all_2xx"] else " (refused)")
            )
            cells.append(
                cell
                + (f" (×{ratio:.2f})" if ratio is not None and server != "llama-server" else "")
            )
        lines.append(f"| {row['session']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _turn_row(server: str, t: dict) -> str:
    def f(x, fmt):
        return "" if x is None else format(x, fmt)

    return (
        f"| {server} | {t['session']} | {t['turn']} | {t['status']} | {f(t['read_tokens'], 'd')} / "
        f"{f(t['cached_tokens'], 'd')} | {f(t['ttft_s'], '.1f')} | {f(t['decode_tps'], '.1f')} | "
        f"{t['duration_s']:.1f} |"
    )


def add_arguments(parser) -> None:
    parser.add_argument(
        "--sessions",
        default=",".join(SESSIONS),
        help=f"recorded sessions, comma-separated (default {','.join(SESSIONS)})",
    )
    parser.add_argument(
        "--sessions-dir", default=None, help="where the sessions lie (default tests/data/agents)"
    )
    parser.add_argument(
        "-n", "--max-tokens", type=int, default=128, help="tokens per turn at most (default 128)"
    )
    parser.add_argument(
        "--servers", default=",".join(SERVERS), help=f"comma-separated, of {', '.join(SERVERS)}"
    )
    add_peers(parser)
    add_smoke(parser, f"{SMOKE_SESSION}'s session, {SMOKE_TOKENS} tokens, default only")
    add_out(parser)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def check(args) -> None:
    from localspec.errors import InvalidOptionError

    positive("--max-tokens", args.max_tokens)
    unknown = [name for name in _names(args.servers) if name not in SERVERS]
    if unknown or not _names(args.servers):
        raise InvalidOptionError(
            f"--servers: unknown {', '.join(unknown) or '(none given)'}; of {', '.join(SERVERS)}"
        )
    if not _names(args.sessions):
        raise InvalidOptionError("--sessions: give at least one session name")


def main(args) -> int:
    from localspec.api import resolve_pair
    from localspec.bench.agent_replay import SESSIONS_DIR, load_session
    from localspec.bench.fresh_clients import llama_server_binary
    from localspec.bench.results import Results
    from localspec.bench.servers import base_url
    from localspec.errors import InvalidOptionError
    from localspec.llama.report import machine_line, machine_record

    names = [SMOKE_SESSION] if args.smoke else _names(args.sessions)
    try:
        sessions = {name: load_session(name, args.sessions_dir or SESSIONS_DIR) for name in names}
    except FileNotFoundError as missing:
        raise InvalidOptionError(f"--sessions: {missing}") from None
    wanted = ["default"] if args.smoke else _names(args.servers)
    binary = (
        llama_server_binary(args.llama_server)
        if any(n.startswith("llama") for n in wanted)
        else None
    )
    chosen = starters(wanted, resolve_pair(), binary)
    if args.endpoint:
        chosen["endpoint"] = lambda: nullcontext(base_url(args.endpoint))
    max_tokens = SMOKE_TOKENS if args.smoke else args.max_tokens
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    results = Results(args.out, KIND, record, smoke=args.smoke)
    result: dict = {"max_tokens": max_tokens, "sessions": names, "turns": {}}
    for server, start in chosen.items():
        with start() as base:
            result["turns"][server] = replay(base, sessions, max_tokens, server)
        result["summary"] = summary(result["turns"])
        results.write(result, markdown({**results.header(), **result}))
    print(markdown({**results.header(), **result}))
    results.done()
    failed = [
        t for turns in result["turns"].values() for t in turns if not 200 <= t["status"] < 300
    ]
    return 1 if args.smoke and failed else 0
