"""A reasoning model in the desktop chat: the thinking in a collapsed block above the answer
(token colours inside it, the time it took on its line), the thinking switch and budget
per conversation, the stats per channel, the thinking stored apart and never sent back.
The view is driven with TokenEvents made here; the window with a synthetic GGUF that
carries DeepSeek-R1-Distill's template (its prompt opens ``<think>``), offscreen."""

import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("PySide6", reason="the GUI tests need PySide6 (pip install -e '.[test]')")

from PySide6.QtCore import Qt, QUrl  # noqa: E402
from PySide6.QtGui import QTextCursor  # noqa: E402
from support.gui import ask, load  # noqa: E402

from gui.chat import export  # noqa: E402
from gui.chat.chat_view import SOURCE_COLOURS, ChatView  # noqa: E402
from gui.chat.message import REASONING, Message, Segment, chat_history, event_segments  # noqa: E402
from gui.chat.stats_line import format_channel_stats  # noqa: E402
from gui.chat.store import SCHEMA_VERSION, ConversationStore  # noqa: E402
from gui.models.remote import RemoteModel, delta_texts  # noqa: E402
from gui.settings.settings import Settings, load_settings, save_settings  # noqa: E402
from gui.settings.settings_panel import SettingsPanel  # noqa: E402
from localspec.decoding.stats import TokenEvent, TokenSource  # noqa: E402
from localspec.llama.synthetic import write_model  # noqa: E402

R1_DISTILL = (
    Path(__file__).parent / "data" / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
).read_text()
THINKING = "Let me think about **this** carefully."
ANSWER = "The answer is 42."


def events():
    """A reasoning model's stream: three thinking tokens (one a draft token kept), the
    close (a marker, forced), then the answer; the third token releases thinking and answer."""
    r = lambda token, text, source, rnd: TokenEvent(
        token, "", source, rnd, channel="reasoning", reasoning=text
    )  # noqa: E731
    return [
        r(1, "Let me think", TokenSource.TARGET, 0),
        r(2, " about **this**", TokenSource.ACCEPTED, 1),
        r(3, " carefully.", TokenSource.ACCEPTED, 1),
        TokenEvent(4, "", TokenSource.FORCED, 2, channel="marker"),
        TokenEvent(5, "The answer", TokenSource.ACCEPTED, 3),
        TokenEvent(6, " is 42.", TokenSource.CORRECTION, 3),
    ]


CHANNEL_STATS = {
    "reasoning": {
        "tokens": 3,
        "rounds": 2,
        "drafted_tokens": 4,
        "accepted_tokens": 2,
        "forced_tokens": 3,
        "mean_accepted_length": 2.0,
        "tokens_per_s": 30.0,
    },
    "content": {
        "tokens": 2,
        "rounds": 1,
        "drafted_tokens": 2,
        "accepted_tokens": 1,
        "tokens_per_s": 12.5,
    },
}
STATS = {
    "drafted_tokens": 6,
    "accepted_tokens": 3,
    "generated_tokens": 7,
    "thinking_s": 3.24,
    "channels": CHANNEL_STATS,
}


@pytest.fixture
def view(qtbot):
    v = ChatView()
    qtbot.addWidget(v)
    v.resize(700, 500)
    v.show()
    return v


def stream(view, evs, expand_at=None):
    """Stream ``evs`` one round at a time (as the model thread batches them); with
    ``expand_at``, open the thinking before that event."""
    answer = Message("assistant", "")
    view.set_messages([Message("user", "question"), answer])
    view.begin_answer(answer)
    for i, event in enumerate(evs):
        if i == expand_at:
            view.browser.anchorClicked.emit(QUrl("localspec:think:streaming"))
        view.append_segments(event_segments(event))
    return answer


def background_at(view, text):
    doc = view.browser.document()
    cursor = QTextCursor(doc)
    cursor.setPosition(doc.toPlainText().index(text) + 1)
    brush = cursor.charFormat().background()
    return brush.color().name() if brush.style() != Qt.NoBrush else None


