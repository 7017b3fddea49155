"""The left of the main window: "New chat", the search box and the stored conversations,
with their right-click menu (rename, export, delete)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


class ConversationList(QWidget):
    """Shows conversations and says what the user asked for; it reads no store.

    Signals: :attr:`opened` (a conversation's id, on click), :attr:`renameAsked`,
    :attr:`deleteAsked` and :attr:`exportAsked` (``"md"`` or ``"json"``) from the
    right-click menu, for the conversation that is :meth:`selected`."""

    opened = Signal(int)
    renameAsked = Signal()
    deleteAsked = Signal()
    exportAsked = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.new_button = QPushButton("New chat")
        self.conversations = QListWidget()
        self.conversations.setContextMenuPolicy(Qt.CustomContextMenu)
        self.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.conversations.setTextElideMode(Qt.ElideRight)
        self.conversations.setToolTip("Click to reopen; right-click to rename, export or delete")
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        lv = QVBoxLayout(self)
        lv.addWidget(self.new_button)
        lv.addWidget(self.search)
        lv.addWidget(self.conversations)
        self._menu = self._build_menu()
        self.conversations.itemClicked.connect(
            lambda item: self.opened.emit(item.data(Qt.UserRole))
        )
        self.conversations.customContextMenuRequested.connect(self._show_menu)

    def _build_menu(self) -> QMenu:
        rename = QAction("Rename…", self)
        delete = QAction("Delete", self)
        to_md = QAction("Export as Markdown…", self)
        to_json = QAction("Export as JSON…", self)
        rename.triggered.connect(lambda: self.renameAsked.emit())
        delete.triggered.connect(lambda: self.deleteAsked.emit())
        to_md.triggered.connect(lambda: self.exportAsked.emit("md"))
        to_json.triggered.connect(lambda: self.exportAsked.emit("json"))
        menu = QMenu(self)
        menu.addActions([rename, to_md, to_json, delete])
        return menu

    def _show_menu(self, pos: QPoint) -> None:
        if self.conversations.itemAt(pos):
            self._menu.exec(self.conversations.mapToGlobal(pos))

    def query(self) -> str:
        """The search box's text, stripped ("" lists every conversation)."""
        return self.search.text().strip()

    def selected(self) -> int | None:
        """The id of the conversation the list's current item shows, or None."""
        item = self.conversations.currentItem()
        return item.data(Qt.UserRole) if item is not None else None

    def show_conversations(self, infos, current_id: int | None) -> None:
        """List ``infos`` (objects with ``id`` and ``title``, as the store lists them),
        ``current_id``'s selected."""
        self.conversations.clear()
        for info in infos:
            item = QListWidgetItem(info.title)
            item.setData(Qt.UserRole, info.id)
            self.conversations.addItem(item)
            if info.id == current_id:
                item.setSelected(True)
                self.conversations.setCurrentItem(item)
