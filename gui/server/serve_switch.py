"""The serve switch: the loaded pair as an OpenAI-compatible server on localhost
(see :mod:`gui.server.serve`), its port, its URL and a Copy button."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)


class ServeBox(QGroupBox):
    """The switch, the port (1024 to 65535) and the read-only URL with its Copy button."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Local server (OpenAI-compatible)", parent)
        self.switch = QCheckBox("Serve on localhost:")
        self.switch.setToolTip(
            "Let editors, agents and chat apps on this computer use the loaded pair "
            "(they share the pair's slots with this window's answers)"
        )
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.slots = QSpinBox()
        self.slots.setRange(1, 16)
        self.slots.setPrefix("slots: ")
        self.slots.setToolTip(
            "Answers generated at once, this window's included (localspec serve's --parallel);\n"
            "their target decodes are batched.  Takes effect when the pair is next loaded."
        )
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setPlaceholderText("off")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the base URL (for the openai client's base_url)")
        box = QVBoxLayout(self)
        row = QHBoxLayout()
        row.addWidget(self.switch)
        row.addWidget(self.port)
        row.addWidget(self.slots)
        row.addStretch(1)
        box.addLayout(row)
        row = QHBoxLayout()
        row.addWidget(self.url, 1)
        row.addWidget(self.copy_button)
        box.addLayout(row)
        self.copy_button.clicked.connect(
            lambda: QGuiApplication.clipboard().setText(self.url.text())
        )

    def set_checked_quietly(self, on: bool) -> None:
        """Set the switch without emitting ``toggled`` (nothing starts or stops)."""
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)


class ServeSwitch:
    """Starts and stops the window's server (:meth:`ModelHost.start_server`) as the
    switch says; one turned on before a pair is loaded starts once it is.  ``window``:
    the :class:`~gui.window.MainWindow` (its host, settings, picker, status and banner)."""

    def __init__(self, window, box: ServeBox):
        self.window = window
        self.box = box

    def toggled(self, on: bool) -> None:
        w = self.window
        w.settings.serve = on
        w.settings.serve_port = self.box.port.value()
        w.settings.parallel = self.box.slots.value()
        w.save_settings()
        if on:
            if w.model_ready:
                self.start()
            else:
                self.box.url.setPlaceholderText("starts once a pair is loaded")
        else:
            w.host.stop_server()
            self.box.url.clear()
            self.box.url.setPlaceholderText("off")

    def start(self) -> None:
        """Serve the loaded pair on the chosen port, named after the target; a port that
        is taken (or a server that does not start) turns the switch off and says why."""
        from localspec.errors import LocalspecError

        w = self.window
        target = w.picker.current_target()
        name = target.name if target is not None else "localspec"
        try:
            url = w.host.start_server(self.box.port.value(), name)
        except (LocalspecError, OSError) as exc:
            self.box.set_checked_quietly(False)
            self.box.url.clear()
            w.show_error(f"Could not serve on localhost:{self.box.port.value()}: {exc}")
            return
        self.box.url.setText(url)
        slots = getattr(w.host.worker.model, "parallel", 1)
        w.status.setText(
            f"Serving the pair at {url} ({slots} slots, this window's answers included)"
        )
