"""Tool calls in OpenAI's streaming shape: the answer's text, as it streams, split into
``delta.content`` (the text before the first call) and ``delta.tool_calls[i]`` pieces (the
call's id and name first, then its ``function.arguments`` text in pieces), as the openai
SDK reassembles them.  :func:`tool_call_stream` picks the reader for a model's format.

Hermes calls (:class:`ToolCallStream`) arrive as ``<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>``
with exactly these separators (the call grammar fixes them; see
:mod:`localspec.decoding.tool_calls`), so ARGS is everything after the header up to the
``}`` that closes the call object; a tail that may begin ``}\\n</tool_call>`` is held back until the
call's end shows where ARGS stops.
"""

from __future__ import annotations

import re
import uuid

from localspec.decoding.tool_calls import ToolFormat
from localspec.decoding.tool_fallback import fallback_calls, undecided_from
from localspec.server.reasoning_fields import REASONING, channel_runs

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_HEADER = re.compile(r'\s*\{"name": "((?:[^"\\]|\\.)*)", "arguments": ')
_END = "}\n" + CLOSE  # what follows a call's arguments


def tool_call_stream(fmt: ToolFormat) -> ToolCallStream | JsonCallStream | FallbackHold:
    """The reader for ``fmt``'s calls; with declared names (``fmt.tools``), text that may be a
    fallback call (fenced or bare JSON) is held back until the answer shows it is not."""
    reader = ToolCallStream() if fmt.open_token is not None else JsonCallStream(fmt.arguments_key)
    return FallbackHold(reader, fmt.tools) if fmt.tools and fmt.open_token is not None else reader


class FallbackHold:
    """A Hermes reader whose content is held back from where it may turn out to be a fallback
    call to one of ``names`` (:func:`~localspec.decoding.tool_fallback.undecided_from`), or
    from a complete one on: such calls are sent at the end, from the finished answer's
    ``tool_calls`` (:func:`end_calls`)."""

    def __init__(self, reader: ToolCallStream, names: tuple[str, ...]):
        self.reader, self.names = reader, names
        self.content, self.released = "", 0

    @property
    def calls(self) -> int:
        return self.reader.calls

    def feed(self, delta: str) -> tuple[str, list[dict]]:
        content, calls = self.reader.feed(delta)
        self.content += content
        cut = undecided_from(self.content, self.names)
        spans = fallback_calls(self.content, self.names)
        cut = max(self.released, min([cut, *(start for start, _, _ in spans)]))
        out, self.released = self.content[self.released : cut], cut
        return out, calls


def end_calls(reader, tool_calls: list[dict] | None) -> list[dict]:
    """The deltas of the finished answer's calls that ``reader`` did not stream (fallback
    calls, parsed from the whole answer): each call's header then its whole arguments."""
    if not isinstance(reader, FallbackHold) or reader.calls or not tool_calls:
        return []
    out = []
    for i, call in enumerate(tool_calls):
        header = {"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"]}}
        out += [{**header, "function": {**header["function"], "arguments": ""}}]
        out.append({"index": i, "function": {"arguments": call["function"]["arguments"]}})
    reader.reader.calls = len(tool_calls)
    return out


def _header(index: int, name: str) -> dict:
    return {
        "index": index,
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }


class ToolCallStream:
    """Hermes calls: feed the streamed text; get (content delta, list of tool-call deltas)."""

    def __init__(self):
        self.text = ""
        self.calls = 0  # calls started (their header sent)
        self._content_sent = 0
        self._in_call = None  # (start of ARGS in text, characters of ARGS sent) while inside a call
        self._scan = 0  # where the next call is looked for

    def feed(self, delta: str) -> tuple[str, list[dict]]:
        self.text += delta
        first = self.text.find(OPEN)
        content_end = len(self.text) - _tail_prefix(self.text, OPEN) if first < 0 else first
        content = self.text[self._content_sent : content_end]
        self._content_sent = max(self._content_sent, content_end)
        return content, self._call_deltas() if first >= 0 else []

    def _call_deltas(self) -> list[dict]:
        out = []
        while True:
            if self._in_call is None:
                start = self.text.find(OPEN, self._scan)
                if start < 0:
                    return out
                header = _HEADER.match(self.text, start + len(OPEN))
                if header is None:
                    return out  # the name is not complete yet
                out.append(_header(self.calls, header.group(1)))
                self.calls += 1
                self._in_call = (header.end(), 0)
            args_start, sent = self._in_call
            close = self.text.find(CLOSE, args_start)
            if close >= 0:
                args_end = self.text.rstrip().rfind("}", args_start, close)
                self._in_call, self._scan = None, close + len(CLOSE)
            else:
                args_end = max(args_start + sent, len(self.text) - _tail_prefix(self.text, _END))
            piece = self.text[args_start + sent : args_end]
            if piece:
                out.append({"index": self.calls - 1, "function": {"arguments": piece}})
            if self._in_call is not None:
                self._in_call = (args_start, args_end - args_start)
                return out


