"""The conversation view: messages in one QTextBrowser, answers rendered as Markdown
(code blocks in Pygments colours) with, when highlighting is on, each token's source as
the background of its text and its probabilities on hover (see :mod:`gui.chat.answer_writer`),
the stats and a drafting chart under each answer (:mod:`gui.chat.draft_chart`)."""

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
from .message import Message, Segment
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
    "format_stats",
    "legend_html",
    "tooltip_for",
]


def format_stats(stats: dict | None, finish_reason: str | None = None, baseline_tps: float | None = None) -> str:
    """One line: "Accepted 87/106 draft tokens (82 %) · mean accepted length 3.1 ·
    14.2 t/s · TTFT 0.41 s · 1.6× vs plain"; times in seconds, rates in tokens/s."""
    if not stats:
        return ""
    if stats.get("unavailable"):
        return f"Statistics unavailable (the server sends no timings) · TTFT {stats.get('ttft_s', 0.0):.2f} s" + (
            " · stopped" if finish_reason == "cancelled" else ""
        )
    parts = []
    drafted, accepted = stats.get("drafted_tokens", 0), stats.get("accepted_tokens", 0)
    if drafted:
        parts.append(f"Accepted {accepted}/{drafted} draft tokens ({100 * accepted / drafted:.0f} %)")
        parts.append(f"mean accepted length {stats.get('mean_accepted_length', 0):.2f}")
    else:
        parts.append("no draft tokens")
    tps = stats.get("tokens_per_s", 0.0)
    parts.append(f"{stats.get('generated_tokens', 0)} tokens, {tps:.1f} t/s")
    parts.append(f"TTFT {stats.get('ttft_s', 0.0):.2f} s")
    if baseline_tps and tps and drafted:
        parts.append(f"{tps / baseline_tps:.2f}× vs plain ({baseline_tps:.1f} t/s)")
    if stats.get("context_dropped_messages"):
        parts.append(f"{stats['context_dropped_messages']} oldest messages left out to fit the context")
    if finish_reason and finish_reason != "stop":
        parts.append(
            {"length": "stopped at max tokens", "cancelled": "stopped", "context": "context full"}.get(
                finish_reason, finish_reason
            )
        )
    return " · ".join(parts)


# Links the view puts under messages: "localspec:ACTION:MESSAGE_ID[:ARG]".
ACTIONS = ("previous", "next", "regenerate", "edit", "copy")
_CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.S)


def code_blocks(text: str) -> list[str]:
    """The contents of the fenced (```) code blocks of a Markdown text, in order."""
    return [m.group(1) for m in _CODE_BLOCK.finditer(text)]


class ChatView(QWidget):
    """Shows a list of :class:`Message`; the last answer may be streaming.

    Under each message: "◀ 2/3 ▶" when it has other versions, "Edit" (questions) or
    "Regenerate" (answers), and "Copy code N" per code block of an answer; a click emits
    :attr:`action` (action name, message id) or, for copy, puts the block on the clipboard."""

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
        self.render()

    def append_segments(self, segments: list[Segment]) -> None:
        """Add one round's tokens to the streaming answer (also appended to its message);
        only the blocks of the answer that changed are written again."""
        msg, writer = self._streaming, self._writer
        if msg is None or writer is None:
            return
        started = time.perf_counter()
        msg.segments.extend(segments)
        msg.content += "".join(s.text for s in segments)
        writer.add(segments)
        bar = self.browser.verticalScrollBar()
        at_bottom, value = bar.value() >= bar.maximum() - 4, bar.value()
        cursor = QTextCursor(self.browser.document())
        cursor.beginEditBlock()
        writer.update(cursor, streaming=True)
        cursor.endEditBlock()
        bar.setValue(bar.maximum() if at_bottom else value)
        self.last_update_s = time.perf_counter() - started

    def end_answer(self) -> None:
        self._streaming = None
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
        self._writer, self._after_table = None, False
        cursor = QTextCursor(doc)
        cursor.beginEditBlock()
        for i, msg in enumerate(self.messages):
            if i:
                new_block(cursor, QTextBlockFormat(), self._after_table)
                cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            self._render_message(cursor, msg)
        cursor.endEditBlock()
        doc.documentLayout().documentSize()  # lays the document out: the scroll range is final
        bar.setValue(bar.maximum() if at_bottom or self._streaming is not None else value)

    def _signature(self) -> tuple:
        """Everything a render depends on (the messages' content, sources and stats, the
        streaming one, the settings and the palette)."""
        shown = tuple(
            (m.role, m.kind, m.id, m.versions, m.finish_reason, m.content, repr(m.stats), m is self._streaming)
            + tuple((s.text, s.source, s.p_target, s.p_draft) for s in m.segments)
            for m in self.messages
        )
        look = (self.palette().cacheKey(), self.font().key(), self.devicePixelRatioF())
        return shown, self.highlight, self.baseline_tps, look

    def _render_message(self, cursor: QTextCursor, msg: Message) -> None:
        head = QTextCharFormat()
        head.setFontWeight(QFont.Bold)
        head.setForeground(self.palette().color(QPalette.Link if msg.role == "user" else QPalette.Text))
        title = {"user": "You"}.get(
            msg.role, "Plain decoding (no draft), same prompt" if msg.kind == "baseline" else "Assistant"
        )
        cursor.insertText(title, head)
        streaming = msg is self._streaming
        if msg.id is not None and not streaming and msg.kind == "chat":
            self._insert_links(cursor, msg)
        if msg.role == "user":
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            cursor.insertText(msg.content, QTextCharFormat())
            return
        writer = AnswerWriter(self._book, msg.segments or [Segment(msg.content, "target")])
        writer.update(cursor, streaming=streaming)
        self._after_table = writer.ends_with_table
        if streaming:
            self._writer = writer
        elif msg.stats:
            self._insert_stats(cursor, msg, writer.ends_with_table)

    def _insert_stats(self, cursor: QTextCursor, msg: Message, after_table: bool) -> None:
        """The stats line, and the drafting line and chart when something was drafted."""
        small = QTextCharFormat()
        small.setForeground(self.palette().color(QPalette.PlaceholderText))
        small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.9))
        new_block(cursor, QTextBlockFormat(), after_table)
        self._after_table = False
        baseline = self.baseline_tps if msg.kind == "chat" else None
        cursor.insertText(format_stats(msg.stats, msg.finish_reason, baseline), small)
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
            self._insert_link(cursor, "Edit", f"edit:{msg.id}", "Edit this message and send it as a new version")
        else:
            self._insert_link(
                cursor,
                "Regenerate",
                f"regenerate:{msg.id}",
                "Answer again, as a new version (Ctrl+R for the last answer)",
            )
            for i, _ in enumerate(code_blocks(msg.content)):
                cursor.insertText("   ", plain)
                self._insert_link(cursor, f"Copy code {i + 1}", f"copy:{msg.id}:{i}", "Copy this code block")

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
