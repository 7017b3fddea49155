"""Reading JSON as it is written: where a value that begins at a known place ends, before
the text after it exists (for :mod:`.tool_parser`, which streams a call's arguments)."""

from __future__ import annotations

_SCALAR_END = frozenset(",}] \t\r\n")


class ValueEnd:
    """Where the JSON value from ``start`` on ends, read as the text grows (:meth:`read`):
    strings, escapes and nesting are followed, the value itself is not checked.  ``begin``
    is its first character's index (whitespace before it skipped), ``first`` that character,
    ``at`` how far the text was read."""

    def __init__(self, start: int):
        self.at = start
        self.begin: int | None = None
        self.first = ""
        self.end: int | None = None
        self._depth = 0
        self._string = False
        self._escape = False

    def read(self, text: str) -> int | None:
        """The index just past the value once it is whole, else None."""
        while self.end is None and self.at < len(text):
            self._step(text[self.at])
            self.at += 1
        return self.end

    def _step(self, char: str) -> None:
        if self.begin is None:
            self._begin(char)
        elif self._string:
            self._in_string(char)
        elif self._depth == 0:  # a number, true, false or null
            if char in _SCALAR_END:
                self.end = self.at
        elif char == '"':
            self._string = True
        elif char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1
            if self._depth == 0:
                self.end = self.at + 1

    def _begin(self, char: str) -> None:
        if char in " \t\r\n":
            return
        self.begin, self.first = self.at, char
        self._depth = 1 if char in "{[" else 0
        self._string = char == '"'

    def _in_string(self, char: str) -> None:
        if self._escape:
            self._escape = False
        elif char == "\\":
            self._escape = True
        elif char == '"':
            self._string = False
            if self._depth == 0:
                self.end = self.at + 1


def tail_prefix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that may be the start of ``marker``."""
    longest = min(len(marker) - 1, len(text))
    return next((n for n in range(longest, 0, -1) if text.endswith(marker[:n])), 0)
