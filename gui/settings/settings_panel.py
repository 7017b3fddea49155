"""The settings widgets of the side panel; reads and writes a :class:`Settings`."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSlider,
    QSpinBox,
    QWidget,
)

from .settings import ALL_LAYERS, DRAFT_MAX_CHOICES, LIMITS, MAX_LAYERS, OVERFLOW_CHOICES, Settings

CONTEXT_CHOICES = [1024, 2048, 4096, 8192, 16384, 32768]


class LayerSlider(QWidget):
    """0..127 layers on the GPU, or "all" at the right end (value -1)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.slider = QSlider(Qt.Horizontal)
        self.slider.setRange(0, MAX_LAYERS)
        self.label = QLabel()
        self.label.setMinimumWidth(28)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.slider)
        row.addWidget(self.label)
        self.slider.valueChanged.connect(
            lambda v: self.label.setText("all" if v == MAX_LAYERS else str(v))
        )
        self.set_value(ALL_LAYERS)

    def value(self) -> int:
        v = self.slider.value()
        return ALL_LAYERS if v == MAX_LAYERS else v

    def set_value(self, layers: int) -> None:
        self.slider.setValue(MAX_LAYERS if layers < 0 or layers >= MAX_LAYERS else layers)
        self.label.setText("all" if self.slider.value() == MAX_LAYERS else str(self.slider.value()))


