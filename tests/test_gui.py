"""The desktop chat against the tiny synthetic GGUF models (real engine, no mocks),
offscreen (conftest sets QT_QPA_PLATFORM)."""

import shutil

import pytest

pytest.importorskip("PySide6", reason="the GUI tests need PySide6 (pip install -e '.[test]')")

from support.gui import ANSWER_MS, LOAD_MS, ask, load  # noqa: E402

from gui.chat.message import Message, Segment  # noqa: E402
from gui.chat.store import ConversationStore  # noqa: E402
from gui.settings.settings import Settings, load_settings, save_settings  # noqa: E402
from gui.settings.settings_panel import SettingsPanel  # noqa: E402
from gui.window import MainWindow  # noqa: E402
from localspec.llama.synthetic import write_model  # noqa: E402
from localspec.models import discovery  # noqa: E402


@pytest.fixture(scope="session")
def badbos_gguf(synth_dir):
    """Same vocabulary as the target but another BOS id: an incompatible draft."""
    return write_model(synth_dir / "badbos.gguf", seed=1, bos_id=2, size_label="0.2M")


@pytest.fixture(scope="session")
def small_draft_gguf(synth_dir):
    """Same vocabulary, a smaller claimed size: a compatible draft for the target."""
    return write_model(synth_dir / "small-draft.gguf", seed=2, size_label="0.2M")


def test_answer_streams_per_round_with_highlighting_and_is_reopened(qtbot, window, target_gguf):
    load(qtbot, window, target_gguf, target_gguf)  # same weights: every draft token is accepted
    rounds = []
    window.host.worker.round.connect(lambda rid, segs: rounds.append(list(segs)))
    result = ask(qtbot, window)
    stats = result["stats"]
    assert stats["accepted_tokens"] > 0
    assert stats["rounds"] >= 2
    assert (
        stats["rounds"] <= len(rounds) <= stats["rounds"] + 2
    )  # one emit per round (+ the first token, tail)
    assert all(isinstance(s, Segment) for r in rounds for s in r)
    answer = window.messages[-1]
    assert answer.content == result["text"]
    assert "".join(s.text for s in answer.segments) == result["text"]
    shown = window.view.sources_in_document()
    assert shown.get("accepted", 0) > 0
    assert "Accepted" in window.view.browser.toPlainText()
    assert "Accepted" in window.session_label.text()

    # Markdown mode drops the colours; the toggle brings them back.
    window.highlight_box.setChecked(False)
    assert window.view.sources_in_document() == {}
    window.highlight_box.setChecked(True)
    assert window.view.sources_in_document() == shown

    # Saved with its sources: a reopened conversation is highlighted the same way.
    cid = window.conversation_id
    window.new_chat()
    assert window.view.sources_in_document() == {}
    window.open_conversation(cid)
    assert window.view.sources_in_document() == shown
    reopened = window.store.messages(cid)
    assert [m.role for m in reopened] == ["user", "assistant"]
    assert reopened[1].stats["accepted_tokens"] == stats["accepted_tokens"]

    # Compare with no draft: a plain rerun of the same prompt, and a speed-up shown.
    assert window.compare_button.isEnabled()
    with qtbot.waitSignal(window.answerDone, timeout=ANSWER_MS) as done:
        window.compare_with_no_draft()
    assert done.args[0].stats["drafted_tokens"] == 0
    assert window.messages[-1].kind == "baseline"
    assert window.session.baseline_tps and "× vs plain" in window.view.browser.toPlainText()

    window.rename_conversation(cid, "Renamed")
    assert [window.conversations.item(i).text() for i in range(window.conversations.count())] == [
        "Renamed"
    ]
    window.delete_conversation(cid)
    assert window.conversations.count() == 0 and window.store.list() == []


def test_loading_reports_progress_per_model(qtbot, window, target_gguf, small_draft_gguf):
    seen = []
    window.host.worker.loadProgress.connect(lambda role, fraction: seen.append((role, fraction)))
    load(qtbot, window, target_gguf, small_draft_gguf)
    qtbot.waitUntil(
        lambda: ("draft", 1.0) in seen, timeout=5_000
    )  # queued signals may trail pairLoaded
    roles = [role for role, _ in seen]
    assert roles == sorted(roles, key=["target", "draft"].index)  # the target first, then the draft
    for role in ("target", "draft"):
        fractions = [f for r, f in seen if r == role]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert window.busy.maximum() == 100 and "Ready" in window.status.text()


