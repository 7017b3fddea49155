"""Tool calls: the call format a model's chat template uses and the grammar of a call
(:mod:`.tool_parser` reads calls back out of the answer).

Two formats, recognised from the GGUF's chat template (:func:`tool_format`; a template with
neither gets a clear refusal):

- ``hermes``: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, one or
  more (Qwen2.5, Qwen2.5-Coder, Qwen3; ``<tool_call>`` and ``</tool_call>`` are single
  tokens there).  With ``tool_choice`` "auto" the grammar sleeps until the model emits
  ``<tool_call>`` (as llama-server engages its call grammar lazily, after the trigger).
- ``llama3-json``: the whole answer is ``{"name": ..., "parameters": {...}}``, one call per
  turn (Llama 3.1 / 3.2 / 3.3, whose template refuses more).  With "auto" the grammar is
  the call or prose that does not begin with ``{`` or a space, active from the first token.

"required" or a named function engage the call grammar from the first token.  The grammar
(llguidance Lark) fixes the separators the templates themselves write (``", "`` and
``": "``), so a call's keys, quotes and the function's name are forced tokens: the grammar
drafter proposes them for free.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace

from localspec.decoding.grammar import LazyTrigger, json_schema_grammar
from localspec.decoding.tool_fallback import fallback_rules, wake_pattern
from localspec.errors import InvalidOptionError

OPEN, CLOSE = "<tool_call>", "</tool_call>"  # Hermes calls' markers


@dataclass(frozen=True)
class ToolFormat:
    """A model's tool-call format: ``name`` ("hermes" or "llama3-json"), the key that holds
    a call's arguments, whether one answer may hold several calls, for Hermes the token
    ids of ``<tool_call>`` / ``</tool_call>``, and ``tools``: the names a request declared
    (:func:`tool_request` sets them; empty: the model's format alone, and only calls in
    its own form are parsed)."""

    name: str
    arguments_key: str = "arguments"
    parallel: bool = True
    open_token: int | None = None
    close_token: int | None = None
    tools: tuple[str, ...] = ()

    @property
    def lazy_trigger(self) -> int | None:
        """The token that wakes the call grammar under tool_choice "auto" (None: none)."""
        return self.open_token


LLAMA3_JSON = ToolFormat("llama3-json", arguments_key="parameters", parallel=False)


def tool_format(chat_template: str | None, tokenize) -> ToolFormat | None:
    """The format ``chat_template`` renders tool calls in, else None: Hermes when it writes
    ``<tool_call>`` and both markers are single tokens (``tokenize(text) -> ids``, special
    tokens parsed); Llama 3.x JSON when it writes an assistant's call as ``{"name": ...,
    "parameters": ...}``."""
    if not chat_template or "tools" not in chat_template:
        return None
    if OPEN in chat_template:
        open_ids, close_ids = tokenize(OPEN), tokenize(CLOSE)
        if len(open_ids) != 1 or len(close_ids) != 1:
            return None
        return ToolFormat("hermes", open_token=open_ids[0], close_token=close_ids[0])
    if "tool_call.name" in chat_template and '"parameters": ' in chat_template:
        return LLAMA3_JSON
    return None


def check_tools(tools, tool_choice) -> tuple[list[dict], str | dict]:
    """OpenAI's ``tools`` (``[{"type": "function", "function": {"name", "description",
    "parameters"}}]``) and ``tool_choice`` ("auto", "none", "required" or
    ``{"type": "function", "function": {"name"}}``), checked; InvalidOptionError otherwise."""
    if not isinstance(tools, (list, tuple)) or not tools:
        raise InvalidOptionError(
            "tools must be a non-empty list of {'type': 'function', 'function': {...}}",
            param="tools",
        )
    names = []
    for tool in tools:
        function = (
            tool.get("function")
            if isinstance(tool, dict) and tool.get("type") == "function"
            else None
        )
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise InvalidOptionError(
                f"each tool needs type 'function' and function.name, got {tool!r}",
                param=f"tools.{len(names)}",
            )
        _check_parameters(len(names), function)
        _check_name(function["name"], len(names))
        names.append(function["name"])
    if len(set(names)) != len(names):
        raise InvalidOptionError(f"tool names must be unique, got {names}", param="tools")
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if tool_choice.get("type") != "function" or name not in names:
            # the name alone: each protocol wraps it its own way
            named = repr(name) if isinstance(name, str) else repr(tool_choice)
            raise InvalidOptionError(
                f"tool_choice names no tool of this request: {named} (tools: {', '.join(names)})",
                param="tool_choice",
            )
    elif tool_choice not in ("auto", "none", "required"):
        raise InvalidOptionError(
            "tool_choice must be 'auto', 'none', 'required' or a named function, got "
            f"{tool_choice!r}",
            param="tool_choice",
        )
    return list(tools), tool_choice


def _check_name(name: str, index: int) -> None:
    """Any name a chat template can carry and the grammar can force (dots, slashes, any
    script: llama-server and Ollama take them, MCP and namespaced tools use them); only
    control characters are refused (the name is checked non-empty before)."""
    bad = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise InvalidOptionError(
            f"tool name {name!r} has a control character ({bad!r})",
            param=f"tools.{index}.function.name",
        )


@dataclass(frozen=True)
class ToolRequest:
    """One request's tools: those to render, the call grammar, what wakes it (None: active
    from the first token; a :class:`~localspec.decoding.grammar.LazyTrigger` with tool_choice
    "auto": ``<tool_call>`` or a fallback call's opening) and the format the calls come back
    in (its ``tools``: the declared names)."""

    tools: list[dict]
    grammar: str
    trigger: LazyTrigger | None
    format: ToolFormat


def tool_request(call, get_format, model_name: str) -> ToolRequest | None:
    """The tools of ``call`` (a :class:`~localspec.decoding.params.CallOptions`, whose tools
    are checked) to render, with their call grammar; None without tools or with tool_choice
    "none".  ``get_format()`` gives the model's format (None: its template has none):
    InvalidOptionError for a model without a tool-call format."""
    if not call.calls_tools:
        return None
    fmt = get_format()
    if fmt is None:
        raise InvalidOptionError(
            f"{model_name}'s chat template has no tool-call format localspec knows (supported: "
            "<tool_call> JSON calls as Qwen2.5 and Qwen3 write them, and Llama 3.x JSON calls)"
        )
    tools, choice = call.tools, call.tool_choice
    fmt = replace(fmt, tools=tuple(t["function"]["name"] for t in tools))
    grammar = call_grammar(fmt, tools, choice, parallel=bool(call.parallel_tool_calls))
    return ToolRequest(tools, grammar, _trigger(fmt) if choice == "auto" else None, fmt)


def _trigger(fmt: ToolFormat) -> LazyTrigger | None:
    """Under "auto": Hermes wakes on ``<tool_call>`` or where a fallback call may open; Llama 3.x's
    grammar is active from the first token."""
    if fmt.lazy_trigger is None:
        return None
    return LazyTrigger(token=fmt.lazy_trigger, pattern=wake_pattern() if fmt.tools else None)


def _check_parameters(index: int, function: dict) -> None:
    """A tool's ``parameters`` must compile as a JSON Schema (llguidance); the error carries
    ``param`` ("tools.N.function.parameters") for a server to name."""
    parameters = function.get("parameters", {})
    try:
        if not isinstance(parameters, dict):
            raise InvalidOptionError("parameters must be a JSON Schema object")
        json_schema_grammar(parameters or None)
    except InvalidOptionError as exc:
        path = f"tools.{index}.function.parameters"
        raise InvalidOptionError(f"tool {function['name']}: {exc}", param=path) from None


def call_grammar(fmt: ToolFormat, tools: list[dict], tool_choice, parallel: bool) -> str:
    """An llguidance Lark grammar for the answer: one call (or, with ``parallel``, a format
    that allows it and no named function, one or more) to the allowed functions, in
    ``fmt``; with tool_choice "auto" in the Llama 3.x format, a call or prose; with "auto"
    in the Hermes format, calls or one fallback call (:func:`fallback_rules`), which the
    lazy trigger wakes at its opening."""
    chosen = [
        t["function"]
        for t in tools
        if not isinstance(tool_choice, dict)
        or t["function"]["name"] == tool_choice["function"]["name"]
    ]
    key = fmt.arguments_key
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": f["name"]},
                key: f.get("parameters") or {"type": "object"},
            },
            "required": ["name", key],
            "additionalProperties": False,
        }
        for f in chosen
    ]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    schema = {
        **schema,
        "x-guidance": {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "},
    }
    payload = f"payload: %json {json.dumps(schema)}\n"
    if fmt.open_token is None:
        start = (
            "start: payload | prose\nprose: /[^{ \\t\\r\\n][\\s\\S]*/\n"
            if tool_choice == "auto"
            else "start: payload\n"
        )
        return "%llguidance {}\n" + start + payload
    repeat = (
        ' ("\\n" call)*' if parallel and fmt.parallel and not isinstance(tool_choice, dict) else ""
    )
    calls = f'call{repeat} "\\n"?'
    fallback = ""
    if tool_choice == "auto":
        calls, fallback = (
            f"calls | fallback\ncalls: {calls}",
            fallback_rules({f["name"]: f.get("parameters") or {"type": "object"} for f in chosen}),
        )
    return (
        f"%llguidance {{}}\nstart: {calls}\n"
        f'call: <[{fmt.open_token}]> "\\n" payload "\\n" <[{fmt.close_token}]>\n'
        + payload
        + fallback
    )


def messages_for_template(messages: list[dict]) -> list[dict]:
    """OpenAI messages as chat templates read them: an assistant's ``tool_calls`` (OpenAI's
    dicts or a result's :class:`~localspec.decoding.tool_parser.ToolCall` records) with
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


def _call_for_template(call) -> dict:
    if not isinstance(call, dict):  # a ToolCall of an earlier result
        function = {"name": call.name, "arguments": call.arguments}
        call = {"id": call.id, "type": "function", "function": function}
    function = dict(call.get("function") or {})
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            raise InvalidOptionError(
                f"tool call arguments must be JSON, got {arguments!r}"
            ) from None
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
        content_ok = isinstance(m, dict) and (
            isinstance(m.get("content"), str) or (calls and m.get("content") is None)
        )
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not content_ok:
            raise InvalidOptionError(f"each message needs a string 'role' and 'content', got {m!r}")
        if calls and not isinstance(m["tool_calls"], list):
            raise InvalidOptionError(
                f"an assistant message's tool_calls must be a list, got {m['tool_calls']!r}"
            )
    return messages_for_template(result)
