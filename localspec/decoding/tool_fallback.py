"""Tool calls the way small models write them besides their template's own form: a JSON
object ``{"name": <a declared tool>, "arguments": {...}}`` (or ``"parameters"``), or that
object wrapped as the template lists tools (``{"type": "function", "function": {...}}``),
fenced (```` ```json ```` or ```` ``` ````) or bare, maybe inside a tag line such as
``<tools>`` (llama.cpp's Hermes parser accepts the same tags), in the answer's text.

A 1.5B Qwen2.5-Coder under tool_choice "auto" often writes the right call this way instead
of ``<tool_call>`` (design.md section 14).  The pieces:

- :func:`fallback_calls` finds such calls in a finished answer; an object whose name is not
  a declared tool, with other keys (a copy of a tool's schema has ``description``) or that
  is not valid JSON stays text;
- :func:`wake_pattern` is where one may open (a line that starts ```` ```json ```` or a tag,
  then ``{"name"``, or ``{"name"`` itself, wrapped or not), which wakes the lazy call
  grammar (:class:`~localspec.decoding.grammar.LazyTrigger`) before the name, as llama.cpp's
  Hermes trigger does: the name is then one of the declared tools;
- :data:`CALL_HEAD` is a call's head up to its arguments (with :data:`OBJECT_END`,
  :data:`FENCE_END` and :func:`tag_end` after them), which
  :class:`~localspec.decoding.tool_parser.ToolCallParser` reads as the call is written;
- :func:`fallback_rules` is that grammar's text part (llguidance Lark): from the opening on,
  the call's arguments follow the tool's schema and the object and fence are closed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import regex

ARGUMENT_KEYS = ("arguments", "parameters")
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?[ \t]*```", re.S)
_TAG = "<(?P<tag>tools?|function_call|json|response)>"
_WRAP = r'"type"[ \t\n]*:[ \t\n]*"function"[ \t\n]*,[ \t\n]*"function"[ \t\n]*:[ \t\n]*\{[ \t\n]*'
_OBJECT = re.compile(r"\{\s*(?:" + _WRAP + r')?"name"\s*:')
# where a fallback call opens: at a line's start, an optional tag line and fence line, then
# the object's head up to its "name" key (_HEAD) or the closing quote of a declared name
# (_OPENING); group "start" is the first of them
_HEAD = (
    r"(?:^|\n)[ \t]*(?P<start>(?:" + _TAG + r"[ \t]*\n[ \t]*)?(?:```[A-Za-z]*[ \t]*\n[ \t]*)?"
    r"\{[ \t\n]*(?:" + _WRAP + r')?"name"'
)
_WAKE = re.compile((_HEAD + ")").encode())
# a fallback call's head as the parser reads it: the opening, the name (any JSON string: its
# declared name is checked once whole) and the arguments key, up to the arguments' value;
# groups: start (where its text begins), fence, body (the object's "{"), wrap, name
_SPACE = r"[ \t\n]*"
CALL_HEAD = regex.compile(
    r"(?:^|\n)[ \t]*(?P<start>(?:" + _TAG + r"[ \t]*\n[ \t]*)?"
    r"(?P<fence>```[A-Za-z]*[ \t]*\n[ \t]*)?(?P<body>\{)"
    + _SPACE
    + "(?P<wrap>"
    + _WRAP
    + ")?"
    + f'"name"{_SPACE}:{_SPACE}"(?P<name>(?:[^"\\\\\\n]|\\\\.)*)"{_SPACE},{_SPACE}'
    + f'"(?:arguments|parameters)"{_SPACE}:{_SPACE})'
)
OBJECT_END = regex.compile(r"[ \t\n]*\}")  # after the arguments: the call object's close
FENCE_END = regex.compile(r"[ \t\n]*```")


def tag_end(tag: str) -> regex.Pattern:
    """The close of a call's tag line (``</tools>``)."""
    return regex.compile(r"[ \t\n]*</" + regex.escape(tag) + ">")


def fallback_calls(text: str, names: Iterable[str]) -> list[tuple[int, int, list[dict]]]:
    """``(start, end, calls)`` for each fenced block or bare object of ``text`` that is a
    call (or, fenced, a JSON array of calls) to one of ``names``, in order and not
    overlapping; each call ``{"name": str, "arguments": dict}``."""
    names = set(names)
    found = []
    for m in _FENCE.finditer(text):
        calls = _calls_in(m.group(1), names)
        if calls:
            found.append((m.start(), m.end(), calls))
    decoder = json.JSONDecoder()
    for m in _OBJECT.finditer(text):
        if any(s <= m.start() < e for s, e, _ in found):
            continue
        try:
            body, end = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        call = fallback_call(body, names)
        if call is not None:
            found.append((m.start(), end, [call]))
    return sorted(
        (_with_tags(text, start, end) + (calls,) for start, end, calls in found), key=lambda f: f[0]
    )