def test_stop_ends_the_answer_within_one_round(qtbot, window, target_gguf):
    load(qtbot, window, target_gguf, target_gguf, max_tokens=400)
    seen = {}

    def first_round(rid, segs):
        if not seen:
            seen["round"] = window.host.worker.current_round
            window.stop()

    window.host.worker.round.connect(first_round)
    window.input.setPlainText("hello")
    with qtbot.waitSignal(window.answerDone, timeout=ANSWER_MS) as done:
        window.send()
    assert done.args[0].finish_reason == "cancelled"
    assert done.args[0].stats["rounds"] <= seen["round"] + 1
    assert "stopped" in window.view.browser.toPlainText()
    assert window.send_button.isEnabled()


def test_closing_while_generating_shuts_down(qtbot, tmp_path, target_gguf):
    win = MainWindow(store=ConversationStore(tmp_path / "c.sqlite3"), autoload=False)
    qtbot.addWidget(win)
    load(qtbot, win, target_gguf, target_gguf, max_tokens=400)
    win.input.setPlainText("hello")
    win.send()
    qtbot.waitUntil(lambda: len(win.messages[-1].segments) > 0, timeout=ANSWER_MS)
    win.close()
    assert win.host.thread.isFinished()


def test_draft_list_holds_exactly_the_compatible_drafts(
    qtbot, window, tmp_path, monkeypatch, target_gguf, small_draft_gguf, badbos_gguf
):
    cache = tmp_path / "cache"
    (cache / "local").mkdir(parents=True)
    for name, src in [
        ("synth-1.gguf", target_gguf),
        ("synth-2.gguf", small_draft_gguf),
        ("synth-3.gguf", badbos_gguf),
    ]:
        shutil.copy(src, cache / "local" / name)
    monkeypatch.setenv("LOCALSPEC_CACHE", str(cache))
    window.picker.refresh()
    assert window.picker.add_target_path(cache / "local" / "synth-1.gguf")
    target = window.picker.current_target()
    candidates = discovery.drafts_for(target)
    compatible = [c.model.name for c in candidates if c.compatible]
    assert window.picker.draft_names() == compatible
    assert "synth-2.gguf" in compatible and "synth-3.gguf" not in compatible
    assert window.picker.draft_combo.itemText(0).startswith("No draft")
    assert "incompatible" in window.picker.note.text()
    assert "synth-3" in window.picker.note.toolTip() and "BOS" in window.picker.note.toolTip()


def test_incompatible_pair_shows_an_error_and_the_window_stays_usable(
    qtbot, window, target_gguf, badbos_gguf
):
    window.input.setPlainText("typed text")
    with qtbot.waitSignal(window.pairFailed, timeout=LOAD_MS):
        window.load_pair(target_gguf, badbos_gguf)
    assert window.banner.isVisible() and "cannot draft" in window.banner.text()
    assert window.input.toPlainText() == "typed text"
    window.send()  # no model: an error, the text stays
    assert (
        window.input.toPlainText() == "typed text" and "Load a model pair" in window.banner.text()
    )
    load(qtbot, window, target_gguf, None)  # a good pair still loads
    assert ask(qtbot, window)["finish_reason"] in ("stop", "length")


def test_missing_file_shows_an_error(qtbot, window, tmp_path):
    assert not window.picker.add_target_path(tmp_path / "nope.gguf")
    assert window.banner.isVisible() and "nope.gguf" in window.banner.text()
    window.hide_error()
    with qtbot.waitSignal(window.pairFailed, timeout=LOAD_MS):
        window.load_pair(tmp_path / "missing.gguf", None)
    assert "missing.gguf" in window.banner.text()
    assert window.new_button.isEnabled() and window.picker.load_button.isEnabled()


def test_a_failed_answer_puts_the_text_back(qtbot, window, target_gguf, monkeypatch):
    load(qtbot, window, target_gguf, None, n_ctx=32)
    long_text = " ".join(["hello world"] * 40)
    window.input.setPlainText(long_text)
    window.send()  # refused before it is sent: the prompt cannot fit
    assert window.request is None and window.input.toPlainText() == long_text
    assert "does not fit" in window.banner.text() and window.messages == []
    # Where the count is not known beforehand, the engine's own refusal puts the text back too.
    monkeypatch.setattr(window.host.worker, "count_tokens", lambda messages: None)
    with qtbot.waitSignal(window.answerFailed, timeout=ANSWER_MS):
        window.send()
    assert window.input.toPlainText() == long_text
    assert "context" in window.banner.text()
    assert window.messages == [] and window.send_button.isEnabled()


