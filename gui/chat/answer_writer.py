"""Writes an answer into the chat's QTextDocument: Markdown rendered (see
:mod:`gui.markdown.markdown_render`), code blocks in Pygments colours, and, with highlighting on,
each character on the background colour of the token that wrote it, with that token's
tooltip.  While the answer streams, :meth:`AnswerWriter.update` rewrites only the blocks
that changed since the last update (usually the last paragraph or code line)."""

from __future__ import annotations

from bisect import bisect_right

from PySide6.QtGui import (
    QColor,
    QFont,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextLength,
    QTextListFormat,
    QTextTableFormat,
)

from ..markdown.code_colours import token_colour
from ..markdown.markdown_render import Span, Unit, parse_markdown
from .message import Segment
from .token_colours import (
    DARK_TEXT,
    SOURCE_COLOURS,
    SOURCE_PROPERTY,
    is_dark,
    readable,
    tooltip_for,
)

HEADING_SCALE = {1: 1.45, 2: 1.3, 3: 1.15}
BULLETS = (QTextListFormat.ListDisc, QTextListFormat.ListCircle, QTextListFormat.ListSquare)


def new_block(cursor: QTextCursor, fmt: QTextBlockFormat, after_table: bool = False) -> int:
    """Start a block at the end of the document and return where it starts.
    ``after_table``: the document ends with a table, and the empty block Qt keeps after it
    is used instead of adding one."""
    start = cursor.position()
    if after_table and cursor.block().length() == 1:
        cursor.setBlockFormat(fmt)
    else:
        cursor.insertBlock(fmt)
    return start


class FormatBook:
    """The char and block formats of one palette and highlight setting, made once."""

    def __init__(self, palette: QPalette, font: QFont, mono: QFont, highlight: bool):
        self.palette, self.font, self.highlight = palette, font, highlight
        self.mono = QFont(mono)
        if font.pointSizeF() > 0:
            self.mono.setPointSizeF(font.pointSizeF() * 0.95)
        self.dark = is_dark(palette)
        base, text = palette.color(QPalette.Base), palette.color(QPalette.Text)
        self.code_bg = QColor(
            *(round(b + (t - b) * 0.07) for b, t in zip(base.getRgb()[:3], text.getRgb()[:3]))
        )
        self._chars: dict[tuple, QTextCharFormat] = {}

    def char(
        self, kind: str, level: int, style: str, href: str, source: str | None
    ) -> QTextCharFormat:
        """The format of text of ``style`` (see :class:`~gui.markdown.markdown_render.Span`) in a
        unit of ``kind``, written by a token of ``source`` (None: no token colours)."""
        key = (kind, level, style, href, source)
        fmt = self._chars.get(key)
        if fmt is None:
            fmt = self._chars[key] = self._make_char(kind, level, style, href, source)
        return fmt

    def _make_char(
        self, kind: str, level: int, style: str, href: str, source: str | None
    ) -> QTextCharFormat:
        fmt = QTextCharFormat()
        syntax = style.startswith("tok:")
        letters = "" if syntax else style
        code = kind == "code" or "c" in letters
        fmt.setFont(self.mono if code else self._text_font(kind, level))
        if "b" in letters or kind == "th":
            fmt.setFontWeight(QFont.Bold)
        fmt.setFontItalic("i" in letters or kind == "quote")
        fmt.setFontStrikeOut("s" in letters)
        background = SOURCE_COLOURS.get(source) if source else None
        fmt.setForeground(self._foreground(style if syntax else "", href, background))
        if background is not None:
            fmt.setBackground(background)
        elif "c" in letters:
            fmt.setBackground(self.code_bg)
        if href:
            fmt.setAnchor(True)
            fmt.setAnchorHref(href)
            fmt.setFontUnderline(True)
        if source:
            fmt.setProperty(SOURCE_PROPERTY, source)
        return fmt

    def _text_font(self, kind: str, level: int) -> QFont:
        font = QFont(self.font)
        if kind == "heading":
            if self.font.pointSizeF() > 0:
                font.setPointSizeF(self.font.pointSizeF() * HEADING_SCALE.get(level, 1.0))
            font.setBold(True)
        return font

    def _foreground(self, syntax: str, href: str, background: QColor | None) -> QColor:
        """Text colour: on a token's (light) background the light style's colour, made
        readable on it; elsewhere the palette's, or the style of the palette's lightness."""
        if background is not None:
            wanted = token_colour(syntax, False) or ("#1d4ed8" if href else DARK_TEXT)
            return readable(QColor(wanted), background)
        if syntax and (colour := token_colour(syntax, self.dark)):
            return readable(QColor(colour), self.code_bg)
        if href:
            return self.palette.color(QPalette.Link)
        return self.palette.color(QPalette.Text)

    def block(self, unit: Unit) -> QTextBlockFormat:
        """The format of ``unit``'s block (a list item's list is set by the writer)."""
        fmt = QTextBlockFormat()
        fmt.setIndent(unit.level if unit.kind in ("para", "code", "quote") else 0)
        if unit.kind == "heading":
            fmt.setHeadingLevel(unit.level)
            fmt.setTopMargin(8)
            fmt.setBottomMargin(4)
        elif unit.kind in ("para", "quote"):
            fmt.setBottomMargin(6)
        elif unit.kind == "code":
            fmt.setBackground(self.code_bg)
            fmt.setTopMargin(4 if unit.first else 0)
        elif unit.kind == "rule":
            fmt.setProperty(QTextFormat.BlockTrailingHorizontalRulerWidth, 1)
        if unit.kind == "quote":
            fmt.setLeftMargin(18)
        return fmt