def test_the_thinking_streams_collapsed_above_the_answer_and_says_how_long_it_took(view):
    answer = stream(view, events()[:2])
    assert view.browser.toPlainText().endswith("Assistant\n▶ Thinking… 2 tokens")
    assert "Let me" not in view.browser.toPlainText()  # collapsed: only its line shows
    for event in events()[2:]:
        view.append_segments(event_segments(event))
    assert (answer.reasoning, answer.content) == (THINKING, ANSWER)
    assert [s.channel for s in answer.reasoning_segments] == [REASONING] * 3
    assert (
        "".join(s.text for s in answer.segments) == ANSWER
    )  # the answer holds none of the thinking
    shown = view.browser.toPlainText()
    assert (
        "▶ Thought for " in shown
        and shown.endswith(ANSWER)
        and "think" not in shown.replace("Thought", "")
    )

    answer.id, answer.stats = 7, dict(STATS)
    view.end_answer()
    lines = view.browser.toPlainText().split("\n")
    assert lines[lines.index("Assistant   Regenerate") + 1] == "▶ Thought for 3.2 s"
    assert "localspec:think:id7" in view.links() and "think" not in "".join(lines).replace(
        "Thought", ""
    )
    assert format_channel_stats(STATS) in lines  # the stats per channel under the stats line
    assert format_channel_stats(STATS) == (
        "Thinking: 3 tokens · accepted 2/4 (50 %) · mean accepted length 2.00 · 30.0 t/s · 3 forced   "
        "Answer: 2 tokens · accepted 1/2 (50 %) · mean accepted length 0.00 · 12.5 t/s"
    )

    view.browser.anchorClicked.emit(QUrl("localspec:think:id7"))  # a click on its line opens it
    shown = view.browser.toPlainText()
    assert "▼ Thought for 3.2 s\nLet me think about this carefully.\nThe answer is 42." in shown
    assert (
        background_at(view, "about") == SOURCE_COLOURS["accepted"].name()
    )  # the answer's colours inside
    assert background_at(view, "answer") == SOURCE_COLOURS["accepted"].name()
    assert background_at(view, " is 42") == SOURCE_COLOURS["correction"].name()
    assert background_at(view, "Let me") is None  # the target's own token
    view.browser.anchorClicked.emit(QUrl("localspec:think:id7"))
    assert "Let me" not in view.browser.toPlainText()


def test_a_thinking_opened_while_it_streams_equals_a_fresh_render_and_stays_open(view, qtbot):
    answer = stream(view, events(), expand_at=1)
    streamed, sources = view.browser.toPlainText(), view.sources_in_document()
    assert "▼ Thought for " in streamed and "Let me think about this carefully." in streamed
    fresh = ChatView()
    qtbot.addWidget(fresh)
    fresh.expanded = {"at1"}
    fresh.set_messages([Message("user", "question"), answer])
    title = streamed.split("\n")[4]  # the time is the stream's own, measured here
    assert fresh.browser.toPlainText().replace("▼ Thoughts", title) == streamed
    assert fresh.sources_in_document() == sources
    assert sources == {
        "target": len("Let me think"),
        "accepted": len(" about this carefully.The answer"),
        "correction": 7,
    }
    answer.id = 3
    view.end_answer()
    assert view.expanded == {"id3"} and "Let me think" in view.browser.toPlainText()


def test_a_model_that_does_not_think_shows_no_block():
    plain = [Segment("a", "target"), Segment("b", "accepted")]
    assert [event_segments(TokenEvent(1, "a", TokenSource.TARGET, 0))] == [plain[:1]]
    assert event_segments(TokenEvent(-1, "", TokenSource.TARGET, 0)) == [Segment("", "target")]
    assert (
        format_channel_stats({"channels": {}})
        == format_channel_stats({"channels": {"content": {}}})
        == ""
    )


def test_the_switch_and_budget_are_settings_that_reach_the_chat_options(qtbot):
    s = Settings(thinking=False, reasoning_budget=300)
    save_settings(s)
    assert load_settings() == s
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    panel.set_settings(s)
    assert not panel.thinking.isChecked() and not panel.reasoning_budget.isEnabled()
    assert panel.apply_to(Settings()).thinking_options() == {
        "thinking": False,
        "reasoning_budget": 300,
    }
    options = s.generation_options()
    assert (options["enable_thinking"], options["reasoning_budget"]) == (False, 300)
    assert Settings().generation_options()["reasoning_budget"] == -1  # unlimited by default
    with qtbot.waitSignal(panel.thinkingChanged):
        panel.thinking.setChecked(True)
    assert panel.reasoning_budget.isEnabled()
    s.take_thinking_options(
        {"thinking": "yes", "reasoning_budget": -7}
    )  # bad values are left alone
    assert (s.thinking, s.reasoning_budget) == (False, 300)


def test_the_thinking_is_stored_and_exported_apart_from_the_answer(tmp_path):
    thinking = [
        Segment("hm", "target", channel=REASONING),
        Segment(" ok", "accepted", 0.5, 0.4, REASONING),
    ]
    msg = Message("assistant", "A", [Segment("A", "accepted")], dict(STATS), "stop")
    msg.reasoning, msg.reasoning_segments = "hm ok", thinking
    store = ConversationStore(tmp_path / "s.sqlite3")
    cid = store.create("t")
    store.add_message(cid, Message("user", "q"))
    store.add_message(cid, msg)
    store.set_options(cid, {"thinking": False, "reasoning_budget": 64})
    store.close()
    store = ConversationStore(tmp_path / "s.sqlite3")
    back = store.messages(cid)[1]
    assert (back.content, back.reasoning, back.reasoning_segments, back.stats) == (
        "A",
        "hm ok",
        thinking,
        STATS,
    )
    assert store.options(cid) == {"thinking": False, "reasoning_budget": 64}
    assert chat_history(store.messages(cid)) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "A"},
    ]
    _, exported = export.from_json(export.to_json("t", [back]))
    assert (exported[0].reasoning, exported[0].reasoning_segments, exported[0].content) == (
        "hm ok",
        thinking,
        "A",
    )
    assert "<details><summary>Thinking</summary>\n\nhm ok\n\n</details>\n" in export.to_markdown(
        "t", [back]
    )


