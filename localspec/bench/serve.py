"""``localspec bench serve``: localspec serve, measured through the openai client, side by side.

    localspec bench serve                  # overhead + edits with prediction, this machine
    localspec bench serve --endpoint URL   # also drive another OpenAI-compatible server
                                           # (e.g. llama.cpp's llama-server -md ...)

1. Server overhead: the same prompts (HumanEval/0..4, greedy, plain decoding and the
   adaptive default) through ``localspec serve`` and through ``SpeculativeModel.chat``,
   interleaved; end-to-end t/s = completion tokens / wall seconds, as each caller sees it.
2. Edits with Predicted Outputs: HumanEval solutions with a small requested change
   (``localspec.bench.workloads.edit_prompts``), temperature 0, the original code sent as
   ``prediction``; decode speed-up over plain decoding of the same request (llama.cpp
   ``timings``: predicted_n / predicted_ms), and as a share of this machine's copy
   ceiling max_b b*c(1)/c(b) from the target's calibrated verify costs c(b).
3. With ``--endpoint``: edit and first-turn requests (without prediction, which
   llama-server does not take) through that server and ours, interleaved: at equal
   settings (the draft model, n_max 4, n_min 0, p_min 0.75, sent as llama.cpp's per-request
   ``speculative`` fields to both) and with each server's default; decode t/s as each
   server's own ``timings`` report it (client-side when it sends none).  ``--peer-only``
   runs just this part.  llama-server 0c1e570 ignores per-request speculative settings,
   so it runs twice: with the equal settings (``--endpoint``) and with its defaults
   (``--endpoint-default``, draft-simple n_max 3, p_min 0).  Built from the llama.cpp
   that llama-cpp-python vendors::

       pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 && tar xzf
       llama_cpp_python-0.3.36.tar.gz cd llama_cpp_python-0.3.36/vendor/llama.cpp && cmake -B build
       -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release cmake --build build --target llama-server -j
       S="build/bin/llama-server -m TARGET.gguf -md DRAFT.gguf --spec-type draft-simple -c 4096 -np
       1 --jinja" $S --port 8081 --spec-draft-n-max 4 --spec-draft-n-min 0 --spec-draft-p-min 0.75 &
       $S --port 8082 &

The suffix drafter keeps no earlier answers here (``suffix_store_tokens=0``): each prompt
runs several times, and a later run would copy the earlier one's answer.  For that, and to
empty the KV cache between requests, the server runs in this process on the library's own
model (:func:`localspec.bench.servers.in_process`), unlike the other benchmarks'.

Written to ``serve-<machine>-<date>-<commit>.json`` in ``--out``; ``--peer-only`` keeps the
other figures of the newest ``serve-<machine>-*.json`` there.
"""

import json
import statistics
import sys
import time
from pathlib import Path

from localspec.bench.cli import add_out, add_peers, positive
from localspec.bench.client import decode_tps, openai_client
from localspec.bench.results import Results, machine_slug
from localspec.bench.servers import base_url, in_process
from localspec.bench.workloads import code_prompts, edit_prompts, humaneval_tasks
from localspec.llama.report import machine_line, machine_record

NAME = "serve"
HELP = (
    "localspec serve against the library; edits with Predicted Outputs; another server (--endpoint)"
)
N_TOKENS = 128


def through_client(client, messages, extra, max_tokens=N_TOKENS):
    start = time.perf_counter()
    r = client.chat.completions.create(
        model="m", messages=messages, max_tokens=max_tokens, temperature=0, extra_body=extra
    )
    wall = time.perf_counter() - start
    timings = (r.model_extra or {}).get("timings") or {}
    details = r.usage.completion_tokens_details
    return {
        "tokens": r.usage.completion_tokens,
        "wall_s": wall,
        "e2e_tps": r.usage.completion_tokens / wall,
        "decode_tps": decode_tps(r),
        "draft_n": timings.get("draft_n"),
        "draft_n_accepted": timings.get("draft_n_accepted"),
        "accepted_prediction_tokens": getattr(details, "accepted_prediction_tokens", None)
        if details
        else None,
        "text": r.choices[0].message.content,
    }


def measure_overhead_and_edits(model, client, result, args):
    result["overhead"] = measure_overhead(model, client)
    result["edit"] = measure_edits(model, client, args)


