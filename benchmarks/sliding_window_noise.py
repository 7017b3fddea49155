"""Gemma 3 270M (a sliding-window model, base, Q4_K_M) under speculation: this machine's path
noise on it and where greedy speculative output parts from plain, with the fresh-prefill gap
there.

    .venv/bin/python benchmarks/sliding_window_noise.py GGUF         # 160 tokens, 5 prompts

GGUF: Gemma 3 270M Q4_K_M (the test suite assembles it from PyPI at
``~/.cache/localspec/test-assets/gemma-3-270m-q4_k_m.gguf``).

Per raw-text prompt: the plain greedy answer; the path noise (localspec.bench.noise.path_noise:
one token at a time against verify batches of 5); then the answer under prompt lookup, suffix,
the model as its own draft and auto, and for each that parts from plain, the position and the
fresh prefill's top-2 gap there, against the tolerance (twice the noise).  Written to
benchmarks/results/sliding-window-noise-<machine>-<date>-<commit>.json.
"""

from __future__ import annotations

import sys

from localspec.api import SpeculativeModel
from localspec.bench.noise import fresh_gap, path_noise
from localspec.bench.results import DEFAULT_OUT, Results
from localspec.llama.report import machine_line, machine_record

PROMPTS = [
    "The history of the Roman Empire",
    "def fibonacci(n):\n",
    "Once upon a time, in a small village,",
    "The three laws of thermodynamics are",
    "import numpy as np\n\n# compute the mean of a list\n",
]
STRATEGIES = ("prompt-lookup", "suffix", "draft-model", "auto")
TOKENS = 160


def main() -> None:
    record = machine_record()
    print(f"machine: {machine_line(record)}")
    path = sys.argv[1]
    rows = []
    with SpeculativeModel(path, path, n_ctx=2048) as model:
        for text in PROMPTS:
            prompt = model.target.tokenize(text)
            plain = model.generate(text, max_tokens=TOKENS, temperature=0.0, draft_max=0).tokens
            noise = path_noise(model, prompt, plain)
            row = {"prompt": text, "path_noise": noise, "parted": {}}
            for strategy in STRATEGIES:
                spec = model.generate(text, max_tokens=TOKENS, temperature=0.0, strategy=strategy)
                at = next((i for i, (a, b) in enumerate(zip(plain, spec.tokens)) if a != b), None)
                if at is not None:
                    row["parted"][strategy] = {"at": at, "gap": fresh_gap(model, prompt, plain, at)}
            rows.append(row)
            print(row)
    results = Results(DEFAULT_OUT, "sliding-window-noise", record)
    results.write({"tokens": TOKENS, "rows": rows})
    results.done()


if __name__ == "__main__":
    main()
