"""localspec serve, measured through the openai client, side by side.

    .venv/bin/python benchmarks/serve_bench.py                 # overhead + edits with prediction, this machine
    .venv/bin/python benchmarks/serve_bench.py --endpoint URL  # also drive another OpenAI-compatible server
                                                               # (e.g. llama.cpp's llama-server -md ...)

1. Server overhead: the same prompts (HumanEval/0..4, greedy, plain decoding and the
   adaptive default) through ``localspec serve`` and through ``SpeculativeModel.chat``,
   interleaved; end-to-end t/s = completion tokens / wall seconds, as each caller sees it.
2. Edits with Predicted Outputs: HumanEval solutions with a small requested change
   (``localspec.workloads.edit_prompts``), temperature 0, the original code sent as
   ``prediction``; decode speed-up over plain decoding of the same request (llama.cpp
   ``timings``: predicted_n / predicted_ms), and as a share of this machine's copy
   ceiling max_b b*c(1)/c(b) from the target's calibrated verify costs c(b).
3. With ``--endpoint``: the same edit requests (without prediction, which llama-server
   does not take) against that server, decode t/s as its own ``timings`` report it, or
   client-side when it sends none.

Written to benchmarks/results/serve.json with the machine record.
"""

import argparse
import json
import socket
import statistics
import threading
import time
from pathlib import Path

import openai
import uvicorn

from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench import copy_ceiling
from localspec.doctor import machine_line, machine_record
from localspec.server import ServerConfig, create_app
from localspec.workloads import code_prompts, edit_prompts, humaneval_tasks

N_TOKENS = 128


def start_server(model):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(model, ServerConfig(model_name="localspec")),
                                           host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}/v1"


def through_client(client, messages, extra, max_tokens=N_TOKENS):
    start = time.perf_counter()
    r = client.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens, temperature=0,
                                       extra_body=extra)
    wall = time.perf_counter() - start
    timings = (r.model_extra or {}).get("timings") or {}
    details = r.usage.completion_tokens_details
    return {"tokens": r.usage.completion_tokens, "wall_s": wall, "e2e_tps": r.usage.completion_tokens / wall,
            "decode_tps": timings.get("predicted_per_second"), "draft_n": timings.get("draft_n"),
            "draft_n_accepted": timings.get("draft_n_accepted"),
            "accepted_prediction_tokens": getattr(details, "accepted_prediction_tokens", None) if details else None,
            "text": r.choices[0].message.content}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", help="base URL of another OpenAI-compatible server, e.g. http://127.0.0.1:8081/v1")
    ap.add_argument("--edits", type=int, default=6)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    pair = resolve_pair()
    result = {"machine": machine_record(), "n_tokens": N_TOKENS}
    with SpeculativeModel(pair.target, pair.draft, n_ctx=4096) as model:
        server, base = start_server(model)
        client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)

        overhead = []
        for i, prompt in enumerate(code_prompts(5)):
            messages = [{"role": "user", "content": prompt.text}]
            for strategy in ("none", "auto"):
                tps = {}
                # alternate who goes first: the adaptive policy keeps learning from call to call
                for side in (("library", "server") if i % 2 == 0 else ("server", "library")):
                    model.reset_cache()
                    if side == "library":
                        start = time.perf_counter()
                        lib = model.chat(messages, max_tokens=N_TOKENS, strategy=strategy)
                        tps[side] = len(lib.tokens) / (time.perf_counter() - start)
                    else:
                        tps[side] = through_client(client, messages, {"speculative": {"strategy": strategy}})["e2e_tps"]
                overhead.append({"prompt": prompt.name, "strategy": strategy, "library_tps": tps["library"],
                                 "server_tps": tps["server"], "ratio": tps["server"] / tps["library"]})
                print(overhead[-1], flush=True)
        result["overhead"] = {
            "rows": overhead,
            "median_ratio_server_over_library": statistics.median(r["ratio"] for r in overhead),
            "median_ratio_plain": statistics.median(r["ratio"] for r in overhead if r["strategy"] == "none"),
        }

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
                predicted = through_client(client, messages, {"prediction": {"type": "content", "content": original}})
                row = {"prompt": prompt.name, "rep": rep, "plain_decode_tps": plain["decode_tps"],
                       "adaptive_speedup": adaptive["decode_tps"] / plain["decode_tps"],
                       "prediction_speedup": predicted["decode_tps"] / plain["decode_tps"],
                       "accepted_prediction_tokens": predicted["accepted_prediction_tokens"],
                       "prediction_same_text": predicted["text"] == plain["text"]}
                edits.append(row)
                print(row, flush=True)
        median = statistics.median(r["prediction_speedup"] for r in edits)
        result["edit"] = {"rows": edits, "copy_ceiling": ceiling, "ceiling_batch": best_b,
                          "median_prediction_speedup": median,
                          "median_adaptive_speedup": statistics.median(r["adaptive_speedup"] for r in edits),
                          "share_of_ceiling": (median - 1) / (ceiling - 1) if ceiling > 1 else None}

        if args.endpoint:
            peer = openai.OpenAI(base_url=args.endpoint, api_key="none", max_retries=0, timeout=600)
            rows = []
            for prompt in edit_prompts(args.edits):
                messages = [{"role": "user", "content": prompt.text}]
                theirs = through_client(peer, messages, None)
                model.reset_cache()
                ours = through_client(client, messages, None)
                rows.append({"prompt": prompt.name, "peer_decode_tps": theirs["decode_tps"] or theirs["e2e_tps"],
                             "localspec_decode_tps": ours["decode_tps"]})
                print(rows[-1], flush=True)
            result["peer"] = {"endpoint": args.endpoint, "rows": rows, "median_ratio_localspec_over_peer": statistics.median(
                r["localspec_decode_tps"] / r["peer_decode_tps"] for r in rows)}
        server.should_exit = True

    print(f"machine: {machine_line(result['machine'])}")
    print(f"server / library t/s (median): {result['overhead']['median_ratio_server_over_library']:.3f}, "
          f"plain decoding only {result['overhead']['median_ratio_plain']:.3f}")
    e = result["edit"]
    print(f"edits with prediction: x{e['median_prediction_speedup']:.2f} decode (adaptive without it "
          f"x{e['median_adaptive_speedup']:.2f}); copy ceiling x{e['copy_ceiling']:.2f} at b={e['ceiling_batch']}; "
          f"{100 * (e['share_of_ceiling'] or 0):.0f} % of the way")
    if "peer" in result:
        print(f"localspec / peer decode t/s (median): {result['peer']['median_ratio_localspec_over_peer']:.3f}")
    out = Path(__file__).parent / "results" / "serve.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
