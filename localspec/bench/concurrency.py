"""``localspec bench concurrency``: many clients at once, through the openai client:
localspec serve beside llama-server.

    localspec bench concurrency --llama-server PATH   # the full run (about 25 min here,
    llama-server included) localspec bench concurrency --smoke               # 1 and 2 clients, 16
    tokens (CI) localspec bench concurrency --one-client 3        # 1 client only: slots vs
    --parallel 1

N asynchronous clients (``openai.AsyncOpenAI``, streaming) share a list of prompts
(MT-Bench and HumanEval first turns, alternating), greedy, ``max_tokens`` 128; each client
sends its next request as soon as its last one ends, until 3 N requests are done (three
waves, so the start and the ragged end weigh less).  At 1, 2, 4 and 8 clients, each server in turn
(one process at a time, the others stopped, one warm-up request first):

- ``localspec serve`` (default ``--parallel 4``) with ``--draft none`` (plain) and with
  its defaults (adaptive), each its own process: a server that had seen the prompts
  would have them cached, and its suffix drafter would copy its earlier answers;
- ``localspec serve --parallel 1``, adaptive: one request at a time, as before slots;
- with ``--llama-server``: ``llama-server -np 4`` without and with ``-md DRAFT
  --spec-type draft-simple`` (its own defaults), same GGUF files, ``-c 4096``;
- with ``--endpoint URL``: that running OpenAI-compatible server (vLLM, ...), as "endpoint".

Reported per level: aggregate t/s (completion tokens of all requests / wall seconds from
the first request to the last answer), per-request decode t/s (tokens after the first /
seconds after the first), TTFT p50 and p95 (seconds from sending to the first streamed
token).  Beside them, this machine's batching ceiling 4 c(1) / c(4): the aggregate four
plain sequences could reach if a decode of 4 tokens were the only cost, from the target's
own decode of 1 and 4 tokens (best of 5, :func:`fastest`).

Written to ``concurrency-<machine>-<date>-<commit>.{json,png}`` in ``--out``
(``concurrency-smoke.json`` for ``--smoke``).

``--fresh`` (:func:`fresh`, :mod:`localspec.bench.fresh_clients`): prompts never sent before, drawn
for this run (``--seed``), 64 tokens; ``localspec serve`` default against ``--draft none``, each a
fresh process, and llama-server plain beside them when a binary is found; the aggregate ratio
default / plain and how many greedy answers equal plain's, on the fresh prompts and on the committed
ones above; ``concurrency-fresh-<machine>-<date>-<commit>.*``.

``--one-client R`` checks one target alone: one client, ``localspec serve`` with its
default slots against ``--parallel 1`` (the server before slots), R rounds, each round
both servers on the same 8 fresh prompts, in alternating order; the ratio of aggregate
t/s per round and over all rounds, written to
``concurrency-one-client-<machine>-<date>-<commit>.json``.
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

from localspec.bench import fresh_clients
from localspec.bench.cli import add_out, add_peers, add_smoke, positive
from localspec.bench.clients_at_once import Starter, run_server
from localspec.bench.results import Results
from localspec.bench.servers import serving
from localspec.bench.workloads import concurrency_prompts
from localspec.llama.report import machine_line, machine_record

NAME = "concurrency"
HELP = (
    "1, 2, 4 and 8 async openai clients: localspec serve plain, adaptive, --parallel 1, "
    "beside llama-server"
)
LEVELS = (1, 2, 4, 8)


def prompts(n: int) -> list[list[dict]]:
    return [p.messages for p in concurrency_prompts(n)]


def fastest(engine, batch: int, repeats: int = 5) -> float:
    """Best of ``repeats`` decodes of ``batch`` tokens at the end of a 64-token context."""
    engine.decode([100] * 64)
    best = float("inf")
    for _ in range(repeats):
        before = engine.decode_s
        engine.decode([100] * batch, range(batch))
        best = min(best, engine.decode_s - before)
        engine.trim(64)
    return best


def ceiling(target_path: Path) -> dict:
    from localspec.llama.engine import Engine, EngineConfig

    engine = Engine(target_path, EngineConfig(n_ctx=512))
    try:
        c1, c4 = fastest(engine, 1), fastest(engine, 4)
    finally:
        engine.close()
    return {"c1_s": c1, "c4_s": c4, "ceiling_tps_4": 4 / c4, "ceiling_ratio_4": 4 * c1 / c4}


def summary(results: dict, ceil: dict) -> dict:
    def at(name, n, key="aggregate_tps"):
        rows = {r["clients"]: r for r in results.get(name, [])}
        return rows[n][key] if n in rows else None

    out = {"ceiling": ceil}
    ours_plain, ours = "localspec plain", "localspec adaptive"
    out["adaptive_over_plain"] = {
        n: at(ours, n) / at(ours_plain, n) for n in LEVELS if at(ours, n) and at(ours_plain, n)
    }
    out["adaptive_over_serialized"] = {
        n: at(ours, n) / at("localspec -np 1 adaptive", n)
        for n in LEVELS
        if at(ours, n) and at("localspec -np 1 adaptive", n)
    }
    if at("llama-server plain", 4):
        out["adaptive_over_llama_server_plain_4"] = at(ours, 4) / at("llama-server plain", 4)
    if at("llama-server -md", 4) and at("llama-server plain", 4):
        out["llama_server_md_over_plain_4"] = at("llama-server -md", 4) / at(
            "llama-server plain", 4
        )
    if at(ours, 4):
        out["adaptive_4_share_of_ceiling"] = at(ours, 4) / (
            at(ours_plain, 1) * ceil["ceiling_ratio_4"]
        )
        out["ttft_p50_4_over_idle"] = at(ours, 4, "ttft_p50_s") / at(ours, 1, "ttft_p50_s")
    return out


def plot(results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rows in results.items():
        ax.plot(
            [r["clients"] for r in rows], [r["aggregate_tps"] for r in rows], marker="o", label=name
        )
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("aggregate tokens/s")
    ax.set_xticks(list(LEVELS))
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def one_client(rounds: int, max_tokens: int, out: Path, record: dict) -> dict:
    """Slots against ``--parallel 1`` at one client (see the module docstring)."""
    pool = prompts(8 * rounds)
    variants = [
        ("localspec adaptive", lambda: serving()),
        ("localspec -np 1 adaptive", lambda: serving("--parallel", "1")),
    ]
    rows = []
    for r in range(rounds):
        work = pool[8 * r : 8 * (r + 1)]
        got = {}
        for name, start in variants if r % 2 == 0 else variants[::-1]:
            got |= run_server(name, start, (1,), lambda n, work=work: work, max_tokens)
        rows.append({name: got[name][0] for name, _ in variants})

    def total(name):
        return sum(x[name]["tokens"] for x in rows) / sum(x[name]["wall_s"] for x in rows)

    result = {
        "max_tokens": max_tokens,
        "rounds": rows,
        "ratio_per_round": [
            x["localspec adaptive"]["aggregate_tps"]
            / x["localspec -np 1 adaptive"]["aggregate_tps"]
            for x in rows
        ],
        "ratio": total("localspec adaptive") / total("localspec -np 1 adaptive"),
    }
    Results(out, "concurrency-one-client", record, benchmark=NAME).write(result)
    print(json.dumps({k: result[k] for k in ("ratio_per_round", "ratio")}, indent=1))
    return result


def add_arguments(parser) -> None:
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="tokens per answer (default 128; 64 with --fresh)",
    )
    parser.add_argument(
        "--one-client",
        type=int,
        metavar="R",
        help="only one client: slots vs --parallel 1, R rounds",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="prompts drawn new for this run, default vs --draft none (and llama-server plain), "
        "greedy answers compared",
    )
    parser.add_argument(
        "--seed", type=int, help="--fresh: the draw of prompts (default: a new one each run)"
    )
    add_peers(parser)
    add_smoke(parser, "1 and 2 clients, 16 tokens, localspec only (--fresh: 2 clients, 2 prompts)")
    add_out(parser)


def check(args) -> None:
    from localspec.errors import InvalidOptionError

    positive("--max-tokens", args.max_tokens)
    positive("--one-client", args.one_client)
    if args.fresh and args.one_client:
        raise InvalidOptionError("--fresh and --one-client are two different runs: choose one")
    if args.fresh and args.endpoint:
        raise InvalidOptionError(
            "--fresh starts every server it measures (a running --endpoint has seen earlier "
            "prompts)"
        )
    if args.seed is not None and not args.fresh:
        raise InvalidOptionError(
            "--seed draws the prompts of --fresh; without --fresh the prompts are fixed"
        )


def main(args) -> int:
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    if args.fresh:
        return fresh(args, record)
    args.max_tokens = args.max_tokens or 128
    if args.one_client:
        one_client(args.one_client, args.max_tokens, Path(args.out), record)
        return 0
    from localspec.api import resolve_pair

    pair = resolve_pair(None)
    levels = (1, 2) if args.smoke else LEVELS
    max_tokens = 16 if args.smoke else args.max_tokens
    counts = {n: 2 if args.smoke else 3 * n for n in levels}  # three waves of requests per client
    pool = prompts(sum(counts.values()))
    starts = {n: sum(counts[m] for m in levels if m < n) for n in levels}

    def work_for(n):
        return pool[starts[n] : starts[n] + counts[n]]

    ceil = ceiling(pair.target)
    results = Results(args.out, NAME, record, smoke=args.smoke)
    measured: dict = {}
    for name, start in _servers(args, pair):
        measured |= run_server(name, start, levels, work_for, max_tokens)
        result = {"max_tokens": max_tokens, "summary": summary(measured, ceil), "results": measured}
        results.write(result)  # after each server
    print(json.dumps(result["summary"], indent=1))
    if not args.smoke:
        title = f"{machine_line(record)}; {max_tokens} tokens, greedy"
        results.write(result, plot=lambda path: plot(measured, path, title))
    results.done()
    return 0


def _servers(args, pair) -> list[tuple[str, Starter]]:
    servers: list[tuple[str, Starter]] = [
        ("localspec plain", lambda: serving("--draft", "none")),
        ("localspec adaptive", lambda: serving()),
    ]
    if not args.smoke:
        servers.append(("localspec -np 1 adaptive", lambda: serving("--parallel", "1")))
    if args.llama_server:
        base = ["-m", str(pair.target), "-c", "4096", "-np", "4"]
        servers.append(
            (
                "llama-server plain",
                lambda: fresh_clients.start_llama_server(args.llama_server, *base),
            )
        )
        draft = [*base, "-md", str(pair.draft), "--spec-type", "draft-simple"]
        servers.append(
            (
                "llama-server -md",
                lambda: fresh_clients.start_llama_server(args.llama_server, *draft),
            )
        )
    if args.endpoint:
        servers.append(("endpoint", lambda: serving(endpoint=args.endpoint)))
    return servers


def _classify_divergences(result: dict, sets: dict, pair) -> None:
    """Each divergence of default from plain classified on the target, loaded here once the
    servers are gone (:func:`localspec.bench.fresh_clients.classify`)."""
    from localspec.api import SpeculativeModel

    differs = any(
        row.get("equality", {}).get("differ")
        for got in result["sets"].values()
        for row in got["summary"]
    )
    if not differs:
        return
    with SpeculativeModel(pair.target, None, n_ctx=4096, strategy="none") as model:
        for set_name, got in result["sets"].items():
            fresh_clients.classify(got["summary"], sets[set_name], model)


def fresh(args, record: dict) -> int:
    """``--fresh``: every prompt set on every server (:mod:`localspec.bench.fresh_clients`)."""
    from localspec.api import resolve_pair

    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    levels, waves = ((2,), 1) if args.smoke else (LEVELS, fresh_clients.WAVES)
    max_tokens = 16 if args.smoke else args.max_tokens or 64
    print(f"fresh prompts: seed {seed}", file=sys.stderr)
    sets = fresh_clients.prompt_sets(levels, waves, seed, committed=not args.smoke)
    pair = resolve_pair(None)
    chosen = fresh_clients.servers(pair, fresh_clients.llama_server_binary(args.llama_server))
    results = Results(args.out, fresh_clients.KIND, record, smoke=args.smoke, benchmark=NAME)
    result: dict = {
        "seed": seed,
        "max_tokens": max_tokens,
        "waves": waves,
        "levels": list(levels),
        "sets": {},
    }
    for set_name, work in sets.items():
        measured: dict = {}
        for name, start in chosen:
            print(f"{set_name} prompts, {name}:", file=sys.stderr, flush=True)
            measured |= run_server(
                name,
                start,
                levels,
                lambda n, work=work: [p.messages for p in work[n]],
                max_tokens,
                True,
            )
            got = {
                "prompts": {n: [p.name for p in w] for n, w in work.items()},
                "results": measured,
            }
            result["sets"][set_name] = {**got, "summary": fresh_clients.compare(measured, work)}
            results.write(result, fresh_clients.markdown({**results.header(), **result}))
    _classify_divergences(result, sets, pair)
    text = fresh_clients.markdown({**results.header(), **result})
    if not args.smoke:
        title = f"{machine_line(record)}; fresh prompts, {max_tokens} tokens, greedy"
        results.write(
            result, text, lambda path: plot(result["sets"]["fresh"]["results"], path, title)
        )
    print(text)
    results.done()
    return 0
