"""Plain decoding speed of the target under each CPU weight placement, side by side.

    .venv/bin/python benchmarks/amx_fallback.py [--tokens 64] [--reps 5]

- ``default``: llama.cpp's own choice (AMX where built in, else CPU_REPACK, else CPU);
- ``no-amx``: localspec's AMX fallback (no AMX buffer type; CPU_REPACK kept by
  tensor buffer-type overrides), what a machine whose AMX crashes gets;
- ``no-extra``: ``use_extra_bufts = False`` (no AMX, no CPU_REPACK), the simple fallback.

On a build without AMX, ``default`` *is* a build without AMX, so ``no-amx / default``
is the fallback's speed against such a build on the same machine.  All three models
stay loaded and the runs interleave, so machine noise hits each alike.  Greedy, the
HumanEval/0 prompt through the chat template, one token per decode.  Written to
benchmarks/results/amx_fallback-<machine>-<date>-<commit>.json (localspec.bench.results).
"""

import argparse
import statistics
import time

import numpy as np

from localspec.api import resolve_pair
from localspec.bench.results import DEFAULT_OUT, Results
from localspec.bench.workloads import code_prompts
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.report import machine_line, machine_record

MODES = ("default", "no-amx", "no-extra")


def decode_tps(engine: Engine, prompt: list[int], n_tokens: int) -> tuple[float, list[int]]:
    engine.trim(0)
    token = int(np.argmax(engine.decode(prompt, [len(prompt) - 1])[0]))
    out = [token]
    start = time.perf_counter()
    for _ in range(n_tokens - 1):
        token = int(np.argmax(engine.decode([token], [0])[0]))
        out.append(token)
    return (n_tokens - 1) / (time.perf_counter() - start), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    pair = resolve_pair()
    engines = {m: Engine(pair.target, EngineConfig(n_ctx=2048, cpu_buffers=m)) for m in MODES}
    prompt = engines["default"].chat_tokens([{"role": "user", "content": code_prompts(1)[0].text}])
    runs = {m: [] for m in MODES}
    outputs = {}
    for rep in range(args.reps):
        for m in MODES:
            tps, outputs[m] = decode_tps(engines[m], prompt, args.tokens)
            runs[m].append(tps)
        print(f"rep {rep}: " + ", ".join(f"{m} {runs[m][-1]:.1f} t/s" for m in MODES), flush=True)
    median = {m: statistics.median(runs[m]) for m in MODES}
    result = {
        "machine": machine_record(),
        "placements": {m: engines[m].cpu_buffers for m in MODES},
        "tokens": args.tokens,
        "reps": args.reps,
        "decode_tps": runs,
        "median_decode_tps": median,
        "ratio_no_amx_over_default": median["no-amx"] / median["default"],
        "ratio_no_extra_over_default": median["no-extra"] / median["default"],
        "same_tokens_as_default": {m: outputs[m] == outputs["default"] for m in MODES},
    }
    print(f"machine: {machine_line(result['machine'])}")
    for m in MODES:
        print(f"{m:>9}: {median[m]:.2f} t/s median ({result['placements'][m]})")
    print(
        f"no-amx / default = {result['ratio_no_amx_over_default']:.3f}, "
        f"no-extra / default = {result['ratio_no_extra_over_default']:.3f}"
    )
    Results(args.out, "amx_fallback", result["machine"]).write(result)
    for e in engines.values():
        e.close()


if __name__ == "__main__":
    main()