def test_a_version_two_store_gets_the_thinking_columns(tmp_path):
    path = tmp_path / "v2.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created_at REAL NOT NULL,
                                    updated_at REAL NOT NULL, current_leaf INTEGER);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL, role TEXT NOT NULL,
            content TEXT NOT NULL, kind TEXT NOT NULL DEFAULT 'chat', segments TEXT, stats TEXT,
            finish_reason TEXT, parent_id INTEGER);
        INSERT INTO conversations VALUES (1, 'old', 1.0, 2.0, 2);
        INSERT INTO messages (conversation_id, role, content, parent_id) VALUES (1, 'user', 'q', NULL),
            (1, 'assistant', 'a', 1);
        PRAGMA user_version = 2;
    """)
    db.commit()
    db.close()
    store = ConversationStore(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert [(m.content, m.reasoning) for m in store.messages(1)] == [("q", ""), ("a", "")]
    assert store.options(1) == {}


def test_a_server_streams_its_thinking_apart_and_thinking_off_is_sent():
    from openai.types.chat import ChatCompletionChunk

    def chunk(delta):
        return ChatCompletionChunk.model_validate(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": delta}],
            }
        ).choices[0]

    assert delta_texts(chunk({"reasoning_content": "hm"})) == ("", "hm")
    assert delta_texts(chunk({"reasoning": "vllm"})) == ("", "vllm")
    assert delta_texts(chunk({"content": "A"})) == ("A", "")
    remote = RemoteModel.__new__(RemoteModel)  # no server needed to build a request
    off = remote.chat([], enable_thinking=False, reasoning_budget=5, max_tokens=3).options
    assert off == {
        "max_tokens": 3,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    }
    assert remote.chat([], enable_thinking=True).options == {}


@pytest.fixture(scope="module")
def thinking_gguf(tmp_path_factory):
    """A synthetic model whose template opens ``<think>`` in the generation prompt."""
    folder = tmp_path_factory.mktemp("gui-thinking")
    return write_model(
        folder / "r1.gguf", seed=1, chat_template=R1_DISTILL, added_tokens=("<think>", "</think>")
    )


def test_the_window_thinks_within_the_budget_per_conversation_and_sends_no_thinking_back(
    qtbot, window, thinking_gguf
):
    sent = []
    generate = window.host.generate
    window.host.generate = lambda history, options: (
        sent.append((history, options)) or generate(history, options)
    )
    load(qtbot, window, thinking_gguf, thinking_gguf, max_tokens=24)
    window.panel.reasoning_budget.setValue(5)
    ask(qtbot, window)
    answer = window.messages[-1]
    assert (sent[-1][1]["enable_thinking"], sent[-1][1]["reasoning_budget"]) == (True, 5)
    thinking = answer.stats["channels"]["reasoning"]
    assert (
        thinking["tokens"] == 6 and thinking["forced_tokens"] >= 3
    )  # the budget, and a newline held as thinking
    assert answer.reasoning and answer.reasoning == "".join(
        s.text for s in answer.reasoning_segments
    )
    assert "</think>" not in answer.content + answer.reasoning and answer.stats["thinking_s"] > 0
    assert (
        answer.stats["accepted_tokens"] > 0
    )  # same weights: drafts kept, coloured as in the answer
    lines = window.view.browser.toPlainText().split("\n")
    assert lines[lines.index("Assistant   Regenerate") + 1].startswith(
        "▶ Thought for "
    )  # collapsed
    assert format_channel_stats(answer.stats) in lines

    cid = window.conversation_id
    stored = window.store.messages(cid)[-1]
    assert (stored.content, stored.reasoning, stored.reasoning_segments) == (
        answer.content,
        answer.reasoning,
        answer.reasoning_segments,
    )
    assert window.store.options(cid) == {"thinking": True, "reasoning_budget": 5}

    window.panel.thinking.setChecked(False)  # this conversation now answers without thinking
    ask(qtbot, window, "and again")
    history, options = sent[-1]
    assert history[1] == {
        "role": "assistant",
        "content": answer.content,
    }  # sent back without its thinking
    assert options["enable_thinking"] is False
    assert (
        window.messages[-1].reasoning == ""
        and window.view.links().count(f"localspec:think:id{answer.id}") == 1
    )
    assert window.store.options(cid) == {"thinking": False, "reasoning_budget": 5}

    window.new_chat()
    window.panel.thinking.setChecked(True)
    window.open_conversation(cid)  # its own switch comes back
    assert not window.panel.thinking.isChecked() and window.panel.reasoning_budget.value() == 5
