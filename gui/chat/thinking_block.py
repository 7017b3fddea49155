"""A reasoning model's thinking in the chat view: a block above the answer, collapsed to
one line ("▶ Thought for 3.2 s") that a click opens; inside, the thinking rendered as the
answer is, each token on its source's colour, in a dimmer text and indented (its stats
per channel: :func:`gui.chat.stats_line.format_channel_stats`)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette, QTextBlockFormat, QTextCharFormat, QTextCursor

from ..markdown.markdown_render import Unit
from .answer_writer import FormatBook
from .message import Message

STREAMING_KEY = "streaming"  # the thinking block of the answer being written
INDENT_PX = 14  # the thinking's left margin


class ThinkingBook(FormatBook):
    """The formats of the thinking: the answer's, indented, and text without a token
    colour in the palette's placeholder colour (token colours as in the answer)."""

    def block(self, unit: Unit) -> QTextBlockFormat:
        fmt = super().block(unit)
        fmt.setLeftMargin(fmt.leftMargin() + INDENT_PX)
        return fmt

    def _foreground(self, syntax: str, href: str, background: QColor | None) -> QColor:
        if background is None and not syntax and not href:
            return self.palette.color(QPalette.PlaceholderText)
        return super()._foreground(syntax, href, background)


def thinking_key(msg: Message, index: int, streaming: bool) -> str:
    """The name of ``msg``'s thinking block in links and :attr:`ChatView.expanded`:
    "id<message id>", "at<index>" for a message not stored, or :data:`STREAMING_KEY`."""
    if streaming:
        return STREAMING_KEY
    return f"id{msg.id}" if msg.id is not None else f"at{index}"


def thinking_title(
    msg: Message, expanded: bool, thinking: bool, thought_s: float | None = None
) -> str:
    """The block's line: "▶ Thinking… 57 tokens" while ``thinking`` (the answer has not
    begun), then "▶ Thought for 3.2 s" (``msg.stats["thinking_s"]``, else ``thought_s``,
    seconds), or "▶ Thoughts" when the time is not known; "▼" when ``expanded``."""
    arrow = "▼" if expanded else "▶"
    if thinking:
        n = sum(1 for s in msg.reasoning_segments if s.text)
        return f"{arrow} Thinking… {n} token{'s' if n != 1 else ''}"
    seconds = (msg.stats or {}).get("thinking_s", thought_s)
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        return f"{arrow} Thought for {seconds:.1f} s"
    return f"{arrow} Thoughts"


def insert_title(
    cursor: QTextCursor, palette: QPalette, key: str, title: str, expanded: bool
) -> None:
    """The block's line as a link ``localspec:think:KEY`` that opens or closes it."""
    fmt = QTextCharFormat()
    fmt.setAnchor(True)
    fmt.setAnchorHref(f"localspec:think:{key}")
    fmt.setForeground(palette.color(QPalette.PlaceholderText))
    fmt.setFontItalic(True)
    fmt.setToolTip("Hide the thinking" if expanded else "Show the thinking")
    cursor.insertText(title, fmt)
