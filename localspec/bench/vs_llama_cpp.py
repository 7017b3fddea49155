"""``localspec bench vs-llama-cpp``: the draft model at draft-max 4, localspec vs llama.cpp's
C++ ``llama-speculative-simple``, side by side on the same HumanEval prompts (chat template
applied), greedy.

    localspec bench vs-llama-cpp --binary /path/to/llama-speculative-simple [--prompts 5]

Build the binary from the llama.cpp that llama-cpp-python 0.3.36 vendors (its sdist's
``vendor/llama.cpp``: ``cmake -B build -DLLAMA_CURL=OFF && cmake --build build --target
llama-speculative-simple``); it runs with ``--spec-type draft-simple --spec-draft-n-max 4
--spec-draft-p-min 0.75``, the same settings as localspec.  Both report decode speed: tokens after
the prompt over the time after prompt eval.  Runs alternate, prompt by prompt; medians are printed
and written to ``vs_llama_cpp-<machine>-<date>-<commit>.json`` in ``--out``.
"""

import json
import os
import re
import statistics
import subprocess
import tempfile

from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench.cli import add_out, positive
from localspec.bench.results import Results
from localspec.bench.workloads import code_prompts
from localspec.llama.engine import default_threads
from localspec.llama.report import machine_record

NAME = "vs-llama-cpp"
HELP = "the draft model at draft-max 4 against llama.cpp's C++ llama-speculative-simple"
N_TOKENS, DRAFT_MAX, P_MIN = 128, 4, 0.75


def run_cpp(binary, pair, prompt_text, n_threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt_text)
    cmd = [
        binary,
        "-m",
        str(pair.target),
        "-md",
        str(pair.draft),
        "-f",
        f.name,
        "-n",
        str(N_TOKENS),
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        str(DRAFT_MAX),
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        str(P_MIN),
        "--temp",
        "0",
        "-t",
        str(n_threads),
        "-c",
        "4096",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    os.unlink(f.name)
    log = out.stdout + out.stderr
    speed = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    accept = re.search(r"accept\s+=\s+([\d.]+)%", log)
    if not speed:
        raise SystemExit(f"could not read llama-speculative-simple's output:\n{log[-2000:]}")
    return {
        "decode_tps": float(speed.group(3)),
        "acceptance": float(accept.group(1)) / 100 if accept else None,
    }


def add_arguments(parser) -> None:
    parser.add_argument(
        "--binary",
        default=os.environ.get("LLAMA_SPECULATIVE_SIMPLE", "llama-speculative-simple"),
        metavar="PATH",
        help="llama-speculative-simple (default: $LLAMA_SPECULATIVE_SIMPLE, else on PATH)",
    )
    parser.add_argument("--prompts", type=int, default=5, help="HumanEval prompts (from 0)")
    add_out(parser)


def check(args) -> None:
    positive("--prompts", args.prompts)


def main(args) -> int:
    binary = args.binary
    pair = resolve_pair()
    n_threads = default_threads()
    rows = []
    with SpeculativeModel(pair.target, pair.draft, n_ctx=4096, n_threads=n_threads) as model:
        for prompt in code_prompts(args.prompts):
            messages = [{"role": "user", "content": prompt.text}]
            cpp = run_cpp(binary, pair, model.target.render_chat(messages), n_threads)
            model.reset_cache()
            r = model.chat(
                messages,
                max_tokens=N_TOKENS,
                strategy="draft-model",
                draft_max=DRAFT_MAX,
                p_min=P_MIN,
            )
            rows.append(
                {
                    "prompt": prompt.name,
                    "llama_cpp_decode_tps": cpp["decode_tps"],
                    "llama_cpp_acceptance": cpp["acceptance"],
                    "localspec_decode_tps": r.stats.tokens_per_s,
                    "localspec_acceptance": r.stats.acceptance_rate,
                    "localspec_tokens": len(r.tokens),
                }
            )
            print(rows[-1], flush=True)
    summary = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k.endswith("tps")}
    summary["ratio_localspec_over_llama_cpp"] = statistics.median(
        r["localspec_decode_tps"] / r["llama_cpp_decode_tps"] for r in rows
    )
    print(json.dumps(summary, indent=1))
    results = Results(args.out, "vs_llama_cpp", machine_record(n_threads), benchmark=NAME)
    settings = {"n_tokens": N_TOKENS, "draft_max": DRAFT_MAX, "p_min": P_MIN, "threads": n_threads}
    results.write({"settings": settings, "summary": summary, "rows": rows})
    results.done()
    return 0