def measure_overhead(model, client) -> dict:
    """The same prompts through the library and through the server, alternating who goes first."""
    overhead = []
    for i, prompt in enumerate(code_prompts(5)):
        messages = [{"role": "user", "content": prompt.text}]
        for strategy in ("none", "auto"):
            tps = {}
            # alternate who goes first: the adaptive policy keeps learning from call to call
            for side in ("library", "server") if i % 2 == 0 else ("server", "library"):
                model.reset_cache()
                if side == "library":
                    start = time.perf_counter()
                    lib = model.chat(messages, max_tokens=N_TOKENS, strategy=strategy)
                    tps[side] = len(lib.tokens) / (time.perf_counter() - start)
                else:
                    tps[side] = through_client(
                        client, messages, {"speculative": {"strategy": strategy}}
                    )["e2e_tps"]
            overhead.append(
                {
                    "prompt": prompt.name,
                    "strategy": strategy,
                    "library_tps": tps["library"],
                    "server_tps": tps["server"],
                    "ratio": tps["server"] / tps["library"],
                }
            )
            print(overhead[-1], flush=True)
    return {
        "rows": overhead,
        "median_ratio_server_over_library": statistics.median(r["ratio"] for r in overhead),
        "median_ratio_plain": statistics.median(
            r["ratio"] for r in overhead if r["strategy"] == "none"
        ),
    }


def measure_edits(model, client, args) -> dict:
    """Edits with the original code as ``prediction``, against plain and adaptive without it."""

    from localspec.bench.runner import copy_ceiling

    ceiling_info = copy_ceiling(model)
    ceiling, best_b = ceiling_info["speedup"], ceiling_info["batch"]
    edits = []
    tasks = humaneval_tasks(args.edits)
    for rep in range(args.reps):
        for prompt, task in zip(edit_prompts(args.edits), tasks):
            messages = [{"role": "user", "content": prompt.text}]
            original = task["prompt"] + task["canonical_solution"]
            model.reset_cache()
            plain = through_client(client, messages, {"speculative": {"strategy": "none"}})
            model.reset_cache()
            adaptive = through_client(client, messages, None)
            model.reset_cache()
            predicted = through_client(
                client, messages, {"prediction": {"type": "content", "content": original}}
            )
            row = {
                "prompt": prompt.name,
                "rep": rep,
                "plain_decode_tps": plain["decode_tps"],
                "adaptive_speedup": adaptive["decode_tps"] / plain["decode_tps"],
                "prediction_speedup": predicted["decode_tps"] / plain["decode_tps"],
                "accepted_prediction_tokens": predicted["accepted_prediction_tokens"],
                "prediction_same_text": predicted["text"] == plain["text"],
            }
            edits.append(row)
            print(row, flush=True)
    median = statistics.median(r["prediction_speedup"] for r in edits)
    return {
        "rows": edits,
        "copy_ceiling": ceiling,
        "ceiling_batch": best_b,
        "median_prediction_speedup": median,
        "median_adaptive_speedup": statistics.median(r["adaptive_speedup"] for r in edits),
        "share_of_ceiling": (median - 1) / (ceiling - 1) if ceiling > 1 else None,
    }


# The equal-settings comparison: llama.cpp's draft-simple with these values (llama-server
# 0c1e570 takes them only on its command line: --spec-draft-n-max 4 --spec-draft-n-min 0
# --spec-draft-p-min 0.75), and ours the same per request: the draft model, fixed k, the
# same confidence cut.  Then each server's own default.
EQUAL = {
    "speculative.n_max": 4,
    "speculative.n_min": 0,
    "speculative.p_min": 0.75,
    "speculative.strategy": "draft-model",
}


def compare_with_peer(peer, peer_default, client, model, endpoint, n_edits, n_first):
    """Edit and first-turn prompts through both servers, interleaved, decode t/s from each
    server's own ``timings``: at equal settings and with each server's default
    (``peer_default``: the peer started with its defaults; None = that column is skipped)."""
    rows = []
    prompts = edit_prompts(n_edits) + code_prompts(n_first)
    for i, prompt in enumerate(prompts):
        messages = [{"role": "user", "content": prompt.text}]
        runs = {
            "peer_equal": lambda m=messages: through_client(peer, m, None),
            "localspec_equal": lambda m=messages: through_client(client, m, EQUAL),
            "localspec_default": lambda m=messages: through_client(client, m, None),
        }
        if peer_default is not None:
            runs["peer_default"] = lambda m=messages: through_client(peer_default, m, None)
        order = list(runs) if i % 2 == 0 else list(reversed(runs))
        row = {"prompt": prompt.name}
        for name in order:
            model.reset_cache()
            r = runs[name]()
            row[name + "_decode_tps"] = r["decode_tps"] or r["e2e_tps"]
            row[name + "_acceptance"] = (
                (r["draft_n_accepted"] / r["draft_n"]) if r["draft_n"] else None
            )
            row[name + "_text"] = r["text"]
        row["same_text_equal"] = row["peer_equal_text"] == row["localspec_equal_text"]
        rows.append(row)
        print({k: v for k, v in row.items() if not k.endswith("_text")}, flush=True)

    def ratio(a, b, subset):
        if not all(b + "_decode_tps" in r for r in subset):
            return None
        return statistics.median(r[a + "_decode_tps"] / r[b + "_decode_tps"] for r in subset)

    def ratios(subset):
        return {
            "localspec_over_peer_equal_settings": ratio("localspec_equal", "peer_equal", subset),
            "localspec_over_peer_each_default": ratio("localspec_default", "peer_default", subset),
            "localspec_default_over_peer_equal_settings": ratio(
                "localspec_default", "peer_equal", subset
            ),
        }

    return {
        "endpoint": endpoint,
        "equal_settings": EQUAL,
        "rows": rows,
        "all": ratios(rows),
        "edits": ratios(rows[:n_edits]),
        "first_turns": ratios(rows[n_edits:]),
    }


