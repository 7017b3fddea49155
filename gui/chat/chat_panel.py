"""The middle of the main window: the error banner, the legend, the chat, the input box
with its buttons, and the session, context and status lines under it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from .chat_view import ChatView, legend_html

BANNER_STYLE = (
    "background:#fde2e1; color:#7f1d1d; border:1px solid #f5a5a0;border-radius:4px; padding:6px;"
)


class ChatInput(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if (
            event.key() in (Qt.Key_Return, Qt.Key_Enter)
            and not event.modifiers() & Qt.ShiftModifier
        ):
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class ChatPanel(QWidget):
    """The chat column.  It only holds and lays out its widgets (the window connects
    them); ``session_text`` is the session line it starts with."""

    def __init__(self, session_text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self._make_banner()
        self.legend = QLabel(legend_html())
        self.highlight_box = QCheckBox("Highlight token sources")
        self.highlight_box.setToolTip(
            "On: answers rendered as Markdown, each token's source as the background of its text "
            "(see the legend) and its probabilities on hover. Off: the same rendered text, "
            "without colours"
        )
        self.view = ChatView()
        self._make_input()
        self._make_status_lines(session_text)
        self._lay_out()

    def _make_banner(self) -> None:
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.banner.setStyleSheet(BANNER_STYLE)
        self.banner.setVisible(False)
        self.banner_close = QPushButton("Dismiss")
        self.banner_close.setVisible(False)

    def _make_input(self) -> None:
        self.input = ChatInput()
        self.input.setPlaceholderText("Message (Enter sends, Shift+Enter new line)")
        self.input.setFixedHeight(84)
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.compare_button = QPushButton("Compare with no draft")
        self.compare_button.setToolTip(
            "Rerun the last prompt with plain decoding and show both speeds"
        )

    def _make_status_lines(self, session_text: str) -> None:
        self.status = QLabel()
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(160)
        self.busy.setVisible(False)
        self.session_label = QLabel(session_text)
        self.session_label.setWordWrap(True)
        self.context_label = QLabel()
        self.context_label.setToolTip(
            "Tokens of this chat (and the message being typed) as the model reads them, "
            "with its chat template, against the context size"
        )

    def _lay_out(self) -> None:
        cv = QVBoxLayout(self)
        brow = QHBoxLayout()
        brow.addWidget(self.banner, 1)
        brow.addWidget(self.banner_close)
        cv.addLayout(brow)
        top = QHBoxLayout()
        top.addWidget(self.legend)
        top.addStretch(1)
        top.addWidget(self.highlight_box)
        cv.addLayout(top)
        cv.addWidget(self.view, 1)
        cv.addWidget(self.session_label)
        irow = QHBoxLayout()
        irow.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.compare_button)
        irow.addLayout(buttons)
        cv.addLayout(irow)
        cv.addWidget(self.context_label)
        srow = QHBoxLayout()
        srow.addWidget(self.busy)
        srow.addWidget(self.status, 1)
        cv.addLayout(srow)

    def show_error(self, message: str) -> None:
        """Show ``message`` in the banner; nothing else changes."""
        self.banner.setText(message)
        self.banner.setVisible(True)
        self.banner_close.setVisible(True)

    def hide_error(self) -> None:
        self.banner.setVisible(False)
        self.banner_close.setVisible(False)
