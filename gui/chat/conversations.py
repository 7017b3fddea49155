"""The stored conversations, as the main window uses them: start a new one, open, rename,
delete and export one, and keep the list on the left in step with the store."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QInputDialog

from . import export


class ConversationActions:
    """What the conversation list and the shortcuts do.  ``window``: the
    :class:`~gui.window.MainWindow` (its store, the conversation shown, the list);
    nothing happens to the conversation shown while an answer is being written."""

    def __init__(self, window):
        self.window = window

    def new_chat(self) -> None:
        w = self.window
        if w.request is not None:
            return
        w.editing = None
        w.conversation_id = None
        w.messages = []
        w.view.set_messages(w.messages)
        w.conversations.clearSelection()
        w.update_buttons()
        w.update_context_meter()

    def open(self, conversation_id: int) -> None:
        """Show a stored conversation (answers keep their highlighting and stats)."""
        w = self.window
        if w.request is not None:
            return
        w.editing = None
        w.conversation_id = conversation_id
        self._restore_thinking(conversation_id)
        w.messages = w.store.messages(conversation_id)
        w.view.set_messages(w.messages)
        w.update_buttons()
        w.update_context_meter()

    def remember_thinking(self) -> None:
        """Keep the thinking switch and budget shown with the conversation shown (none: nothing)."""
        w = self.window
        if w.conversation_id is not None:
            w.store.set_options(w.conversation_id, w.panel.apply_to(w.settings).thinking_options())

    def _restore_thinking(self, conversation_id: int) -> None:
        """Show the thinking switch and budget the conversation keeps (a conversation from
        before they were kept: the current ones stay)."""
        w = self.window
        options = w.store.options(conversation_id)
        if options:
            w.settings.take_thinking_options(options)
            w.panel.set_thinking(w.settings)

    def rename(self, conversation_id: int, title: str) -> None:
        self.window.store.rename(conversation_id, title.strip() or "Untitled")
        self.reload()

    def delete(self, conversation_id: int) -> None:
        self.window.store.delete(conversation_id)
        if conversation_id == self.window.conversation_id:
            self.new_chat()
        self.reload()

    def export(self, conversation_id: int, path: Path, fmt: str) -> None:
        """Write the conversation's shown path to ``path`` as ``fmt`` "md" or "json".
        Raises OSError when the file cannot be written."""
        store = self.window.store
        title = store.title(conversation_id) or "Chat"
        messages = store.messages(conversation_id)
        text = (
            export.to_markdown(title, messages) if fmt == "md" else export.to_json(title, messages)
        )
        Path(path).write_text(text, encoding="utf-8")

    def reload(self) -> None:
        """List the conversations the search box matches, the one shown selected."""
        w = self.window
        w.conversation_list.show_conversations(
            w.store.list(w.conversation_list.query()), w.conversation_id
        )

    # --- the list's right-click menu: the selected conversation, through a dialog -------------

    def rename_selected(self) -> None:
        w = self.window
        cid = w.conversation_list.selected()
        if cid is None:
            return
        title, ok = QInputDialog.getText(
            w, "Rename conversation", "Title", text=w.store.title(cid) or ""
        )
        if ok:
            self.rename(cid, title)

    def delete_selected(self) -> None:
        cid = self.window.conversation_list.selected()
        if cid is not None:
            self.delete(cid)

    def export_selected(self, fmt: str) -> None:
        """Ask where, then :meth:`export` as ``fmt`` ("md" or "json"); says so in the status
        line, or in the banner when the file cannot be written."""
        w = self.window
        cid = w.conversation_list.selected()
        if cid is None:
            return
        name = short_title(w.store.title(cid) or "chat", 40).replace("/", "-").replace("…", "")
        filters = "Markdown (*.md)" if fmt == "md" else "JSON (*.json)"
        path, _ = QFileDialog.getSaveFileName(w, "Export conversation", f"{name}.{fmt}", filters)
        if not path:
            return
        try:
            self.export(cid, Path(path), fmt)
            w.status.setText(f"Exported to {path}")
        except OSError as exc:
            w.show_error(f"Could not export: {exc}")


def short_title(text: str, length: int = 48) -> str:
    """``text`` on one line, cut to ``length`` characters with "…" (a conversation's title)."""
    line = " ".join(text.split())
    return line if len(line) <= length else line[: length - 1] + "…"
