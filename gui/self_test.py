"""``localspec-gui --self-test``: open the real window, load the default pair, answer one
short prompt, print the answer and how long each step took, and exit.  It proves an
installed app (a venv's or the desktop bundle's) can show a window, find the pair on
disk (or fetch it) and decode with llama.cpp.  Nothing is written to the user's settings
or conversations.

Output (stdout), times in seconds since the process started::

    localspec-gui self-test: window shown at 0.9 s
    localspec-gui self-test: pair loaded at 3.2 s (qwen2.5-coder-1.5b-instruct-q4_k_m + …)
    <the answer>
    localspec-gui self-test: answered at 6.0 s (Accepted 20/24 draft tokens (83 %) · …)

Exit status 0 with a non-empty answer, 1 with one line on stderr otherwise.
"""

from __future__ import annotations

import os
import sys
import time

PROMPT = "Write a Python function that returns the square of a number. Only the code."
MAX_TOKENS = 48
TIMEOUT_S = 600.0  # per step: a first run may download the pair
_IMPORTED = time.perf_counter()


def _since_start() -> float:
    """Seconds since this process started (from the kernel's clock where it tells, else
    since this module was imported)."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/self/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19]) / ticks
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - started
    except (
        OSError,
        ValueError,
        IndexError,
        AttributeError,
    ):  # AttributeError: no sysconf (Windows)
        return time.perf_counter() - _IMPORTED


def say(text: str) -> None:
    print(f"localspec-gui self-test: {text}", flush=True)


def run(prompt: str = PROMPT, max_tokens: int = MAX_TOKENS, timeout_s: float = TIMEOUT_S) -> int:
    """Drive the main window through one answer (a QApplication must exist); returns the
    exit status.  Prints progress and the answer on stdout, a failure as one line on stderr."""
    from PySide6.QtCore import QCoreApplication, QEvent

    from localspec.errors import LocalspecError

    from .chat.chat_view import format_stats
    from .chat.store import ConversationStore
    from .drive import ask, load_default_pair
    from .window import MainWindow

    win = MainWindow(store=ConversationStore(":memory:"), autoload=False, persist=False)
    try:
        win.show()
        say(f"window shown at {_since_start():.1f} s")
        win.panel.max_tokens.setValue(max_tokens)
        win.panel.temperature.setValue(0.0)
        info = load_default_pair(win, timeout_s)
        say(f"pair loaded at {_since_start():.1f} s ({_pair_name(info)})")
        answer = ask(win, prompt, timeout_s)
        print(answer.content.strip(), flush=True)
        say(
            f"answered at {_since_start():.1f} s "
            f"({format_stats(answer.stats, answer.finish_reason)})"
        )
        if not answer.content.strip():
            print("localspec-gui: error: the self-test's answer is empty", file=sys.stderr)
            return 1
        return 0
    except (
        RuntimeError,
        TimeoutError,
        LocalspecError,
    ) as exc:  # LocalspecError: finding or fetching the pair
        print(f"localspec-gui: error: self-test: {exc}", file=sys.stderr)
        return 1
    finally:
        win.close()
        win.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.DeferredDelete)


def _pair_name(info: dict) -> str:
    """ "target + draft" from the window's load info (file names), or what is there."""
    names = [str(info.get(k)) for k in ("target", "draft") if info.get(k)]
    return " + ".join(n.rsplit("/", 1)[-1] for n in names) or "loaded"
