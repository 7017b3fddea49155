"""``localspec serve``'s app from the window: the loaded pair on 127.0.0.1:PORT.

Requests from outside share the pair's slots with the window's own answers
(``SpeculativeModel(parallel=N)``, the settings' "slots"): a
:class:`localspec.server.worker.ModelWorker` runs up to N - 1 of them at once (at least
one), leaving a slot for the window, and their target decodes are batched with the
window's; uvicorn runs in a thread of its own.
"""

from __future__ import annotations

import threading
import time

import uvicorn

from localspec.server.app import ServerConfig, check_port_free, create_app
from localspec.server.worker import ModelWorker

HOST = "127.0.0.1"


class WindowServer:
    """Serves ``model`` (a :class:`~localspec.api.SpeculativeModel`) until :meth:`stop`."""

    def __init__(self, model, port: int, model_name: str):
        self.port = port
        self.worker = ModelWorker(model, threads=max(1, getattr(model, "parallel", 1) - 1))
        app = create_app(
            model, ServerConfig(model_name=model_name, loopback_only=True), worker=self.worker
        )
        self._server = uvicorn.Server(
            uvicorn.Config(
                app, host=HOST, port=port, log_level="warning", timeout_graceful_shutdown=2
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, name="localspec-window-server", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def start(self, timeout_s: float = 10.0) -> None:
        """Listen; raises :class:`~localspec.errors.InvalidOptionError` when the port is
        taken, OSError when uvicorn does not come up within ``timeout_s`` seconds."""
        check_port_free(HOST, self.port)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                raise OSError(f"the server on {HOST}:{self.port} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        """Cancel what runs and waits (within one round), then stop listening."""
        self.worker.close()
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
