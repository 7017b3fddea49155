"""Tool calls read out of an answer as it is written: one parser for the stream and for the
finished answer (:func:`split_tool_calls` is the whole text fed at once).

:class:`ToolCallParser` takes the answer's text in pieces (``feed``) and gives back the
content released so far (text that can no longer be part of a call) and :class:`CallDelta`
pieces: a call's id and name as soon as its name is known, then its arguments' JSON text
as it arrives.  ``finish()`` returns the answer's :class:`ToolCall` records, the same ids.

The forms (markers in :mod:`.tool_calls` and :mod:`.tool_fallback`):

- the format's own: Hermes ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (one
  or more; the text after the first is calls only), Llama 3.x's whole answer
  ``{"name": ..., "parameters": ...}``;
- fallback calls to a declared name (fenced or bare JSON objects, wrapped or in a tag line,
  opening at a line's start) read as they are written; other fallback calls (a fenced
  array, an object mid-line) are found in the content when the answer ends.

A call whose text breaks off (max_tokens) is left out, and is not content either; a
fallback object that proves not to be a call stays content.  Arguments are the JSON text
the model wrote (as streamed), or, for a call whose arguments came as a JSON string or
not in the expected order, that value re-encoded.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import regex

from localspec.decoding.tool_calls import CLOSE, OPEN, ToolFormat
from localspec.decoding.tool_fallback import (
    CALL_HEAD,
    FENCE_END,
    OBJECT_END,
    fallback_call,
    fallback_calls,
    tag_end,
)
from localspec.decoding.tool_values import ValueEnd, tail_prefix


@dataclass(frozen=True)
class ToolCall:
    """A call the answer made: ``id`` (``call_`` and 24 hex digits, made once: a stream's
    deltas carry the same), ``name``, ``arguments`` (JSON text) and ``index`` (its place
    among the calls the answer announced, as streamed)."""

    id: str
    name: str
    arguments: str
    index: int


@dataclass(frozen=True)
class CallDelta:
    """A piece of a call while it is written: the first carries its ``id`` and ``name``,
    the next ones pieces of its ``arguments`` text."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


def _own_head(key: str) -> regex.Pattern:
    return regex.compile(
        r'[ \t\n]*\{[ \t\n]*"name"[ \t\n]*:[ \t\n]*"(?P<name>(?:[^"\\\n]|\\.)*)"[ \t\n]*,[ \t\n]*"'
        + regex.escape(key)
        + r'"[ \t\n]*:[ \t\n]*'
    )


@dataclass
class _Call:
    """A call being read: where its text starts, its kind ("own": Hermes, "whole": Llama
    3.x's answer, "fallback"), where its JSON object begins, and once its head is read its
    name and arguments' value."""

    start: int
    kind: str
    body: int
    id: str = ""
    name: str | None = None
    value: ValueEnd | None = None
    whole_body: bool = False  # its head is not the expected one: parsed once it ends
    index: int = -1  # set when announced
    sent: int = 0  # where the arguments text sent so far ends
    head: regex.Match | None = None  # a fallback call's head

    def __post_init__(self):
        self.id = f"call_{uuid.uuid4().hex[:24]}"


