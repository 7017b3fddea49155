"""``localspec bench engine``: plain localspec vs llama-cpp-python on the default pair,
speculative at draft-max 4, our per-round overhead, peak RSS.

    localspec bench engine            # 10 HumanEval prompts, 128 tokens
    localspec bench engine --smoke    # 2 prompts, 32 tokens

Greedy (temperature 0).  Plain localspec and ``Llama.create_completion`` run
interleaved, prompt by prompt, in one process, so machine noise hits both alike.
Throughput is end to end: generated tokens / wall seconds including prompt eval.
Written to ``engine-<machine>-<date>-<commit>.{json,md}`` in ``--out``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench.cli import add_out, add_smoke, positive
from localspec.bench.results import Results
from localspec.bench.workloads import code_prompts
from localspec.llama.engine import default_threads
from localspec.llama.peer import load_peer_llama
from localspec.llama.report import machine_line, machine_record

NAME = "engine"
HELP = (
    "plain localspec against llama-cpp-python, speculative at draft-max 4, our overhead, peak RSS"
)


def humaneval_prompts(n: int) -> list[str]:
    return [p.text for p in code_prompts(n)]


def bench_plain_vs_llama_cpp_python(pair, prompts, n_tokens, n_threads):
    ours = SpeculativeModel(pair.target, None, n_ctx=4096, n_threads=n_threads)
    theirs = load_peer_llama(
        pair.target,
        n_ctx=4096,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        n_batch=512,
        flash_attn=True,
        verbose=False,
    )
    rows = []
    for prompt in prompts:
        messages = [{"role": "user", "content": prompt}]
        tokens = ours.target.chat_tokens(messages)
        theirs.reset()
        t0 = time.perf_counter()
        out = theirs.create_completion(tokens, max_tokens=n_tokens, temperature=0.0, top_k=1)
        t_theirs = time.perf_counter() - t0
        n_theirs = out["usage"]["completion_tokens"]
        ours.target.trim(0)  # cold, like theirs after reset()
        r = ours.chat(messages, max_tokens=n_tokens, draft_max=0)
        rows.append(
            {
                "llama_cpp_python_tps": n_theirs / t_theirs,
                "localspec_plain_tps": len(r.tokens) / r.stats.total_s,
                "tokens": len(r.tokens),
                "same_tokens_as_llama_cpp_python": n_theirs == r.stats.generated_tokens,
            }
        )
    ours.close()
    theirs.close()
    return rows


def bench_speculative(pair, prompts, n_tokens, n_threads, p_min):
    rows = []
    with SpeculativeModel(
        pair.target,
        pair.draft,
        n_ctx=4096,
        n_threads=n_threads,
        draft_max=4,
        p_min=p_min,
        strategy="draft-model",
    ) as m:
        for prompt in prompts:
            messages = [{"role": "user", "content": prompt}]
            m.target.trim(0)
            m.drafter.engine.trim(0)
            plain = m.chat(messages, max_tokens=n_tokens, draft_max=0)
            m.target.trim(0)
            m.drafter.engine.trim(0)
            spec = m.chat(messages, max_tokens=n_tokens)
            s = spec.stats
            after_first = s.total_s - s.ttft_s
            rows.append(
                {
                    "plain_tps": len(plain.tokens) / plain.stats.total_s,
                    "speculative_tps": len(spec.tokens) / s.total_s,
                    "decode_tps": s.tokens_per_s,
                    "acceptance_rate": s.acceptance_rate,
                    "mean_accepted_length": s.mean_accepted_length,
                    "ttft_s": s.ttft_s,
                    "prompt_eval_s": s.prompt_eval_s,
                    "draft_s": s.draft_s,
                    "verify_s": s.verify_s,
                    "overhead_s": s.overhead_s,
                    "overhead_share": s.overhead_s / after_first if after_first else 0.0,
                    "round_ms": 1000 * after_first / s.rounds if s.rounds else 0.0,
                }
            )
    return rows


def peak_rss(pair) -> dict:
    """Load both models at n_ctx 4096 in a fresh process, generate, report its peak RSS.

    Read from /proc/self/status VmHWM: ru_maxrss would include the parent's RSS at fork
    time (Linux keeps it across exec) and report ~1.2 GiB too much here."""
    code = (
        "from localspec.api import SpeculativeModel\n"
        f"m = SpeculativeModel({str(pair.target)!r}, {str(pair.draft)!r}, n_ctx=4096)\n"
        "m.chat('Write a Python function that reverses a string.', max_tokens=64)\n"
        "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rss = int(out.stdout.strip().splitlines()[-1]) * 1024  # kB
    files = pair.target.stat().st_size + pair.draft.stat().st_size
    return {
        "peak_rss_bytes": rss,
        "model_files_bytes": files,
        "budget_bytes": files + (1 << 30),
        "within_budget": rss < files + (1 << 30),
    }


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def add_arguments(parser) -> None:
    parser.add_argument("--prompts", type=int, default=10, help="HumanEval prompts (from 0)")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per answer")
    add_smoke(parser, "2 prompts, 32 tokens")
    add_out(parser)


def check(args) -> None:
    positive("--prompts", args.prompts)
    positive("--tokens", args.tokens)


def main(args) -> int:
    n_prompts, n_tokens = (2, 32) if args.smoke else (args.prompts, args.tokens)
    n_threads = default_threads()
    pair = resolve_pair()
    prompts = humaneval_prompts(n_prompts)
    plain = bench_plain_vs_llama_cpp_python(pair, prompts, n_tokens, n_threads)
    spec = {
        p_min: bench_speculative(pair, prompts, n_tokens, n_threads, p_min) for p_min in (0.0, 0.75)
    }
    summary = summarise(
        plain,
        spec,
        peak_rss(pair),
        f"HumanEval/0..{n_prompts - 1}, {n_tokens} new tokens, temperature 0",
    )
    summary["machine"] = machine_record(n_threads)
    print(json.dumps(summary, indent=2))
    results = Results(args.out, NAME, summary["machine"], smoke=args.smoke)
    results.write(
        {"summary": summary, "plain_rows": plain, "speculative_rows": spec}, markdown(summary)
    )
    results.done()
    return 0


def summarise(plain: list[dict], spec: dict, rss: dict, prompts: str) -> dict:
    ratio = sum(r["localspec_plain_tps"] for r in plain) / sum(
        r["llama_cpp_python_tps"] for r in plain
    )
    return {
        "prompts": prompts,
        "plain_localspec_tps_median": median(plain, "localspec_plain_tps"),
        "plain_llama_cpp_python_tps_median": median(plain, "llama_cpp_python_tps"),
        "plain_ratio_localspec_over_llama_cpp_python": ratio,
        "speculative": {str(p_min): _speculative_summary(rows) for p_min, rows in spec.items()},
        "memory": rss,
    }


def _speculative_summary(rows: list[dict]) -> dict:
    return {
        "plain_tps_median": median(rows, "plain_tps"),
        "speculative_tps_median": median(rows, "speculative_tps"),
        "speedup_median": statistics.median(r["speculative_tps"] / r["plain_tps"] for r in rows),
        "acceptance_rate_median": median(rows, "acceptance_rate"),
        "mean_accepted_length_median": median(rows, "mean_accepted_length"),
        "round_ms_median": median(rows, "round_ms"),
        "time_split_s_median": {
            k: median(rows, k) for k in ("prompt_eval_s", "draft_s", "verify_s", "overhead_s")
        },
        "overhead_share_max": max(r["overhead_share"] for r in rows),
    }


def markdown(s: dict) -> str:
    m = s["memory"]
    lines = [
        f"Engine benchmark: {s['prompts']}; {machine_line(s['machine'])}.",
        "",
        table(s),
        "",
        "localspec plain / llama-cpp-python: "
        f"×{s['plain_ratio_localspec_over_llama_cpp_python']:.3f}.",
        f"Peak RSS with both models at n_ctx 4096: {m['peak_rss_bytes'] / 2**30:.2f} GiB "
        f"(budget: files {m['model_files_bytes'] / 2**30:.2f} GiB + 1 GiB).",
        "",
    ]
    return "\n".join(lines)


def table(s: dict) -> str:
    """The Markdown table of a summary: both plain runs, then speculative per p-min."""
    lines = [
        "| run | t/s (median) | acceptance | mean accepted length | overhead share (max) |",
        "|---|---|---|---|---|",
        f"| llama-cpp-python `create_completion` | {s['plain_llama_cpp_python_tps_median']:.1f} "
        "| | | |",
        f"| localspec plain | {s['plain_localspec_tps_median']:.1f} | | | |",
    ]
    for p_min, v in s["speculative"].items():
        lines.append(
            f"| localspec draft-max 4, p-min {p_min} | {v['speculative_tps_median']:.1f} "
            f"(plain {v['plain_tps_median']:.1f}, ×{v['speedup_median']:.2f}) | "
            f"{v['acceptance_rate_median']:.1%} | {v['mean_accepted_length_median']:.2f} | "
            f"{v['overhead_share_max']:.1%} |"
        )
    return "\n".join(lines)