class JsonCallStream:
    """Llama 3.x calls: an answer that begins with ``{`` is one call, ``{"name": "NAME",
    "parameters": ARGS}`` with these separators (the call grammar fixes them), and nothing
    follows its closing ``}``; any other answer is content.  A trailing ``}`` is held back
    until more text shows it was part of ARGS."""

    def __init__(self, arguments_key: str = "parameters"):
        self.text = ""
        self.calls = 0
        self._header = re.compile(r'\{"name": "((?:[^"\\]|\\.)*)", "' + re.escape(arguments_key) + '": ')
        self._args_start = None
        self._sent = 0  # characters of ARGS sent, or of content before the answer proved prose

    def feed(self, delta: str) -> tuple[str, list[dict]]:
        self.text += delta
        if not self.text.startswith("{"):
            content, self._sent = self.text[self._sent :], len(self.text)
            return content, []
        out = []
        if self._args_start is None:
            header = self._header.match(self.text)
            if header is None:
                return "", out
            out.append(_header(0, header.group(1)))
            self.calls, self._args_start, self._sent = 1, header.end(), 0
        end = len(self.text) - (1 if self.text.endswith("}") else 0)
        piece = self.text[self._args_start + self._sent : end]
        if piece:
            out.append({"index": 0, "function": {"arguments": piece}})
            self._sent += len(piece)
        return "", out


class StreamedTextAndCalls:
    """For a protocol's answer shape that streams text and tool calls as its own events:
    subclasses set ``tool_stream`` (a reader from :func:`tool_call_stream`, or None),
    keep ``sent`` (the text streamed so far) and ``calls`` (calls opened so far), and give
    ``_thinking(str)``, ``_text(str)`` and ``_call(delta)``, each a list of encoded events."""

    tool_stream: ToolCallStream | JsonCallStream | None = None
    sent: str = ""
    calls: int = 0

    def stream_events(self, events: list) -> list[str]:
        """The events for a batch of ``(event, stats)`` pairs from the generation: the
        thinking through ``_thinking(str)``, the answer's text and calls through ``_text`` and
        ``_call``."""
        out = []
        for kind, run in channel_runs(events):
            out += self._thinking(run) if kind == REASONING else self._answer_events(run)
        return out

    def _answer_events(self, events: list) -> list[str]:
        text = "".join(e.text for e, _ in events)
        content, calls = self.tool_stream.feed(text) if self.tool_stream is not None else (text, [])
        out = self._text(content)
        for delta in calls:
            out += self._call(delta)
        return out

    def held_back(self, full_text: str, tool_calls: list[dict] | None = None) -> list[str]:
        """The events for text the tool-call reader held back (it may have begun a call)
        when the answer ended with no call, or for the answer's fallback calls
        (``tool_calls``: the finished answer's) the reader held back."""
        deltas = end_calls(self.tool_stream, tool_calls)
        if deltas:
            out = []
            for delta in deltas:
                out += self._call(delta)
            return out
        if not self.calls and full_text.startswith(self.sent):
            return self._text(full_text[len(self.sent) :])
        return []


def _tail_prefix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that may be the start of ``marker``."""
    return next((n for n in range(min(len(marker) - 1, len(text)), 0, -1) if text.endswith(marker[:n])), 0)