class AnswerWriter:
    """One answer in the document: its source text (the segments' texts, in order) and the
    units written so far with the document position where each begins."""

    def __init__(self, book: FormatBook, segments: list[Segment]):
        self.book = book
        self.segments: list[Segment] = []
        self.bounds: list[int] = []  # the source offset where each segment starts
        self.source = ""
        self.units: list[Unit] = []
        self.starts: list[int] = []  # where each unit's block begins (its separator)
        self.text_starts: list[int] = []  # where its text begins (-1 for a table)
        self._formats: dict[tuple, QTextCharFormat] = {}  # per token, with its tooltip
        self.memo: dict = {}  # the last parse's blocks (see parse_markdown)
        self.lists: dict[int, int] = {}  # list group -> position of a block in that QTextList
        self.add(segments)

    def add(self, segments: list[Segment]) -> None:
        """Take more of the answer (a streamed round)."""
        for seg in segments:
            if seg.text:
                self.segments.append(seg)
                self.bounds.append(len(self.source))
                self.source += seg.text

    def update(self, cursor: QTextCursor, streaming: bool) -> None:
        """Bring the document's end up to date with the source: units that did not change
        stay, the last one grows in place when only its end changed, and from the first
        other changed unit on everything is written again."""
        units = parse_markdown(self.source, streaming, self.memo)
        same = 0
        while same < min(len(units), len(self.units)) and units[same] == self.units[same]:
            same += 1
        if same == len(units) == len(self.units):
            return
        cursor.movePosition(QTextCursor.End)
        if (
            same == len(self.units) - 1
            and same < len(units)
            and self._grow_last(cursor, units[same])
        ):
            same += 1
        elif same < len(self.units):
            start = self.starts[same]
            cursor.setPosition(start, QTextCursor.KeepAnchor)
            cursor.removeSelectedText()
            del self.units[same:], self.starts[same:], self.text_starts[same:]
            self.lists = {g: p for g, p in self.lists.items() if p < start}
        for unit in units[same:]:
            self._write(cursor, unit)

    def _grow_last(self, cursor: QTextCursor, unit: Unit) -> bool:
        """Rewrite the last unit from its first changed character when it is still the
        same block (same kind, level, list); False when it must be written again."""
        old = self.units[-1]
        shape = (old.kind, old.level, old.number, old.group, old.first)
        if old.kind == "table" or shape != (
            unit.kind,
            unit.level,
            unit.number,
            unit.group,
            unit.first,
        ):
            return False
        p = 0
        while p < min(len(old.spans), len(unit.spans)) and old.spans[p] == unit.spans[p]:
            p += 1
        keep = self.text_starts[-1] + sum(len(s.text) for s in old.spans[:p])
        tail = list(unit.spans[p:])
        if p < len(old.spans) and tail:
            a, b = old.spans[p], tail[0]
            if (a.src, a.style, a.href) == (b.src, b.style, b.href) and b.text.startswith(a.text):
                keep += len(a.text)
                tail[0] = Span(b.src + len(a.text), b.text[len(a.text) :], b.style, b.href)
        cursor.setPosition(keep, QTextCursor.KeepAnchor)
        cursor.removeSelectedText()
        self._spans(cursor, tail, unit.kind, unit.level)
        self.units[-1] = unit
        return True

    @property
    def ends_with_table(self) -> bool:
        """Whether the last unit written is a table (see :func:`new_block`)."""
        return bool(self.units) and self.units[-1].kind == "table"

    def _write(self, cursor: QTextCursor, unit: Unit) -> None:
        if unit.kind == "table":
            self.starts.append(cursor.position())
            self.text_starts.append(-1)
            self._table(cursor, unit)
        else:
            self.starts.append(new_block(cursor, self.book.block(unit), self.ends_with_table))
            self.text_starts.append(cursor.position())
            if unit.kind == "item":
                self._join_list(cursor, unit)
                cursor.setBlockCharFormat(
                    self.book.char("item", unit.level, "", "", None)
                )  # the marker's
            self._spans(cursor, unit.spans, unit.kind, unit.level)
        self.units.append(unit)

    def _join_list(self, cursor: QTextCursor, unit: Unit) -> None:
        pos = self.lists.get(unit.group)
        existing = cursor.document().findBlock(pos).textList() if pos is not None else None
        if existing is not None:
            existing.add(cursor.block())
            return
        fmt = QTextListFormat()
        fmt.setStyle(
            QTextListFormat.ListDecimal if unit.number else BULLETS[unit.level % len(BULLETS)]
        )
        fmt.setIndent(unit.level + 1)
        if unit.number:
            fmt.setStart(unit.number)
        cursor.createList(fmt)
        self.lists[unit.group] = cursor.block().position()

    def _table(self, cursor: QTextCursor, unit: Unit) -> None:
        fmt = QTextTableFormat()
        fmt.setBorder(1)
        fmt.setBorderBrush(self.book.palette.color(QPalette.Mid))
        fmt.setBorderCollapse(True)
        fmt.setCellPadding(4)
        fmt.setCellSpacing(0)
        fmt.setHeaderRowCount(1)
        fmt.setWidth(QTextLength(QTextLength.VariableLength, 0))
        columns = max(len(row) for row in unit.cells)
        table = cursor.insertTable(len(unit.cells), max(1, columns), fmt)
        for r, row in enumerate(unit.cells):
            for c, cell in enumerate(row):
                self._spans(
                    table.cellAt(r, c).firstCursorPosition(), cell, "th" if r == 0 else "td", 0
                )
        cursor.movePosition(QTextCursor.End)

    def _spans(self, cursor: QTextCursor, spans: tuple[Span, ...], kind: str, level: int) -> None:
        """Insert ``spans``, cut where one token ends and the next begins when highlighting."""
        book = self.book
        for span in spans:
            if not book.highlight:
                cursor.insertText(span.text, book.char(kind, level, span.style, span.href, None))
                continue
            k = max(0, bisect_right(self.bounds, span.src) - 1)
            done, n = 0, len(span.text)
            while done < n:
                end = self.bounds[k + 1] if k + 1 < len(self.bounds) else len(self.source)
                take = max(1, min(n - done, end - span.src - done))
                cursor.insertText(
                    span.text[done : done + take], self._token_format(kind, level, span, k)
                )
                done += take
                k = min(k + 1, len(self.segments) - 1)

    def _token_format(self, kind: str, level: int, span: Span, k: int) -> QTextCharFormat:
        """The format of ``span``'s text written by segment ``k``: its style on the
        segment's colour, with the segment's tooltip."""
        key = (kind, level, span.style, span.href, k)
        fmt = self._formats.get(key)
        if fmt is None:
            seg = self.segments[k]
            fmt = QTextCharFormat(self.book.char(kind, level, span.style, span.href, seg.source))
            fmt.setToolTip(tooltip_for(seg))
            self._formats[key] = fmt
        return fmt
