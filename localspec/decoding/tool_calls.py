"""Tool calls: the call format a model's chat template uses, the grammar of a call, and
calls parsed back out of the answer.

Supported format: Hermes-style ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
(Qwen2.5, Qwen2.5-Coder, Qwen3; ``<tool_call>`` and ``</tool_call>`` are single tokens
there), recognised from the GGUF's chat template.  A template without it gets a clear
refusal (:func:`tool_format` returns None).  The grammar (llguidance Lark) fixes the
separators the template itself writes (``", "`` and ``": "``), so a call's keys, quotes and
the function's name are forced tokens: the grammar drafter proposes them for free.

With ``tool_choice`` "auto" the grammar sleeps until the model emits ``<tool_call>`` (as
llama-server engages its call grammar lazily, after the trigger); "required" or a named
function engage it from the first token.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from localspec.errors import InvalidOptionError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)


@dataclass(frozen=True)
class ToolFormat:
    """A model's tool-call markers: their token ids and texts."""

    open_token: int
    close_token: int
    name: str = "hermes"


def tool_format(chat_template: str | None, tokenize) -> ToolFormat | None:
    """The Hermes format when ``chat_template`` renders tools with ``<tool_call>`` and both
    markers are single tokens (``tokenize(text) -> ids``, special tokens parsed); else None."""
    if not chat_template or "tools" not in chat_template or OPEN not in chat_template:
        return None
    open_ids, close_ids = tokenize(OPEN), tokenize(CLOSE)
    if len(open_ids) != 1 or len(close_ids) != 1:
        return None
    return ToolFormat(open_ids[0], close_ids[0])


def check_tools(tools, tool_choice) -> tuple[list[dict], str | dict]:
    """OpenAI's ``tools`` (``[{"type": "function", "function": {"name", "description",
    "parameters"}}]``) and ``tool_choice`` ("auto", "none", "required" or
    ``{"type": "function", "function": {"name"}}``), checked; InvalidOptionError otherwise."""
    if not isinstance(tools, (list, tuple)) or not tools:
        raise InvalidOptionError("tools must be a non-empty list of {'type': 'function', 'function': {...}}")
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise InvalidOptionError(f"each tool needs type 'function' and function.name, got {tool!r}")
        if not isinstance(function.get("parameters", {}), dict):
            raise InvalidOptionError(f"tool {function['name']}: parameters must be a JSON Schema object")
        names.append(function["name"])
    if len(set(names)) != len(names):
        raise InvalidOptionError(f"tool names must be unique, got {names}")
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if tool_choice.get("type") != "function" or name not in names:
            raise InvalidOptionError(f"tool_choice names no tool of this request: {tool_choice!r}")
    elif tool_choice not in ("auto", "none", "required"):
        raise InvalidOptionError(
            f"tool_choice must be 'auto', 'none', 'required' or a named function, got {tool_choice!r}"
        )
    return list(tools), tool_choice


def call_grammar(fmt: ToolFormat, tools: list[dict], tool_choice, parallel: bool) -> str:
    """An llguidance Lark grammar: one call (or, with ``parallel`` and no named function,
    one or more) to the allowed functions, each
    ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, and an optional
    newline after the last (where the model may end its turn)."""
    chosen = [
        t["function"]
        for t in tools
        if not isinstance(tool_choice, dict) or t["function"]["name"] == tool_choice["function"]["name"]
    ]
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": f["name"]}, "arguments": f.get("parameters") or {"type": "object"}},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in chosen
    ]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    schema = {**schema, "x-guidance": {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}}
    repeat = ' ("\\n" call)*' if parallel and not isinstance(tool_choice, dict) else ""
    return (
        f'%llguidance {{}}\nstart: call{repeat} "\\n"?\n'
        f'call: <[{fmt.open_token}]> "\\n" payload "\\n" <[{fmt.close_token}]>\n'
        f"payload: %json {json.dumps(schema)}\n"
    )


def split_tool_calls(text: str) -> tuple[str, list[dict]]:
    """(the answer's text before its first call, the calls in OpenAI's shape: ``{"id",
    "type": "function", "function": {"name", "arguments": JSON text}}``).  A call that is not
    complete JSON (cut by max_tokens) is left out."""
    start = text.find(OPEN)
    if start < 0:
        return text, []
    calls = []
    for match in _CALL.finditer(text, start):
        try:
            body = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(body, dict) and isinstance(body.get("name"), str):
            calls.append(
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": body["name"], "arguments": json.dumps(body.get("arguments", {}))},
                }
            )
    return text[:start].rstrip(), calls


def messages_for_template(messages: list[dict]) -> list[dict]:
    """OpenAI messages as chat templates read them: an assistant's ``tool_calls`` with
    ``arguments`` as objects (OpenAI sends JSON text), ``content`` "" where it is None."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            m["tool_calls"] = [_call_for_template(c) for c in m["tool_calls"]]
        out.append(m)
    return out


def _call_for_template(call: dict) -> dict:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            raise InvalidOptionError(f"tool call arguments must be JSON, got {arguments!r}") from None
    return {**call, "function": {**function, "arguments": arguments}}


def normalise_messages(messages: str | Iterable[dict]) -> list[dict]:
    """A string (one user message) or OpenAI-style messages, checked and made ready for a
    chat template (:func:`messages_for_template`); InvalidOptionError otherwise."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, (list, tuple)):
        raise InvalidOptionError(
            f"messages must be a string or a list of {{'role', 'content'}} dicts, got {messages!r}"
        )
    result = list(messages)
    if not result:
        raise InvalidOptionError("messages is empty")
    for m in result:
        calls = isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls")
        content_ok = isinstance(m, dict) and (isinstance(m.get("content"), str) or (calls and m.get("content") is None))
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not content_ok:
            raise InvalidOptionError(f"each message needs a string 'role' and 'content', got {m!r}")
        if calls and not isinstance(m["tool_calls"], list):
            raise InvalidOptionError(f"an assistant message's tool_calls must be a list, got {m['tool_calls']!r}")
    return messages_for_template(result)
