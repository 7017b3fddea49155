"""Choosing the pair: a target (catalogue, files on disk, Open GGUF…), a compatible
draft or "No draft", and downloading what is not on disk yet (progress, rate, cancel)."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from localspec.errors import LocalspecError
from localspec.models import discovery

from .download import human_bytes, start_download

OPEN_FILE = "Open GGUF…"
NO_DRAFT = "No draft (plain decoding)"


def spec_of(ref) -> str:
    """What the settings keep for a model: its catalogue name, else its path."""
    if ref.entry is not None:
        return ref.entry.name
    return str(ref.path) if ref.path is not None else ref.name


class PairPicker(QWidget):
    """Emits :attr:`pairReady` with local paths once both files are on disk (after a
    download if needed); :attr:`error` with a message for anything that went wrong."""

    pairReady = Signal(object, object)  # target Path, draft Path or None
    error = Signal(str)
    selectionChanged = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.targets: list = []
        self.candidates: list = []  # DraftCandidate for the current target
        self.target_combo = QComboBox()
        self.target_combo.setMinimumContentsLength(18)
        self.target_combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.draft_combo = QComboBox()
        self.draft_combo.setMinimumContentsLength(18)
        self.draft_combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setForegroundRole(QPalette.PlaceholderText)
        self.load_button = QPushButton("Load pair")
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        self.progress_label = QLabel()
        self.progress_label.setVisible(False)
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.setVisible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for title, combo in (("Target", self.target_combo), ("Draft", self.draft_combo)):
            combo.view().setMinimumWidth(560)  # the open list shows whole names, sizes and notes
            combo.currentTextChanged.connect(combo.setToolTip)
            layout.addWidget(QLabel(title))
            layout.addWidget(combo)
        layout.addWidget(self.note)
        row = QHBoxLayout()
        row.addWidget(self.load_button)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_label)

        self._job = None
        self._thread = None
        self.target_combo.activated.connect(self._target_activated)
        self.draft_combo.activated.connect(self._draft_activated)
        self.draft_combo.currentIndexChanged.connect(self._update_button)
        self.draft_combo.currentIndexChanged.connect(lambda _i: self.selectionChanged.emit())
        self.load_button.clicked.connect(self.load_selected)
        self.cancel_button.clicked.connect(self.cancel_download)

    # --- selection ----------------------------------------------------------------------

    def refresh(self, target_spec: str = "", draft_spec: str | None = None) -> None:
        """Re-list the models; select ``target_spec`` (default: the catalogue's default
        pair) and ``draft_spec`` ("" = no draft, None = the recommended draft)."""
        try:
            self.targets = discovery.list_models()
        except LocalspecError as exc:
            self.targets = []
            self.error.emit(str(exc))
        chosen = None
        if target_spec:
            try:
                chosen = discovery.model_ref(target_spec)
            except LocalspecError:
                self.error.emit(
                    f"The saved target {target_spec} is not available; the default pair is "
                    "selected."
                )
        if chosen is None:
            try:
                chosen = discovery.model_ref(_default_pair_name())
            except LocalspecError:
                chosen = self.targets[0] if self.targets else None
        if chosen is not None and not any(_same(chosen, t) for t in self.targets):
            self.targets.append(chosen)
        self._fill_targets(chosen)
        self._fill_drafts(draft_spec)

    def add_target_path(self, path: str | Path) -> bool:
        """Add a GGUF file as a target and select it; False (and :attr:`error`) if unusable."""
        try:
            ref = discovery.model_ref(Path(path))
        except LocalspecError as exc:
            self.error.emit(str(exc))
            return False
        if not any(_same(ref, t) for t in self.targets):
            self.targets.append(ref)
        self._fill_targets(ref)
        self._fill_drafts(None)
        return True

    def current_target(self):
        i = self.target_combo.currentIndex()
        return self.targets[i] if 0 <= i < len(self.targets) else None

    def current_draft(self):
        data = self.draft_combo.currentData()
        return None if data is None or data < 0 else self.candidates[data].model

    def draft_names(self) -> list[str]:
        """The names in the draft list, "No draft" excluded."""
        data = [self.draft_combo.itemData(i) for i in range(self.draft_combo.count())]
        return [self.candidates[d].model.name for d in data if d is not None and d >= 0]

    def add_draft_path(self, path: str | Path) -> bool:
        """Offer a GGUF file as the draft if it can draft for the current target; else
        :attr:`error` with the reasons and False."""
        target = self.current_target()
        try:
            ref = discovery.model_ref(Path(path))
            if target is None or target.path is None:
                raise LocalspecError(
                    "download the target first; a draft file is checked against it"
                )
            verdict = discovery.check_draft(target, ref)
        except LocalspecError as exc:
            self.error.emit(str(exc))
            return False
        if not verdict.compatible:
            self.error.emit(
                f"{ref.name} cannot draft for {target.name}: " + "; ".join(verdict.reasons)
            )
            return False
        self.candidates.append(verdict)
        self.draft_combo.blockSignals(True)
        self.draft_combo.insertItem(
            self.draft_combo.count() - 1, ref.label, len(self.candidates) - 1
        )
        self.draft_combo.setCurrentIndex(self.draft_combo.count() - 2)
        self.draft_combo.blockSignals(False)
        self._update_button()
        self.selectionChanged.emit()
        return True

    def _draft_activated(self, index: int) -> None:
        if self.draft_combo.itemData(index) != -1:
            return
        path, _ = QFileDialog.getOpenFileName(
            self, "Open a GGUF draft model", str(Path.home()), "GGUF models (*.gguf)"
        )
        if not path or not self.add_draft_path(path):
            self.draft_combo.setCurrentIndex(0)

    def _fill_targets(self, chosen) -> None:
        self.target_combo.blockSignals(True)
        self.target_combo.clear()
        for ref in self.targets:
            self.target_combo.addItem(ref.label)
            self.target_combo.setItemData(
                self.target_combo.count() - 1, str(ref.path or ref.name), Qt.ToolTipRole
            )
        self.target_combo.addItem(OPEN_FILE)
        index = next(
            (i for i, t in enumerate(self.targets) if chosen is not None and _same(chosen, t)), 0
        )
        self.target_combo.setCurrentIndex(index)
        self.target_combo.blockSignals(False)

    def _fill_drafts(self, draft_spec: str | None) -> None:
        target = self.current_target()
        try:
            self.candidates = discovery.drafts_for(target) if target is not None else []
        except (LocalspecError, OSError) as exc:
            self.candidates = []
            self.error.emit(str(exc))
        self.draft_combo.blockSignals(True)
        self.draft_combo.clear()
        self.draft_combo.addItem(NO_DRAFT, None)
        select = 0
        for i, cand in enumerate(self.candidates):
            if not cand.compatible:
                continue
            label = cand.model.label + ("  ★ recommended" if cand.recommended else "")
            self.draft_combo.addItem(label, i)
            if cand.notes:
                self.draft_combo.setItemData(
                    self.draft_combo.count() - 1, "; ".join(cand.notes), Qt.ToolTipRole
                )
            if draft_spec is None and cand.recommended and select == 0:
                select = self.draft_combo.count() - 1
            if draft_spec and spec_of(cand.model) == draft_spec:
                select = self.draft_combo.count() - 1
        if draft_spec is None and select == 0 and self.draft_combo.count() > 1:
            select = 1  # the best compatible draft
        self.draft_combo.addItem(OPEN_FILE, -1)
        self.draft_combo.setCurrentIndex(select)
        self.draft_combo.blockSignals(False)
        self._explain_incompatible()
        self._update_button()
        self.selectionChanged.emit()

    def _explain_incompatible(self) -> None:
        bad = [c for c in self.candidates if not c.compatible]
        good = [c for c in self.candidates if c.compatible]
        if not bad:
            self.note.setText(
                "" if good else "No other model on disk or in the catalogue can draft for it."
            )
            self.note.setToolTip("")
            return
        lines = [
            f"<b>{html.escape(c.model.name)}</b>: {html.escape('; '.join(c.reasons))}" for c in bad
        ]
        if good:
            self.note.setText(f"{len(bad)} incompatible model(s) not listed (hover for reasons).")
        else:
            self.note.setText(
                f"No compatible draft for this target; use No draft. {len(bad)} model(s) checked "
                "(hover for reasons)."
            )
        self.note.setToolTip("<br>".join(lines))

    def _target_activated(self, index: int) -> None:
        if index == len(self.targets):  # Open GGUF…
            path, _ = QFileDialog.getOpenFileName(
                self, "Open a GGUF model", str(Path.home()), "GGUF models (*.gguf)"
            )
            if not path or not self.add_target_path(path):
                self._fill_targets(
                    self.current_target() or (self.targets[0] if self.targets else None)
                )
            return
        self._fill_drafts(None)

    def _update_button(self) -> None:
        refs = [r for r in (self.current_target(), self.current_draft()) if r is not None]
        missing = [r for r in refs if not r.downloaded]
        self.load_button.setText("Download && load" if missing else "Load pair")
        self.load_button.setEnabled(bool(refs) and self._job is None)
        self.load_button.setToolTip(
            "Fetch " + ", ".join(f"{r.name} ({human_bytes(r.size)})" for r in missing)
            if missing
            else "Load both models (replaces the loaded pair)"
        )

    # --- load / download ----------------------------------------------------------------

    def load_selected(self) -> None:
        """Emit :attr:`pairReady` now, or after downloading what is missing."""
        target, draft = self.current_target(), self.current_draft()
        if target is None:
            self.error.emit("choose a target model first")
            return
        refs = [target] + ([draft] if draft is not None else [])
        if all(r.downloaded for r in refs):
            self.pairReady.emit(Path(target.path), Path(draft.path) if draft is not None else None)
            return
        self._job, self._thread = start_download(refs, self)
        self._job.progress.connect(self._on_progress)
        self._job.done.connect(lambda paths: self._download_ended(paths, draft is not None))
        self._job.failed.connect(
            lambda msg: self._download_ended(None, False, f"download failed: {msg}")
        )
        self._job.cancelled.connect(lambda: self._download_ended(None, False, None))
        self.progress.setRange(0, 0)
        for w in (self.progress, self.progress_label, self.cancel_button):
            w.setVisible(True)
        self.progress_label.setText("Starting download…")
        self._update_button()
        self._thread.start()

    def cancel_download(self) -> None:
        if self._job is not None:
            self._job.cancel_event.set()
            self.progress_label.setText("Cancelling…")

    def _on_progress(self, name: str, done: int, total: int, rate: float) -> None:
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * done / total))
        self.progress_label.setText(
            f"{name}: {human_bytes(done)} of {human_bytes(total)} · {human_bytes(rate)}/s"
        )

    def _download_ended(self, paths, has_draft: bool, message: str | None = "") -> None:
        self._job = None
        self._thread = None
        for w in (self.progress, self.cancel_button):
            w.setVisible(False)
        self.progress_label.setText("Download cancelled." if message is None else "")
        self.progress_label.setVisible(message is None)
        if paths:  # the files are on disk now: list them as downloaded
            target, draft = self.current_target(), self.current_draft()
            self.refresh(
                spec_of(target) if target else "", spec_of(draft) if draft is not None else ""
            )
        self._update_button()
        if message:
            self.error.emit(message)
        elif paths:
            self.pairReady.emit(paths[0], paths[1] if has_draft else None)

    def busy(self) -> bool:
        return self._job is not None

    def shutdown(self, timeout_ms: int = 30_000) -> bool:
        """Cancel a running download and wait for its thread (up to ``timeout_ms``
        milliseconds; a download stops within one chunk).  Returns whether it ended."""
        if self._thread is None:
            return True
        self.cancel_download()
        try:
            return self._thread.wait(timeout_ms)
        except RuntimeError:  # the thread already ended and Qt deleted it
            return True


def _same(a, b) -> bool:
    if a.entry is not None or b.entry is not None:
        return a.name == b.name
    return (
        a.path is not None
        and b.path is not None
        and Path(a.path).resolve() == Path(b.path).resolve()
    )


def _default_pair_name() -> str:
    from localspec.models.catalog import load_catalog

    return load_catalog().default_pair
