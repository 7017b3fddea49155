"""The conversation view: messages in one QTextBrowser, answers highlighted by token
source (or rendered as Markdown), a hover tooltip per token, stats under each answer."""

from __future__ import annotations

import re

from PySide6.QtCore import QEvent, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFont,
    QGuiApplication,
    QPalette,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
)
from PySide6.QtWidgets import QTextBrowser, QToolTip, QVBoxLayout, QWidget

from .message import Message, Segment

# Background colours for highlighted tokens, always with DARK_TEXT on them (WCAG contrast
# > 10:1), so they read the same in a light and a dark palette; other text takes the palette's.
DARK_TEXT = "#111827"
SOURCE_COLOURS = {
    "accepted": QColor("#b9ebc3"),  # green: a draft token the target kept
    "correction": QColor("#ffc8a0"),  # orange: the target replaced a rejected draft token
    "forced": QColor("#c7d2fe"),  # indigo: a grammar forced it (a schema's key, a call's name), the target kept it
}
SOURCE_LABELS = {
    "accepted": "accepted draft token",
    "forced": "forced by the grammar (drafted free, kept by the target)",
    "correction": "target correction (draft rejected)",
    "bonus": "target bonus token (all drafts accepted)",
    "target": "target token (no draft this round)",
}
SOURCE_PROPERTY = QTextFormat.UserProperty + 1  # char format property holding the source


def format_stats(stats: dict | None, finish_reason: str | None = None, baseline_tps: float | None = None) -> str:
    """One line: "Accepted 87/106 draft tokens (82 %) · mean accepted length 3.1 ·
    14.2 t/s · TTFT 0.41 s · 1.6× vs plain"; times in seconds, rates in tokens/s."""
    if not stats:
        return ""
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


def tooltip_for(segment: Segment) -> str:
    """Source, plus target / draft probabilities when sampling (as percentages)."""
    tip = SOURCE_LABELS.get(segment.source, segment.source)
    probs = []
    if segment.p_target is not None:
        probs.append(f"p target {100 * segment.p_target:.1f} %")
    if segment.p_draft is not None:
        probs.append(f"p draft {100 * segment.p_draft:.1f} %")
    return tip + (" — " + ", ".join(probs) if probs else "")


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
        self.highlight = True
        self.messages: list[Message] = []
        self.baseline_tps: float | None = None
        self._streaming: Message | None = None
        self._mono = QFont("DejaVu Sans Mono")
        self._mono.setStyleHint(QFont.Monospace)

    # --- content ------------------------------------------------------------------------

    def set_messages(self, messages: list[Message]) -> None:
        self.messages = messages
        self._streaming = None
        self.render()

    def set_highlight(self, on: bool) -> None:
        """True: colour by token source; False: answers as Markdown with code blocks."""
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
        """Add one round's tokens to the streaming answer (also appended to its message)."""
        msg = self._streaming
        if msg is None:
            return
        msg.segments.extend(segments)
        msg.content += "".join(s.text for s in segments)
        cursor = QTextCursor(self.browser.document())
        cursor.movePosition(QTextCursor.End)
        bar = self.browser.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        for seg in segments:
            self._insert_segment(cursor, seg, coloured=self.highlight)
        if at_bottom:
            bar.setValue(bar.maximum())

    def end_answer(self) -> None:
        self._streaming = None
        self.render()

    # --- rendering ---------------------------------------------------------------------

    def render(self) -> None:
        bar = self.browser.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        doc = self.browser.document()
        doc.clear()
        cursor = QTextCursor(doc)
        first = True
        for msg in self.messages:
            if not first:
                cursor.insertBlock()
                cursor.insertBlock()
            first = False
            self._render_message(cursor, msg)
        if at_bottom or self._streaming is not None:
            bar.setValue(bar.maximum())

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
        cursor.insertBlock()
        if msg.role == "user":
            cursor.insertText(msg.content, QTextCharFormat())
            return
        if self.highlight or streaming:
            for seg in msg.segments or [Segment(msg.content, "target")]:
                self._insert_segment(cursor, seg, coloured=self.highlight)
        else:
            cursor.insertMarkdown(msg.content)
        if not streaming and msg.stats:
            cursor.insertBlock()
            small = QTextCharFormat()
            small.setForeground(self.palette().color(QPalette.PlaceholderText))
            small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.9))
            baseline = self.baseline_tps if msg.kind == "chat" else None
            cursor.insertText(format_stats(msg.stats, msg.finish_reason, baseline), small)

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

    def _insert_segment(self, cursor: QTextCursor, seg: Segment, coloured: bool) -> None:
        if not seg.text:
            return
        fmt = QTextCharFormat()
        fmt.setFont(self._mono)
        if coloured and seg.source in SOURCE_COLOURS:  # light backgrounds: dark text in either palette
            fmt.setBackground(SOURCE_COLOURS[seg.source])
            fmt.setForeground(QColor(DARK_TEXT))
        else:
            fmt.setForeground(self.palette().color(QPalette.Text))
        fmt.setToolTip(tooltip_for(seg))
        fmt.setProperty(SOURCE_PROPERTY, seg.source)
        cursor.insertText(seg.text, fmt)

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


def contrast_ratio(foreground: QColor, background: QColor) -> float:
    """WCAG 2 contrast ratio of two colours (1 to 21)."""

    def luminance(c: QColor) -> float:
        channels = [x / 255 for x in (c.red(), c.green(), c.blue())]
        lin = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def legend_html() -> str:
    """The legend's rich text: a coloured swatch per highlighted source."""
    items = [
        f'<span style="background:{SOURCE_COLOURS["accepted"].name()}; color:{DARK_TEXT}">&nbsp;accepted draft&nbsp;</span>',
        f'<span style="background:{SOURCE_COLOURS["correction"].name()}; color:{DARK_TEXT}">&nbsp;target correction&nbsp;</span>',
        f'<span style="background:{SOURCE_COLOURS["forced"].name()}; color:{DARK_TEXT}">&nbsp;forced by a grammar&nbsp;</span>',
        "<span>&nbsp;plain: target only&nbsp;</span>",
    ]
    return "&nbsp;&nbsp;".join(items)
