"""The conversation view: messages in one QTextBrowser, answers rendered as Markdown
(code blocks in Pygments colours) with, when highlighting is on, each token's source as
the background of its text and its probabilities on hover (see :mod:`gui.chat.answer_writer`),
the stats and a drafting chart under each answer (:mod:`gui.chat.draft_chart`); a reasoning
model's thinking in a collapsed block above its answer (:mod:`gui.chat.thinking_block`)."""

from __future__ import annotations

import re
import time

from PySide6.QtCore import QEvent, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QDesktopServices,
    QFont,
    QGuiApplication,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextImageFormat,
)
from PySide6.QtWidgets import QTextBrowser, QToolTip, QVBoxLayout, QWidget

from ..markdown.code_colours import warm_up
from .answer_writer import AnswerWriter, FormatBook, new_block
from .draft_chart import chart_image, chart_size, mix_text
from .message import REASONING, Message, Segment
from .stats_line import format_channel_stats, format_stats
from .thinking_block import STREAMING_KEY, ThinkingBook, insert_title, thinking_key, thinking_title
from .token_colours import (
    DARK_TEXT,
    SOURCE_COLOURS,
    SOURCE_LABELS,
    SOURCE_PROPERTY,
    contrast_ratio,
    legend_html,
    tooltip_for,
)

__all__ = [
    "ACTIONS",
    "DARK_TEXT",
    "SOURCE_COLOURS",
    "SOURCE_LABELS",
    "SOURCE_PROPERTY",
    "ChatView",
    "code_blocks",
    "contrast_ratio",
    "format_channel_stats",
    "format_stats",
    "legend_html",
    "tooltip_for",
]


# Links the view puts under messages: "localspec:ACTION:MESSAGE_ID[:ARG]".
ACTIONS = ("previous", "next", "regenerate", "edit", "copy")  # and "think:KEY", handled here
_CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.S)


def code_blocks(text: str) -> list[str]:
    """The contents of the fenced (```) code blocks of a Markdown text, in order."""
    return [m.group(1) for m in _CODE_BLOCK.finditer(text)]


