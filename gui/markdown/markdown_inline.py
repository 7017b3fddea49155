"""The inline pass of :mod:`gui.markdown.markdown_render`: a block's text as :class:`Span` s of
shown text in one style each (code spans, bold, italic, strikethrough, links, bare URLs,
backslash escapes), each knowing the source offset of its first character."""

from __future__ import annotations

import re
from dataclasses import dataclass

PUNCTUATION = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
URL = re.compile(r"https?://[^\s<>()\[\]]*[^\s<>()\[\].,;:!?'\"*_~]")
SPECIAL = re.compile(r"[\\`*_~\[!<\n]|https?://")
CANDIDATES = {c: re.compile(f"[{re.escape(c)}`]") for c in "*_~"}
AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")


@dataclass(frozen=True, slots=True)
class Span:
    """Shown text whose i-th character is source character ``src + i``.  ``style``:
    letters b (bold), i (italic), c (inline code), s (strikethrough), or "tok:<Pygments
    token type>" in code blocks; ``href``: the link target, if any."""

    src: int
    text: str
    style: str = ""
    href: str = ""


def parse_inline(text: str, base: int) -> tuple[Span, ...]:
    """The spans of one block's inline text, whose first character is source offset ``base``."""
    parser = _Inline(text, base)
    parser.run(0, len(text), "", "")
    return tuple(_merged(parser.out))


def _merged(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for s in spans:
        last = out[-1] if out else None
        if (
            last
            and last.style == s.style
            and last.href == s.href
            and last.src + len(last.text) == s.src
        ):
            out[-1] = Span(last.src, last.text + s.text, s.style, s.href)
        elif s.text:
            out.append(s)
    return out


class _Inline:
    """The inline pass over ``text``: each handler gets the position of a special
    character and returns where parsing goes on, or None when it is plain text."""

    def __init__(self, text: str, base: int):
        self.s, self.base = text, base
        self.out: list[Span] = []
        self.unclosed: dict[
            tuple, int
        ] = {}  # (char, run, end) -> an opener after which none closes
        self.handlers = {
            "\\": self._escape,
            "`": self._code,
            "*": self._emphasis,
            "_": self._emphasis,
        }
        self.handlers.update(
            {"~": self._emphasis, "[": self._link, "!": self._image, "<": self._autolink}
        )
        self.handlers.update({"h": self._url, "\n": self._newline})

    def run(self, i: int, end: int, style: str, href: str) -> None:
        plain = i
        while i < end:
            m = SPECIAL.search(
                self.s, i, end
            )  # plain text up to the next character that may be markup
            if m is None:
                break
            i = m.start()
            c = self.s[i]
            handler = self.handlers.get(c)
            nxt = handler(i, end, style, href, plain) if handler else None
            if nxt is None:
                i += self._run_length(i, end) if c in "`*_~" else 1
            else:
                i = plain = nxt
        self._emit(plain, end, style, href)

    def _emit(self, a: int, b: int, style: str, href: str) -> None:
        if b > a:
            self.out.append(Span(self.base + a, self.s[a:b], style, href))

    def _run_length(self, i: int, end: int) -> int:
        j = i
        while j < end and self.s[j] == self.s[i]:
            j += 1
        return j - i

    def _escape(self, i, end, style, href, plain):
        if i + 1 < end and self.s[i + 1] in PUNCTUATION:
            self._emit(plain, i, style, href)
            self._emit(i + 1, i + 2, style, href)
            return i + 2
        return None

    def _newline(self, i, end, style, href, plain):
        self._emit(plain, i, style, href)
        self.out.append(Span(self.base + i, " ", style, href))  # a soft break reads as a space
        j = i + 1
        while j < end and self.s[j] in " \t":
            j += 1
        return j

    def _code_end(self, i: int, end: int) -> int | None:
        """Where the code span opened by the backticks at ``i`` closes, or None."""
        n = self._run_length(i, end)
        j = i + n
        while (j := self.s.find("`" * n, j, end)) >= 0:
            r = self._run_length(j, end)
            if r == n:
                return j
            j += r
        return None

    def _code(self, i, end, style, href, plain):
        j = self._code_end(i, end)
        if j is None:
            return None
        n = self._run_length(i, end)
        a, b = i + n, j
        if b - a >= 2 and self.s[a] == " " and self.s[b - 1] == " " and self.s[a:b].strip():
            a, b = a + 1, b - 1
        self._emit(plain, i, style, href)
        self.out.append(Span(self.base + a, self.s[a:b].replace("\n", " "), style + "c", href))
        return j + n

    def _emphasis(self, i, end, style, href, plain):
        c, n = self.s[i], self._run_length(i, end)
        if n > 3 or (c == "~" and n != 2) or i + n >= end or self.s[i + n].isspace():
            return None
        if c == "_" and i > 0 and self.s[i - 1].isalnum():
            return None
        close = self._closer(c, n, i + n, end)
        if close is None:
            return None
        self._emit(plain, i, style, href)
        added = "s" if c == "~" else {1: "i", 2: "b", 3: "bi"}[n]
        self.run(i + n, close, style + added, href)
        return close + n

    def _closer(self, c: str, n: int, k: int, end: int) -> int | None:
        """Where the run of ``n`` ``c`` closing an emphasis opened before ``k`` starts:
        the first right-flanking run of exactly n, else the end of a longer one."""
        if self.unclosed.get((c, n, end), end) <= k:
            return None  # none after an earlier opener: none after this one either
        opened, longer = k, None
        while (m := CANDIDATES[c].search(self.s, k, end)) is not None:
            k = m.start()
            if self.s[k] == "`":
                j = self._code_end(k, end)
                k = k + 1 if j is None else j + self._run_length(j, end)
                continue
            r = self._run_length(k, end)
            flanking = not self.s[k - 1].isspace()
            if flanking and c == "_" and k + r < end and self.s[k + r].isalnum():
                flanking = False
            if flanking and r == n:
                return k
            if flanking and r > n and longer is None:
                longer = k + r - n
            k += r
        if longer is None:
            self.unclosed[(c, n, end)] = opened
        return longer

    def _link(self, i, end, style, href, plain, skip=0):
        depth, j = 0, i
        while j < end:
            depth += {"[": 1, "]": -1}.get(self.s[j], 0)
            if depth == 0:
                break
            j += 1
        if j >= end - 1 or self.s[j + 1] != "(":
            return None
        close = self.s.find(")", j + 2, end)
        if close < 0:
            return None
        target = self.s[j + 2 : close].strip().strip("<>").split(" ")[0]
        self._emit(plain, i - skip, style, href)
        self.run(i + 1, j, style, target)
        return close + 1

    def _image(self, i, end, style, href, plain):
        if i + 1 < end and self.s[i + 1] == "[":
            return self._link(i + 1, end, style, href, plain, skip=1)
        return None

    def _autolink(self, i, end, style, href, plain):
        m = AUTOLINK.match(self.s, i, end)
        if not m:
            return None
        self._emit(plain, i, style, href)
        self._emit(i + 1, m.end() - 1, style, m.group(1))
        return m.end()

    def _url(self, i, end, style, href, plain):
        if href or (i > 0 and self.s[i - 1].isalnum()) or not self.s.startswith("http", i):
            return None
        m = URL.match(self.s, i, end)
        if not m:
            return None
        self._emit(plain, i, style, href)
        self._emit(i, m.end(), style, m.group(0))
        return m.end()
