"""Desktop chat, second pass: branches (regenerate / edit), export, search, shortcuts,
palettes and the bare-system check; real engine on the synthetic pair, offscreen."""

import sqlite3
import time

import pytest

pytest.importorskip("PySide6", reason="the GUI tests need PySide6 (pip install -e '.[test]')")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QColor, QGuiApplication, QPalette  # noqa: E402
from support.gui import ANSWER_MS, ask, load, regenerate  # noqa: E402
from support.hub_server import hub_ref  # noqa: E402

from gui.chat import export  # noqa: E402
from gui.chat.chat_view import DARK_TEXT, SOURCE_COLOURS, ChatView, code_blocks, contrast_ratio  # noqa: E402
from gui.chat.message import Message, Segment  # noqa: E402
from gui.chat.store import SCHEMA_VERSION, ConversationStore  # noqa: E402


def test_regenerate_and_edit_make_branches_that_survive_a_reopen(
    qtbot, window, target_gguf, other_gguf
):
    load(qtbot, window, target_gguf, other_gguf, max_tokens=24)
    window.panel.temperature.setValue(0.9)  # sampling: a regenerated answer differs
    first = ask(qtbot, window, "hello world")
    cid = window.conversation_id
    v1 = window.messages[-1]
    v1_sources = window.view.sources_in_document()
    v2 = regenerate(qtbot, window)
    assert [m.role for m in window.messages] == ["user", "assistant"]  # beside, not after
    assert window.messages[-1].versions == (2, 2) and window.messages[-1].parent_id == v1.parent_id
    assert f"localspec:previous:{window.messages[-1].id}" in window.view.links()
    assert "2/2" in window.view.browser.toPlainText()

    window.switch_version(window.messages[-1].id, -1)  # back to version 1: its text and sources
    assert window.messages[-1].content == first["text"] and window.messages[-1].versions == (1, 2)
    assert window.view.sources_in_document() == v1_sources

    question = window.messages[0]
    window.edit(question.id)
    assert window.input.toPlainText() == "hello world"
    window.input.setPlainText("the code")
    with qtbot.waitSignal(window.answerDone, timeout=ANSWER_MS):
        window.send()
    assert [m.content for m in window.messages][0] == "the code"
    assert window.messages[0].versions == (2, 2) and window.messages[1].versions == (1, 1)

    window.new_chat()
    window.open_conversation(cid)  # reopened: the edited branch, and the old one one click away
    assert window.messages[0].content == "the code" and window.messages[0].versions == (2, 2)
    window.switch_version(window.messages[0].id, -1)
    assert window.messages[0].content == "hello world"
    assert [m.versions for m in window.messages] == [
        (1, 2),
        (2, 2),
    ]  # the newest answer of that question
    assert window.messages[1].content == v2.content
    assert len(window.store.siblings(v1.id)) == 2  # nothing was erased


