"""``localspec bench agents``: the coding agents' recorded sessions sent again, request by
request, to ``localspec serve`` (adaptive and plain) and to llama-server on the same GGUFs.

    localspec bench agents --llama-server PATH              # four sessions, four servers
    localspec bench agents --servers default,plain          # localspec only
    localspec bench agents --sessions aider-0.86.2 -n 64    # one session, 64 tokens per turn
    localspec bench agents --smoke                          # aider's session, 16 tokens, default
    only
    localspec bench agents --sessions codex-0.171.0-default --first-turn --runs 3 \
        --servers default,plain -n 32000                    # an agent's first request, as sent

Sessions (``--sessions``, names of ``tests/data/agents``, see its README): the requests Claude
Code, Codex CLI, opencode and aider sent while creating ``hello.py`` in an empty folder,
captured from their own releases (:mod:`localspec.bench.agent_replay`).  Every body is sent
as the agent sent it (its path, query, headers and stream flag), made greedy and capped at
``--max-tokens`` generated tokens, so each server answers the same prompts.

``--first-turn`` sends only each session's first request (its long system prompt read on a
fresh server: where a draft model's catch-up would cost most); ``--runs R`` measures every
server R times, fresh each time, the servers' order reversed every other run.

Servers (``--servers``), each a fresh process with a ``-c 16384`` context, every session
replayed on it in order (so a session's second turn may find its first turn's prefix cached):
``default`` (``localspec serve``), ``plain`` (``localspec serve --draft none``),
``llama-server`` (``-m TARGET -c 16384 -np 1 --jinja``, plain) and ``llama-server-md`` (the
same with ``-md DRAFT``: llama.cpp's own draft-model speculation); the llama-server ones need
``--llama-server PATH`` (or ``llama-server`` on ``PATH``) and are skipped with a line without;
``--endpoint URL`` adds a server already running (llama-server, vLLM, ...) as ``endpoint``.

Reported per server and turn: HTTP status, prompt tokens read and cached (from the answer's
usage, or llama.cpp's ``timings``), time to the first generated event, decode t/s, seconds;
per session the wall time (the sum of its turns' seconds, the mean over runs) and, for every
server, its wall ÷ llama-server's; with ``default`` and ``plain`` both run, default's wall ÷
plain's per run, their mean and 95 % interval, and where default's time went against plain
decoding (its answers' ``timings.against_plain``, mean seconds per run).  A refused request
(non-2xx) is recorded with its body, not retried.

Written to ``agents-<machine>-<date>-<commit>.{json,md}`` in ``--out`` (``agents-smoke.*``
for ``--smoke``), rewritten after each server.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from localspec.bench.cli import add_out, add_peers, add_smoke, comma_names, positive
from localspec.bench.ratios import interval_text, mean_interval

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
    """Per session of ``turns`` (records of one server): wall seconds (sum of its turns', the
    mean over runs; ``run_walls`` each run's), tokens read and cached over its turns (the first
    run's), whether every turn was answered 2xx, and ``against_plain``: the mean over runs of
    its turns' ``timings.against_plain`` summed, in seconds (None where a turn had none)."""
    out: dict[str, dict] = {}
    for t in turns:
        row = out.setdefault(
            t["session"],
            {"runs": {}, "read_tokens": 0, "cached_tokens": 0, "all_2xx": True},
        )
        run = row["runs"].setdefault(t.get("run", 0), {"wall_s": 0.0, "accounts": []})
        run["wall_s"] += t["duration_s"]
        run["accounts"].append(t.get("against_plain"))
        if t.get("run", 0) == 0:
            row["read_tokens"] += t["read_tokens"] or 0
            row["cached_tokens"] += t["cached_tokens"] or 0
        row["all_2xx"] = row["all_2xx"] and 200 <= t["status"] < 300
    return {session: _walls(row) for session, row in out.items()}


def _walls(row: dict) -> dict:
    runs = [row["runs"][r] for r in sorted(row["runs"])]
    walls = [r["wall_s"] for r in runs]
    accounts = [a for r in runs for a in r["accounts"]]
    account = None
    if accounts and all(a is not None for a in accounts):
        account = {
            key[:-3] + "_s": sum(a[key] for a in accounts) / 1000 / len(runs)
            for key in accounts[0]
            if key.endswith("_ms")
        }
    return {
        "wall_s": statistics.fmean(walls),
        "run_walls": walls,
        "read_tokens": row["read_tokens"],
        "cached_tokens": row["cached_tokens"],
        "all_2xx": row["all_2xx"],
        "against_plain": account,
    }


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
        default, plain = row["servers"].get("default"), row["servers"].get("plain")
        if default and plain and default["all_2xx"] and plain["all_2xx"]:
            pairs = zip(default["run_walls"], plain["run_walls"])
            row["default_over_plain"] = mean_interval([d / p for d, p in pairs if p > 0])
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
                *against_plain_table(result),
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


def against_plain_table(result: dict) -> list[str]:
    """Per session: default's wall ÷ plain's (mean [95 % interval] over runs) and where
    default's time went against plain decoding (mean seconds per run); nothing without both."""
    rows = [r for r in result["summary"] if r.get("default_over_plain")]
    if not rows:
        return []
    lines = [
        "",
        "Default against plain: wall ÷ plain's wall, mean [95 % interval] over runs; where "
        "default's time went (its `timings.against_plain`, seconds per run: rounds won and "
        "lost, the draft model's catch-up and prompt read, the policy's own time, net):",
        "",
        "| session | runs | default ÷ plain | won | lost | catch-up | draft prompt | policy "
        "| net |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = ("won_s", "lost_s", "catch_up_s", "draft_prompt_s", "policy_s", "net_s")
    for row in rows:
        ratio, account = row["default_over_plain"], row["servers"]["default"]["against_plain"]
        cells = " | ".join(f"{account[k]:+.2f}" if account else "" for k in keys)
        lines.append(f"| {row['session']} | {ratio['n']} | {interval_text(ratio)} | {cells} |")
    return lines


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
    parser.add_argument(
        "--first-turn", action="store_true", help="send only each session's first request"
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="fresh runs of every server, interleaved (default 1)"
    )
    add_peers(parser)
    add_smoke(parser, f"{SMOKE_SESSION}'s session, {SMOKE_TOKENS} tokens, default only")
    add_out(parser)


def check(args) -> None:
    from localspec.errors import InvalidOptionError

    positive("--max-tokens", args.max_tokens)
    positive("--runs", args.runs)
    unknown = [name for name in comma_names(args.servers) if name not in SERVERS]
    if unknown or not comma_names(args.servers):
        raise InvalidOptionError(
            f"--servers: unknown {', '.join(unknown) or '(none given)'}; of {', '.join(SERVERS)}"
        )
    if not comma_names(args.sessions):
        raise InvalidOptionError("--sessions: give at least one session name")


def main(args) -> int:
    from localspec.api import resolve_pair
    from localspec.bench.agent_replay import SESSIONS_DIR, load_session
    from localspec.bench.fresh_clients import llama_server_binary
    from localspec.bench.results import Results
    from localspec.bench.servers import base_url
    from localspec.errors import InvalidOptionError
    from localspec.llama.report import machine_line, machine_record

    names = [SMOKE_SESSION] if args.smoke else comma_names(args.sessions)
    try:
        sessions = {name: load_session(name, args.sessions_dir or SESSIONS_DIR) for name in names}
        if args.first_turn:
            sessions = {name: turns[:1] for name, turns in sessions.items()}
    except FileNotFoundError as missing:
        raise InvalidOptionError(f"--sessions: {missing}") from None
    wanted = ["default"] if args.smoke else comma_names(args.servers)
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
    runs = 1 if args.smoke else args.runs
    result: dict = {"max_tokens": max_tokens, "sessions": names, "runs": runs, "turns": {}}
    for run in range(runs):
        for server, start in list(chosen.items())[:: -1 if run % 2 else 1]:
            with start() as base:
                got = replay(base, sessions, max_tokens, server)
            result["turns"].setdefault(server, []).extend({**t, "run": run} for t in got)
            result["summary"] = summary(result["turns"])
            results.write(result, markdown({**results.header(), **result}))
    print(markdown({**results.header(), **result}))
    results.done()
    failed = [
        t for turns in result["turns"].values() for t in turns if not 200 <= t["status"] < 300
    ]
    return 1 if args.smoke and failed else 0
