"""A small Markdown parser for the chat view that keeps, for every character it shows, the
offset of the source character it came from, so that the view can colour the rendered text
by the token that wrote it (markup such as ``**`` and fences is not shown and maps nowhere).

``parse_markdown`` cuts the source into :class:`Unit` s, one per document block (a paragraph,
a heading, a list item, one line of a code block, a table, a rule), each made of
:class:`Span` s: runs of shown text whose characters come from consecutive source offsets,
in one inline style (the inline pass is :mod:`gui.markdown.markdown_inline`).  It covers what chat
answers use: ATX headings, paragraphs, bullet and numbered lists (nested by indentation), block
quotes, fenced code (Pygments colours, see
:mod:`gui.markdown.code_colours`), GFM pipe tables, rules, and inline code, bold, italic,
strikethrough, links and bare URLs.  An unclosed fence runs to the end (a code block
still streaming); unclosed emphasis is shown as typed until its closer arrives."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .code_colours import code_lines
from .markdown_inline import Span, parse_inline

__all__ = ["Span", "Unit", "parse_inline", "parse_markdown"]


@dataclass(frozen=True, slots=True)
class Unit:
    """One block of the rendered answer.  ``kind``: para, heading, item, quote, code, rule
    or table.  ``level``: the heading level, or the indentation depth (list nesting);
    ``number``: an item's number (0 for a bullet); ``group``: the list an item belongs to,
    or the code block a code line belongs to; ``first``: the first line of a code block;
    ``cells``: a table's rows, each a tuple of cells (tuples of spans)."""

    kind: str
    spans: tuple[Span, ...] = ()
    level: int = 0
    number: int = 0
    group: int = 0
    first: bool = False
    cells: tuple = ()