def test_settings_round_trip(qtbot, tmp_path):
    s = Settings(
        target="t.gguf",
        draft="d.gguf",
        draft_max="6",
        draft_min=2,
        p_min=0.5,
        temperature=0.7,
        top_p=0.9,
        seed=42,
        max_tokens=300,
        system_prompt="Be brief.",
        gpu_layers=12,
        gpu_layers_draft=-1,
        n_ctx=8192,
        highlight=False,
    )
    save_settings(s)
    assert load_settings() == s
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    panel.set_settings(s)
    back = panel.apply_to(Settings(target="t.gguf", draft="d.gguf", highlight=False))
    assert back == s
    assert (
        s.generation_options()["draft_max"] == 6 and Settings().generation_options()["seed"] is None
    )
    (tmp_path / "bad.json").write_text('{"max_tokens": "many", "draft_max": "x", "p_min": 0.3}')
    odd = load_settings(tmp_path / "bad.json")
    assert odd.max_tokens == 512 and odd.draft_max == "auto" and odd.p_min == 0.3


def test_window_restores_saved_settings(qtbot, tmp_path):
    save_settings(Settings(max_tokens=77, temperature=0.4, highlight=False, draft_max="3"))
    win = MainWindow(store=ConversationStore(tmp_path / "c.sqlite3"), autoload=False)
    qtbot.addWidget(win)
    assert win.panel.max_tokens.value() == 77 and win.panel.draft_max.currentText() == "3"
    assert not win.highlight_box.isChecked()
    win.panel.max_tokens.setValue(99)
    win.close()
    assert load_settings().max_tokens == 99


def test_store_round_trip(tmp_path):
    store = ConversationStore(tmp_path / "s.sqlite3")
    cid = store.create("first")
    store.add_message(cid, Message("user", "hi"))
    store.add_message(
        cid,
        Message(
            "assistant",
            "ab",
            [Segment("a", "accepted"), Segment("b", "correction", 0.4, 0.6)],
            {"accepted_tokens": 1},
            "stop",
        ),
    )
    msgs = store.messages(cid)
    assert (
        msgs[1].segments[1] == Segment("b", "correction", 0.4, 0.6)
        and msgs[1].finish_reason == "stop"
    )
    store.rename(cid, "second")
    assert store.list()[0].title == "second"
    store.delete(cid)
    assert store.list() == [] and store.messages(cid) == []


def test_cli_gui_without_pyside6(monkeypatch, capsys):
    import sys

    from localspec.cli import main

    monkeypatch.setitem(sys.modules, "PySide6", None)
    assert main(["gui"]) == 2
    assert "pip install 'localspec[gui]'" in capsys.readouterr().err


def test_download_shows_progress_and_can_be_cancelled(qtbot, window, monkeypatch):
    import threading

    from localspec.errors import DownloadCancelled

    release = threading.Event()

    def fake_ensure_local(ref, progress=None, cancel=None):
        progress(1 << 20, 4 << 20)
        assert release.wait(30)
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled(f"download of {ref.name} cancelled")
        raise AssertionError("not cancelled")

    monkeypatch.setattr(discovery, "ensure_local", fake_ensure_local)
    missing = discovery.ModelRef("not-here", entry=None, path=None, size=4 << 20)
    window.picker.targets = [missing]
    window.picker._fill_targets(missing)
    window.picker.draft_combo.setCurrentIndex(0)  # No draft
    window.picker._update_button()
    assert window.picker.load_button.text() == "Download && load"
    window.picker.load_selected()
    qtbot.waitUntil(
        lambda: "1.0 MiB of 4.0 MiB" in window.picker.progress_label.text(), timeout=10_000
    )
    assert window.picker.progress.isVisible() and window.picker.cancel_button.isVisible()
    window.picker.cancel_download()
    release.set()
    qtbot.waitUntil(lambda: "cancelled" in window.picker.progress_label.text(), timeout=10_000)
    assert not window.picker.busy() and not window.picker.progress.isVisible()


def test_failed_download_shows_an_error(qtbot, window, monkeypatch):
    from localspec.errors import DownloadError

    def failing(ref, progress=None, cancel=None):
        raise DownloadError("could not fetch x: Hub unreachable")

    monkeypatch.setattr(discovery, "ensure_local", failing)
    missing = discovery.ModelRef("not-here", entry=None, path=None, size=1)
    window.picker.targets = [missing]
    window.picker._fill_targets(missing)
    window.picker.draft_combo.setCurrentIndex(0)
    window.picker.load_selected()
    qtbot.waitUntil(window.banner.isVisible, timeout=10_000)
    assert "Hub unreachable" in window.banner.text() and not window.picker.busy()


