"""The Responses API's tools as chat function tools, and calls back as their output items.

Codex CLI sends function tools, ``namespace`` tools (a group of functions, e.g.
``multi_agent_v1``), ``custom`` (freeform) tools such as ``apply_patch`` with a Lark
grammar, ``local_shell``, and hosted tools the server cannot run.  :func:`toolset` offers
the model one function per callable tool:

- a namespace's functions under their own names (``spawn_agent``; ``NAMESPACE.NAME`` only
  when two would clash), answered as ``function_call`` items with ``name`` and
  ``namespace``: Codex routes a call by the pair, and a client that reads only ``name``
  still finds a unique bare name;
- a custom tool as a function of one string argument ``input`` (its grammar in the
  description), answered as a ``custom_tool_call`` item with that ``input``;
- ``local_shell`` as a function of ``command`` (argv), ``working_directory``, ``timeout_ms``,
  ``env``, answered as a ``local_shell_call`` item with ``action: {"type": "exec", ...}``.

Hosted tools (:data:`HOSTED`) are left out of the prompt, not refused, and said once per
server in its log; another unknown type is a 400 naming ``tools.N``.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field

from localspec.server.errors import FieldPath, RequestError, dotted

log = logging.getLogger("localspec.server")

HOSTED = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "image_generation",
        "file_search",
        "computer_use",
        "computer_use_preview",
        "computer",
        "tool_search",
        "code_interpreter",
        "mcp",
    }
)
_said: set[str] = set()  # hosted tool types already logged by this server process

_INPUT = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's freeform input."}},
    "required": ["input"],
}
_SHELL = {
    "type": "object",
    "properties": {
        "command": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The command and its arguments.",
        },
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["command"],
}


@dataclass(frozen=True)
class ToolEntry:
    """One tool as the model sees it: ``kind`` ("function", "custom", "local_shell"), the
    client's ``name`` and ``namespace`` (None: top level)."""

    kind: str
    name: str
    namespace: str | None = None


@dataclass
class Toolset:
    """``tools``: chat function tools to offer; ``by_model_name``: what each one is."""

    tools: list[dict] = field(default_factory=list)
    by_model_name: dict[str, ToolEntry] = field(default_factory=dict)

    def model_name(self, name: str, namespace: str | None = None) -> str:
        """The name the model knows a client's tool by (a replayed call's name)."""
        for model_name, tool in self.by_model_name.items():
            if tool.name == name and tool.namespace == namespace:
                return model_name
        return name if namespace is None else f"{namespace}.{name}"

    def add(
        self, model_name: str, tool: ToolEntry, description: str | None, parameters: dict | None
    ) -> None:
        function = {
            "name": model_name,
            "parameters": parameters or {"type": "object", "properties": {}},
        }
        if description:
            function["description"] = description
        self.tools.append({"type": "function", "function": function})
        self.by_model_name[model_name] = tool


def toolset(tools: list, path: FieldPath = ("tools",)) -> Toolset:
    """The request's ``tools`` (pydantic items with ``type``, ``name``, ``description``,
    ``parameters``, and ``tools`` / ``format`` in ``model_extra``) as a :class:`Toolset`."""
    entries: list[tuple[ToolEntry, str | None, dict | None]] = []
    for i, tool in enumerate(tools):
        entries += _entries(tool, path + (i,))
    bare = [t.name for t, _, _ in entries]
    out = Toolset()
    for tool, description, parameters in entries:
        clash = tool.namespace is not None and bare.count(tool.name) > 1
        out.add(
            f"{tool.namespace}.{tool.name}" if clash else tool.name, tool, description, parameters
        )
    return out


def _entries(tool, at: FieldPath) -> list[tuple[ToolEntry, str | None, dict | None]]:
    extra = tool.model_extra or {}
    if tool.type in HOSTED:
        _say_dropped(tool.type)
        return []
    if tool.type == "local_shell":
        return [
            (
                ToolEntry("local_shell", "local_shell"),
                "Run a shell command on the user's machine.",
                _SHELL,
            )
        ]
    if tool.type not in ("function", "custom", "namespace"):
        raise RequestError(f"{dotted(at)}: tool type {tool.type!r} is not supported", at)
    if not tool.name:
        raise RequestError(f"{dotted(at)}: a {tool.type} tool needs name", at + ("name",))
    if tool.type == "function":
        return [(ToolEntry("function", tool.name), tool.description, tool.parameters)]
    if tool.type == "custom":
        return [
            (
                ToolEntry("custom", tool.name),
                _custom_description(tool.description, extra.get("format")),
                _INPUT,
            )
        ]
    inner = extra.get("tools")
    if not isinstance(inner, list):
        raise RequestError(
            f"{dotted(at)}: a namespace tool needs tools (a list of functions)", at + ("tools",)
        )
    out = []
    for j, member in enumerate(inner):
        where = at + ("tools", j)
        if (
            not isinstance(member, dict)
            or member.get("type", "function") != "function"
            or not member.get("name")
        ):
            raise RequestError(
                f"{dotted(where)}: a namespace holds function tools with a name", where
            )
        function = ToolEntry("function", member["name"], tool.name)
        out.append((function, member.get("description"), member.get("parameters")))
    return out


def _custom_description(description: str | None, fmt) -> str:
    text = description or ""
    if (
        isinstance(fmt, dict)
        and fmt.get("type") == "grammar"
        and isinstance(fmt.get("definition"), str)
    ):
        syntax = fmt.get("syntax", "lark")
        text += (
            f"\n\nPut the whole freeform text in `input`; it follows this {syntax} "
            f"grammar:\n{fmt['definition']}"
        )
    return text.strip() or "A freeform tool: put its whole text in `input`."


def _say_dropped(kind: str) -> None:
    if kind not in _said:
        _said.add(kind)
        log.warning(
            "Responses tool type %r is run by OpenAI's servers, not here: left out of the prompt",
            kind,
        )


def output_item(tools: Toolset, call_id: str, model_name: str, arguments: str, status: str) -> dict:
    """A call of the model's (by its model-facing name) as the client's output item."""
    tool = tools.by_model_name.get(model_name, ToolEntry("function", model_name))
    if tool.kind == "custom":
        item = {
            "type": "custom_tool_call",
            "id": f"ctc_{uuid.uuid4().hex[:24]}",
            "call_id": call_id,
        }
        return {**item, "name": tool.name, "input": _input_of(arguments), "status": status}
    if tool.kind == "local_shell":
        action = {"type": "exec", **_json_object(arguments)}
        item = {
            "type": "local_shell_call",
            "id": f"lsc_{uuid.uuid4().hex[:24]}",
            "call_id": call_id,
        }
        return {**item, "action": action, "status": status}
    item = {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex[:24]}",
        "call_id": call_id,
        "name": tool.name,
    }
    if tool.namespace is not None:
        item["namespace"] = tool.namespace
    return {**item, "arguments": arguments, "status": status}


def call_arguments(item_type: str, item) -> str:
    """A replayed custom / local-shell call's arguments as the model wrote them (JSON text)."""
    if item_type == "custom_tool_call":
        return json.dumps({"input": item.input or ""})
    action = dict((item.model_extra or {}).get("action") or {})
    action.pop("type", None)
    return json.dumps(action)


def _json_object(arguments: str) -> dict:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _input_of(arguments: str) -> str:
    value = _json_object(arguments).get("input")
    return value if isinstance(value, str) else ""