def test_a_version_one_store_is_migrated_with_its_conversations(tmp_path):
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created_at REAL NOT NULL,
                                    updated_at REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id)
            ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, kind TEXT NOT NULL DEFAULT 'chat',
            segments TEXT, stats TEXT, finish_reason TEXT);
        INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0), (2, 'other', 1.0, 3.0);
        INSERT INTO messages (conversation_id, role, content) VALUES (1, 'user', 'q1'), (2, 'user', 'x'),
            (1, 'assistant', 'a1'), (1, 'user', 'q2'), (1, 'assistant', 'a2');
    """)
    db.commit()
    db.close()
    store = ConversationStore(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [m.content for m in store.messages(1)] == ["q1", "a1", "q2", "a2"]
    assert [m.content for m in store.messages(2)] == ["x"]
    assert all(m.versions == (1, 1) for m in store.messages(1))
    q2 = store.messages(1)[2]
    store.add_message(1, Message("assistant", "a2 again"), parent_id=q2.id)
    assert [m.content for m in store.messages(1)] == ["q1", "a1", "q2", "a2 again"]
    store.close()
    reopened = ConversationStore(path)  # opening again changes nothing
    assert [m.versions for m in reopened.messages(1)][-1] == (2, 2)


def test_export_round_trips_and_markdown_keeps_code_and_stats(qtbot, window, target_gguf, tmp_path):
    messages = [
        Message("user", "write it"),
        Message(
            "assistant",
            "Here:\n```python\ndef f():\n    return 1\n```\n",
            [
                Segment("Here:\n", "target"),
                Segment("```python\ndef f():\n    return 1\n```\n", "accepted", 0.5, 0.4),
            ],
            {
                "drafted_tokens": 4,
                "accepted_tokens": 3,
                "mean_accepted_length": 2.5,
                "generated_tokens": 9,
                "tokens_per_s": 12.5,
                "ttft_s": 0.3,
            },
            "stop",
        ),
    ]
    title, back = export.from_json(export.to_json("Chat é", messages))
    assert title == "Chat é"
    assert [(m.role, m.content, m.segments, m.stats, m.finish_reason, m.kind) for m in back] == [
        (m.role, m.content, m.segments, m.stats, m.finish_reason, m.kind) for m in messages
    ]
    md = export.to_markdown("Chat", messages)
    assert (
        "```python\ndef f():\n    return 1\n```" in md and "*Accepted 3/4 draft tokens (75 %)" in md
    )
    with pytest.raises(ValueError):
        export.from_json('{"format": "something else"}')

    cid = window.store.create("Exported")
    for m in messages:
        window.store.add_message(cid, m)
    window.export_conversation(cid, tmp_path / "c.json", "json")
    window.export_conversation(cid, tmp_path / "c.md", "md")
    assert (
        export.from_json((tmp_path / "c.json").read_text())[1][1].segments == messages[1].segments
    )
    assert (tmp_path / "c.md").read_text().startswith("# Exported")


def test_copy_links_put_each_code_block_on_the_clipboard(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    text = "a\n```\nfirst()\n```\nand\n```py\nsecond()\n```"
    assert code_blocks(text) == ["first()\n", "second()\n"]
    view.set_messages([Message("assistant", text, id=7)])
    assert "localspec:copy:7:1" in view.links()
    from PySide6.QtCore import QUrl

    view._on_link(QUrl("localspec:copy:7:1"))
    assert QGuiApplication.clipboard().text() == "second()\n"


def test_search_finds_titles_and_message_text(window):
    _a, b = window.store.create("Prime numbers"), window.store.create("Sorting")
    window.store.add_message(b, Message("user", "use 100% quicksort_fast"))
    window.search.setText("prime")
    assert [window.conversations.item(i).text() for i in range(window.conversations.count())] == [
        "Prime numbers"
    ]
    window.search.setText("quicksort_")
    assert window.conversations.count() == 1 and window.conversations.item(0).text() == "Sorting"
    window.search.setText("100%")
    assert window.conversations.count() == 1
    window.search.setText("_x%")  # LIKE wildcards are taken literally
    assert window.conversations.count() == 0


def test_shortcuts_fire_and_are_listed(qtbot, window, target_gguf):
    from PySide6.QtTest import QTest

    load(qtbot, window, target_gguf, target_gguf, max_tokens=12)
    ask(qtbot, window, "hello")
    with qtbot.waitSignal(window.answerDone, timeout=ANSWER_MS):
        QTest.keyClick(window, Qt.Key_R, Qt.ControlModifier)
    assert window.messages[-1].versions == (2, 2)
    window.search.setFocus()
    QTest.keyClick(window, Qt.Key_L, Qt.ControlModifier)
    assert window.input.hasFocus()
    QTest.keyClick(window, Qt.Key_F, Qt.ControlModifier)
    assert window.search.hasFocus()
    window.edit(window.messages[0].id)
    QTest.keyClick(window, Qt.Key_Escape)
    assert window.editing is None and window.input.toPlainText() == ""
    QTest.keyClick(window, Qt.Key_N, Qt.ControlModifier)
    assert window.conversation_id is None and window.messages == []
    listed = window.shortcuts_text()
    for key in ("Ctrl+N", "Ctrl+R", "Esc", "Ctrl+L", "Ctrl+F"):
        assert key in listed
    assert "Ctrl+N" in window.new_button.toolTip() and "Esc" in window.stop_button.toolTip()


def test_token_colours_stay_readable_in_light_and_dark_palettes(qtbot):
    for colour in SOURCE_COLOURS.values():
        assert contrast_ratio(QColor(DARK_TEXT), colour) >= 7.0  # WCAG AAA
    dark = QPalette()
    dark.setColor(QPalette.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.Text, QColor("#e5e5e5"))
    view = ChatView()
    qtbot.addWidget(view)
    view.setPalette(dark)
    view.set_messages(
        [Message("assistant", "ab", [Segment("a", "target"), Segment("b", "accepted")], id=1)]
    )
    doc = view.browser.document()
    formats = {}
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            formats[frag.text()] = frag.charFormat()
            it += 1
        block = block.next()
    plain, accepted = formats["a"], formats["b"]
    assert contrast_ratio(plain.foreground().color(), dark.color(QPalette.Base)) >= 7.0
    assert contrast_ratio(accepted.foreground().color(), accepted.background().color()) >= 7.0


def test_a_bare_system_gets_one_line_and_exit_status_2(monkeypatch, capsys):
    from gui import qt_check
    from localspec.cli import main

    assert "xvfb-run -a localspec gui" in qt_check.platform_problem({})
    assert qt_check.platform_problem({"QT_QPA_PLATFORM": "offscreen"}) is None
    monkeypatch.setattr(
        qt_check, "missing_libraries", lambda files: ["libxcb-cursor.so.0", "libxkbcommon-x11.so.0"]
    )
    line = qt_check.platform_problem({"DISPLAY": ":0"})
    assert "apt-get install libxcb-cursor0 libxkbcommon-x11-0" in line and "Fedora" in line
    monkeypatch.setattr(qt_check, "platform_problem", lambda environ=None, command=None: line)
    assert main(["gui"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "libxcb-cursor0" in err and "Traceback" not in err
    assert "libegl1" in qt_check.import_problem(
        ImportError("libEGL.so.1: cannot open shared object file")
    )


def test_the_memory_badge_estimates_the_chosen_pair(window, target_gguf):
    assert window.picker.add_target_path(target_gguf)
    window.update_memory_estimate()
    assert "Memory:" in window.memory_badge.text() and "fits" in window.memory_badge.text()
    tip = window.memory_badge.toolTip()
    assert "KV cache" in tip and target_gguf.name in tip
    assert window.memory_estimate.n_ctx == window.panel.apply_to(window.settings).n_ctx


def test_the_badge_reads_a_hub_header_in_a_thread_before_download(
    qtbot, window, fake_hub, small_blocks, target_gguf, monkeypatch
):
    ref = hub_ref(fake_hub, target_gguf.read_bytes())
    monkeypatch.setattr(window.picker, "current_target", lambda: ref)
    monkeypatch.setattr(window.picker, "current_draft", lambda: None)
    with qtbot.waitSignal(window.memoryShown, timeout=10_000) as shown:
        window.update_memory_estimate()
        assert "reading the GGUF headers from the Hub" in window.memory_badge.text()
    assert not shown.args[0].partial and shown.args[0].models[0].kv_cache > 0
    assert "≥" not in window.memory_badge.text() and "fits" in window.memory_badge.text()
    assert "header read from the Hub" in window.memory_badge.toolTip()


def test_the_context_meter_counts_the_rendered_chat_template(qtbot, window, target_gguf):
    load(qtbot, window, target_gguf, target_gguf, max_tokens=16)
    window.input.setPlainText("hello world the code")
    window.update_context_meter()
    expected = len(
        window.host.worker.model.target.chat_tokens(
            [{"role": "user", "content": "hello world the code"}]
        )
    )
    assert window.context_tokens() == (expected, 512)
    assert (
        window.context_label.text()
        == f"Context {100 * expected / 512:.0f} % full ({expected:,} / 512 tokens)"
    )
    ask(qtbot, window, "hello world the code")
    history = [
        {"role": "user", "content": "hello world the code"},
        {"role": "assistant", "content": window.messages[-1].content},
    ]
    assert window.context_tokens()[0] == len(window.host.worker.model.target.chat_tokens(history))
    qtbot.waitUntil(lambda: "Context" in window.context_label.text(), timeout=2_000)


def test_an_over_long_prompt_is_refused_or_its_oldest_turns_dropped(qtbot, window, target_gguf):
    load(qtbot, window, target_gguf, target_gguf, max_tokens=8)
    ask(qtbot, window, "hello " * 40)  # an early turn of ~260 tokens (one a character, here)
    n_messages = len(window.messages)
    long_text = "world " * 45  # ~290 more: over 512 together, fits alone
    window.input.setPlainText(long_text)
    window.send()  # Stop at the limit (the default): refused, with the numbers, nothing lost
    assert window.request is None and len(window.messages) == n_messages
    assert "does not fit" in window.banner.text() and "512" in window.banner.text()
    assert window.input.toPlainText() == long_text
    window.panel.overflow.setCurrentIndex(window.panel.overflow.findData("drop-oldest"))
    with qtbot.waitSignal(window.answerDone, timeout=ANSWER_MS) as done:
        window.send()
    answer = done.args[0]
    assert answer.stats["context_dropped_messages"] == 2
    assert "2 oldest messages left out to fit the context" in window.view.browser.toPlainText()
    assert [m.role for m in window.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]  # the chat keeps them
    window.input.setPlainText("code " * 120)  # too long even alone
    window.send()
    assert window.request is None and "alone does not fit" in window.banner.text()


def test_the_serve_switch_answers_the_openai_client_in_the_pairs_other_slots(
    qtbot, window, target_gguf
):
    """The window's pair has the settings' slots (4 by default); the server runs its
    requests in all but one of them, beside the window's own answers."""
    import socket
    import threading

    import openai

    load(qtbot, window, target_gguf, target_gguf, max_tokens=12)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    window.serve_port.setValue(port)
    window.serve_switch.setChecked(True)
    assert window.serve_url.text() == f"http://127.0.0.1:{port}/v1"
    assert window.host.worker.model.parallel == window.settings.parallel == 4
    assert len(window.host.server.worker._threads) == 3
    window.serve_copy.click()
    assert QGuiApplication.clipboard().text() == window.serve_url.text()
    got, ticks = {}, []

    def ask_server():
        client = openai.OpenAI(
            base_url=window.serve_url.text(), api_key="none", max_retries=0, timeout=60
        )
        got["start"] = time.perf_counter()
        got["r"] = client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hello"}], max_tokens=6, temperature=0
        )
        got["end"] = time.perf_counter()

    from PySide6.QtCore import QTimer

    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(10)
    thread = threading.Thread(target=ask_server)
    thread.start()
    ask(qtbot, window, "hello")  # the window's own answer, in its own slot
    qtbot.waitUntil(lambda: "r" in got, timeout=ANSWER_MS)
    thread.join(5)
    timer.stop()
    assert got["r"].choices[0].message.content is not None and got["r"].usage.completion_tokens > 0
    # the window's event loop kept running while the request was served (a blocked loop
    # ticks at most once, after the answer; a count of ticks would depend on the load)
    assert sum(got["start"] < t < got["end"] for t in ticks) >= 2
    assert window.settings.serve and load_settings_serve(window)
    window.serve_switch.setChecked(False)
    assert window.host.server is None and window.serve_url.text() == ""
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=5
        ).models.list()