class ToolCallParser:
    """The tool calls of one answer in ``fmt`` (None: Hermes), with fallback calls to
    ``names`` (default ``fmt.tools``; none: the format's own form only)."""

    def __init__(self, fmt: ToolFormat | None = None, names: Iterable[str] | None = None):
        self.hermes = fmt is None or fmt.open_token is not None
        self.names = frozenset(fmt.tools if names is None and fmt is not None else names or ())
        self._key = fmt.arguments_key if fmt is not None else "arguments"
        self._head = _own_head(self._key)
        self.text, self.content = "", ""
        self._pos = 0  # the text before it is decided: content, calls or skipped
        self._pieces: list[list[int]] = []  # the content released, as [start, end] runs
        self._calls: list[tuple[int, ToolCall]] = []
        self._announced = 0
        self._open: _Call | None = None
        self._calls_only = False  # an own-form call began: the rest of the answer is calls
        self._prose = False  # Llama 3.x: the answer is prose, not a call
        self._trailers: list[regex.Pattern] = []  # what may close the last fallback call
        self._final = False

    @property
    def held(self) -> str:
        """The text read but not released yet (it may still be, or is, a call)."""
        start = self._open.start if self._open is not None else self._pos
        return self.text[start:]

    def feed(self, text: str) -> tuple[str, list[CallDelta]]:
        """(content released, call deltas) after ``text``, the answer's next piece."""
        self.text += text
        return self._advance()

    def close(self) -> tuple[str, list[CallDelta]]:
        """The answer has ended: (the content held back that proved content, deltas of the
        calls not sent yet); then ``finish()`` and ``content`` hold the result."""
        if self._final:
            return "", []
        self._final = True
        content, deltas = self._advance()
        spans = self._late_calls(deltas)
        self.content = self._final_content(spans)
        return content, deltas

    def finish(self) -> list[ToolCall]:
        """The answer's calls, in the order they were written (the text ended)."""
        self.close()
        return [call for _, call in sorted(self._calls, key=lambda c: c[0])]

    # --- reading ---------------------------------------------------------------------------

    def _advance(self) -> tuple[str, list[CallDelta]]:
        content: list[str] = []
        deltas: list[CallDelta] = []
        moving = True
        while moving:
            moving = self._read_call(content, deltas) if self._open else self._read_content(content)
        return "".join(content), deltas

    def _release(self, end: int, content: list[str]) -> None:
        if end <= self._pos:
            return
        content.append(self.text[self._pos : end])
        if self._pieces and self._pieces[-1][1] == self._pos:
            self._pieces[-1][1] = end
        else:
            self._pieces.append([self._pos, end])
        self._pos = end

    def _read_content(self, content: list[str]) -> bool:
        """Content up to the next call (True: one opened) or up to what may still open one."""
        if not self._skip_trailers():
            return False
        if self._calls_only:
            return self._skip_to_own_call()
        at, call = min(
            (self._whole_opening(), self._own_opening(), self._fallback_opening()),
            key=lambda found: (found[0], found[1] is None),
        )
        self._release(at, content)
        if call is None:
            return False
        self._open, self._pos = call, call.start
        self._calls_only = call.kind != "fallback"
        return True

    def _skip_trailers(self) -> bool:
        """Past what closes the last fallback call (its fence, its tag); False: it may
        still be coming."""
        while self._trailers:
            m = self._trailers[0].match(self.text, self._pos, partial=not self._final)
            if m is not None and m.partial:
                return False
            if m is not None:
                self._pos = m.end()
            self._trailers.pop(0)
        return True

    def _skip_to_own_call(self) -> bool:
        start = self.text.find(OPEN, self._pos) if self.hermes else -1
        if start < 0:
            held = tail_prefix(self.text, OPEN) if self.hermes and not self._final else 0
            self._pos = max(self._pos, len(self.text) - held)
            return False
        self._open, self._pos = _Call(start, "own", start + len(OPEN)), start
        return True

    def _nothing(self) -> tuple[int, None]:
        return len(self.text), None

    def _whole_opening(self) -> tuple[int, _Call | None]:
        """Llama 3.x: an answer that begins with ``{`` is one call."""
        if self.hermes or self._prose or self._pos > 0:
            return self._nothing()
        stripped = self.text.lstrip()
        if not stripped:
            return (len(self.text) if self._final else 0), None
        self._prose = not stripped.startswith("{")
        body = len(self.text) - len(stripped)
        return self._nothing() if self._prose else (0, _Call(0, "whole", body))

    def _own_opening(self) -> tuple[int, _Call | None]:
        if not self.hermes:
            return self._nothing()
        start = self.text.find(OPEN, self._pos)
        if start >= 0:
            return start, _Call(start, "own", start + len(OPEN))
        return len(self.text) - (0 if self._final else tail_prefix(self.text, OPEN)), None

    def _fallback_opening(self) -> tuple[int, _Call | None]:
        """The first fallback call's head to a declared name, or where one may still open."""
        at = max(0, self._pos - 1)  # the newline before it may have gone out as content
        while self.names and (m := CALL_HEAD.search(self.text, at, partial=not self._final)):
            if m.partial:
                return m.start() + (self.text[m.start() : m.start() + 1] == "\n"), None
            name = _json_string(m.group("name"))
            if name in self.names:
                call = _Call(m.start("start"), "fallback", m.start("body"), name=name, head=m)
                call.value = ValueEnd(m.end())
                return call.start, call
            at = m.start() + 1
        return self._nothing()

    # --- a call ----------------------------------------------------------------------------

    def _read_call(self, content: list[str], deltas: list[CallDelta]) -> bool:
        """The open call read on (True: it ended, the text after it is next)."""
        call = self._open
        if call.value is None and not call.whole_body and not self._read_own_head(call):
            return False
        if call.whole_body:
            return self._read_whole_body(call, deltas)
        end = call.value.read(self.text)
        self._stream_arguments(call, end, deltas)
        if end is None:
            return False
        if call.kind == "fallback":
            return self._end_fallback(call, end, content, deltas)
        return self._end_own(call, end, deltas)

    def _read_own_head(self, call: _Call) -> bool:
        m = self._head.match(self.text, call.body, partial=not self._final)
        if m is not None and m.partial:
            return False
        name = _json_string(m.group("name")) if m is not None else None
        if name is None:
            call.whole_body = True
        else:
            call.name, call.value = name, ValueEnd(m.end())
        return True

    def _announce(self, call: _Call, deltas: list[CallDelta]) -> None:
        call.index, self._announced = self._announced, self._announced + 1
        deltas.append(CallDelta(call.index, id=call.id, name=call.name))

    def _stream_arguments(self, call: _Call, end: int | None, deltas: list[CallDelta]) -> None:
        """The arguments read so far go out (a fallback call's only when they are an object:
        arguments written as a JSON string are decoded at its end)."""
        value = call.value
        if call.index < 0:
            if value.begin is None or (call.kind == "fallback" and value.first != "{"):
                return
            self._announce(call, deltas)
            call.sent = value.begin
        upto = end if end is not None else value.at
        if upto > call.sent:
            deltas.append(CallDelta(call.index, arguments=self.text[call.sent : upto]))
            call.sent = upto

    def _complete(self, call: _Call, arguments: str | None, deltas: list[CallDelta]) -> None:
        """``call`` made: announced (with ``arguments``) unless streamed; None: it is not a call."""
        self._open = None
        if arguments is None:
            return
        if call.index < 0:
            self._announce(call, deltas)
            deltas.append(CallDelta(call.index, arguments=arguments))
        else:
            arguments = self.text[call.value.begin : call.sent]
        self._calls.append((call.start, ToolCall(call.id, call.name, arguments, call.index)))

    def _end_own(self, call: _Call, end: int, deltas: list[CallDelta]) -> bool:
        """A Hermes call ends at ``</tool_call>``, a Llama 3.x call at its object's close."""
        if call.kind == "whole":
            m = OBJECT_END.match(self.text, end, partial=not self._final)
            close, after = (m.end(), m.end()) if m is not None and not m.partial else (-1, -1)
        else:
            close = self.text.find(CLOSE, end)
            after = close + len(CLOSE)
        if close < 0:
            return False
        body = _json_object(self.text[call.body : close].strip())
        valid = body is not None and body.get("name") == call.name
        self._complete(call, "" if valid else None, deltas)
        self._pos = after
        return True

    def _read_whole_body(self, call: _Call, deltas: list[CallDelta]) -> bool:
        """A call whose head is not the expected one, parsed once whole: a Hermes call at
        ``</tool_call>``, a Llama 3.x answer at its end."""
        close = self.text.find(CLOSE, call.body) if call.kind == "own" else -1
        if close < 0 and not (call.kind == "whole" and self._final):
            return False
        close = close if close >= 0 else len(self.text)
        body = _json_object(self.text[call.body : close].strip())
        arguments = None
        if body is not None and isinstance(body.get("name"), str):
            call.name = body["name"]
            arguments = json.dumps(body.get(self._key, {}), ensure_ascii=False)
        self._complete(call, arguments, deltas)
        self._pos = close + (len(CLOSE) if call.kind == "own" else 0)
        return True

    def _end_fallback(self, call: _Call, end: int, content: list, deltas: list) -> bool:
        """A fallback call ends at its object's close (a wrapped one's two); one that proves
        not to be a call is content."""
        at, closes = end, 2 if call.head.group("wrap") else 1
        for _ in range(closes):
            m = OBJECT_END.match(self.text, at, partial=not self._final)
            if m is not None and m.partial:
                return False
            if m is None:
                break
            at = m.end()
        found = fallback_call(_json_object(self.text[call.body : at]), self.names) if m else None
        if found is None:
            self._open, self._pos = None, call.start
            self._release(at, content)
            return True
        arguments = "" if call.index >= 0 else json.dumps(found["arguments"], ensure_ascii=False)
        self._complete(call, arguments, deltas)
        self._pos = at
        head = call.head
        self._trailers = ([FENCE_END] if head.group("fence") else []) + (
            [tag_end(head.group("tag"))] if head.group("tag") else []
        )
        return True

    # --- the end -----------------------------------------------------------------------------

    def _late_calls(self, deltas: list[CallDelta]) -> list[tuple[int, int]]:
        """Fallback calls found only in the finished content (a fenced array, an object
        mid-line): announced now; their spans."""
        if self._calls_only or not self.names:
            return []
        spans = []
        for start, end in self._pieces:
            for s, e, group in fallback_calls(self.text[start:end], self.names):
                spans.append((start + s, start + e))
                for found in group:
                    call = _Call(start + s, "fallback", start + s, name=found["name"])
                    self._complete(call, json.dumps(found["arguments"], ensure_ascii=False), deltas)
        return spans

    def _final_content(self, spans: list[tuple[int, int]]) -> str:
        """The content: without calls the text released (up to a call that broke off), with
        calls the prose around them, each piece stripped, joined by blank lines."""
        runs = []
        for start, end in self._pieces:
            for s, e in sorted(spans):
                if start <= s < end:
                    runs.append(self.text[start:s])
                    start = e
            runs.append(self.text[start:end])
        if self._calls:
            return "\n\n".join(r.strip() for r in runs if r.strip())
        text = "".join(runs)
        return text.rstrip() if self._open is not None or self._calls_only else text


def split_tool_calls(
    text: str, fmt: ToolFormat | None = None, names: Iterable[str] | None = None
) -> tuple[str, list[ToolCall]]:
    """(the answer's content, its calls): ``text`` read whole by a :class:`ToolCallParser`."""
    parser = ToolCallParser(fmt, names)
    parser.feed(text)
    calls = parser.finish()
    return parser.content, calls


def _json_string(quoted: str) -> str | None:
    try:
        return json.loads(f'"{quoted}"')
    except ValueError:
        return None


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