def _with_tags(text: str, start: int, end: int) -> tuple[int, int]:
    """The span ``start:end`` widened over a tag line just before it (``<tools>``) and
    that tag's close just after it."""
    before = re.search(_TAG + r"[ \t]*\n?[ \t]*\Z", text[:start])
    if before is None:
        return start, end
    after = re.match(r"[ \t]*\n?[ \t]*</" + before.group("tag") + ">", text[end:])
    return before.start(), end + (after.end() if after else 0)


def text_around(text: str, spans: list[tuple[int, int, list[dict]]]) -> str:
    """``text`` without ``spans`` (from :func:`fallback_calls`): the prose before, between
    and after the calls, each piece stripped, joined by blank lines."""
    pieces, at = [], 0
    for start, end, _ in spans:
        pieces.append(text[at:start])
        at = end
    pieces.append(text[at:])
    return "\n\n".join(p.strip() for p in pieces if p.strip())


def _calls_in(body_text: str, names: set[str]) -> list[dict]:
    try:
        body = json.loads(body_text)
    except ValueError:
        return []
    calls = [fallback_call(b, names) for b in (body if isinstance(body, list) else [body])]
    return calls if calls and None not in calls else []


def fallback_call(body, names: set[str]) -> dict | None:
    """``{"name", "arguments": dict}`` from a fallback object, else None."""
    if (
        isinstance(body, dict)
        and body.keys() == {"type", "function"}
        and body["type"] == "function"
    ):
        body = body["function"]  # the wrapping of the template's tool listing
    if not isinstance(body, dict) or body.get("name") not in names or len(body) != 2:
        return None
    key = next((k for k in ARGUMENT_KEYS if k in body), None)
    arguments = body.get(key)
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return {"name": body["name"], "arguments": arguments} if isinstance(arguments, dict) else None


def wake_pattern() -> re.Pattern[bytes]:
    """Where a fallback call may open (up to its ``"name"`` key), over the answer's UTF-8
    bytes; group ``start`` is where the call's text (and its grammar) begins.  The token
    that completes it is the model's own; from the next one on the grammar holds the name
    to the declared tools and the arguments to the named tool's schema."""
    return _WAKE


def fallback_rules(schemas: dict[str, dict]) -> str:
    """llguidance Lark rules of a fallback call, rule ``fallback``: ``LEAD`` (the end of
    the token that holds the opening, before it), an optional fence, then ``{"name":
    "NAME", "arguments": ARGS}`` with ARGS under ``schemas[NAME]`` (a JSON Schema), in
    the whitespace the model chooses (a little at a time), the object and the fence closed.
    Names are quoted as JSON strings by llguidance's ``%json`` (``const``), so any name is
    safe in the grammar."""
    # the model's own layout (small models indent these objects), with bounded whitespace
    layout = {"whitespace_flexible": True, "whitespace_pattern": "[ \\t\\n]{0,24}"}
    lines = [
        "fallback: LEAD? (FENCE fb_call FENCE_END | fb_call) TAG_END?",
        "LEAD: /[^`{]+/",
        "FENCE: /```[A-Za-z]*[ \\t]*\\n[ \\t]*/",
        "FENCE_END: /[ \\t\\n]{0,8}```\\n?/",
        'FB_HEAD: /\\{[ \\t\\n]*"name"[ \\t\\n]*:[ \\t\\n]*/',
        "FB_WRAP: /\\{[ \\t\\n]*" + _WRAP + '"name"[ \\t\\n]*:[ \\t\\n]*/',
        "TAG_END: /[ \\t\\n]{0,8}<\\/(tools?|function_call|json|response)>\\n?/",
        'FB_SEP: /,[ \\t\\n]{0,16}"(arguments|parameters)"[ \\t\\n]{0,4}:[ \\t]{0,4}/',
        "FB_CLOSE: /[ \\t\\n]{0,16}\\}/",
        "fb_call: " + " | ".join(f"fb_{i}" for i in range(len(schemas))),
    ]
    for i, (name, schema) in enumerate(schemas.items()):
        args = {**(schema or {"type": "object"}), "x-guidance": layout}
        lines += [
            f"fb_{i}: FB_HEAD fb_body_{i} | FB_WRAP fb_body_{i} FB_CLOSE",
            f"fb_body_{i}: fb_name_{i} FB_SEP fb_args_{i} FB_CLOSE",
            f"fb_name_{i}: %json {json.dumps({'const': name})}",
            f"fb_args_{i}: %json {json.dumps(args)}",
        ]
    return "\n".join(lines) + "\n"
