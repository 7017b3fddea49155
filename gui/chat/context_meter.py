"""The context: whether a chat fits the loaded pair's context (and what to leave out when
it does not), and the meter under the input ("Context 37 % full (1,512 / 4,096 tokens)")."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from PySide6.QtCore import QTimer

from .message import chat_history

CountTokens = Callable[
    [list[dict]], "tuple[int, int] | None"
]  # (tokens, n_ctx), None without a model


class Fitted(NamedTuple):
    """What :func:`fit_to_context` decided: the ``history`` to send (None: refused, and
    ``problem`` says why), its prompt tokens (None when unknown), and how many messages
    were left out of it."""

    history: list[dict] | None
    n_prompt: int | None
    dropped: int = 0
    problem: str = ""


def fit_to_context(history: list[dict], count_tokens: CountTokens, overflow: str) -> Fitted:
    """``history`` itself if it fits the context; else, by ``overflow``, a refusal with the
    numbers ("stop"), or the history with its oldest turns left out ("drop-oldest": the
    system prompt and the new message stay).  An unknown count (no model) passes."""
    counted = count_tokens(history)
    if counted is None or counted[0] < counted[1]:
        return Fitted(history, counted[0] if counted else None)
    n, n_ctx = counted
    if overflow != "drop-oldest":
        return Fitted(
            None,
            None,
            0,
            f"This message does not fit: the chat would be {n:,} tokens and the context "
            f"holds {n_ctx:,}. Start a New chat, raise Context and Load the pair again, or set "
            "Settings ▸ Too long to “Drop the oldest turns”.",
        )
    head = 1 if history and history[0]["role"] == "system" else 0
    trimmed, dropped = list(history), 0
    while len(trimmed) - head > 1:  # a turn: a question and the answers after it
        del trimmed[head]
        dropped += 1
        while len(trimmed) - head > 1 and trimmed[head]["role"] == "assistant":
            del trimmed[head]
            dropped += 1
        counted = count_tokens(trimmed)
        if counted is None or counted[0] < n_ctx:
            return Fitted(trimmed, counted[0] if counted else None, dropped)
    return Fitted(
        None,
        None,
        0,
        f"The message alone does not fit: {counted[0]:,} tokens with the system prompt, "
        f"the context holds {n_ctx:,}. Shorten it, or raise Context and Load the pair again.",
    )


class ContextMeter:
    """Counts the tokens of the chat shown in ``window`` (a :class:`~gui.window.MainWindow`)
    and writes them into ``label``; :attr:`timer` recounts 250 ms after the last keystroke
    (the window starts it).  :attr:`base`: the prompt tokens of the answer streaming now
    (set by whoever starts and ends answers), None otherwise."""

    def __init__(self, window, label):
        self.window = window
        self.label = label
        self.base: int | None = None
        self.timer = QTimer(window)
        self.timer.setSingleShot(True)
        self.timer.setInterval(250)  # milliseconds after the last keystroke

    def tokens(self) -> tuple[int, int] | None:
        """(tokens, n_ctx): the chat shown plus the message being typed, rendered with the
        chat template as it would be sent; while an answer streams, its prompt plus the
        tokens so far.  None while no model is loaded."""
        w = self.window
        if w.request is not None and self.base is not None:
            return self.base + len(w.request[2].segments), self.n_ctx_loaded()
        before = (
            w.messages[: w.messages.index(w.editing)] if w.editing in w.messages else w.messages
        )
        history = chat_history(before, w.settings.system_prompt)
        typed = w.input.toPlainText().strip()
        if typed:
            history.append({"role": "user", "content": typed})
        return w.host.worker.count_tokens(history) if history else (0, self.n_ctx_loaded())

    def n_ctx_loaded(self) -> int:
        """The loaded pair's context size in tokens (the setting's while none is loaded)."""
        counted = self.window.host.worker.count_tokens([])
        return counted[1] if counted else self.window.settings.n_ctx

    def update(self) -> None:
        """ "Context 37 % full (1,512 / 4,096 tokens)", orange from 90 %, red when full."""
        w = self.window
        counted = self.tokens() if w.model_ready else None
        if counted is None:
            self.label.setText("")
            return
        n, n_ctx = counted
        share = 100 * n / n_ctx if n_ctx else 0
        colour = "#b91c1c" if share >= 100 else ("#b45309" if share >= 90 else "")
        text = f"Context {share:.0f} % full ({n:,} / {n_ctx:,} tokens)"
        if share >= 100 and w.request is None:
            text += (
                ": the oldest turns are left out when it is sent"
                if w.settings.overflow == "drop-oldest"
                else ": a message now is refused (see Settings ▸ Too long)"
            )
        self.label.setText(f'<span style="color:{colour}">{text}</span>' if colour else text)
