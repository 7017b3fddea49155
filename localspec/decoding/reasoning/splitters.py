"""The stream split into channels as its tokens come (:func:`channel_splitter`); see the
package docstring."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from localspec.decoding.reasoning.formats import (
    CONTENT,
    EITHER,
    HARMONY,
    HARMONY_ENDS,
    HARMONY_HEADER_LIMIT,
    MARKER,
    REASONING,
    THINK_TAGS,
    ReasoningFormat,
    forced_close,
)


class Split(NamedTuple):
    """What one fed token gave: its ``channel`` (``reasoning`` / ``content`` / ``marker``)
    and the ``segments`` of text now decided, ``(channel, text)`` pairs in order (possibly
    text held back from earlier tokens; empty while this token's text is held back)."""

    channel: str
    segments: list[tuple[str, str]]


class ChannelSplitter:
    """Splits a generation's text into channels as its tokens come (one generation, one
    thread).  Build with :func:`channel_splitter`.

    A token's channel is the channel of the last text it releases that is not a marker;
    ``marker`` when it releases only marker text; while all its text is held back, the
    channel in force.  So a marker that is one token (``</think>`` in Qwen3's and
    DeepSeek-R1's vocabularies, harmony's tags in gpt-oss's) is labelled ``marker``, while
    the first pieces of a marker spelled in several tokens keep the channel before it.
    """

    def __init__(self, marker_tokens: Mapping[int, str] | None = None):
        self._marker_tokens = dict(marker_tokens or {})
        self._held = ""
        self._out: list[tuple[str, str]] = []
        self.counts = {REASONING: 0, CONTENT: 0, MARKER: 0}  # tokens fed, by their channel
        self._texts: dict[str, list[str]] = {REASONING: [], CONTENT: []}

    @property
    def channel(self) -> str:
        """The channel the next visible text goes to (``reasoning`` or ``content``)."""
        raise NotImplementedError

    @property
    def reasoning(self) -> str:
        return "".join(self._texts[REASONING])

    @property
    def content(self) -> str:
        return "".join(self._texts[CONTENT])

    def feed(self, text: str, token: int | None = None) -> Split:
        """Take one emitted token's decoded text ("" for a partial UTF-8 character).  A
        ``token`` among the ``marker_tokens`` stands for its marker text whatever ``text``
        is (the engine decodes control tokens such as ``<|end|>`` to "")."""
        if token is not None and token in self._marker_tokens:
            text = self._marker_tokens[token]
        self._out = []
        if text:
            buf, self._held = self._held + text, ""
            while buf:
                buf = self._step(buf)
        channel = self._label()
        self.counts[channel] += 1
        return Split(channel, self._out)

    def finish(self) -> list[tuple[str, str]]:
        """The held-back text, at the end of the generation, as ``(channel, text)`` pairs."""
        self._out = []
        if self._held:
            self._emit(self._held_channel(), self._held)
            self._held = ""
        return self._out

    def forced_close(self, message: str = "") -> str:
        """The text to force now to end the thinking ("" when not inside it): completes a
        close already begun in the held-back text, else :func:`forced_close` (with
        ``message`` before the close)."""
        return ""

    def _step(self, buf: str) -> str:
        """Consume the start of ``buf`` in the current state; return the rest."""
        raise NotImplementedError

    def _held_channel(self) -> str:
        return self.channel

    def _label(self) -> str:
        if not self._out:
            return self._held_channel()
        return next((ch for ch, _ in reversed(self._out) if ch != MARKER), MARKER)

    def _emit(self, channel: str, text: str) -> None:
        if not text:
            return
        if channel != MARKER:
            self._texts[channel].append(text)
        if self._out and self._out[-1][0] == channel:
            self._out[-1] = (channel, self._out[-1][1] + text)
        else:
            self._out.append((channel, text))


def _partial(buf: str, needle: str) -> int:
    """Length of the longest end of ``buf`` that is a proper start of ``needle``."""
    for n in range(min(len(needle) - 1, len(buf)), 0, -1):
        if buf.endswith(needle[:n]):
            return n
    return 0


class _Plain(ChannelSplitter):
    channel = CONTENT

    def _step(self, buf: str) -> str:
        self._emit(CONTENT, buf)
        return ""


# think-tags states
_START, _OPENED, _THINKING, _CLOSED, _ANSWER = range(5)


class _ThinkTags(ChannelSplitter):
    """``[ws] <think> \\n* reasoning \\n* </think> \\n* answer``; no block when the text
    does not start with the open tag.  The newlines next to the tags are markers: the
    templates write them (``'<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n'``), so
    the split reasoning and answer render back to the same text."""

    def __init__(self, fmt: ReasoningFormat, start: str, marker_tokens: Mapping[int, str] | None):
        super().__init__(marker_tokens)
        self.fmt = fmt
        self._state = {REASONING: _OPENED, CONTENT: _ANSWER}.get(start, _START)

    @property
    def channel(self) -> str:
        return REASONING if self._state in (_OPENED, _THINKING) else CONTENT

    def forced_close(self, message: str = "") -> str:
        if self._state not in (_OPENED, _THINKING):
            return ""
        begun = _partial(self._held, self.fmt.close)
        if begun:  # too late for a message: the close has begun
            return self.fmt.close[begun:] + self.fmt.separator
        # the reasoning text handed out never ends with a newline: trailing ones are held
        return forced_close(self.fmt, self._held or " ", message)

    def _step(self, buf: str) -> str:
        if self._state == _ANSWER:
            self._emit(CONTENT, buf)
            return ""
        if self._state == _START:
            return self._start(buf)
        if self._state == _THINKING:
            return self._thinking(buf)
        return self._newlines(buf, _THINKING if self._state == _OPENED else _ANSWER)

    def _start(self, buf: str) -> str:
        opening = self.fmt.open
        rest = buf.lstrip()
        if rest.startswith(opening):
            end = len(buf) - len(rest) + len(opening)
            self._emit(MARKER, buf[:end])
            self._state = _OPENED
            return buf[end:]
        if opening.startswith(rest):
            self._held = buf
            return ""
        self._state = _ANSWER
        return buf

    def _newlines(self, buf: str, then: int) -> str:
        rest = buf.lstrip("\n")
        self._emit(MARKER, buf[: len(buf) - len(rest)])
        if rest:
            self._state = then
        return rest

    def _thinking(self, buf: str) -> str:
        close = self.fmt.close
        i = buf.find(close)
        if i >= 0:
            body = buf[:i].rstrip("\n")
            self._emit(REASONING, body)
            self._emit(MARKER, buf[len(body) : i + len(close)])
            self._state = _CLOSED
            return buf[i + len(close) :]
        keep = len(buf) - _partial(buf, close)
        body = buf[:keep].rstrip("\n")
        self._emit(REASONING, body)
        self._held = buf[len(body) :]
        return ""


class _Harmony(ChannelSplitter):
    """``<|start|>assistant<|channel|>NAME[ to=…][<|constrain|>…]<|message|>BODY<|end|>``,
    repeated; a header (everything up to ``<|message|>``) is a marker, a body is reasoning in
    the ``analysis`` channel and content in any other.  A header that runs past
    ``HARMONY_HEADER_LIMIT`` characters means the model is not writing harmony: from there
    on everything is content."""

    def __init__(self, fmt: ReasoningFormat, start: str, marker_tokens: Mapping[int, str] | None):
        super().__init__(marker_tokens)
        self.fmt = fmt
        self._body = start if start in (REASONING, CONTENT) else None  # None: in a header
        self._last = start if start == REASONING else CONTENT
        self._plain = False

    @property
    def channel(self) -> str:
        return self._body or self._last

    def forced_close(self, message: str = "") -> str:
        return forced_close(self.fmt, message=message) if self._body == REASONING else ""

    def _step(self, buf: str) -> str:
        if self._plain:
            self._emit(CONTENT, buf)
            return ""
        return self._header(buf) if self._body is None else self._message(buf)

    def _header(self, buf: str) -> str:
        i = buf.find("<|message|>")
        if i < 0:
            if len(buf) > HARMONY_HEADER_LIMIT:
                self._plain = True
                return buf
            self._held = buf
            return ""
        end = i + len("<|message|>")
        header = buf[:i]
        name = (
            header.rpartition("<|channel|>")[2].split(" ", 1)[0] if "<|channel|>" in header else ""
        )
        self._body = self._last = REASONING if name == "analysis" else CONTENT
        self._emit(MARKER, buf[:end])
        return buf[end:]

    def _message(self, buf: str) -> str:
        found = [(i, end) for end in HARMONY_ENDS if (i := buf.find(end)) >= 0]
        if found:
            i, end = min(found)
            self._emit(self._body, buf[:i])
            self._emit(MARKER, end)
            self._body = None
            return buf[i + len(end) :]
        keep = len(buf) - max(_partial(buf, end) for end in HARMONY_ENDS)
        self._emit(self._body, buf[:keep])
        self._held = buf[keep:]
        return ""

    def _held_channel(self) -> str:
        return MARKER if self._body is None and not self._plain else self.channel


def channel_splitter(
    fmt: ReasoningFormat, start: str = EITHER, marker_tokens: Mapping[int, str] | None = None
) -> ChannelSplitter:
    """A splitter for one generation in format ``fmt`` starting at ``start`` (from
    :func:`prompt_start`).  ``marker_tokens``: token id -> marker text, for the markers the
    vocabulary holds as single tokens (see :func:`single_token_markers`)."""
    if fmt.kind == THINK_TAGS:
        return _ThinkTags(fmt, start, marker_tokens)
    if fmt.kind == HARMONY:
        return _Harmony(fmt, start, marker_tokens)
    return _Plain(marker_tokens)
