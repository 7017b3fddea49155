"""Does the target read a prompt slower with the draft model loaded beside it?

    .venv/bin/python benchmarks/prefill_beside_draft.py [PAIRS] [TOKENS]

Each run is a fresh process that loads the default pair's target, with the draft model
(``with``: the adaptive default) or without it (``without``: ``strategy="none"``), and reads
TOKENS tokens of real text (:func:`localspec.bench.workloads.real_text`, default 2,048) with
``generate(tokens, max_tokens=1)``; its ``prompt_eval_s`` is the target's prompt decode (the
draft model's own read of the prompt is counted apart, and is 0 here).  PAIRS pairs (default
4), the order swapped every other pair; prints each run, each pair's with ÷ without and their
mean with a Student's-t 95 % interval.
"""

import json
import subprocess
import sys

from localspec.bench.ratios import interval_text, mean_interval

ONE_RUN = """
import json, sys
from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench.workloads import real_text
which, n = sys.argv[1], int(sys.argv[2])
pair = resolve_pair()
draft, strategy = (pair.draft, "auto") if which == "with" else (None, "none")
with SpeculativeModel(pair.target, draft, n_ctx=n + 256, strategy=strategy) as m:
    tokens = m.target.tokenize(real_text(), add_special=False)[:n]
    r = m.generate(tokens, max_tokens=1)
    print(json.dumps({"prompt_s": r.stats.prompt_eval_s,
                      "draft_prompt_s": r.stats.against_plain.draft_prompt_s}))
"""


def run(which: str, tokens: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", ONE_RUN, which, str(tokens)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    ratios = []
    for i in range(pairs):
        order = ("with", "without") if i % 2 == 0 else ("without", "with")
        seconds = {}
        for which in order:
            seconds[which] = run(which, tokens)["prompt_s"]
            print(f"pair {i + 1} {which}: {seconds[which]:.2f} s", flush=True)
        ratios.append(seconds["with"] / seconds["without"])
    print("with ÷ without per pair:", [round(r, 3) for r in ratios])
    print("mean [95 % interval]:", interval_text(mean_interval(ratios)))


if __name__ == "__main__":
    main()
