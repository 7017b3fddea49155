"""The "OpenAI-compatible server" pair source: URL, key and model, and a Connect button."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLineEdit, QPushButton, QWidget


class RemoteBox(QGroupBox):
    """Emits :attr:`connectRequested` (url, api key, model; model "" = the server's first)."""

    connectRequested = Signal(str, str, str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Or chat with a server", parent)
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://127.0.0.1:8080/v1")
        self.url.setToolTip(
            "An OpenAI-compatible server: localspec serve, llama-server, vLLM, SGLang, …"
        )
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.Password)
        self.api_key.setPlaceholderText("none")
        self.model = QLineEdit()
        self.model.setPlaceholderText("the server's first model")
        self.connect_button = QPushButton("Connect")
        form = QFormLayout(self)
        form.addRow("URL", self.url)
        form.addRow("API key", self.api_key)
        form.addRow("Model", self.model)
        form.addRow(self.connect_button)
        self.connect_button.clicked.connect(self._connect)
        self.url.returnPressed.connect(self._connect)

    def _connect(self) -> None:
        url = self.url.text().strip() or self.url.placeholderText()
        self.connectRequested.emit(url, self.api_key.text().strip(), self.model.text().strip())
