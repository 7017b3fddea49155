"""The desktop chat talking to an OpenAI-compatible server (a localspec serve started here
on the tiny synthetic pair), offscreen."""

import pytest

pytest.importorskip("PySide6", reason="the GUI tests need PySide6 (pip install -e '.[test]')")

from support.gui import ANSWER_MS, LOAD_MS, ask, regenerate  # noqa: E402
from support.served import RunningServer, free_port  # noqa: E402

from localspec.api import SpeculativeModel  # noqa: E402

KEY = "remote-key"


@pytest.fixture(scope="module")
def remote(target_gguf):
    # A fixed draft length: the adaptive policy may rightly decode this pair plainly on a busy machine.
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=1024, p_min=0.0, draft_max=4) as model:
        server = RunningServer(model, api_key=KEY)
        yield server
        server.stop()


def connect(qtbot, win, url, key, model=""):
    with qtbot.waitSignal(win.pairLoaded, timeout=LOAD_MS):
        win.pair_loading.connect(url, key, model)
    assert win.model_ready


def test_chat_stop_and_regenerate_with_a_server(qtbot, window, remote):
    window.panel.max_tokens.setValue(48)
    connect(qtbot, window, remote.base, KEY)
    assert "Connected: test-pair" in window.status.text()
    result = ask(qtbot, window)
    assert result["text"] and result["finish_reason"] in ("length", "stop")
    stats = result["stats"]
    assert not stats.get("unavailable")
    assert (
        stats["generated_tokens"] == 48 and stats["drafted_tokens"] > 0
    )  # from the server's timings
    assert "Accepted" in window.view.browser.toPlainText()
    assert (
        window.host.worker.count_tokens([{"role": "user", "content": "x"}]) is None
    )  # no tokenizer here

    again = regenerate(qtbot, window, window.messages[-1].id)
    assert again.content and again.versions == (2, 2)

    window.panel.max_tokens.setValue(400)
    stopped = {}

    def stop_once(rid, segs):
        if not stopped:
            stopped["yes"] = True
            window.stop()

    window.host.worker.round.connect(stop_once)
    window.input.setPlainText("hello again")
    with qtbot.waitSignal(window.answerDone, timeout=ANSWER_MS) as done:
        window.send()
    assert done.args[0].finish_reason == "cancelled"
    assert len(done.args[0].content) < 400


def test_a_wrong_key_and_an_unreachable_server_fail_in_one_line(qtbot, window, remote):
    with qtbot.waitSignal(window.pairFailed, timeout=LOAD_MS) as failed:
        window.pair_loading.connect(remote.base, "wrong", "")
    assert "401" in failed.args[0] and "\n" not in failed.args[0]
    assert not window.model_ready
    url = f"http://127.0.0.1:{free_port()}"
    with qtbot.waitSignal(window.pairFailed, timeout=LOAD_MS) as failed:
        window.pair_loading.connect(url, "", "")
    assert failed.args[0] == f"cannot reach {url}/v1 (is the server running?)"
    assert window.banner.isVisible() and not window.model_ready
