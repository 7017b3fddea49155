"""The main window: conversations on the left, the chat in the middle, the pair and
settings on the right.  It wires widgets to the model thread and the store; the data
flows one way: worker signals → window slots → view."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeyEvent, QKeySequence
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QGroupBox, QHBoxLayout, QInputDialog, QLabel, QLineEdit,
                               QListWidget, QListWidgetItem, QMainWindow, QMenu, QMessageBox, QPlainTextEdit,
                               QProgressBar, QPushButton, QScrollArea, QSpinBox, QSplitter, QVBoxLayout, QWidget)

from . import export
from .chat_view import ChatView, format_stats, legend_html
from .message import Message, chat_history
from .model_picker import PairPicker, spec_of
from .settings import Settings, load_settings, save_settings
from .settings_panel import SettingsPanel
from .store import ConversationStore
from .worker import ModelHost


class ChatInput(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key_Return, Qt.Key_Enter) and not event.modifiers() & Qt.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class SessionStats:
    """Totals over this run's answers (speculative ones) and the plain baseline."""

    def __init__(self):
        self.accepted = self.drafted = self.rounds = self.tokens = self.answers = 0
        self.decode_s = self.ttft_s = 0.0
        self.baseline_tps: float | None = None

    def add(self, stats: dict) -> None:
        self.answers += 1
        self.accepted += stats.get("accepted_tokens", 0)
        self.drafted += stats.get("drafted_tokens", 0)
        self.rounds += stats.get("rounds", 0)
        self.tokens += max(0, stats.get("generated_tokens", 0) - 1)
        self.decode_s += max(0.0, stats.get("total_s", 0.0) - stats.get("ttft_s", 0.0))
        self.ttft_s += stats.get("ttft_s", 0.0)

    def text(self) -> str:
        if not self.answers:
            return "Session: no answers yet"
        tps = self.tokens / self.decode_s if self.decode_s > 0 else 0.0
        parts = [f"Session: {self.answers} answer(s)"]
        if self.drafted:
            parts.append(f"Accepted {self.accepted}/{self.drafted} draft tokens "
                         f"({100 * self.accepted / self.drafted:.0f} %)")
            parts.append(f"mean accepted length {(self.accepted + self.rounds) / max(1, self.rounds):.2f}")
        parts.append(f"{tps:.1f} t/s")
        parts.append(f"mean TTFT {self.ttft_s / self.answers:.2f} s")
        if self.baseline_tps:
            parts.append(f"plain {self.baseline_tps:.1f} t/s → {tps / self.baseline_tps:.2f}×")
        return " · ".join(parts)


def _estimate_or_problem(estimate):
    """``estimate()``, or the sentence saying why it failed."""
    from localspec.errors import LocalspecError

    try:
        return estimate()
    except (LocalspecError, OSError, ValueError) as exc:
        return str(exc)
    except Exception as exc:  # a bug must not leave the badge on "reading…" for good
        return f"{type(exc).__name__}: {exc}"


