"""The main window: conversations on the left, the chat in the middle, the pair and
settings on the right.  It wires widgets to the model thread and the store; the data
flows one way: worker signals → window slots → view.

The window holds the state (the conversation shown, the answer being written, whether a
pair is loaded) and wires the parts, each in a module of its own:

- panels, which only hold and lay out widgets: :class:`~gui.chat.conversation_list.ConversationList`
  (left), :class:`~gui.chat.chat_panel.ChatPanel` (middle), :class:`~gui.side_panel.SidePanel`
  (right: the pair with its :class:`~gui.models.memory_badge.MemoryBadge`, the settings and the
  :class:`~gui.server.serve_switch.ServeBox`);
- helpers that act on the window: :class:`~gui.chat.answers.Answers` (asking, answers coming back),
  :class:`~gui.chat.context_meter.ContextMeter`,
    :class:`~gui.chat.conversations.ConversationActions`,
  :class:`~gui.models.pair_loading.PairLoading`, :class:`~gui.server.serve_switch.ServeSwitch`, and
  the menus of :mod:`gui.shortcuts`.

The panels' widgets are attributes of the window too (``window.picker``, ``window.input``,
``window.stop_button``, …)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, Signal
from PySide6.QtWidgets import QMainWindow, QSplitter

from .chat.answers import Answers
from .chat.chat_panel import ChatPanel
from .chat.context_meter import ContextMeter
from .chat.conversation_list import ConversationList
from .chat.conversations import ConversationActions
from .chat.message import Message
from .chat.session_stats import SessionStats
from .chat.store import ConversationStore
from .models.model_picker import spec_of
from .models.pair_loading import PairLoading
from .models.worker import ModelHost
from .server.serve_switch import ServeSwitch
from .settings import settings as user_settings
from .settings.settings import Settings
from .shortcuts import SHORTCUTS, build_menus, shortcuts_text, show_shortcuts
from .side_panel import SidePanel


class MainWindow(QMainWindow):
    """``autoload``: load the selected pair at start when it is on disk.  ``persist``:
    save settings changes to the user config dir (False for scripts such as the screenshot).

    Its own signals fire after the window has handled the worker's (for tests and
    scripts): :attr:`pairLoaded`, :attr:`pairFailed`, :attr:`answerDone`, :attr:`answerFailed`."""

    pairLoaded = Signal(dict)
    pairFailed = Signal(str)
    answerDone = Signal(object)  # the finished assistant Message
    answerFailed = Signal(str)
    memoryEstimated = Signal(
        object, object
    )  # (key, PairMemory or a problem), from the estimate's thread
    memoryShown = Signal(object)  # the PairMemory the badge now shows

    SHORTCUTS = SHORTCUTS

    def __init__(
        self, store: ConversationStore | None = None, autoload: bool = True, persist: bool = True
    ):
        super().__init__()
        self.persist = persist
        self.setWindowTitle("localspec — speculative chat")
        self.resize(1280, 800)
        self.settings: Settings = user_settings.load_settings()
        store_problem = ""
        if store is None:
            store, store_problem = ConversationStore.open_or_recover()
        self.store = store
        self.host = ModelHost(self)
        self.session = SessionStats()
        self.conversation_id: int | None = None
        self.messages: list[Message] = []
        self.model_ready = False
        self.loading = False
        self.request: tuple[int, str, Message] | None = None  # id, kind, answer being written
        self.editing: Message | None = None  # the question being edited into a new version
        self._ready = False  # no settings saved while the widgets are being filled
        self._closed = False
        self._build()
        self._connect()
        self._show_settings()
        self.update_memory_estimate()
        self.conversation_actions.reload()
        self._ready = True
        self.update_buttons()
        if store_problem:
            self.show_error(store_problem)
        else:
            self._warn_about_the_build()
        if autoload:
            self._load_the_selected_pair_if_on_disk()

    # --- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self.conversation_list = ConversationList()
        self.chat_panel = ChatPanel(self.session.text())
        self.side_panel = SidePanel()
        splitter = QSplitter()
        splitter.addWidget(self.conversation_list)
        splitter.addWidget(self.chat_panel)
        splitter.addWidget(self.side_panel)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([190, 680, 410])
        self.setCentralWidget(splitter)
        self._expose_widgets()
        self.context_meter = ContextMeter(self, self.context_label)
        self.answers = Answers(self)
        self.conversation_actions = ConversationActions(self)
        self.pair_loading = PairLoading(self)
        self.serving = ServeSwitch(self, self.side_panel.serve_box)
        self.shortcut_actions = build_menus(self)
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.stop_button.setToolTip("End the answer after its current round (Esc)")
        self.input.setToolTip("Enter sends, Shift+Enter starts a new line (Ctrl+L focuses)")

    def _expose_widgets(self) -> None:
        """The panels' widgets as the window's attributes (scripts and tests use them)."""
        left, chat, side = self.conversation_list, self.chat_panel, self.side_panel
        self.new_button, self.search, self.conversations = (
            left.new_button,
            left.search,
            left.conversations,
        )
        self.banner, self.banner_close, self.legend = chat.banner, chat.banner_close, chat.legend
        self.highlight_box, self.view, self.input = chat.highlight_box, chat.view, chat.input
        self.send_button, self.stop_button, self.compare_button = (
            chat.send_button,
            chat.stop_button,
            chat.compare_button,
        )
        self.status, self.busy = chat.status, chat.busy
        self.session_label, self.context_label = chat.session_label, chat.context_label
        self.picker, self.panel, self.memory_badge = (
            side.picker,
            side.settings_panel,
            side.memory_badge,
        )
        self.remote_box = side.remote_box
        serve = side.serve_box
        self.serve_switch, self.serve_port, self.serve_url, self.serve_copy = (
            serve.switch,
            serve.port,
            serve.url,
            serve.copy_button,
        )

    @property
    def memory_estimate(self):
        """The PairMemory the badge shows (None before the first estimate)."""
        return self.memory_badge.memory

    def _show_settings(self) -> None:
        """Fill the widgets from :attr:`settings` (nothing is saved yet: see ``_ready``)."""
        self.panel.set_settings(self.settings)
        self.serve_port.setValue(self.settings.serve_port)
        self.side_panel.serve_box.slots.setValue(self.settings.parallel)
        self.side_panel.serve_box.set_checked_quietly(
            self.settings.serve
        )  # takes effect once a pair is loaded
        self.highlight_box.setChecked(self.settings.highlight)
        self.view.set_highlight(self.settings.highlight)
        self.picker.refresh(
            self.settings.target, self.settings.draft if self.settings.target else None
        )

    def _load_the_selected_pair_if_on_disk(self) -> None:
        target, draft = self.picker.current_target(), self.picker.current_draft()
        if target is not None and target.downloaded and (draft is None or draft.downloaded):
            self.picker.load_selected()

    # --- wiring ----------------------------------------------------------------------------

    def _connect(self) -> None:
        self._connect_worker()
        self._connect_side_panel()
        self._connect_chat()
        self._connect_conversation_list()

    def _connect_worker(self) -> None:
        """The model thread's signals come to the window's own slots (queued to this thread;
        :meth:`closeEvent` delivers the last ones)."""
        w = self.host.worker
        w.status.connect(self._on_status)
        w.loadProgress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.loadFailed.connect(self._on_load_failed)
        w.round.connect(self._on_round)
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)

    def _connect_side_panel(self) -> None:
        self.picker.pairReady.connect(self.load_pair)
        self.remote_box.connectRequested.connect(self.pair_loading.connect)
        self.picker.error.connect(self.show_error)
        self.picker.selectionChanged.connect(self.save_settings)
        self.panel.changed.connect(self.save_settings)
        self.panel.thinkingChanged.connect(self.conversation_actions.remember_thinking)
        self.memory_badge.estimated.connect(self.memoryEstimated)
        self.memory_badge.shown.connect(self.memoryShown)
        self.picker.selectionChanged.connect(self.update_memory_estimate)
        self.panel.changed.connect(self.update_memory_estimate)
        self.panel.changed.connect(self.context_meter.timer.start)
        self.serve_switch.toggled.connect(self.serving.toggled)

    def _connect_chat(self) -> None:
        self.highlight_box.toggled.connect(self._on_highlight)
        self.input.submitted.connect(self.send)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.compare_button.clicked.connect(self.compare_with_no_draft)
        self.banner_close.clicked.connect(self.hide_error)
        self.view.action.connect(self.answers.on_view_action)
        self.input.textChanged.connect(self.context_meter.timer.start)
        self.context_meter.timer.timeout.connect(self.update_context_meter)

    def _connect_conversation_list(self) -> None:
        left, actions = self.conversation_list, self.conversation_actions
        self.new_button.clicked.connect(self.new_chat)
        left.opened.connect(self.open_conversation)
        self.search.textChanged.connect(lambda _: actions.reload())
        left.renameAsked.connect(actions.rename_selected)
        left.deleteAsked.connect(actions.delete_selected)
        left.exportAsked.connect(actions.export_selected)

    # --- errors, status, buttons ----------------------------------------------------------

    def show_error(self, message: str) -> None:
        """Show ``message`` in the banner; nothing else changes."""
        self.chat_panel.show_error(message)

    def hide_error(self) -> None:
        self.chat_panel.hide_error()

    def _warn_about_the_build(self) -> None:
        """The doctor's one-line warning when this machine's GPU goes unused (once per process)."""
        from localspec.llama.report import warn_gpu_once

        warn_gpu_once(lambda line: self.show_error(line.removeprefix("localspec: ")))

    def _on_status(self, text: str) -> None:
        self.status.setText(text)

    def update_buttons(self) -> None:
        """Enable what can be done now (nothing that changes the chat while an answer is
        written)."""
        generating = self.request is not None
        self.send_button.setEnabled(self.model_ready and not generating)
        self.stop_button.setEnabled(generating)
        has_answer = any(
            m.kind == "chat" and m.role == "assistant" and m.stats for m in self.messages
        )
        self.compare_button.setEnabled(self.model_ready and not generating and has_answer)
        self.new_button.setEnabled(not generating)
        self.conversations.setEnabled(not generating)
        self.shortcut_actions["regenerate"].setEnabled(self.model_ready and not generating)
        self.picker.load_button.setEnabled(
            not generating and not self.loading and not self.picker.busy()
        )
        self.remote_box.connect_button.setEnabled(not generating and not self.loading)

    # --- the pair (see gui.models.pair_loading, gui.models.memory_badge)
    # ------------------------------------

    def update_memory_estimate(self) -> None:
        """The pair's memory estimate at the chosen context: a coloured badge, the numbers
        on hover (see :mod:`localspec.models.memory`).  A model not downloaded yet has its header
        read from the Hub in a thread; the badge says so meanwhile, and a result for a pair
        or context no longer chosen is dropped (see
        :class:`~gui.models.memory_badge.MemoryBadge`)."""
        target, draft = self.picker.current_target(), self.picker.current_draft()
        chosen = self.panel.apply_to(Settings())
        self.memory_badge.estimate(target, draft, chosen.n_ctx, chosen.gpu_layers != 0)

    def load_pair(self, target: Path, draft: Path | None) -> None:
        """Load ``target`` (+ ``draft``) in the model thread with the current settings."""
        self.pair_loading.load(target, draft)

    def _on_load_progress(self, role: str, fraction: float) -> None:
        self.pair_loading.on_progress(role, fraction)

    def _on_loaded(self, info: dict) -> None:
        self.pair_loading.on_loaded(info)

    def _on_load_failed(self, message: str) -> None:
        self.pair_loading.on_failed(message)

    # --- chatting (see gui.chat.answers) ----------------------------------------------------------

    def send(self) -> None:
        """Send the input box's text; it is cleared only once the request is queued, and
        put back if the request fails (see :class:`~gui.chat.answers.Answers`)."""
        self.answers.send()

    def regenerate(self, message_id: int | None = None) -> None:
        """Answer the question of answer ``message_id`` (default: the last answer) again,
        as a new version beside it; the old one stays, reachable with ◀ ▶."""
        self.answers.regenerate(message_id)

    def edit(self, message_id: int) -> None:
        """Put question ``message_id`` in the input box; sending it makes a new version of
        the question (and a new answer) beside the old ones.  Esc cancels."""
        self.answers.edit(message_id)

    def switch_version(self, message_id: int, step: int) -> None:
        """Show the previous (``step`` -1) or next (+1) version of a message, and the
        conversation as it went on from that version."""
        self.answers.switch_version(message_id, step)

    def compare_with_no_draft(self) -> None:
        """Rerun the prompt of the last answer with plain decoding (no draft, no lookup)."""
        self.answers.compare_with_no_draft()

    def stop(self) -> None:
        """End the running answer after its current round."""
        self.answers.stop()

    def stop_or_cancel(self) -> None:
        self.answers.stop_or_cancel()

    def _on_round(self, rid: int, segments: list) -> None:
        if not self._closed:
            self.answers.on_round(rid, segments)

    def _on_finished(self, rid: int, result: dict) -> None:
        if not self._closed:
            self.answers.on_finished(rid, result)

    def _on_failed(self, rid: int, message: str) -> None:
        if not self._closed:
            self.answers.on_failed(rid, message)

    def context_tokens(self) -> tuple[int, int] | None:
        """(tokens, n_ctx): the chat shown plus the message being typed, rendered with the
        chat template as it would be sent; while an answer streams, its prompt plus the
        tokens so far.  None while no model is loaded."""
        return self.context_meter.tokens()

    def update_context_meter(self) -> None:
        """ "Context 37 % full (1,512 / 4,096 tokens)" under the input."""
        self.context_meter.update()

    def focus_input(self) -> None:
        self.input.setFocus()

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def shortcuts_text(self) -> str:
        return shortcuts_text()

    def show_shortcuts(self) -> None:
        show_shortcuts(self)

    # --- conversations (see gui.chat.conversations)
    # ------------------------------------------------

    def new_chat(self) -> None:
        self.conversation_actions.new_chat()

    def open_conversation(self, conversation_id: int) -> None:
        """Show a stored conversation (answers keep their highlighting and stats)."""
        self.conversation_actions.open(conversation_id)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.conversation_actions.rename(conversation_id, title)

    def delete_conversation(self, conversation_id: int) -> None:
        self.conversation_actions.delete(conversation_id)

    def export_conversation(self, conversation_id: int, path: Path, fmt: str) -> None:
        """Write the conversation's shown path to ``path`` as ``fmt`` "md" or "json".
        Raises OSError when the file cannot be written."""
        self.conversation_actions.export(conversation_id, path, fmt)

    # --- settings and closing ---------------------------------------------------------------

    def _on_highlight(self, on: bool) -> None:
        self.view.set_highlight(on)
        self.save_settings()

    def save_settings(self) -> None:
        """Take the widgets' values into :attr:`settings` and, with ``persist``, write them
        to the user config dir (the banner says so when that fails)."""
        if not self._ready:
            return
        s = self.panel.apply_to(self.settings)
        target, draft = self.picker.current_target(), self.picker.current_draft()
        if target is not None:
            s.target = spec_of(target)
            s.draft = spec_of(draft) if draft is not None else ""
        s.highlight = self.highlight_box.isChecked()
        s.serve, s.serve_port = self.serve_switch.isChecked(), self.serve_port.value()
        s.parallel = self.side_panel.serve_box.slots.value()
        if not self.persist:
            return
        try:
            user_settings.save_settings(s)
        except OSError as exc:
            self.show_error(f"Settings not saved: {exc}")

    def closeEvent(self, event) -> None:
        """Stop a running answer (within one round), free the models, then close."""
        self.status.setText("Closing…")
        self.save_settings()
        self.picker.shutdown()
        if not self.host.shutdown():
            self.show_error("The model thread did not stop in time; closing anyway.")
        # Deliver what the worker sent before it stopped (a stopped answer is saved).
        QCoreApplication.sendPostedEvents(self, QEvent.MetaCall)
        self._closed = True
        self.memory_badge.stop()
        self.store.close()
        super().closeEvent(event)
