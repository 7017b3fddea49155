"""The memory badge under the pair: whether the chosen pair fits this machine's memory
at the chosen context (see :mod:`localspec.models.memory`)."""

from __future__ import annotations

import functools
import threading

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QWidget


class MemoryBadge(QLabel):
    """A coloured verdict with the numbers on hover.  :meth:`estimate` computes it; a
    model not downloaded yet has its header read from the Hub in a thread.

    Signals: :attr:`estimated` ``(key, PairMemory or a problem sentence)``, from the
    estimate's thread; :attr:`shown` (the PairMemory the badge now shows, also kept in
    :attr:`memory`)."""

    estimated = Signal(object, object)
    shown = Signal(object)

    COLOURS = {"fits": "#15803d", "tight": "#b45309", "won't fit": "#b91c1c", "unknown": "#6b7280"}

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWordWrap(True)
        self.memory = None  # the PairMemory shown, once one is
        self._key = None  # what the badge was last computed for
        self._stopped = False
        self.estimated.connect(self._show)

    def estimate(self, target, draft, n_ctx: int, offload: bool) -> None:
        """Estimate ``target`` (+ ``draft``: ModelRefs, either may be None) at ``n_ctx``
        tokens of context, in GPU memory when ``offload``.  Nothing happens when that is
        what the badge already shows or computes; a result for a pair or context no longer
        chosen is dropped."""
        from localspec.llama.backend import memory_budget
        from localspec.models.memory import pair_memory_of_refs

        key = (target, draft, n_ctx, offload)
        if key == self._key:  # the settings changed something else (they fire on every edit)
            return
        self._key = key
        if target is None:
            self.setText("")
            return
        estimate = functools.partial(
            pair_memory_of_refs, target, draft, n_ctx, budget=memory_budget(offload=offload)
        )
        if all(ref is None or ref.downloaded for ref in (target, draft)):
            self._show(key, estimate_or_problem(estimate))
            return
        self.setText("Memory: reading the GGUF headers from the Hub…")
        self.setToolTip("")
        threading.Thread(
            target=self._estimate_in_thread,
            args=(key, estimate),
            name="memory-estimate",
            daemon=True,
        ).start()

    def stop(self) -> None:
        """Drop the results that arrive from now on (the window is closing)."""
        self._stopped = True

    def _estimate_in_thread(self, key, estimate) -> None:
        result = estimate_or_problem(estimate)
        try:
            self.estimated.emit(key, result)  # queued to the GUI thread
        except RuntimeError:  # the window was closed and deleted meanwhile
            pass

    def _show(self, key, est) -> None:
        from localspec.models.memory import gib

        if key != self._key or self._stopped:
            return
        if isinstance(est, str):
            self.setText(f"Memory: cannot estimate ({est})")
            return
        colour = self.COLOURS[est.verdict]
        least = "≥ " if est.partial else ""
        self.setText(
            f'<span style="color:{colour}">●</span> Memory: {least}{gib(est.total)} '
            f"of {gib(est.available)} {est.where}: <b>{est.verdict}</b>"
        )
        self.setToolTip(est.describe())
        self.memory = est
        self.shown.emit(est)


def estimate_or_problem(estimate):
    """``estimate()``, or the sentence saying why it failed."""
    from localspec.errors import LocalspecError

    try:
        return estimate()
    except (LocalspecError, OSError, ValueError) as exc:
        return str(exc)
    except Exception as exc:  # a bug must not leave the badge on "reading…" for good
        return f"{type(exc).__name__}: {exc}"
