"""Driving the main window from code, as a person would with the mouse: wait for one of
two signals, load the default pair, ask one question.  Used by the screenshots
(:mod:`gui.screenshot`) and the self-test (:mod:`gui.self_test`)."""

from __future__ import annotations

from PySide6.QtCore import QEventLoop, QTimer


def wait_for(signal_ok, signal_fail, timeout_s: float) -> tuple[bool, tuple]:
    """Run the event loop until ``signal_ok`` or ``signal_fail`` fires; returns (True,
    args) or (False, args).  Raises TimeoutError when neither fires in ``timeout_s`` seconds."""
    loop = QEventLoop()
    got: dict = {}

    def done(ok):
        def handler(*args):
            got.setdefault("ok", ok)
            got.setdefault("args", args)
            loop.quit()

        return handler

    signal_ok.connect(done(True))
    signal_fail.connect(done(False))
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    if "ok" not in got:
        raise TimeoutError(f"nothing happened in {timeout_s:.0f} s")
    return got["ok"], got["args"]


def load_default_pair(win, timeout_s: float) -> dict:
    """Load the catalogue's default pair (already on disk, or fetched as the library
    does) into ``win`` and wait; returns the window's load info.  Raises RuntimeError
    with the window's one-line message when it fails, TimeoutError after ``timeout_s``."""
    from localspec.api import resolve_pair

    pair = resolve_pair()
    win.load_pair(pair.target, pair.draft)
    ok, args = wait_for(win.pairLoaded, win.pairFailed, timeout_s)
    if not ok:
        raise RuntimeError(f"could not load the default pair: {args[0]}")
    return args[0]


def wait_for_answer(win, timeout_s: float, what: str = "the answer"):
    """Wait for the answer under way in ``win``; returns the finished assistant Message.
    Raises RuntimeError with the window's message when it fails, TimeoutError after
    ``timeout_s``."""
    ok, args = wait_for(win.answerDone, win.answerFailed, timeout_s)
    if not ok:
        raise RuntimeError(f"{what} failed: {args[0]}")
    return args[0]


def ask(win, prompt: str, timeout_s: float):
    """Type ``prompt`` into ``win``, send it and wait; returns the finished assistant Message."""
    win.input.setPlainText(prompt)
    win.send()
    return wait_for_answer(win, timeout_s)
