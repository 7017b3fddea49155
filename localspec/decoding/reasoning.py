"""Reasoning models: the thinking format read from a chat template, the stream split into
channels, and the text a thinking budget forces.

Two formats are known (design.md section 14):

- ``think-tags``: ``<think>…</think>`` then the answer (Qwen3, QwQ, DeepSeek-R1 and its
  distills).  Some templates open the block in the generation prompt (DeepSeek-R1 distills,
  QwQ: ``<think>\\n``); Qwen3 reads ``enable_thinking`` and, when it is false, writes an empty
  block (``<think>\\n\\n</think>\\n\\n``) so the answer starts at once.
- ``harmony`` (gpt-oss): messages ``<|channel|>NAME<|message|>…<|end|>``; the ``analysis``
  channel is the thinking, ``final`` (and ``commentary``, tool calls) the answer.

Where generation starts is read from the rendered prompt's tail (:func:`prompt_start`),
not from the template: a template can open or close the block depending on its arguments.

The splitter (:func:`channel_splitter`) is fed each emitted token's decoded text in order
and says which channel each piece belongs to: ``reasoning``, ``content``, or ``marker`` (the
format's own tags and the newlines the template writes around them, part of neither text).
Text that may be the start of a marker is held back until it is decided, as stop strings
are.  Pure Python, a few string operations per token; the answer channel passes text
through untouched.

A thinking budget is enforced by forcing the close at the budget (:meth:`ChannelSplitter.
forced_close`, :func:`close_grammar`) rather than by one grammar over the whole block:
llguidance's ``max_tokens`` on a rule disables rollback, which the speculative loop needs
for every verify, and a regex bound ``/(.|\\n){0,N}/`` counts bytes, not tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

REASONING, CONTENT, MARKER = "reasoning", "content", "marker"
EITHER = "either"  # prompt_start: the model itself decides whether to open a block

THINK_TAGS, HARMONY = "think-tags", "harmony"
HARMONY_OPEN = "<|channel|>analysis<|message|>"
HARMONY_FINAL = "<|start|>assistant<|channel|>final<|message|>"
HARMONY_ENDS = ("<|end|>", "<|call|>", "<|return|>")
HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>") + HARMONY_ENDS
HARMONY_HEADER_LIMIT = 256  # characters of header before the output is taken for plain text


@dataclass(frozen=True)
class ReasoningFormat:
    """How a chat template marks the model's thinking.

    ``kind``: ``"think-tags"``, ``"harmony"`` or None (no thinking).  ``open`` / ``close``:
    the text that starts and ends the thinking (``"<think>"`` / ``"</think>"``; harmony:
    ``"<|channel|>analysis<|message|>"`` / ``"<|end|>"``).  ``separator``: what the template
    writes between the close and the answer (``"\\n\\n"``; harmony: the final channel's
    header).  ``opens_in_prompt``: the template's generation prompt opens the block itself.
    ``reads_enable_thinking`` / ``reads_reasoning_effort``: the template reads that
    variable (pass it to the renderer; Qwen3 reads the first, gpt-oss the second).
    """

    kind: str | None = None
    open: str = ""
    close: str = ""
    separator: str = ""
    opens_in_prompt: bool = False
    reads_enable_thinking: bool = False
    reads_reasoning_effort: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        """The marker strings a vocabulary may hold as single (special) tokens."""
        if self.kind == HARMONY:
            return HARMONY_MARKERS
        return (self.open, self.close) if self.kind else ()


NO_REASONING = ReasoningFormat()

_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)
_GENERATION_PROMPT = re.compile(r"\badd_generation_prompt\b")
_AFTER_CLOSE = re.compile(r"</think>((?:\\n|\n)+)")


def detect_reasoning(template: str | None) -> ReasoningFormat:
    """The reasoning format of a chat template (Jinja text, as in a GGUF's
    ``tokenizer.chat_template``); :data:`NO_REASONING` for None, "" or a template that
    writes no thinking.  Reads the text only (never renders it): a template that mentions
    ``<think>`` and ``</think>`` is think-tags, one with ``<|channel|>`` and ``analysis``
    harmony; the generation prompt is the text after its last ``add_generation_prompt``."""
    if not template:
        return NO_REASONING
    text = _COMMENT.sub("", template)
    generation = text[_last_match(_GENERATION_PROMPT, text) :]
    reads_effort = "reasoning_effort" in text
    if "<|channel|>" in text and "analysis" in text:
        return ReasoningFormat(
            HARMONY,
            HARMONY_OPEN,
            HARMONY_ENDS[0],
            HARMONY_FINAL,
            opens_in_prompt=HARMONY_OPEN in generation,
            reads_reasoning_effort=reads_effort,
        )
    if "<think>" not in text or "</think>" not in text:
        return NO_REASONING
    separator = _AFTER_CLOSE.search(text)
    opens = generation.find("<think>")
    return ReasoningFormat(
        THINK_TAGS,
        "<think>",
        "</think>",
        separator.group(1).replace("\\n", "\n") if separator else "\n\n",
        opens_in_prompt=opens >= 0 and "</think>" not in generation[opens:],
        reads_enable_thinking=re.search(r"\benable_thinking\b", text) is not None,
        reads_reasoning_effort=reads_effort,
    )


def _last_match(pattern: re.Pattern, text: str) -> int:
    start = len(text)
    for match in pattern.finditer(text):
        start = match.start()
    return start


def prompt_start(fmt: ReasoningFormat, prompt: str) -> str:
    """Where generation starts after ``prompt`` (the rendered chat, generation prompt
    included): ``"reasoning"`` when the prompt ends inside an open block (``…<think>\\n``),
    ``"content"`` when the answer starts at once (no format, or the prompt closed the block:
    Qwen3 with ``enable_thinking=False``; harmony: a non-analysis channel opened), else
    ``"either"`` (the model opens a block or not)."""
    if fmt.kind is None:
        return CONTENT
    tail = prompt.rstrip()
    if tail.endswith(fmt.open):
        return REASONING
    if fmt.kind == THINK_TAGS and tail.endswith(fmt.close):
        return CONTENT
    if fmt.kind == HARMONY and tail.endswith("<|message|>"):
        return CONTENT
    return EITHER


def forced_close(fmt: ReasoningFormat, tail: str = "", message: str = "") -> str:
    """The text that ends the thinking and starts the answer, for a budget that is spent:
    think-tags ``"\\n</think>\\n\\n"`` (no leading newline when the thinking's text ``tail``
    already ends with one: the template writes ``'\\n</think>\\n\\n'``); harmony
    ``"<|end|><|start|>assistant<|channel|>final<|message|>"``; "" without a format.
    ``message`` (llama.cpp's ``--reasoning-budget-message``) is written first, on a line of its
    own in think-tags, so the model reads why its thinking ends and goes on to its answer."""
    if fmt.kind is None:
        return ""
    if message and fmt.kind == THINK_TAGS:
        lead = "" if tail.endswith("\n") or not tail else "\n"
        return lead + message.strip("\n") + "\n" + fmt.close + fmt.separator
    lead = "\n" if fmt.kind == THINK_TAGS and not tail.endswith("\n") else ""
    return lead + message.strip("\n") + fmt.close + fmt.separator


def close_grammar(forced: str, special: Collection[str] = (), answer: str = r"/(.|\n)*/") -> str:
    """An llguidance Lark grammar: the text ``forced`` (from :func:`forced_close` or
    :meth:`ChannelSplitter.forced_close`), then ``answer`` (a Lark expression: free text by
    default, or e.g. ``%json {…}`` for a schema).  Each string of ``special`` found in
    ``forced`` is written as a special-token reference (``<|end|>``, ``</think>``): pass the
    markers the vocabulary holds as single tokens, since llguidance keeps such tokens apart
    from text.  Compile it with :meth:`Constraint.compile`; the grammar drafter then drafts
    the forced text, verified like any draft."""
    pieces = _split_special(forced, sorted(special, key=len, reverse=True))
    items = [p if p in special else json.dumps(p, ensure_ascii=False) for p in pieces]
    return "start: " + " ".join(items + ["answer"]) + "\nanswer: " + answer + "\n"


def _split_special(text: str, special: list[str]) -> list[str]:
    if not special or not text:
        return [text] if text else []
    pattern = re.compile("|".join(map(re.escape, special)))
    pieces, at = [], 0
    for match in pattern.finditer(text):
        pieces += [text[at : match.start()]] if match.start() > at else []
        pieces.append(match.group())
        at = match.end()
    return pieces + ([text[at:]] if at < len(text) else [])


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


def single_token_markers(
    fmt: ReasoningFormat, tokenize: Callable[[str], Sequence[int]]
) -> dict[int, str]:
    """token id -> marker text for each of ``fmt.markers`` that ``tokenize`` (text -> list of
    ids, special tokens parsed) turns into exactly one token."""
    found = {}
    for marker in fmt.markers:
        ids = list(tokenize(marker))
        if len(ids) == 1:
            found[ids[0]] = marker
    return found