def test_token_tooltips_give_source_and_probabilities(qtbot, window):
    from gui.chat.chat_view import tooltip_for

    seg = Segment("def", "accepted", 0.91, 0.87)
    assert tooltip_for(seg) == "accepted draft token — p target 91.0 %, p draft 87.0 %"
    assert tooltip_for(Segment("x", "correction")) == "target correction (draft rejected)"
    window.view.set_messages(
        [Message("user", "hi"), Message("assistant", "def", [seg], {"drafted_tokens": 1})]
    )
    doc = window.view.browser.document()
    pos = doc.toPlainText().index("def") + 1
    from PySide6.QtGui import QTextCursor

    cursor = QTextCursor(doc)
    cursor.setPosition(pos)
    assert cursor.charFormat().toolTip() == tooltip_for(seg)


def test_closing_during_a_download_cancels_it_and_ends_its_thread(qtbot, tmp_path, monkeypatch):
    import threading

    from localspec.errors import DownloadCancelled

    started, saw_cancel = threading.Event(), threading.Event()

    def slow_ensure_local(ref, progress=None, cancel=None):
        started.set()
        while not cancel.wait(0.01):
            progress(1, 10)
        saw_cancel.set()
        raise DownloadCancelled("cancelled")

    monkeypatch.setattr(discovery, "ensure_local", slow_ensure_local)
    win = MainWindow(store=ConversationStore(tmp_path / "chats.sqlite3"), autoload=False)
    qtbot.addWidget(win)
    missing = discovery.ModelRef("not-here", entry=None, path=None, size=10)
    win.picker.targets = [missing]
    win.picker._fill_targets(missing)
    win.picker.draft_combo.setCurrentIndex(0)
    win.picker.load_selected()
    assert started.wait(10)
    thread = win.picker._thread
    win.close()
    assert saw_cancel.is_set() and thread.isFinished()


def test_an_unreadable_history_is_set_aside_and_the_window_starts(qtbot, tmp_path, monkeypatch):
    data = tmp_path / "data" / "localspec"
    data.mkdir(parents=True)
    (data / "conversations.sqlite3").write_text("this is not a database")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    win = MainWindow(autoload=False)
    qtbot.addWidget(win)
    assert not win.banner.isHidden() and "could not be read" in win.banner.text()
    assert [
        p.name.split(".unreadable-")[0] for p in data.iterdir() if ".unreadable-" in p.name
    ] == ["conversations.sqlite3"]
    cid = win.store.create("works")
    assert win.store.title(cid) == "works"
    win.close()


def test_damaged_rows_and_settings_fall_back_instead_of_failing(tmp_path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create("x")
    cur = store._db.execute(
        "INSERT INTO messages (conversation_id, role, content, segments, stats) "
        "VALUES (?, 'assistant', 'hi', '{broken', '[1, 2]')",
        (cid,),
    )
    store.set_leaf(cid, cur.lastrowid)
    (message,) = store.messages(cid)
    assert message.content == "hi" and message.segments == [] and message.stats is None
    path = tmp_path / "gui.json"
    path.write_text(
        '{"seed": 1099511627776, "draft_min": 100000000000000000000, "max_tokens": 0,'
        ' "draft_max": "\\u00b2", "n_ctx": 8, "temperature": 7.5, "top_p": 0.5}'
    )
    loaded = load_settings(path)
    defaults = Settings()
    assert (
        loaded.seed,
        loaded.draft_min,
        loaded.max_tokens,
        loaded.draft_max,
        loaded.n_ctx,
        loaded.temperature,
    ) == (
        defaults.seed,
        defaults.draft_min,
        defaults.max_tokens,
        defaults.draft_max,
        defaults.n_ctx,
        defaults.temperature,
    )
    assert loaded.top_p == 0.5


def test_a_gpu_the_build_cannot_use_is_named_in_the_window(qtbot, tmp_path, monkeypatch):
    from localspec import machine
    from localspec.llama import backend
    from localspec.llama import report as doctor

    gpu = machine.GpuHardware("NVIDIA", "NVRM version: test", "CUDA", "-DGGML_CUDA=on")
    monkeypatch.setattr(machine, "gpu_hardware", lambda: gpu)
    monkeypatch.setattr(backend, "supports_gpu_offload", lambda: False)
    monkeypatch.setattr(doctor, "_warned", False)
    win = MainWindow(store=ConversationStore(tmp_path / "chats.sqlite3"), autoload=False)
    qtbot.addWidget(win)
    assert win.banner.isVisibleTo(win) and "NVIDIA GPU found" in win.banner.text()
    assert 'CMAKE_ARGS="-DGGML_CUDA=on"' in win.banner.text()
    win.close()