def add_arguments(parser) -> None:
    add_peers(parser, llama_server=False)
    parser.add_argument(
        "--endpoint-default", metavar="URL", help="the same server started with its own defaults"
    )
    parser.add_argument(
        "--edits", type=int, default=6, help="edit prompts (HumanEval solutions, from 0)"
    )
    parser.add_argument(
        "--first-turns", type=int, default=4, help="first-turn prompts in the --endpoint comparison"
    )
    parser.add_argument("--reps", type=int, default=1, help="repetitions of the edits")
    parser.add_argument(
        "--peer-only",
        action="store_true",
        help="only the --endpoint comparison; the other figures are kept",
    )
    add_out(parser)


def check(args) -> None:
    from localspec.errors import InvalidOptionError

    if args.peer_only and not args.endpoint:
        raise InvalidOptionError("--peer-only needs --endpoint")
    positive("--edits", args.edits)
    positive("--first-turns", args.first_turns, 0)
    positive("--reps", args.reps)


def main(args) -> int:
    from localspec.api import SpeculativeModel, resolve_pair

    pair = resolve_pair()
    record = machine_record()
    results = Results(args.out, NAME, record)
    earlier = _newest(Path(args.out), record)
    result = {"n_tokens": N_TOKENS}
    if args.peer_only:
        result = {
            **{k: v for k, v in earlier.items() if k not in results.header()},
            "peer_machine": record,
        }
    # No store of earlier answers: every prompt runs several times here (plain, adaptive, library,
    # server), and the suffix drafter would copy the earlier run's answer to the same prompt.
    with SpeculativeModel(pair.target, pair.draft, n_ctx=4096, suffix_store_tokens=0) as model:
        with in_process(model) as base:
            client = openai_client(base)
            if not args.peer_only:
                measure_overhead_and_edits(model, client, result, args)
            if args.endpoint:
                result["peer"] = _compare(args, client, model)
    if not args.endpoint:  # keep the last comparison with a peer server
        result.update({k: earlier[k] for k in ("peer_machine", "peer") if k in earlier})
    _print(result, record)
    results.write(result)
    results.done()
    return 0


def _compare(args, client, model) -> dict:
    peer = openai_client(base_url(args.endpoint))
    peer_default = openai_client(base_url(args.endpoint_default)) if args.endpoint_default else None
    return compare_with_peer(
        peer, peer_default, client, model, args.endpoint, args.edits, args.first_turns
    )


def _newest(out: Path, record: dict) -> dict:
    """The newest serve result of this machine in ``out`` ({} when there is none)."""
    found = sorted(out.glob(f"serve-{machine_slug(record)}*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else {}


def _print(result: dict, record: dict) -> None:
    print(f"machine: {machine_line(record)}")
    if "peer" in result:
        for part in ("all", "edits", "first_turns"):
            print(
                f"localspec / peer decode t/s, medians, {part}: "
                + ", ".join(
                    f"{k} {v:.3f}" for k, v in result["peer"][part].items() if v is not None
                )
            )
    if "overhead" in result:
        o, e = result["overhead"], result["edit"]
        print(
            f"server / library t/s (median): {o['median_ratio_server_over_library']:.3f}, "
            f"plain decoding only {o['median_ratio_plain']:.3f}",
            file=sys.stdout,
        )
        print(
            f"edits with prediction: x{e['median_prediction_speedup']:.2f} decode (adaptive "
            "without it "
            f"x{e['median_adaptive_speedup']:.2f}); copy ceiling x{e['copy_ceiling']:.2f} at "
            f"b={e['ceiling_batch']}; "
            f"{100 * (e['share_of_ceiling'] or 0):.0f} % of the way"
        )
