"""An answer's text as its tokens come: complete UTF-8 only, stop strings honoured."""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from localspec.decoding.stats import TokenSource
from localspec.llama.engine import Engine


class TextAssembler:
    """Turns emitted tokens into text: complete UTF-8 only, end-of-generation tokens and
    stop strings end it, and text that may be the start of a stop string is held back."""

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