class MainWindow(QMainWindow):
    """``autoload``: load the selected pair at start when it is on disk.  ``persist``:
    save settings changes to the user config dir (False for scripts such as the screenshot).

    Its own signals fire after the window has handled the worker's (for tests and
    scripts): :attr:`pairLoaded`, :attr:`pairFailed`, :attr:`answerDone`, :attr:`answerFailed`."""

    pairLoaded = Signal(dict)
    pairFailed = Signal(str)
    answerDone = Signal(object)  # the finished assistant Message
    answerFailed = Signal(str)
    memoryEstimated = Signal(object, object)  # (key, PairMemory or a problem), from the estimate's thread
    memoryShown = Signal(object)  # the PairMemory the badge now shows

    def __init__(self, store: ConversationStore | None = None, autoload: bool = True, persist: bool = True):
        super().__init__()
        self.persist = persist
        self.setWindowTitle("localspec — speculative chat")
        self.resize(1280, 800)
        self.settings: Settings = load_settings()
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
        self._dropped = 0  # turns _fit_to_context left out of the history it returned last
        self._memory_key = None  # what the memory badge was last computed for
        self._request_dropped = 0  # ... of the answer being written
        self._sent_text = ""
        self._ready = False  # no settings saved while the widgets are being filled
        self._closed = False
        self._build()
        self._connect()
        self.panel.set_settings(self.settings)
        self.serve_port.setValue(self.settings.serve_port)
        self.serve_switch.blockSignals(True)
        self.serve_switch.setChecked(self.settings.serve)  # takes effect once a pair is loaded
        self.serve_switch.blockSignals(False)
        self.highlight_box.setChecked(self.settings.highlight)
        self.view.set_highlight(self.settings.highlight)
        self.picker.refresh(self.settings.target, self.settings.draft if self.settings.target else None)
        self.update_memory_estimate()
        self._reload_conversations()
        self._ready = True
        self._update_buttons()
        if store_problem:
            self.show_error(store_problem)
        else:
            self._warn_about_the_build()
        if autoload:
            target, draft = self.picker.current_target(), self.picker.current_draft()
            if target is not None and target.downloaded and (draft is None or draft.downloaded):
                self.picker.load_selected()

    # --- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        # Left: conversations.
        self.new_button = QPushButton("New chat")
        self.conversations = QListWidget()
        self.conversations.setContextMenuPolicy(Qt.CustomContextMenu)
        self.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.conversations.setTextElideMode(Qt.ElideRight)
        self.conversations.setToolTip("Click to reopen; right-click to rename, export or delete")
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.addWidget(self.new_button)
        lv.addWidget(self.search)
        lv.addWidget(self.conversations)

        # Centre: banner, legend, chat, input.
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.banner.setStyleSheet("background:#fde2e1; color:#7f1d1d; border:1px solid #f5a5a0;"
                                  "border-radius:4px; padding:6px;")
        self.banner.setVisible(False)
        self.banner_close = QPushButton("Dismiss")
        self.banner_close.setVisible(False)
        self.legend = QLabel(legend_html())
        self.highlight_box = QCheckBox("Highlight token sources")
        self.highlight_box.setToolTip("Off: render answers as Markdown with code blocks")
        self.view = ChatView()
        self.input = ChatInput()
        self.input.setPlaceholderText("Message (Enter sends, Shift+Enter new line)")
        self.input.setFixedHeight(84)
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.compare_button = QPushButton("Compare with no draft")
        self.compare_button.setToolTip("Rerun the last prompt with plain decoding and show both speeds")
        self.status = QLabel()
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(160)
        self.busy.setVisible(False)
        self.session_label = QLabel(self.session.text())
        self.session_label.setWordWrap(True)
        self.context_label = QLabel()
        self.context_label.setToolTip("Tokens of this chat (and the message being typed) as the model reads them, "
                                      "with its chat template, against the context size")
        self._count_timer = QTimer(self)
        self._count_timer.setSingleShot(True)
        self._count_timer.setInterval(250)  # milliseconds after the last keystroke
        self._count_base: int | None = None  # tokens of the prompt of the answer streaming now

        centre = QWidget()
        cv = QVBoxLayout(centre)
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

        # Right: pair + settings.
        self.picker = PairPicker()
        self.panel = SettingsPanel()
        pair_box = QGroupBox("Model pair")
        self.memory_badge = QLabel()
        self.memory_badge.setWordWrap(True)
        pair_layout = QVBoxLayout(pair_box)
        pair_layout.addWidget(self.picker)
        pair_layout.addWidget(self.memory_badge)
        settings_box = QGroupBox("Settings")
        QVBoxLayout(settings_box).addWidget(self.panel)
        serve_box = QGroupBox("Local server (OpenAI-compatible)")
        self.serve_switch = QCheckBox("Serve on localhost:")
        self.serve_switch.setToolTip("Let editors, agents and chat apps on this computer use the loaded pair "
                                     "(their requests wait in the same queue as this window's)")
        self.serve_port = QSpinBox()
        self.serve_port.setRange(1024, 65535)
        self.serve_url = QLineEdit()
        self.serve_url.setReadOnly(True)
        self.serve_url.setPlaceholderText("off")
        self.serve_copy = QPushButton("Copy")
        self.serve_copy.setToolTip("Copy the base URL (for the openai client's base_url)")
        sv_box = QVBoxLayout(serve_box)
        row = QHBoxLayout()
        row.addWidget(self.serve_switch)
        row.addWidget(self.serve_port)
        row.addStretch(1)
        sv_box.addLayout(row)
        row = QHBoxLayout()
        row.addWidget(self.serve_url, 1)
        row.addWidget(self.serve_copy)
        sv_box.addLayout(row)
        side = QWidget()
        sv = QVBoxLayout(side)
        sv.addWidget(pair_box)
        sv.addWidget(settings_box)
        sv.addWidget(serve_box)
        sv.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(side)
        scroll.setMinimumWidth(330)

        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(centre)
        splitter.addWidget(scroll)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([190, 680, 410])
        self.setCentralWidget(splitter)

        rename = QAction("Rename…", self)
        delete = QAction("Delete", self)
        to_md = QAction("Export as Markdown…", self)
        to_json = QAction("Export as JSON…", self)
        rename.triggered.connect(self._rename_selected)
        delete.triggered.connect(self._delete_selected)
        to_md.triggered.connect(lambda: self._export_selected("md"))
        to_json.triggered.connect(lambda: self._export_selected("json"))
        self._conv_menu = QMenu(self)
        self._conv_menu.addActions([rename, to_md, to_json, delete])
        self._build_menus()

    # Keyboard shortcuts: (menu, label, key, slot name); listed in Help ▸ Shortcuts.
    SHORTCUTS = (("Chat", "New chat", "Ctrl+N", "new_chat"),
                 ("Chat", "Regenerate the last answer", "Ctrl+R", "regenerate"),
                 ("Chat", "Stop the answer / cancel editing", "Esc", "stop_or_cancel"),
                 ("Chat", "Focus the message box", "Ctrl+L", "focus_input"),
                 ("Chat", "Search conversations", "Ctrl+F", "focus_search"))

    def _build_menus(self) -> None:
        menus = {}
        self.shortcut_actions: dict[str, QAction] = {}
        for menu, label, key, slot in self.SHORTCUTS:
            if menu not in menus:
                menus[menu] = self.menuBar().addMenu(f"&{menu}")
            action = QAction(label, self)
            action.setShortcut(QKeySequence(key))
            action.setShortcutContext(Qt.WindowShortcut)
            action.triggered.connect(getattr(self, slot))
            menus[menu].addAction(action)
            self.addAction(action)
            self.shortcut_actions[slot] = action
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction("Shortcuts", self.show_shortcuts)
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.stop_button.setToolTip("End the answer after its current round (Esc)")
        self.input.setToolTip("Enter sends, Shift+Enter starts a new line (Ctrl+L focuses)")

    def shortcuts_text(self) -> str:
        return "\n".join(f"{key:<8} {label}" for _, label, key, _ in self.SHORTCUTS)

    def show_shortcuts(self) -> None:
        QMessageBox.information(self, "Keyboard shortcuts", self.shortcuts_text())

    def _connect(self) -> None:
        w = self.host.worker
        w.status.connect(self._on_status)
        w.loadProgress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.loadFailed.connect(self._on_load_failed)
        w.round.connect(self._on_round)
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)
        self.picker.pairReady.connect(self.load_pair)
        self.picker.error.connect(self.show_error)
        self.picker.selectionChanged.connect(self._save_settings)
        self.panel.changed.connect(self._save_settings)
        self.memoryEstimated.connect(self._show_memory_estimate)
        self.picker.selectionChanged.connect(self.update_memory_estimate)
        self.panel.changed.connect(self.update_memory_estimate)
        self.highlight_box.toggled.connect(self._on_highlight)
        self.input.submitted.connect(self.send)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.compare_button.clicked.connect(self.compare_with_no_draft)
        self.new_button.clicked.connect(self.new_chat)
        self.banner_close.clicked.connect(self.hide_error)
        self.conversations.itemClicked.connect(lambda item: self.open_conversation(item.data(Qt.UserRole)))
        self.search.textChanged.connect(lambda _: self._reload_conversations())
        self.view.action.connect(self._on_view_action)
        self.input.textChanged.connect(self._count_timer.start)
        self._count_timer.timeout.connect(self.update_context_meter)
        self.panel.changed.connect(self._count_timer.start)
        self.serve_switch.toggled.connect(self._on_serve_toggled)
        self.serve_copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.serve_url.text()))
        self.conversations.customContextMenuRequested.connect(
            lambda pos: self.conversations.itemAt(pos) and self._conv_menu.exec(self.conversations.mapToGlobal(pos)))

    # --- errors and status ----------------------------------------------------------------

    def show_error(self, message: str) -> None:
        """Show ``message`` in the banner; nothing else changes."""
        self.banner.setText(message)
        self.banner.setVisible(True)
        self.banner_close.setVisible(True)

    def _warn_about_the_build(self) -> None:
        """The doctor's one-line warning when this machine's GPU goes unused (once per process)."""
        from localspec.llama.report import warn_gpu_once

        warn_gpu_once(lambda line: self.show_error(line.removeprefix("localspec: ")))

    def hide_error(self) -> None:
        self.banner.setVisible(False)
        self.banner_close.setVisible(False)

    def _on_status(self, text: str) -> None:
        self.status.setText(text)

    def _update_buttons(self) -> None:
        generating = self.request is not None
        self.send_button.setEnabled(self.model_ready and not generating)
        self.stop_button.setEnabled(generating)
        has_answer = any(m.kind == "chat" and m.role == "assistant" and m.stats for m in self.messages)
        self.compare_button.setEnabled(self.model_ready and not generating and has_answer)
        self.new_button.setEnabled(not generating)
        self.conversations.setEnabled(not generating)
        self.shortcut_actions["regenerate"].setEnabled(self.model_ready and not generating)
        self.picker.load_button.setEnabled(not generating and not self.loading and not self.picker.busy())

    # --- models --------------------------------------------------------------------------

    BADGE_COLOURS = {"fits": "#15803d", "tight": "#b45309", "won't fit": "#b91c1c", "unknown": "#6b7280"}

    def update_memory_estimate(self) -> None:
        """The pair's memory estimate at the chosen context: a coloured badge, the numbers
        on hover (see :mod:`localspec.models.memory`).  A model not downloaded yet has its header
        read from the Hub in a thread; the badge says so meanwhile, and a result for a pair
        or context no longer chosen is dropped."""
        from localspec.llama.backend import memory_budget
        from localspec.models.memory import pair_memory_of_refs

        target, draft = self.picker.current_target(), self.picker.current_draft()
        chosen = self.panel.apply_to(Settings())
        key = (target, draft, chosen.n_ctx, chosen.gpu_layers != 0)
        if key == self._memory_key:  # the panel changed something else (it fires on every edit)
            return
        self._memory_key = key
        if target is None:
            self.memory_badge.setText("")
            return
        estimate = functools.partial(pair_memory_of_refs, target, draft, chosen.n_ctx,
                                     budget=memory_budget(offload=chosen.gpu_layers != 0))
        if all(ref is None or ref.downloaded for ref in (target, draft)):
            self._show_memory_estimate(key, _estimate_or_problem(estimate))
            return
        self.memory_badge.setText("Memory: reading the GGUF headers from the Hub…")
        self.memory_badge.setToolTip("")
        threading.Thread(target=self._estimate_in_thread, args=(key, estimate), name="memory-estimate",
                         daemon=True).start()

    def _estimate_in_thread(self, key, estimate) -> None:
        result = _estimate_or_problem(estimate)
        try:
            self.memoryEstimated.emit(key, result)  # queued to the GUI thread
        except RuntimeError:  # the window was closed and deleted meanwhile
            pass

    def _show_memory_estimate(self, key, est) -> None:
        from localspec.models.memory import gib

        if key != self._memory_key or self._closed:
            return
        if isinstance(est, str):
            self.memory_badge.setText(f"Memory: cannot estimate ({est})")
            return
        colour = self.BADGE_COLOURS[est.verdict]
        least = "≥ " if est.partial else ""
        self.memory_badge.setText(f'<span style="color:{colour}">●</span> Memory: {least}{gib(est.total)} '
                                  f'of {gib(est.available)} {est.where}: <b>{est.verdict}</b>')
        self.memory_badge.setToolTip(est.describe())
        self.memory_estimate = est
        self.memoryShown.emit(est)

    def load_pair(self, target: Path, draft: Path | None) -> None:
        """Load ``target`` (+ ``draft``) in the model thread with the current settings."""
        if self.request is not None:
            self.show_error("Stop the running answer before loading another pair.")
            return
        self._save_settings()
        self.serve_url.clear()  # the host stops serving the pair being replaced
        self.model_ready = False
        self.loading = True
        self.busy.setRange(0, 0)  # busy until llama.cpp reports how far it has read
        self.busy.setVisible(True)
        self.status.setText("Loading…")
        self._update_buttons()
        self.host.load({"target": str(target), "draft": str(draft) if draft else None,
                        **self.settings.load_options()})

    def _on_load_progress(self, role: str, fraction: float) -> None:
        """One model's weights read so far (``fraction`` 0.0 to 1.0), from llama.cpp."""
        self.busy.setRange(0, 100)
        self.busy.setValue(round(100 * fraction))
        self.status.setText(f"Loading the {role} model… {100 * fraction:.0f} %")

    def _on_loaded(self, info: dict) -> None:
        self.model_ready = True
        self.loading = False
        self.busy.setVisible(False)
        names = Path(info["target"]).name + (f" + draft {Path(info['draft']).name}" if info["draft"] else " (no draft)")
        self.status.setText(f"Ready: {names} — loaded in {info['load_s']:.1f} s")
        self.session.baseline_tps = None  # a baseline belongs to one pair
        self.view.set_baseline(None)
        self._update_buttons()
        self.update_context_meter()
        if self.serve_switch.isChecked():
            self._start_serving()
        self.pairLoaded.emit(info)

    def _on_load_failed(self, message: str) -> None:
        self.model_ready = False
        self.loading = False
        self.busy.setVisible(False)
        self.status.setText("No model loaded")
        self.show_error(f"Could not load the pair: {message}")
        self._update_buttons()
        self.pairFailed.emit(message)

    # --- chatting ------------------------------------------------------------------------

    def send(self) -> None:
        """Send the input box's text; it is cleared only once the request is queued, and
        put back if the request fails."""
        text = self.input.toPlainText().strip()
        if not text or self.request is not None:
            return
        if not self.model_ready:
            self.show_error("Load a model pair first (Model pair → Load pair)." if not self.loading
                            else "The pair is still loading; send again when it is ready.")
            return
        self.hide_error()
        if self.conversation_id is None:
            self.conversation_id = self.store.create(_title(text))
            self._reload_conversations()
        user = Message("user", text)
        before = self.messages[: self.messages.index(self.editing)] if self.editing is not None else self.messages
        history, n_prompt = self._fit_to_context(chat_history(before + [user], self.settings.system_prompt))
        if history is None:
            return
        if self.editing is not None:  # a new version of that question, beside it
            self.store.add_message(self.conversation_id, user, parent_id=self.editing.parent_id)
            self.editing = None
            self.messages = before
        else:
            self.store.add_message(self.conversation_id, user)
        self.messages.append(user)
        self._sent_text = text
        self.input.clear()
        self._start(history, "chat", self.settings.generation_options(), parent_id=user.id, n_prompt=n_prompt)

    def _fit_to_context(self, history: list[dict]) -> tuple[list[dict] | None, int | None]:
        """(history to send, its prompt tokens): ``history`` itself if it fits the
        context; else, by the overflow setting, (None, None) after saying so with the
        numbers ("stop"), or the history with its oldest turns left out ("drop-oldest":
        the system prompt and the new message stay; how many were left out is noted in
        the answer's stats).  An unknown count (no model) passes as None."""
        self._dropped = 0
        counted = self.host.worker.count_tokens(history)
        if counted is None or counted[0] < counted[1]:
            return history, counted[0] if counted else None
        n, n_ctx = counted
        if self.panel.overflow.currentData() == "drop-oldest":
            head = 1 if history and history[0]["role"] == "system" else 0
            trimmed = list(history)
            while len(trimmed) - head > 1:  # a turn: a question and the answers after it
                del trimmed[head]
                self._dropped += 1
                while len(trimmed) - head > 1 and trimmed[head]["role"] == "assistant":
                    del trimmed[head]
                    self._dropped += 1
                counted = self.host.worker.count_tokens(trimmed)
                if counted is None or counted[0] < n_ctx:
                    return trimmed, counted[0] if counted else None
            self._dropped = 0
            self.show_error(f"The message alone does not fit: {counted[0]:,} tokens with the system prompt, "
                            f"the context holds {n_ctx:,}. Shorten it, or raise Context and Load the pair again.")
            return None, None
        self.show_error(f"This message does not fit: the chat would be {n:,} tokens and the context holds "
                        f"{n_ctx:,}. Start a New chat, raise Context and Load the pair again, or set "
                        "Settings ▸ Too long to “Drop the oldest turns”.")
        return None, None

    def regenerate(self, message_id: int | None = None) -> None:
        """Answer the question of answer ``message_id`` (default: the last answer) again,
        as a new version beside it; the old one stays, reachable with ◀ ▶."""
        if self.request is not None or not self.model_ready:
            return
        answers = [m for m in self.messages if m.role == "assistant" and m.kind == "chat" and m.id is not None]
        target = next((m for m in answers if m.id == message_id), None) if message_id else (answers[-1] if answers else None)
        if target is None:
            return
        self.hide_error()
        history, n_prompt = self._fit_to_context(chat_history(self.messages[: self.messages.index(target)],
                                                              self.settings.system_prompt))
        if history is None:
            return
        self.messages = self.messages[: self.messages.index(target)]
        self._sent_text = ""
        self._start(history, "chat", self.settings.generation_options(), parent_id=target.parent_id,
                    n_prompt=n_prompt)

    def edit(self, message_id: int) -> None:
        """Put question ``message_id`` in the input box; sending it makes a new version of
        the question (and a new answer) beside the old ones.  Esc cancels."""
        target = next((m for m in self.messages if m.id == message_id and m.role == "user"), None)
        if target is None or self.request is not None:
            return
        self.editing = target
        self.input.setPlainText(target.content)
        self.input.setFocus()
        self.status.setText("Editing a message: Enter sends it as a new version, Esc cancels")

    def switch_version(self, message_id: int, step: int) -> None:
        """Show the previous (``step`` -1) or next (+1) version of a message, and the
        conversation as it went on from that version."""
        if self.request is not None or self.conversation_id is None:
            return
        siblings = self.store.siblings(message_id)
        if message_id not in siblings:
            return
        i = siblings.index(message_id) + step
        if 0 <= i < len(siblings):
            self.store.switch_to(self.conversation_id, siblings[i])
            self.messages = self.store.messages(self.conversation_id)
            self.view.set_messages(self.messages)
            self._update_buttons()

    def _on_view_action(self, name: str, message_id: int) -> None:
        if name in ("previous", "next"):
            self.switch_version(message_id, -1 if name == "previous" else 1)
        elif name == "regenerate":
            self.regenerate(message_id)
        elif name == "edit":
            self.edit(message_id)

    def stop_or_cancel(self) -> None:
        if self.request is not None:
            self.stop()
        elif self.editing is not None:
            self.editing = None
            self.input.clear()
            self.status.setText("")

    def focus_input(self) -> None:
        self.input.setFocus()

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def compare_with_no_draft(self) -> None:
        """Rerun the prompt of the last answer with plain decoding (no draft, no lookup)."""
        if self.request is not None or not self.model_ready:
            return
        last = max((i for i, m in enumerate(self.messages) if m.kind == "chat" and m.role == "assistant"),
                   default=None)
        if last is None:
            return
        history = chat_history(self.messages[:last], self.settings.system_prompt)
        self._sent_text = ""
        self._start(history, "baseline", {**self.settings.generation_options(), "strategy": "none"},
                    parent_id=self.messages[-1].id)

    def _start(self, history: list[dict], kind: str, options: dict, parent_id: int | None,
               n_prompt: int | None = None) -> None:
        """Queue the answer to ``history``; ``n_prompt``: its prompt tokens when already
        counted (for the context meter while the answer streams)."""
        answer = Message("assistant", "", kind=kind, parent_id=parent_id)
        self.messages.append(answer)
        self.view.set_messages(self.messages)
        self.view.begin_answer(answer)
        rid = self.host.generate(history, options)
        self.request = (rid, kind, answer)
        self._request_dropped = self._dropped if kind == "chat" else 0
        if n_prompt is None:
            counted = self.host.worker.count_tokens(history)
            n_prompt = counted[0] if counted else None
        self._count_base = n_prompt
        self.update_context_meter()
        self.status.setText("Generating…" if kind == "chat" else "Measuring plain decoding…")
        self._update_buttons()

    def stop(self) -> None:
        """End the running answer after its current round."""
        if self.request is not None:
            self.host.stop(self.request[0])
            self.status.setText("Stopping…")

    def _on_round(self, rid: int, segments: list) -> None:
        if self._closed:
            return
        if self.request is not None and rid == self.request[0]:
            self.view.append_segments(segments)
            self.update_context_meter()

    def _take_request(self, rid: int):
        """(kind, answer message) of the running request if ``rid`` is it, and forget it;
        None for a stale signal or after the window closed."""
        if self._closed or self.request is None or rid != self.request[0]:
            return None
        _, kind, answer = self.request
        self.request = None
        return kind, answer

    def _on_finished(self, rid: int, result: dict) -> None:
        taken = self._take_request(rid)
        if taken is None:
            return
        kind, answer = taken
        answer.content = result["text"]
        answer.stats = result["stats"]
        if self._request_dropped:
            answer.stats["context_dropped_messages"] = self._request_dropped
        self._count_base = None
        answer.finish_reason = result["finish_reason"]
        if self.conversation_id is not None:
            self.store.add_message(self.conversation_id, answer, parent_id=answer.parent_id)
            self.messages = self.store.messages(self.conversation_id)  # with the versions counted
            self._reload_conversations()
        if kind == "baseline":
            self.session.baseline_tps = answer.stats.get("tokens_per_s") or None
            self.view.baseline_tps = self.session.baseline_tps
        else:
            self.session.add(answer.stats)
        self.view.end_answer()
        self.view.set_messages(self.messages)
        self.session_label.setText(self.session.text())
        line = format_stats(answer.stats, answer.finish_reason,
                            self.session.baseline_tps if kind == "chat" else None)
        self.status.setText(("Plain decoding: " if kind == "baseline" else "") + line)
        if answer.finish_reason == "context":
            self.show_error(f"The context is full ({self.settings.n_ctx} tokens): start a New chat, "
                            "or raise Context and Load the pair again.")
        self._update_buttons()
        self.update_context_meter()
        shown = next((m for m in self.messages if m.id == answer.id), answer)  # with its versions counted
        self.answerDone.emit(shown)

    def _on_failed(self, rid: int, message: str) -> None:
        taken = self._take_request(rid)
        if taken is None:
            return
        kind, answer = taken
        self._count_base = None
        self.messages.remove(answer)
        if kind == "chat" and self._sent_text and self.messages and self.messages[-1].role == "user":
            user = self.messages.pop()
            if user.id is not None:
                self.store.delete_message(user.id)
            current = self.input.toPlainText()
            self.input.setPlainText(self._sent_text + ("\n" + current if current.strip() else ""))
        if self.conversation_id is not None:  # back to the path the store has
            self.store.set_leaf(self.conversation_id, self.messages[-1].id if self.messages else None)
            self.messages = self.store.messages(self.conversation_id)
        self.view.end_answer()
        self.view.set_messages(self.messages)
        self.status.setText("")
        self.show_error(f"The answer failed: {message}")
        self._update_buttons()
        self.answerFailed.emit(message)

    # --- context meter -------------------------------------------------------------------

    def context_tokens(self) -> tuple[int, int] | None:
        """(tokens, n_ctx): the chat shown plus the message being typed, rendered with the
        chat template as it would be sent; while an answer streams, its prompt plus the
        tokens so far.  None while no model is loaded."""
        if self.request is not None and self._count_base is not None:
            return self._count_base + len(self.request[2].segments), self._n_ctx_loaded()
        before = self.messages[: self.messages.index(self.editing)] if self.editing in self.messages else self.messages
        history = chat_history(before, self.settings.system_prompt)
        typed = self.input.toPlainText().strip()
        if typed:
            history.append({"role": "user", "content": typed})
        return self.host.worker.count_tokens(history) if history else (0, self._n_ctx_loaded())

    def _n_ctx_loaded(self) -> int:
        counted = self.host.worker.count_tokens([])
        return counted[1] if counted else self.settings.n_ctx

    def update_context_meter(self) -> None:
        """"Context 37 % full (1,512 / 4,096 tokens)" under the input."""
        counted = self.context_tokens() if self.model_ready else None
        if counted is None:
            self.context_label.setText("")
            return
        n, n_ctx = counted
        share = 100 * n / n_ctx if n_ctx else 0
        colour = "#b91c1c" if share >= 100 else ("#b45309" if share >= 90 else "")
        text = f"Context {share:.0f} % full ({n:,} / {n_ctx:,} tokens)"
        if share >= 100 and self.request is None:
            text += (": the oldest turns are left out when it is sent" if self.settings.overflow == "drop-oldest"
                     else ": a message now is refused (see Settings ▸ Too long)")
        self.context_label.setText(f'<span style="color:{colour}">{text}</span>' if colour else text)

    # --- local server ----------------------------------------------------------------------

    def _on_serve_toggled(self, on: bool) -> None:
        self.settings.serve = on
        self.settings.serve_port = self.serve_port.value()
        self._save_settings()
        if on:
            if self.model_ready:
                self._start_serving()
            else:
                self.serve_url.setPlaceholderText("starts once a pair is loaded")
        else:
            self.host.stop_server()
            self.serve_url.clear()
            self.serve_url.setPlaceholderText("off")

    def _start_serving(self) -> None:
        from localspec.errors import LocalspecError

        target = self.picker.current_target()
        name = target.name if target is not None else "localspec"
        try:
            url = self.host.start_server(self.serve_port.value(), name)
        except (LocalspecError, OSError) as exc:
            self.serve_switch.blockSignals(True)
            self.serve_switch.setChecked(False)
            self.serve_switch.blockSignals(False)
            self.serve_url.clear()
            self.show_error(f"Could not serve on localhost:{self.serve_port.value()}: {exc}")
            return
        self.serve_url.setText(url)
        self.status.setText(f"Serving the pair at {url} (requests queue with this window's answers)")

    # --- conversations ---------------------------------------------------------------------

    def new_chat(self) -> None:
        if self.request is not None:
            return
        self.editing = None
        self.conversation_id = None
        self.messages = []
        self.view.set_messages(self.messages)
        self.conversations.clearSelection()
        self._update_buttons()
        self.update_context_meter()

    def open_conversation(self, conversation_id: int) -> None:
        """Show a stored conversation (answers keep their highlighting and stats)."""
        if self.request is not None:
            return
        self.editing = None
        self.conversation_id = conversation_id
        self.messages = self.store.messages(conversation_id)
        self.view.set_messages(self.messages)
        self._update_buttons()
        self.update_context_meter()

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename(conversation_id, title.strip() or "Untitled")
        self._reload_conversations()

    def delete_conversation(self, conversation_id: int) -> None:
        self.store.delete(conversation_id)
        if conversation_id == self.conversation_id:
            self.new_chat()
        self._reload_conversations()

    def _selected_conversation(self) -> int | None:
        item = self.conversations.currentItem()
        return item.data(Qt.UserRole) if item is not None else None

    def _rename_selected(self) -> None:
        cid = self._selected_conversation()
        if cid is None:
            return
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title", text=self.store.title(cid) or "")
        if ok:
            self.rename_conversation(cid, title)

    def _delete_selected(self) -> None:
        cid = self._selected_conversation()
        if cid is not None:
            self.delete_conversation(cid)

    def export_conversation(self, conversation_id: int, path: Path, fmt: str) -> None:
        """Write the conversation's shown path to ``path`` as ``fmt`` "md" or "json".
        Raises OSError when the file cannot be written."""
        title = self.store.title(conversation_id) or "Chat"
        messages = self.store.messages(conversation_id)
        text = export.to_markdown(title, messages) if fmt == "md" else export.to_json(title, messages)
        Path(path).write_text(text, encoding="utf-8")

    def _export_selected(self, fmt: str) -> None:
        cid = self._selected_conversation()
        if cid is None:
            return
        name = _title(self.store.title(cid) or "chat", 40).replace("/", "-").replace("…", "")
        filters = "Markdown (*.md)" if fmt == "md" else "JSON (*.json)"
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", f"{name}.{fmt}", filters)
        if not path:
            return
        try:
            self.export_conversation(cid, Path(path), fmt)
            self.status.setText(f"Exported to {path}")
        except OSError as exc:
            self.show_error(f"Could not export: {exc}")

    def _reload_conversations(self) -> None:
        self.conversations.clear()
        query = self.search.text().strip() if hasattr(self, "search") else ""
        for info in self.store.list(query):
            item = QListWidgetItem(info.title)
            item.setData(Qt.UserRole, info.id)
            self.conversations.addItem(item)
            if info.id == self.conversation_id:
                item.setSelected(True)
                self.conversations.setCurrentItem(item)

    # --- settings ---------------------------------------------------------------------------

    def _on_highlight(self, on: bool) -> None:
        self.view.set_highlight(on)
        self._save_settings()

    def _save_settings(self) -> None:
        if not self._ready:
            return
        s = self.panel.apply_to(self.settings)
        target, draft = self.picker.current_target(), self.picker.current_draft()
        if target is not None:
            s.target = spec_of(target)
            s.draft = spec_of(draft) if draft is not None else ""
        s.highlight = self.highlight_box.isChecked()
        s.serve, s.serve_port = self.serve_switch.isChecked(), self.serve_port.value()
        if not self.persist:
            return
        try:
            save_settings(s)
        except OSError as exc:
            self.show_error(f"Settings not saved: {exc}")

    def closeEvent(self, event) -> None:
        """Stop a running answer (within one round), free the models, then close."""
        self.status.setText("Closing…")
        self._save_settings()
        self.picker.shutdown()
        if not self.host.shutdown():
            self.show_error("The model thread did not stop in time; closing anyway.")
        # Deliver what the worker sent before it stopped (a stopped answer is saved).
        QCoreApplication.sendPostedEvents(self, QEvent.MetaCall)
        self._closed = True
        self.store.close()
        super().closeEvent(event)


def _title(text: str, length: int = 48) -> str:
    line = " ".join(text.split())
    return line if len(line) <= length else line[: length - 1] + "…"