class ChatView(QWidget):
    """Shows a list of :class:`Message`; the last answer may be streaming.

    Under each message: "◀ 2/3 ▶" when it has other versions, "Edit" (questions) or
    "Regenerate" (answers), and "Copy code N" per code block of an answer; a click emits
    :attr:`action` (action name, message id) or, for copy, puts the block on the clipboard.
    An answer's thinking is a block above it, collapsed; its line opens and closes it
    (:attr:`expanded` holds the open ones, by :func:`~gui.chat.thinking_block.thinking_key`)."""

    action = Signal(str, int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.browser = QTextBrowser(self)
        self.browser.setOpenLinks(False)
        self.browser.anchorClicked.connect(self._on_link)
        self.browser.viewport().installEventFilter(self)
        self.browser.viewport().setMouseTracking(True)
        self.browser.document().setDocumentMargin(12)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.browser)
        self.browser.document().setUndoRedoEnabled(False)
        self.highlight = True
        self.messages: list[Message] = []
        self.baseline_tps: float | None = None
        self._streaming: Message | None = None
        self._writer: AnswerWriter | None = None
        self._mono = QFont("DejaVu Sans Mono")
        self._mono.setStyleHint(QFont.Monospace)
        self.last_update_s = 0.0  # how long the last streamed update took to render
        self._rendered: tuple | None = None  # the signature of what the document shows
        self.expanded: set[str] = set()  # the thinking blocks shown open
        self._thinking_writer: AnswerWriter | None = None  # the streaming answer's open thinking
        self._title_at = -1  # where the streaming answer's thinking line starts
        self._started = 0.0  # when the streaming answer began (time.perf_counter())
        self._thought_s: float | None = None  # how long it thought, as seen here
        QTimer.singleShot(0, warm_up)

    # --- content ------------------------------------------------------------------------

    def set_messages(self, messages: list[Message]) -> None:
        self.messages = messages
        self._streaming = None
        self.render()

    def set_highlight(self, on: bool) -> None:
        """True: rendered answers with each token's source as its background colour and
        its probabilities on hover; False: the same rendered text, without colours."""
        self.highlight = on
        self.render()

    def set_baseline(self, tokens_per_s: float | None) -> None:
        self.baseline_tps = tokens_per_s
        self.render()

    def begin_answer(self, message: Message) -> None:
        """Show ``message`` (an empty assistant message, already in ``messages``) as streaming."""
        self._streaming = message
        self._started, self._thought_s = time.perf_counter(), None
        self.expanded.discard(STREAMING_KEY)
        self.render()

    def append_segments(self, segments: list[Segment]) -> None:
        """Add one round's tokens to the streaming answer (also appended to its message: the
        "reasoning" ones to its thinking); only the blocks of the answer that changed are
        written again.  The thinking's first token and the answer's first after it write the
        whole view again, once each (the thinking line appears, then says how long it took)."""
        msg = self._streaming
        if msg is None or self._writer is None:
            return
        started = time.perf_counter()
        thinking = [s for s in segments if s.channel == REASONING]
        answer = [s for s in segments if s.channel != REASONING]
        was_thinking, had_answer = bool(msg.reasoning), bool(msg.content)
        msg.reasoning_segments.extend(thinking)
        msg.reasoning += "".join(s.text for s in thinking)
        msg.segments.extend(answer)
        msg.content += "".join(s.text for s in answer)
        if msg.reasoning and not had_answer and (msg.content or not was_thinking):
            if msg.content:
                self._thought_s = started - self._started
            self.render()
        else:
            self._write_streamed(msg, thinking, answer)
        self.last_update_s = time.perf_counter() - started

    def _write_streamed(self, msg: Message, thinking: list[Segment], answer: list[Segment]) -> None:
        """Bring the document's end up to date: the answer, else the open thinking, else
        the collapsed thinking's token count."""
        bar = self.browser.verticalScrollBar()
        at_bottom, value = bar.value() >= bar.maximum() - 4, bar.value()
        cursor = QTextCursor(self.browser.document())
        cursor.beginEditBlock()
        if msg.content or not msg.reasoning:
            self._writer.add(answer)
            self._writer.update(cursor, streaming=True)
        elif self._thinking_writer is not None:
            self._thinking_writer.add(thinking)
            self._thinking_writer.update(cursor, streaming=True)
        elif thinking and self._title_at >= 0:
            cursor.setPosition(self._title_at)
            cursor.movePosition(QTextCursor.End, QTextCursor.KeepAnchor)
            insert_title(
                cursor, self.palette(), STREAMING_KEY, thinking_title(msg, False, True), False
            )
        cursor.endEditBlock()
        bar.setValue(bar.maximum() if at_bottom else value)

    def end_answer(self) -> None:
        """The streaming answer is done (stored: its ``id`` set); its thinking stays as open
        or closed as it was."""
        if (
            STREAMING_KEY in self.expanded
            and self._streaming is not None
            and self._streaming.id is not None
        ):
            self.expanded.add(f"id{self._streaming.id}")
        self.expanded.discard(STREAMING_KEY)
        self._streaming = None
        self.render()

    def toggle_thinking(self, key: str) -> None:
        """Open or close the thinking block ``key`` (see :attr:`expanded`)."""
        self.expanded ^= {key}
        self.render()

    # --- rendering ---------------------------------------------------------------------

    def render(self) -> None:
        """Write every message again (the scroll position is kept, or stays at the bottom);
        nothing to do when nothing it shows changed since the last time."""
        signature = self._signature()
        if signature == self._rendered:
            return
        self._rendered = signature
        bar = self.browser.verticalScrollBar()
        at_bottom, value = bar.value() >= bar.maximum() - 4, bar.value()
        doc = self.browser.document()
        doc.clear()
        self._book = FormatBook(self.palette(), self.font(), self._mono, self.highlight)
        self._thinking_book = ThinkingBook(self.palette(), self.font(), self._mono, self.highlight)
        self._writer, self._thinking_writer, self._title_at, self._after_table = (
            None,
            None,
            -1,
            False,
        )
        cursor = QTextCursor(doc)
        cursor.beginEditBlock()
        for i, msg in enumerate(self.messages):
            if i:
                new_block(cursor, QTextBlockFormat(), self._after_table)
                cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            self._render_message(cursor, msg, i)
        cursor.endEditBlock()
        doc.documentLayout().documentSize()  # lays the document out: the scroll range is final
        bar.setValue(bar.maximum() if at_bottom or self._streaming is not None else value)

    def _signature(self) -> tuple:
        """Everything a render depends on (the messages' content, sources and stats, the
        streaming one, the settings and the palette)."""
        shown = tuple(
            (
                m.role,
                m.kind,
                m.id,
                m.versions,
                m.finish_reason,
                m.content,
                repr(m.stats),
                m is self._streaming,
            )
            + tuple((s.text, s.source, s.p_target, s.p_draft) for s in m.segments)
            + (m.reasoning,)
            + tuple((s.text, s.source, s.p_target, s.p_draft) for s in m.reasoning_segments)
            for m in self.messages
        )
        look = (self.palette().cacheKey(), self.font().key(), self.devicePixelRatioF())
        return shown, self.highlight, self.baseline_tps, look, frozenset(self.expanded)

    def _render_message(self, cursor: QTextCursor, msg: Message, index: int) -> None:
        head = QTextCharFormat()
        head.setFontWeight(QFont.Bold)
        head.setForeground(
            self.palette().color(QPalette.Link if msg.role == "user" else QPalette.Text)
        )
        title = {"user": "You"}.get(
            msg.role,
            "Plain decoding (no draft), same prompt" if msg.kind == "baseline" else "Assistant",
        )
        cursor.insertText(title, head)
        streaming = msg is self._streaming
        if msg.id is not None and not streaming and msg.kind == "chat":
            self._insert_links(cursor, msg)
        if msg.role == "user":
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            cursor.insertText(msg.content, QTextCharFormat())
            return
        if msg.reasoning:
            self._insert_thinking(cursor, msg, index, streaming)
        writer = AnswerWriter(self._book, msg.segments or [Segment(msg.content, "target")])
        writer.update(cursor, streaming=streaming)
        self._after_table = writer.ends_with_table
        if streaming:
            self._writer = writer
        elif msg.stats:
            self._insert_stats(cursor, msg, writer.ends_with_table)

    def _insert_thinking(
        self, cursor: QTextCursor, msg: Message, index: int, streaming: bool
    ) -> None:
        """The thinking's line under the title and, when open, the thinking."""
        key = thinking_key(msg, index, streaming)
        expanded, thinking = key in self.expanded, streaming and not msg.content
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        if streaming:
            self._title_at = cursor.position()
        insert_title(
            cursor,
            self.palette(),
            key,
            thinking_title(msg, expanded, thinking, self._thought_s),
            expanded,
        )
        if expanded:
            seg = Segment(msg.reasoning, "target", channel=REASONING)
            writer = AnswerWriter(self._thinking_book, msg.reasoning_segments or [seg])
            writer.update(cursor, streaming=thinking)
            if thinking:
                self._thinking_writer = writer

    def _insert_stats(self, cursor: QTextCursor, msg: Message, after_table: bool) -> None:
        """The stats line, and the drafting line and chart when something was drafted."""
        small = QTextCharFormat()
        small.setForeground(self.palette().color(QPalette.PlaceholderText))
        small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.9))
        new_block(cursor, QTextBlockFormat(), after_table)
        self._after_table = False
        baseline = self.baseline_tps if msg.kind == "chat" else None
        cursor.insertText(format_stats(msg.stats, msg.finish_reason, baseline), small)
        if by_channel := format_channel_stats(msg.stats):
            cursor.insertBlock(QTextBlockFormat(), small)
            cursor.insertText(by_channel, small)
        line = mix_text(msg.stats)
        ratio = self.devicePixelRatioF()
        image = chart_image(msg.stats, self.palette(), self.font(), ratio)
        if not line or image is None:
            return
        cursor.insertBlock(QTextBlockFormat(), small)
        cursor.insertText(line, small)
        drawn = hash((repr(msg.stats), self.palette().cacheKey(), ratio)) & 0xFFFFFFFF
        name = f"localspec-chart:{drawn:08x}"  # doc.clear() drops the resources
        self.browser.document().addResource(QTextDocument.ImageResource, QUrl(name), image)
        fmt = QTextImageFormat()
        fmt.setName(name)
        width, height = chart_size(msg.stats)
        fmt.setWidth(width)
        fmt.setHeight(height)
        fmt.setToolTip(line)
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        cursor.insertImage(fmt)

    def _insert_links(self, cursor: QTextCursor, msg: Message) -> None:
        """The version switcher and the actions, after the message's title."""
        plain = QTextCharFormat()
        plain.setForeground(self.palette().color(QPalette.PlaceholderText))
        n, total = msg.versions
        cursor.insertText("   ", plain)
        if total > 1:
            self._insert_link(cursor, "◀", f"previous:{msg.id}", "Previous version")
            cursor.insertText(f" {n}/{total} ", plain)
            self._insert_link(cursor, "▶", f"next:{msg.id}", "Next version")
            cursor.insertText("   ", plain)
        if msg.role == "user":
            self._insert_link(
                cursor, "Edit", f"edit:{msg.id}", "Edit this message and send it as a new version"
            )
        else:
            self._insert_link(
                cursor,
                "Regenerate",
                f"regenerate:{msg.id}",
                "Answer again, as a new version (Ctrl+R for the last answer)",
            )
            for i, _ in enumerate(code_blocks(msg.content)):
                cursor.insertText("   ", plain)
                self._insert_link(
                    cursor, f"Copy code {i + 1}", f"copy:{msg.id}:{i}", "Copy this code block"
                )

    def _insert_link(self, cursor: QTextCursor, text: str, target: str, tip: str) -> None:
        fmt = QTextCharFormat()
        fmt.setAnchor(True)
        fmt.setAnchorHref(f"localspec:{target}")
        fmt.setForeground(self.palette().color(QPalette.Link))
        fmt.setToolTip(tip)
        cursor.insertText(text, fmt)

    def _on_link(self, url: QUrl) -> None:
        if url.scheme() != "localspec":
            QDesktopServices.openUrl(url)
            return
        name, _, rest = url.path().partition(":")
        if name == "think":
            self.toggle_thinking(rest)
            return
        mid, _, arg = rest.partition(":")
        if name not in ACTIONS or not mid.isdigit():
            return
        if name == "copy":
            msg = next((m for m in self.messages if m.id == int(mid)), None)
            blocks = code_blocks(msg.content) if msg is not None else []
            if arg.isdigit() and int(arg) < len(blocks):
                QGuiApplication.clipboard().setText(blocks[int(arg)])
            return
        self.action.emit(name, int(mid))

    def links(self) -> list[str]:
        """Every link target shown (``localspec:...``), in order (for tests)."""
        out = []
        block = self.browser.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fmt = it.fragment().charFormat()
                if fmt.isAnchor():
                    out.append(fmt.anchorHref())
                it += 1
            block = block.next()
        return out

    # --- queries (tooltips, tests) -----------------------------------------------------

    def sources_in_document(self) -> dict[str, int]:
        """Characters per token source currently shown, e.g. {"accepted": 120, ...}."""
        counts: dict[str, int] = {}
        block = self.browser.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                source = frag.charFormat().property(SOURCE_PROPERTY)
                if source:
                    counts[source] = counts.get(source, 0) + frag.length()
                it += 1
            block = block.next()
        return counts

    def eventFilter(self, obj, event) -> bool:
        if obj is self.browser.viewport() and event.type() == QEvent.ToolTip:
            cursor = self.browser.cursorForPosition(event.pos())
            if not cursor.atBlockEnd():
                cursor.movePosition(QTextCursor.NextCharacter)  # charFormat() is the char before
            tip = cursor.charFormat().toolTip()
            if tip:
                QToolTip.showText(event.globalPos(), tip, self.browser)
            else:
                QToolTip.hideText()
            return True
        return super().eventFilter(obj, event)