FENCE = re.compile(r"( *)(`{3,}|~{3,})[ \t]*([^`\s]*)")
HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+|$)")
RULE = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
ITEM = re.compile(r"( *)([-*+]|(\d{1,9})[.)])(?:[ \t]+|$)")
QUOTE = re.compile(r" {0,3}> ?")
TABLE_SEP = re.compile(r" {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


def parse_markdown(source: str, streaming: bool = False, memo: dict | None = None) -> list[Unit]:
    """The units of ``source``.  ``streaming``: the answer is still growing (a long code
    block is then coloured piecewise, so that each update lexes only its last part).
    ``memo``: the blocks parsed last time (kept by the caller between updates, replaced
    in place), reused where their text did not change."""
    blocks = _Blocks(source, streaming, memo or {})
    units = blocks.parse()
    if memo is not None:
        memo.clear()
        memo.update(blocks.memo)
    return units


class _Blocks:
    """The block pass: one line at a time, with the open lists as a stack of
    (marker indentation, ordered, group id)."""

    def __init__(self, source: str, streaming: bool, previous: dict):
        self.source, self.streaming = source, streaming
        self.previous, self.memo = previous, {}
        self.lines: list[tuple[int, str]] = []
        pos = 0
        for line in source.split("\n"):
            self.lines.append((pos, line[:-1] if line.endswith("\r") else line))
            pos += len(line) + 1
        self.units: list[Unit] = []
        self.lists: list[tuple[int, bool, int]] = []
        self.groups = 0

    def parse(self) -> list[Unit]:
        i = 0
        while i < len(self.lines):
            i = self._block(i)
        return self.units

    def _cached(self, key: tuple, make):
        """``make(*key)``, or what it gave for the same key in this or the last parse."""
        hit = self.memo.get(key) or self.previous.get(key)
        if hit is None:
            hit = make(*key)
        self.memo[key] = hit
        return hit

    def _inline(self, text: str, base: int) -> tuple[Span, ...]:
        return self._cached((text, base), parse_inline)

    def _block(self, i: int) -> int:
        start, line = self.lines[i]
        if not line.strip():
            return i + 1
        indent = len(line) - len(line.lstrip(" "))
        nested = self._nested(indent)
        if (m := ITEM.match(line)) and not RULE.match(line):
            return self._item(i, m)
        if not nested:
            self.lists = []
        if m := FENCE.match(line):
            return self._code(i, m, nested)
        if m := HEADING.match(line):
            text = re.sub(r"[ \t]+#+[ \t]*$|^#+[ \t]*$", "", line[m.end() :]).rstrip()
            self.units.append(
                Unit("heading", self._inline(text, start + m.end()), level=len(m.group(1)))
            )
            return i + 1
        if RULE.match(line):
            self.units.append(Unit("rule"))
            return i + 1
        if self._table_starts(i):
            return self._table(i)
        if m := QUOTE.match(line):
            return self._paragraph(i, "quote", m.end(), nested)
        return self._paragraph(i, "para", indent, nested)

    def _nested(self, indent: int) -> int:
        """The list depth a block indented by ``indent`` belongs to (0: not in a list)."""
        return len(self.lists) if self.lists and indent >= 2 else 0

    def _starts_block(self, line: str) -> bool:
        return bool(
            FENCE.match(line) or HEADING.match(line) or RULE.match(line) or ITEM.match(line)
        )

    def _continuation(self, i: int) -> int:
        """The index after the lines that continue the paragraph starting at line ``i``."""
        j = i + 1
        while j < len(self.lines):
            line = self.lines[j][1]
            if (
                not line.strip()
                or self._starts_block(line)
                or QUOTE.match(line)
                or self._table_starts(j)
            ):
                break
            j += 1
        return j

    def _paragraph(self, i: int, kind: str, skip: int, level: int) -> int:
        j = self._continuation(i)
        start = self.lines[i][0] + skip
        end = self.lines[j - 1][0] + len(self.lines[j - 1][1])
        self.units.append(Unit(kind, self._inline(self.source[start:end], start), level=level))
        return j

    def _item(self, i: int, m: re.Match) -> int:
        indent, ordered = len(m.group(1)), m.group(3) is not None
        while self.lists and self.lists[-1][0] > indent + 1:
            self.lists.pop()
        if self.lists and self.lists[-1][0] >= indent - 1 and self.lists[-1][1] == ordered:
            group = self.lists[-1][2]
        else:
            if self.lists and self.lists[-1][0] >= indent - 1:
                self.lists.pop()  # same depth, other kind of marker: a new list
            self.groups += 1
            group = self.groups
            self.lists.append((indent, ordered, group))
        j = self._continuation(i)
        start = self.lines[i][0] + m.end()
        end = max(start, self.lines[j - 1][0] + len(self.lines[j - 1][1]))
        number = int(m.group(3)) if ordered else 0
        spans = self._inline(self.source[start:end], start)
        self.units.append(
            Unit("item", spans, level=len(self.lists) - 1, number=number, group=group)
        )
        return j

    def _code(self, i: int, m: re.Match, level: int) -> int:
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3)
        closer = re.compile(rf" *{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(self.lines) and not closer.match(self.lines[j][1]):
            j += 1
        body = self.lines[i + 1 : j]
        if j == len(self.lines) and body and not body[-1][1]:
            body = body[:-1]  # streaming: the newline that will start the next line
        cut = tuple(min(indent, len(line) - len(line.lstrip(" "))) for _, line in body)
        code = "\n".join(line[n:] for (_, line), n in zip(body, cut))
        self.groups += 1
        start = body[0][0] if body else 0
        piecewise = self.streaming and j == len(self.lines)
        self.units.extend(
            self._cached((code, cut, start, lang, piecewise, level, self.groups), _code_units)
        )
        return j + 1

    def _table_starts(self, i: int) -> bool:
        if i + 1 >= len(self.lines):
            return False
        head, sep = self.lines[i][1], self.lines[i + 1][1]
        return "|" in head and "|" in sep and bool(TABLE_SEP.match(sep))

    def _table(self, i: int) -> int:
        rows = [self._cells(i)]
        j = i + 2
        while j < len(self.lines) and "|" in self.lines[j][1] and self.lines[j][1].strip():
            rows.append(self._cells(j))
            j += 1
        self.units.append(Unit("table", cells=tuple(rows)))
        return j

    def _cells(self, i: int) -> tuple:
        start, line = self.lines[i]
        bounds, k, ticks = [-1], 0, False
        while k < len(line):
            if line[k] == "\\":
                k += 1
            elif line[k] == "`":
                ticks = not ticks
            elif line[k] == "|" and not ticks:
                bounds.append(k)
            k += 1
        bounds.append(len(line))
        cells = []
        for a, b in zip(bounds, bounds[1:]):
            text = line[a + 1 : b]
            lead = len(text) - len(text.lstrip())
            cells.append(self._inline(text.strip(), start + a + 1 + lead))
        if cells and not line[: bounds[1]].strip():
            cells = cells[1:]  # a leading "|"
        if cells and len(bounds) > 2 and not line[bounds[-2] + 1 :].strip():
            cells = cells[:-1]  # a trailing "|"
        return tuple(cells)


def _code_units(
    code: str, cut: tuple, start: int, lang: str, piecewise: bool, level: int, group: int
):
    """The units of a code block's lines (``cut``: the indentation taken off each line,
    ``start``: the source offset of its first line), Pygments colours in their spans."""
    units = []
    for k, (runs, text, n) in enumerate(
        zip(code_lines(code, lang, piecewise), code.split("\n"), cut)
    ):
        spans = tuple(Span(start + n + col, part, style) for col, part, style in runs)
        units.append(Unit("code", spans, level=level, group=group, first=k == 0))
        start += n + len(text) + 1
    return units or [Unit("code", (), level=level, group=group, first=True)]
