"""An answer's text as its tokens come: complete UTF-8 only, stop strings honoured; for a
reasoning model, the thinking split from the answer first (stop strings apply to the answer)."""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from localspec.decoding.reasoning import CONTENT, REASONING, ChannelSplitter
from localspec.decoding.stats import TokenSource
from localspec.llama.engine import Engine


class TextAssembler:
    """Turns emitted tokens into text: complete UTF-8 only, end-of-generation tokens and
    stop strings end it, and text that may be the start of a stop string is held back."""

    label = channel = (
        CONTENT  # the channel of the last token added and of the next (always the answer)
    )
    reasoning = None  # no thinking channel

    def __init__(self, engine: Engine, stop: Sequence[str]):
        self.engine = engine
        self.stop = tuple(stop)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.full = ""
        self.sent = 0  # characters of `full` already handed out
        self.end: int | None = None  # final length of the text once stopped
        self.tokens: list[int] = []
        self.sources: list[TokenSource] = []

    @property
    def text(self) -> str:
        return self.full[: self.end] if self.end is not None else self.full

    def add(self, token: int, source: TokenSource) -> str | None:
        """Add one token; return "stop" when the generation must end here."""
        if self.engine.is_eog(token):
            self.end = len(self.full)
            return "stop"
        self.tokens.append(token)
        self.sources.append(source)
        before = len(self.full)
        self.full += self.decoder.decode(self.engine.token_bytes(token))
        for s in self.stop:
            i = self.full.find(s, max(0, before - len(s) + 1))
            if i >= 0 and (self.end is None or i < self.end):
                self.end = i
        return "stop" if self.end is not None else None

    def take_reasoning(self) -> str:
        return ""

    def take_delta(self) -> str:
        limit = self.end if self.end is not None else len(self.full) - self._held_back()
        delta = self.full[self.sent : limit]
        self.sent = max(self.sent, limit)
        return delta

    def _held_back(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        held = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.full)), held, -1):
                if self.full.endswith(s[:n]):
                    held = n
                    break
        return held

    def finish(self) -> str:
        """Flush what is left (held-back text, an incomplete UTF-8 tail)."""
        if self.end is None:
            self.full += self.decoder.decode(b"", final=True)
            self.end = len(self.full)
        delta = self.full[self.sent : self.end]
        self.sent = self.end
        return delta


class StopText:
    """Text fed in pieces with stop strings honoured: the text ends before the first stop
    string, and a tail that may start one is held back until decided."""

    def __init__(self, stop: Sequence[str]):
        self.stop = tuple(stop)
        self.full = ""
        self.sent = 0
        self.end: int | None = None

    @property
    def text(self) -> str:
        return self.full[: self.end] if self.end is not None else self.full

    def add(self, text: str) -> bool:
        """Append ``text``; True once a stop string has been found."""
        if self.end is None and text:
            before = len(self.full)
            self.full += text
            found = [
                i for s in self.stop if (i := self.full.find(s, max(0, before - len(s) + 1))) >= 0
            ]
            self.end = min(found) if found else None
        return self.end is not None

    def take_delta(self) -> str:
        limit = (
            self.end if self.end is not None else len(self.full) - _held_back(self.full, self.stop)
        )
        delta = self.full[self.sent : limit]
        self.sent = max(self.sent, limit)
        return delta

    def finish(self) -> str:
        self.end = len(self.full) if self.end is None else self.end
        return self.take_delta()


def _held_back(text: str, stop: Sequence[str]) -> int:
    held = 0
    for s in stop:
        for n in range(min(len(s) - 1, len(text)), held, -1):
            if text.endswith(s[:n]):
                held = n
                break
    return held


class ChannelAssembler:
    """:class:`TextAssembler`'s interface for a reasoning model: each token's text goes
    through ``splitter`` (:func:`~localspec.decoding.reasoning.channel_splitter`); the
    answer's text then through the stop strings (the thinking never stops a generation).
    ``label``: the channel of the last token added (``reasoning``, ``content``, ``marker``);
    ``text`` the answer, ``reasoning`` the thinking; the markers are in neither."""

    def __init__(self, engine: Engine, stop: Sequence[str], splitter: ChannelSplitter):
        self.raw = TextAssembler(engine, ())
        self.splitter = splitter
        self.answer = StopText(stop)
        self.label = splitter.channel
        self._reasoning: list[str] = []
        self._reasoning_sent = 0

    @property
    def tokens(self) -> list[int]:
        return self.raw.tokens

    @property
    def sources(self) -> list[TokenSource]:
        return self.raw.sources

    @property
    def text(self) -> str:
        return self.answer.text

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def channel(self) -> str:
        """The channel the next text goes to (``reasoning`` or ``content``)."""
        return self.splitter.channel

    def add(self, token: int, source: TokenSource) -> str | None:
        """Add one token; "stop" when the generation must end here (an end-of-generation
        token, or a stop string in the answer)."""
        if self.raw.add(token, source) == "stop":
            self.label = self.splitter.channel
            return "stop"
        split = self.splitter.feed(self.raw.take_delta(), token)
        self.label = split.channel
        self._take(split.segments)
        return "stop" if self.answer.end is not None else None

    def _take(self, segments: list[tuple[str, str]]) -> None:
        for channel, text in segments:
            if channel == REASONING and self.answer.end is None:
                self._reasoning.append(text)
            elif channel == CONTENT:
                self.answer.add(text)

    def take_delta(self) -> str:
        """The new answer text."""
        return self.answer.take_delta()

    def take_reasoning(self) -> str:
        """The new thinking text."""
        new = "".join(self._reasoning[self._reasoning_sent :])
        self._reasoning_sent = len(self._reasoning)
        return new

    def finish(self) -> str:
        """Flush what is left; the answer's rest (the thinking's in :meth:`take_reasoning`)."""
        tail = self.raw.finish()
        if tail and self.answer.end is None:
            self._take(self.splitter.feed(tail).segments)
        self._take(self.splitter.finish())
        return self.answer.finish()
