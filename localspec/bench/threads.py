"""``localspec bench threads``: does the thread a caller is on, or the server around the
library, cost decode speed?

    localspec bench threads            # both parts, about 6 minutes on 2 cores
    localspec bench threads --smoke    # one prompt, one round each (CI-sized check that it runs)

Every measurement runs in a fresh process of its own, one after the other, so no two
measurements share the cores or llama.cpp's OpenMP thread teams.  Decode speed is
llama.cpp server's ``predicted_per_second`` (tokens after the first over the time after the
first), read from the server's ``timings`` and computed the same way from the library's
statistics (:func:`localspec.bench.client.decode_tps`); the default pair, greedy, the
HumanEval prompts 0..4, 128 new tokens.

1. Threads: the library loads the pair and generates (a) both in the main thread, (b) loads
   in the main thread and generates from another thread, (c) both in one other thread.
   Plain decoding (no drafter), so only the threads differ.
2. Server vs library: ``localspec serve`` exactly as the README starts it, driven by the
   openai client, against ``SpeculativeModel.chat`` in its own process; plain decoding and
   the adaptive default.  The two alternate (server, library, server, library).

Written to ``thread_serve-<machine>-<date>-<commit>.json`` in ``--out`` (``--smoke``
writes ``thread_serve-smoke.json``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading

from localspec.bench.cli import add_out, add_smoke
from localspec.bench.client import decode_tps, openai_client
from localspec.bench.results import Results
from localspec.bench.servers import serving

NAME = "threads"
HELP = "the caller's thread, and localspec serve against the library, each in a fresh process"
PROMPTS = 5
N_TOKENS = 128
PLAIN = {
    "strategy": "none"
}  # SpeculativeModel.chat's option; the server takes it as speculative.strategy
ADAPTIVE: dict = {}


def _messages(i: int) -> list[dict]:
    from localspec.bench.workloads import code_prompts

    return code_prompts(i + 1)[i].messages


def library_child(mode: str, strategy: dict, n_prompts: int) -> list[float]:
    """Runs in a child process: decode t/s per prompt, the pair loaded and used as ``mode`` says."""
    from localspec.api import load

    out: list[float] = []

    def generate(model) -> None:
        for i in range(n_prompts):
            result = model.chat(_messages(i), max_tokens=N_TOKENS, temperature=0, **strategy)
            out.append(decode_tps(result))

    if mode == "worker":
        holder = threading.Thread(target=lambda: generate(load()), name="user-thread")
        holder.start()
        holder.join()
        return out
    model = load()
    if mode == "cross":
        user = threading.Thread(target=generate, args=(model,), name="user-thread")
        user.start()
        user.join()
    else:
        generate(model)
    model.close()
    return out


def _run_child(mode: str, strategy: dict, n_prompts: int) -> list[float]:
    code = (
        "import json; from localspec.bench import threads; "
        f"print(json.dumps(threads.library_child({mode!r}, {strategy!r}, {n_prompts})))"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _serve_child(strategy: dict, n_prompts: int) -> list[float]:
    """``localspec serve`` in its own process, driven by the openai client; one per
    strategy, as the library's children, so no server holds another strategy's answers
    for its suffix drafter to copy."""
    with serving() as base:
        client = openai_client(base, max_retries=2)
        out = []
        for i in range(n_prompts):
            r = client.chat.completions.create(
                model="m",
                messages=_messages(i),
                max_tokens=N_TOKENS,
                temperature=0,
                extra_body={"speculative": strategy},
            )
            out.append(decode_tps(r))
        return out


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def add_arguments(parser) -> None:
    add_smoke(parser, "one prompt, one alternation")
    add_out(parser)


def main(args) -> int:
    from localspec.llama.report import machine_line, machine_record

    n_prompts, alternations = (1, 1) if args.smoke else (PROMPTS, 2)
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    threads = {mode: _run_child(mode, PLAIN, n_prompts) for mode in ("main", "cross", "worker")}
    serve: dict[str, list[float]] = {"plain": [], "adaptive": []}
    library: dict[str, list[float]] = {"plain": [], "adaptive": []}
    for _ in range(alternations):
        serve["plain"] += _serve_child(PLAIN, n_prompts)
        serve["adaptive"] += _serve_child(ADAPTIVE, n_prompts)
        library["plain"] += _run_child("main", PLAIN, n_prompts)
        library["adaptive"] += _run_child("main", ADAPTIVE, n_prompts)
    summary = {
        "threads_decode_tps": {m: _median(v) for m, v in threads.items()},
        "cross_over_main": _median(threads["cross"]) / _median(threads["main"]),
        "worker_over_main": _median(threads["worker"]) / _median(threads["main"]),
        "serve_decode_tps": {k: _median(v) for k, v in serve.items()},
        "library_decode_tps": {k: _median(v) for k, v in library.items()},
        "serve_over_library": {k: _median(serve[k]) / _median(library[k]) for k in serve},
    }
    result = {
        "prompts": n_prompts,
        "alternations": alternations,
        "max_tokens": N_TOKENS,
        "runs": {"threads": threads, "serve": serve, "library": library},
        "summary": summary,
    }
    print(json.dumps(summary, indent=1))
    results = Results(args.out, "thread_serve", record, smoke=args.smoke, benchmark=NAME)
    results.write(result)
    results.done()
    return 0
