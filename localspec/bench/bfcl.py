"""Function-calling cases of the Berkeley Function Calling Leaderboard (the ``bfcl-eval``
package's ``BFCL_v4_*.json`` and ``possible_answer/``), as JSON-schema answers.

A case's call is asked for as ``{"name": ..., "arguments": {...}}`` under a schema built
from its function's parameters (BFCL's ``"type": "dict"`` is JSON Schema's ``object``);
:func:`call_matches` is BFCL's AST check reduced to one call: the function's name, and
every argument given among the values the possible answer allows (an optional one may be
left out where the answer allows "")."""

from __future__ import annotations

import json
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from localspec.models.hub import cache_dir, pip_download

BFCL_WHEEL = "bfcl-eval==2026.3.23"
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


@dataclass(frozen=True)
class CallCase:
    id: str
    messages: tuple  # the question's messages ({"role", "content"} dicts)
    functions: tuple  # BFCL function descriptions (name, description, parameters)
    answer: dict  # function name -> {argument: allowed values}


def bfcl_cases(category: str, n: int) -> list[CallCase]:
    """The first ``n`` cases of ``BFCL_v4_<category>.json`` with their possible answers."""
    folder = _data_folder()
    questions = _read_jsonl(folder / f"BFCL_v4_{category}.json")[:n]
    answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json")}
    return [CallCase(q["id"], tuple(q["question"][0]), tuple(q["function"]), answers[q["id"]][0]) for q in questions]


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
        "You call functions. Functions: " + tools + '\nReply with one call as JSON: {"name": ..., "arguments": {...}}.'
    )
    return [{"role": "system", "content": system}, *case.messages]


def call_matches(case: CallCase, call: dict) -> bool:
    ((name, allowed),) = case.answer.items()
    if call.get("name") != name:
        return False
    given = call.get("arguments", {})
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
    if isinstance(value, (int, float)) and isinstance(expected, (int, float)) and not isinstance(value, bool):
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
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


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
