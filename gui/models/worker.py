"""The model thread: one long-lived :class:`ChatWorker` on its own QThread owns both
models; :class:`ModelHost` (GUI thread) sends it requests as queued calls.

Data flows one way: requests go in through the host's private signals (queued, since
the worker lives in another thread); token events, stats and errors come back as the
worker's signals, one :attr:`ChatWorker.round` emit per speculative round.  Stop is a
flag the generation reads after every round (``Generation.cancel``), not a queued
message, so it takes effect within one round even while the worker is busy.
"""

from __future__ import annotations

import threading
import time
import traceback

from PySide6.QtCore import QObject, QThread, Signal, Slot

from localspec.errors import LocalspecError

from ..chat.message import Segment, event_segments


class ChatWorker(QObject):
    """Lives in the model thread; never touch it from the GUI thread except
    :meth:`request_stop`."""

    status = Signal(str)  # a human line: "Loading qwen… (1.0 GiB)"
    loadProgress = Signal(
        str, float
    )  # "target" / "draft", fraction of its weights read (0.0 to 1.0)
    loaded = Signal(dict)  # {"target": str, "draft": str | None, "load_s": float (seconds)}
    loadFailed = Signal(str)  # the LocalspecError / OSError message
    round = Signal(int, object)  # request id, list[Segment] of one speculative round
    finished = Signal(
        int, dict
    )  # request id, {"text", "reasoning", "finish_reason", "stats": GenerationStats.to_dict()}
    failed = Signal(int, str)  # request id, error message
    closed = Signal()

    def __init__(self):
        super().__init__()
        self._model = None
        self._model_lock = threading.Lock()  # held while the model is replaced or freed
        self._lock = threading.Lock()  # guards _generation / _stopped between threads
        self._generation = None
        self._stopped: set[int] = set()
        self.current_round = -1  # round of the last event taken from the engine

    # --- called from any thread -------------------------------------------------------

    def request_stop(self, request_id: int | None = None) -> None:
        """End request ``request_id`` (None: whatever runs now) after its current round."""
        with self._lock:
            if request_id is not None:
                self._stopped.add(request_id)
            if self._generation is not None and (
                request_id is None or self._generation[0] == request_id
            ):
                self._generation[1].cancel()

    def count_tokens(self, messages: list[dict]) -> tuple[int, int] | None:
        """(tokens of ``messages`` rendered with the target's chat template, n_ctx), or None
        while no model is loaded or one is being loaded or freed.  Safe from the GUI thread:
        the tokenizing runs on the pair's own llama.cpp thread (see
        :mod:`localspec.llama.owner`), between two rounds of a running answer, so it waits
        at most one round (a few tens of milliseconds on a 2-core CPU)."""
        if not self._model_lock.acquire(blocking=False):
            return None
        try:
            if self._model is None or not hasattr(
                self._model, "target"
            ):  # none, or a remote server
                return None
            n_ctx = self._model.target.n_ctx
            return (len(self._model.target.chat_tokens(messages)) if messages else 0), n_ctx
        except (LocalspecError, ValueError):
            return None
        finally:
            self._model_lock.release()

    @property
    def model(self):
        """The loaded SpeculativeModel or None (for the serve switch, whose requests take
        the pair's other slots)."""
        return self._model

    # --- slots, run in the model thread -------------------------------------------------

    @Slot(dict)
    def load(self, config: dict) -> None:
        """``config``: target / draft (paths, draft may be None) plus SpeculativeModel keyword
        options (n_ctx tokens, n_gpu_layers, n_gpu_layers_draft, draft_max, draft_min, p_min)."""
        from localspec.api import SpeculativeModel

        with self._model_lock:
            self._close_model()
        config = dict(config)
        if "remote" in config:
            self._connect(config["remote"])
            return
        target, draft = config.pop("target"), config.pop("draft", None)
        started = time.perf_counter()
        names = " + ".join(str(p).rsplit("/", 1)[-1] for p in (target, draft) if p)
        self.status.emit(f"Loading {names}…")
        try:
            model = SpeculativeModel(target, draft, load_progress=self.loadProgress.emit, **config)
            with self._model_lock:
                self._model = model
        except (LocalspecError, OSError, ValueError) as exc:
            self._model = None
            self.loadFailed.emit(str(exc) or type(exc).__name__)
            return
        except Exception as exc:  # a bug: keep the app alive, say so, keep the traceback on stderr
            traceback.print_exc()
            self._model = None
            self.loadFailed.emit(f"internal error ({type(exc).__name__}): {exc}")
            return
        self.loaded.emit(
            {
                "target": str(target),
                "draft": str(draft) if draft else None,
                "load_s": time.perf_counter() - started,
            }
        )

    def _connect(self, remote: dict) -> None:
        """Use an OpenAI-compatible server (``remote``: url, api_key, model) as the pair."""
        from .remote import RemoteModel

        started = time.perf_counter()
        self.status.emit(f"Connecting to {remote['url']}…")
        try:
            model = RemoteModel(
                remote["url"], remote.get("api_key", ""), remote.get("model") or None
            )
        except LocalspecError as exc:
            self.loadFailed.emit(str(exc))
            return
        with self._model_lock:
            self._model = model
        self.loaded.emit(
            {
                "target": model.model,
                "draft": None,
                "load_s": time.perf_counter() - started,
                "remote": model.url,
            }
        )

    @Slot(int, object, object)
    def generate(self, request_id: int, messages: list, options: dict) -> None:
        """Answer ``messages`` with ``SpeculativeModel.chat`` options; emits ``round`` per
        round (a reasoning model's thinking as "reasoning" segments), then ``finished``
        (finish_reason "cancelled" after Stop; with thinking, ``stats["thinking_s"]``: seconds
        from the request to the thinking's last token) or ``failed``."""
        if self._model is None:
            self.failed.emit(request_id, "no model is loaded; choose a pair and press Load")
            return
        try:
            started = time.perf_counter()
            generation = self._model.chat(messages, stream=True, **options)
            with self._lock:
                self._generation = (request_id, generation)
                if request_id in self._stopped:
                    generation.cancel()
            thought_at = self._stream_rounds(request_id, generation)
            result = generation.result
            stats = result.stats.to_dict()
            if getattr(result.stats, "unavailable", False):  # a remote server without timings
                stats["unavailable"] = True
            if thought_at is not None:
                stats["thinking_s"] = thought_at - started
            self.finished.emit(
                request_id,
                {
                    "text": result.text,
                    "reasoning": getattr(result, "reasoning", None) or "",
                    "finish_reason": result.finish_reason,
                    "stats": stats,
                },
            )
        except (LocalspecError, OSError, ValueError) as exc:
            self.failed.emit(request_id, str(exc) or type(exc).__name__)
        except Exception as exc:  # a bug: keep the app alive, say so, keep the traceback on stderr
            traceback.print_exc()
            self.failed.emit(request_id, f"internal error ({type(exc).__name__}): {exc}")
        finally:
            with self._lock:
                self._generation = None
                self._stopped.discard(request_id)

    def _stream_rounds(self, request_id: int, generation) -> float | None:
        """Emit ``generation``'s events as one ``round`` signal per speculative round;
        returns when (``time.perf_counter()``) its last thinking token came, None without
        thinking."""
        batch: list[Segment] = []
        current, thought_at, answering = None, None, False
        for event in generation:
            self.current_round = event.round
            if current is not None and event.round != current and batch:
                self.round.emit(request_id, batch)
                batch = []
            current = event.round
            batch.extend(event_segments(event))
            answering = answering or bool(event.text)
            if getattr(event, "reasoning", "") or (thought_at is not None and not answering):
                thought_at = (
                    time.perf_counter()
                )  # a thinking token, or a marker that closes the thinking
        if batch:
            self.round.emit(request_id, batch)
        return thought_at

    @Slot()
    def close(self) -> None:
        """Free both models and end the thread's event loop."""
        with self._model_lock:
            self._close_model()
        self.closed.emit()
        QThread.currentThread().quit()

    def _close_model(self) -> None:
        if self._model is not None:
            self._model.close()
            self._model = None


