"""Tool calls in OpenAI's streaming shape: the answer's text, as it streams, split into
``delta.content`` (the text before the first call) and ``delta.tool_calls[i]`` pieces (the
call's id and name first, then its ``function.arguments`` text in pieces), as the openai
SDK reassembles them.

The calls arrive as ``<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>``
with exactly these separators (the call grammar fixes them; see
:mod:`localspec.decoding.tool_calls`), so ARGS is everything after the header up to the
``}`` that closes the call object; a tail that may begin ``}\\n</tool_call>`` is held back until the
call's end shows where ARGS stops.
"""

from __future__ import annotations

import re
import uuid

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_HEADER = re.compile(r'\s*\{"name": "((?:[^"\\]|\\.)*)", "arguments": ')
_END = "}\n" + CLOSE  # what follows a call's arguments


class ToolCallStream:
    """Feed the streamed text; get (content delta, list of tool-call deltas)."""

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
                out.append(
                    {
                        "index": self.calls,
                        "id": f"call_{uuid.uuid4().hex[:24]}",
                        "type": "function",
                        "function": {"name": header.group(1), "arguments": ""},
                    }
                )
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


def _tail_prefix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that may be the start of ``marker``."""
    return next((n for n in range(min(len(marker) - 1, len(text)), 0, -1) if text.endswith(marker[:n])), 0)
