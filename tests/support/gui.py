"""Driving the desktop chat in tests: load a pair, ask, regenerate, each waiting for its
signal (conftest's ``window`` fixture makes the window)."""

LOAD_MS = 60_000
ANSWER_MS = 60_000


def load(qtbot, win, target, draft, *, draft_max="4", n_ctx=512, max_tokens=64):
    win.panel.draft_max.setCurrentText(draft_max)
    win.panel.p_min.setValue(0.0)
    win.panel.n_ctx.addItem(str(n_ctx))
    win.panel.n_ctx.setCurrentText(str(n_ctx))
    win.panel.max_tokens.setValue(max_tokens)
    with qtbot.waitSignal(win.pairLoaded, timeout=LOAD_MS):
        win.load_pair(target, draft)
    assert win.model_ready


def ask(qtbot, win, text="hello world"):
    win.input.setPlainText(text)
    with qtbot.waitSignal(win.answerDone, timeout=ANSWER_MS) as done:
        win.send()
    return _result(done.args[0])


def _result(message):
    return {"text": message.content, "stats": message.stats, "finish_reason": message.finish_reason}


def regenerate(qtbot, win, message_id=None):
    with qtbot.waitSignal(win.answerDone, timeout=ANSWER_MS) as done:
        win.regenerate(message_id)
    return done.args[0]