def load_settings_serve(window):
    return window.settings.serve_port == window.serve_port.value()


def test_a_damaged_tree_and_foreign_ids_do_not_hang_or_lose_messages(tmp_path):
    s = ConversationStore(tmp_path / "c.sqlite3")
    c, other = s.create("c"), s.create("other")
    x = s.add_message(c, Message("user", "x"))
    y = s.add_message(c, Message("assistant", "y"))
    z = s.add_message(other, Message("user", "z"))
    s.delete_message(x)  # has a child: left alone
    assert [m.content for m in s.messages(c)] == ["x", "y"]
    s.switch_to(c, z)  # another conversation's message: ignored
    s.set_leaf(c, 12345)
    assert [m.content for m in s.messages(c)] == ["x", "y"]
    s._db.execute("UPDATE messages SET parent_id = ? WHERE id = ?", (y, x))  # a cycle, by hand
    s._db.commit()
    s.switch_to(c, x)  # returns
    assert sorted(m.content for m in s.messages(c)) == ["x", "y"]  # each once
    assert [i.title for i in s.list("y\x00")] == ["c"]  # a NUL does not end the pattern early


@pytest.mark.parametrize(
    "bad",
    [
        '{"format": "localspec-conversation", "version": 1, "messages": 5}',
        '{"format": "localspec-conversation", "version": 1, "messages": [{"role": "user", "content": "a", "segments": "abc"}]}',
        '{"format": "localspec-conversation", "version": 1, "messages": [{"role": "user", "content": "a", '
        '"segments": [{"text": "a", "source": "target", "p_target": null, "p_draft": null, "extra": 1}]}]}',
        '{"format": "localspec-conversation", "version": 1, "messages": [{"role": "assistant", "content": "a", "stats": [1]}]}',
        '{"format": "localspec-conversation", "version": 99, "messages": []}',
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_from_json_refuses_malformed_files_with_value_error(bad):
    with pytest.raises(ValueError):
        export.from_json(bad)