class ModelHost(QObject):
    """The GUI thread's handle on the model thread.  Its methods return at once."""

    _load = Signal(dict)
    _generate = Signal(int, object, object)
    _close = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.thread = QThread(self)
        self.thread.setObjectName("localspec-model")
        self.worker = ChatWorker()
        self.worker.moveToThread(self.thread)
        self._load.connect(self.worker.load)
        self._generate.connect(self.worker.generate)
        self._close.connect(self.worker.close)
        self._next_id = 0
        self.server = None  # gui.server.serve.WindowServer while the serve switch is on
        self.thread.start()

    def start_server(self, port: int, model_name: str) -> str:
        """Serve the loaded pair on 127.0.0.1:``port`` (see :mod:`gui.server.serve`); returns the
        base URL.  Raises LocalspecError / OSError when there is no model or the port is taken."""
        from localspec.errors import InvalidOptionError

        from ..server.serve import WindowServer

        self.stop_server()
        if self.worker.model is None:
            raise InvalidOptionError("load a pair first")
        if not hasattr(self.worker.model, "target"):
            raise InvalidOptionError(
                "the window is chatting with a server; load a pair here to serve it"
            )
        server = WindowServer(self.worker.model, port, model_name)
        try:
            server.start()
        except BaseException:
            server.worker.close()
            raise
        self.server = server
        return server.url

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def load(self, config: dict) -> None:
        self.stop_server()  # it serves the pair being replaced
        self._load.emit(config)

    def generate(self, messages: list[dict], options: dict) -> int:
        """Queue a request; returns its id (matches the worker signals' first argument)."""
        self._next_id += 1
        self._generate.emit(self._next_id, messages, options)
        return self._next_id

    def stop(self, request_id: int | None = None) -> None:
        self.worker.request_stop(request_id)

    def shutdown(self, timeout_ms: int = 120_000) -> bool:
        """Stop any generation (within one round), free the models, end the thread.
        Waits up to ``timeout_ms`` milliseconds (a model still loading cannot be
        interrupted); returns whether the thread ended."""
        self.stop_server()
        if not self.thread.isRunning():
            return True
        self.stop()
        self._close.emit()
        return self.thread.wait(timeout_ms)
