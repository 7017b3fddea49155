"""The README's screenshots: the window at 1280×800 with a finished answer from the real
default pair, rendered Markdown with a coloured Python code block and token sources
highlighted, regenerated once (so it shows "◀ 2/2 ▶"), scrolled to its end so the
stats, the drafting line and the drafter chart show, with the context meter and the
memory badge; light, or with ``--dark`` a dark palette as a system in dark mode gives it.

``python -m gui.screenshot docs/screenshot.png [--dark]`` (offscreen unless
QT_QPA_PLATFORM says otherwise; under Xvfb: ``xvfb-run -a python -m gui.screenshot …``).
Nothing is written to the user's settings or conversations.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PROMPT = (
    "In Python, write is_palindrome(text) ignoring case and punctuation, plus an example "
    "call, then a one-sentence explanation. Keep it short."
)
SIZE = (1280, 800)  # pixels


def dark_palette():
    """A dark palette like the ones Qt takes from a system in dark mode."""
    from PySide6.QtGui import QColor, QPalette

    p = QPalette()
    for role, colour in (
        (QPalette.Window, "#202124"),
        (QPalette.WindowText, "#e8eaed"),
        (QPalette.Base, "#17181a"),
        (QPalette.AlternateBase, "#2a2b2e"),
        (QPalette.Text, "#e8eaed"),
        (QPalette.Button, "#2d2e31"),
        (QPalette.ButtonText, "#e8eaed"),
        (QPalette.Highlight, "#8ab4f8"),
        (QPalette.HighlightedText, "#202124"),
        (QPalette.Link, "#8ab4f8"),
        (QPalette.PlaceholderText, "#9aa0a6"),
        (QPalette.ToolTipBase, "#2d2e31"),
        (QPalette.ToolTipText, "#e8eaed"),
    ):
        p.setColor(role, QColor(colour))
    for role in (QPalette.ButtonText, QPalette.Text, QPalette.WindowText):
        p.setColor(QPalette.Disabled, role, QColor("#6b6f75"))
    return p


def render(
    out: Path,
    prompt: str = PROMPT,
    max_tokens: int = 160,
    compare: bool = False,
    timeout_s: float = 300.0,
    regenerate: bool = True,
    dark: bool = False,
) -> Path:
    """Load the default pair (draft max 4, p-min 0, so the draft model's tokens show),
    answer ``prompt``, regenerate it once (``regenerate``), optionally rerun it without
    the draft (``compare``), scroll to the end of the chat, and save the window as a
    PNG at ``out``.  Raises
    RuntimeError with the window's message when loading or the answer fails,
    TimeoutError after ``timeout_s`` seconds per step."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # no display: draw offscreen
    from PySide6.QtWidgets import QApplication

    from .chat.store import ConversationStore
    from .drive import ask, load_default_pair, wait_for_answer
    from .window import MainWindow

    app = QApplication.instance() or QApplication(["localspec-screenshot"])
    if dark:
        app.setStyle("Fusion")
        app.setPalette(dark_palette())
    win = MainWindow(store=ConversationStore(":memory:"), autoload=False, persist=False)
    try:
        win.resize(*SIZE)
        win.show()
        win.panel.draft_max.setCurrentText("4")
        win.panel.p_min.setValue(0.0)
        win.panel.temperature.setValue(0.0)
        win.panel.max_tokens.setValue(max_tokens)
        win.highlight_box.setChecked(True)
        load_default_pair(win, timeout_s)
        ask(win, prompt, timeout_s)
        if regenerate:
            win.regenerate()
            wait_for_answer(win, timeout_s, "the regenerated answer")
        if compare:
            win.compare_with_no_draft()
            wait_for_answer(win, timeout_s, "the plain rerun")
        win.input.setPlainText("Now add type hints.")
        win.update_context_meter()
        bar = win.view.browser.verticalScrollBar()
        bar.setValue(bar.maximum())  # the end of the answer: its stats, drafting line and chart
        app.processEvents()
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not win.grab().save(str(out), "PNG"):
            raise OSError(f"could not write {out}")
        return out
    finally:
        win.close()
        # Destroy the Qt objects now, while the application exists, not at interpreter exit.
        from PySide6.QtCore import QCoreApplication, QEvent

        win.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.DeferredDelete)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gui.screenshot", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out", nargs="?", default="docs/screenshot.png", help="PNG file to write")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument(
        "--compare", action="store_true", help="also rerun the prompt with plain decoding"
    )
    parser.add_argument(
        "--dark", action="store_true", help="a dark palette, as in a system's dark mode"
    )
    args = parser.parse_args(argv)
    path = render(Path(args.out), max_tokens=args.max_tokens, compare=args.compare, dark=args.dark)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
