"""Function-calling cases of the Berkeley Function Calling Leaderboard (the ``bfcl-eval``
package's ``BFCL_v4_*.json`` and ``possible_answer/``), as JSON-schema answers.

A case's call is asked for either as ``{"name": ..., "arguments": {...}}`` under a schema
built from its function's parameters (BFCL's ``"type": "dict"`` is JSON Schema's
``object``), or as OpenAI function tools (:func:`openai_tools`; dots in names become
``_``, as BFCL's own OpenAI handler does).  :func:`calls_match` is BFCL's AST check: as many
calls as the possible answer has, paired one to one in any order, each with the function's
name and every argument given among the values the answer allows (an optional one may be
left out where the answer allows "")."""

from __future__ import annotations

import itertools
import json
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from localspec.models.cache import cache_dir
from localspec.models.mirror import pip_download

BFCL_WHEEL = "bfcl-eval==2026.3.23"
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


@dataclass(frozen=True)
class CallCase:
    id: str
    messages: tuple  # the question's messages ({"role", "content"} dicts)
    functions: tuple  # BFCL function descriptions (name, description, parameters)
    answers: tuple  # the expected calls: {function name: {argument: allowed values}} each


def bfcl_cases(category: str, n: int) -> list[CallCase]:
    """The first ``n`` cases of ``BFCL_v4_<category>.json`` with their possible answers."""
    folder = _data_folder()
    questions = _read_jsonl(folder / f"BFCL_v4_{category}.json")[:n]
    answers = {
        a["id"]: a["ground_truth"]
        for a in _read_jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json")
    }
    return [
        CallCase(q["id"], tuple(q["question"][0]), tuple(q["function"]), tuple(answers[q["id"]]))
        for q in questions
    ]


def openai_tools(case: CallCase) -> list[dict]:
    """The case's functions as OpenAI ``tools`` (JSON Schema parameters, ``.`` -> ``_``)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool_name(f["name"]),
                "description": f.get("description", ""),
                "parameters": _schema(f["parameters"]),
            },
        }
        for f in case.functions
    ]


def tool_name(name: str) -> str:
    return name.replace(".", "_")


def call_schema(case: CallCase) -> dict:
    """JSON Schema of one call to one of the case's functions."""
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": f["name"]}, "arguments": _schema(f["parameters"])},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in case.functions
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def call_prompt(case: CallCase) -> list[dict]:
    tools = json.dumps(list(case.functions))
    system = (
        "You call functions. Functions: "
        + tools
        + '\nReply with one call as JSON: {"name": ..., "arguments": {...}}.'
    )
    return [{"role": "system", "content": system}, *case.messages]


def call_matches(case: CallCase, call: dict) -> bool:
    """One ``{"name", "arguments"}`` call against a single-call case."""
    return calls_match(case, [call])


def calls_match(case: CallCase, calls: list[dict]) -> bool:
    """``calls`` (``{"name", "arguments": dict}`` each; names with or without the dots) pair
    one to one with the case's expected calls, in some order."""
    if len(calls) != len(case.answers) or len(calls) > 8:
        return False
    return any(
        all(map(_one_matches, case.answers, order)) for order in itertools.permutations(calls)
    )


def _one_matches(answer: dict, call: dict) -> bool:
    ((name, allowed),) = answer.items()
    if call.get("name") not in (name, tool_name(name)):
        return False
    given = call.get("arguments", {})
    if not isinstance(given, dict):
        return False
    for arg, values in allowed.items():
        if arg in given:
            if not any(_same(given[arg], v) for v in values):
                return False
        elif "" not in values:
            return False
    return all(arg in allowed for arg in given)


def _same(value, expected) -> bool:
    if isinstance(value, str) and isinstance(expected, str):
        return value.strip().lower() == expected.strip().lower()
    if (
        isinstance(value, (int, float))
        and isinstance(expected, (int, float))
        and not isinstance(value, bool)
    ):
        return float(value) == float(expected)
    return value == expected


def _schema(node):
    if isinstance(node, list):
        return [_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str) and value in _TYPES:
            if _TYPES[value] is not None:
                out[key] = _TYPES[value]
        elif key in ("description", "default", "optional"):
            continue
        else:
            out[key] = _schema(value)
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def _read_jsonl(path: Path) -> list[dict]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def _data_folder() -> Path:
    dest = cache_dir() / "benchmark-data" / "bfcl"
    if not (dest / "possible_answer").is_dir():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            wheel = pip_download(BFCL_WHEEL, Path(tmp))
            with zipfile.ZipFile(wheel) as zf:
                for member in zf.namelist():
                    if member.startswith("bfcl_eval/data/") and member.endswith(".json"):
                        target = Path(tmp, "bfcl", member.removeprefix("bfcl_eval/data/"))
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(zf.read(member))
            Path(tmp, "bfcl").replace(dest)
    return dest
