"""Loading a model pair in the main window's model thread, and what the window shows
while it loads, once it is ready, or when it fails."""

from __future__ import annotations

from pathlib import Path


class PairLoading:
    """Loads pairs for ``window`` (the :class:`~gui.window.MainWindow`): its ``model_ready``
    and ``loading`` say where that stands; its busy bar and status line show it."""

    def __init__(self, window):
        self.window = window

    def load(self, target: Path, draft: Path | None) -> None:
        """Load ``target`` (+ ``draft``) in the model thread with the current settings."""
        w = self.window
        if w.request is not None:
            w.show_error("Stop the running answer before loading another pair.")
            return
        w.save_settings()
        w.serve_url.clear()  # the host stops serving the pair being replaced
        w.model_ready = False
        w.loading = True
        w.busy.setRange(0, 0)  # busy until llama.cpp reports how far it has read
        w.busy.setVisible(True)
        w.status.setText("Loading…")
        w.update_buttons()
        w.host.load(
            {
                "target": str(target),
                "draft": str(draft) if draft else None,
                **w.settings.load_options(),
            }
        )

    def connect(self, url: str, api_key: str, model: str) -> None:
        """Chat with an OpenAI-compatible server instead of a loaded pair."""
        w = self.window
        if w.request is not None:
            w.show_error("Stop the running answer before connecting.")
            return
        w.serve_url.clear()
        w.model_ready = False
        w.loading = True
        w.busy.setRange(0, 0)
        w.busy.setVisible(True)
        w.status.setText(f"Connecting to {url}…")
        w.update_buttons()
        w.host.load({"remote": {"url": url, "api_key": api_key, "model": model}})

    def on_progress(self, role: str, fraction: float) -> None:
        """One model's weights read so far (``fraction`` 0.0 to 1.0), from llama.cpp."""
        w = self.window
        w.busy.setRange(0, 100)
        w.busy.setValue(round(100 * fraction))
        w.status.setText(f"Loading the {role} model… {100 * fraction:.0f} %")

    def on_loaded(self, info: dict) -> None:
        """The pair is ready: ``info`` has the "target" and "draft" paths and "load_s"."""
        w = self.window
        w.model_ready = True
        w.loading = False
        w.busy.setVisible(False)
        if info.get("remote"):
            w.status.setText(f"Connected: {info['target']} on {info['remote']}")
        else:
            names = Path(info["target"]).name
            names += f" + draft {Path(info['draft']).name}" if info["draft"] else " (no draft)"
            w.status.setText(f"Ready: {names} — loaded in {info['load_s']:.1f} s")
        w.session.baseline_tps = None  # a baseline belongs to one pair
        w.view.set_baseline(None)
        w.update_buttons()
        w.update_context_meter()
        if w.serve_switch.isChecked():
            w.serving.start()
        w.pairLoaded.emit(info)

    def on_failed(self, message: str) -> None:
        w = self.window
        w.model_ready = False
        w.loading = False
        w.busy.setVisible(False)
        w.status.setText("No model loaded")
        w.show_error(f"Could not load the pair: {message}")  # (or connect to the server)
        w.update_buttons()
        w.pairFailed.emit(message)
