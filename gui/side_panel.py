"""The right of the main window, in a scroll area: the model pair with its memory badge,
the settings, and the local server switch."""

from __future__ import annotations

from PySide6.QtWidgets import QGroupBox, QScrollArea, QVBoxLayout, QWidget

from .models.memory_badge import MemoryBadge
from .models.model_picker import PairPicker
from .models.remote_box import RemoteBox
from .server.serve_switch import ServeBox
from .settings.settings_panel import SettingsPanel


class SidePanel(QScrollArea):
    """Holds :attr:`picker` (:class:`PairPicker`), :attr:`memory_badge`, :attr:`remote_box`,
    :attr:`settings_panel` (:class:`SettingsPanel`) and :attr:`serve_box`; the window
    connects them."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.picker = PairPicker()
        self.settings_panel = SettingsPanel()
        pair_box = QGroupBox("Model pair")
        self.memory_badge = MemoryBadge()
        pair_layout = QVBoxLayout(pair_box)
        pair_layout.addWidget(self.picker)
        pair_layout.addWidget(self.memory_badge)
        self.remote_box = RemoteBox()
        settings_box = QGroupBox("Settings")
        QVBoxLayout(settings_box).addWidget(self.settings_panel)
        self.serve_box = ServeBox()
        side = QWidget()
        sv = QVBoxLayout(side)
        sv.addWidget(pair_box)
        sv.addWidget(self.remote_box)
        sv.addWidget(settings_box)
        sv.addWidget(self.serve_box)
        sv.addStretch(1)
        self.setWidgetResizable(True)
        self.setWidget(side)
        self.setMinimumWidth(330)