class SettingsPanel(QWidget):
    """Emits :attr:`changed` on every edit; :meth:`settings` gives the values."""

    changed = Signal()
    thinkingChanged = Signal()  # the thinking switch or budget, edited (also emits changed)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.draft_max = QComboBox()
        self.draft_max.addItems(DRAFT_MAX_CHOICES)
        self.draft_max.setToolTip(
            "Most draft tokens per round; auto picks the drafter and length each round"
        )
        self.draft_min = QSpinBox()
        self.draft_min.setRange(*LIMITS["draft_min"])
        self.draft_min.setToolTip("Drop drafts shorter than this many tokens")
        self.p_min = _spin(
            *LIMITS["p_min"],
            0.05,
            2,
            "Stop drafting when the draft's top probability falls below this",
        )
        self.temperature = _spin(
            *LIMITS["temperature"], 0.05, 2, "0 = greedy (the target's own output)"
        )
        self.top_p = _spin(
            *LIMITS["top_p"], 0.01, 2, "Nucleus sampling (used when temperature > 0)"
        )
        self.seed = QSpinBox()
        self.seed.setRange(*LIMITS["seed"])
        self.seed.setSpecialValueText("random")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(*LIMITS["max_tokens"])
        self.max_tokens.setSuffix(" tokens")
        self.n_ctx = QComboBox()
        self.n_ctx.addItems([str(n) for n in CONTEXT_CHOICES])
        self.n_ctx.setToolTip("Context size in tokens (applies on the next Load)")
        self.gpu_layers = LayerSlider()
        self.gpu_layers.setToolTip(
            "Target layers on the GPU (applies on the next Load; CPU builds ignore it)"
        )
        self.gpu_layers_draft = LayerSlider()
        self.gpu_layers_draft.setToolTip("Draft layers on the GPU (applies on the next Load)")
        self.overflow = QComboBox()
        for key, label in OVERFLOW_CHOICES.items():
            self.overflow.addItem(label, key)
        self.overflow.setToolTip(
            "When the chat no longer fits the context: refuse the message with the numbers, "
            "or leave the oldest turns out of what is sent (the system prompt stays)"
        )
        self._make_thinking()
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("System prompt (optional)")
        self.system_prompt.setFixedHeight(64)

        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("Draft max", self.draft_max)
        form.addRow("Draft min", self.draft_min)
        form.addRow("p-min", self.p_min)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Seed", self.seed)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Thinking", self.thinking)
        form.addRow("Thinking budget", self.reasoning_budget)
        form.addRow("Context", self.n_ctx)
        form.addRow("Too long", self.overflow)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("Draft GPU layers", self.gpu_layers_draft)
        form.addRow(self.system_prompt)

        for w in (self.draft_max, self.n_ctx, self.overflow):
            w.currentIndexChanged.connect(lambda _v: self.changed.emit())
        for w in (
            self.draft_min,
            self.p_min,
            self.temperature,
            self.top_p,
            self.seed,
            self.max_tokens,
        ):
            w.valueChanged.connect(lambda _v: self.changed.emit())
        self.reasoning_budget.valueChanged.connect(lambda _v: self.thinkingChanged.emit())
        self.thinking.toggled.connect(self._on_thinking)
        for w in (self.gpu_layers, self.gpu_layers_draft):
            w.slider.valueChanged.connect(lambda _v: self.changed.emit())
        self.system_prompt.textChanged.connect(self.changed.emit)

    def set_settings(self, s: Settings) -> None:
        self.blockSignals(True)
        if s.draft_max not in DRAFT_MAX_CHOICES:
            self.draft_max.addItem(s.draft_max)
        self.draft_max.setCurrentText(s.draft_max)
        self.draft_min.setValue(s.draft_min)
        self.p_min.setValue(s.p_min)
        self.temperature.setValue(s.temperature)
        self.top_p.setValue(s.top_p)
        self.seed.setValue(s.seed)
        self.max_tokens.setValue(s.max_tokens)
        if str(s.n_ctx) not in [self.n_ctx.itemText(i) for i in range(self.n_ctx.count())]:
            self.n_ctx.addItem(str(s.n_ctx))
        self.n_ctx.setCurrentText(str(s.n_ctx))
        self.gpu_layers.set_value(s.gpu_layers)
        self.gpu_layers_draft.set_value(s.gpu_layers_draft)
        self.system_prompt.setPlainText(s.system_prompt)
        self.overflow.setCurrentIndex(max(0, self.overflow.findData(s.overflow)))
        self.set_thinking(s)
        self.blockSignals(False)

    def _make_thinking(self) -> None:
        self.thinking = QCheckBox("Let the model think")
        self.thinking.setToolTip(
            "A reasoning model (Qwen3, DeepSeek-R1 …) thinks before it answers (enable_thinking); "
            "kept with each conversation. Models that do not think ignore it"
        )
        self.reasoning_budget = QSpinBox()
        self.reasoning_budget.setRange(*LIMITS["reasoning_budget"])
        self.reasoning_budget.setSpecialValueText("unlimited")
        self.reasoning_budget.setSuffix(" tokens")
        self.reasoning_budget.setToolTip(
            "Most thinking tokens; then the close of the thinking is forced and the model answers "
            "(0: no thinking). Kept with each conversation"
        )
        self.thinkingChanged.connect(self.changed.emit)

    def _on_thinking(self, on: bool) -> None:
        self.reasoning_budget.setEnabled(on)
        self.thinkingChanged.emit()

    def set_thinking(self, s: Settings) -> None:
        """Show ``s``'s thinking switch and budget (no signal: a conversation being opened)."""
        blocked = self.signalsBlocked()
        self.blockSignals(True)
        self.thinking.setChecked(s.thinking)
        self.reasoning_budget.setValue(s.reasoning_budget)
        self.reasoning_budget.setEnabled(s.thinking)
        self.blockSignals(blocked)

    def apply_to(self, s: Settings) -> Settings:
        """Copy the widget values into ``s`` (model choice and highlight untouched)."""
        s.draft_max = self.draft_max.currentText()
        s.draft_min = self.draft_min.value()
        s.p_min = round(self.p_min.value(), 4)
        s.temperature = round(self.temperature.value(), 4)
        s.top_p = round(self.top_p.value(), 4)
        s.seed = self.seed.value()
        s.max_tokens = self.max_tokens.value()
        s.n_ctx = int(self.n_ctx.currentText())
        s.gpu_layers = self.gpu_layers.value()
        s.gpu_layers_draft = self.gpu_layers_draft.value()
        s.system_prompt = self.system_prompt.toPlainText()
        s.overflow = self.overflow.currentData()
        s.thinking = self.thinking.isChecked()
        s.reasoning_budget = self.reasoning_budget.value()
        return s


def _spin(lo: float, hi: float, step: float, decimals: int, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    box.setToolTip(tip)
    return box
