"""The main window's keyboard shortcuts, its menu bar (Chat, Help) and the list that
Help ▸ Shortcuts shows."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMessageBox

# Keyboard shortcuts: (menu, label, key, slot name); listed in Help ▸ Shortcuts.
SHORTCUTS = (
    ("Chat", "New chat", "Ctrl+N", "new_chat"),
    ("Chat", "Regenerate the last answer", "Ctrl+R", "regenerate"),
    ("Chat", "Stop the answer / cancel editing", "Esc", "stop_or_cancel"),
    ("Chat", "Focus the message box", "Ctrl+L", "focus_input"),
    ("Chat", "Search conversations", "Ctrl+F", "focus_search"),
)


def build_menus(window: QMainWindow) -> dict[str, QAction]:
    """Add the menus of :data:`SHORTCUTS` and Help to ``window``'s menu bar; each action
    calls the window's method of its slot name and works anywhere in the window (Help ▸
    Shortcuts calls ``window.show_shortcuts``).
    Returns the actions by slot name."""
    menus = {}
    actions: dict[str, QAction] = {}
    for menu, label, key, slot in SHORTCUTS:
        if menu not in menus:
            menus[menu] = window.menuBar().addMenu(f"&{menu}")
        action = QAction(label, window)
        action.setShortcut(QKeySequence(key))
        action.setShortcutContext(Qt.WindowShortcut)
        action.triggered.connect(getattr(window, slot))
        menus[menu].addAction(action)
        window.addAction(action)
        actions[slot] = action
    help_menu = window.menuBar().addMenu("&Help")
    help_menu.addAction("Shortcuts", window.show_shortcuts)
    return actions


def shortcuts_text() -> str:
    """One line a shortcut: its key, then what it does."""
    return "\n".join(f"{key:<8} {label}" for _, label, key, _ in SHORTCUTS)


def show_shortcuts(parent) -> None:
    QMessageBox.information(parent, "Keyboard shortcuts", shortcuts_text())
