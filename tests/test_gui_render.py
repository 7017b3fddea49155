"""The chat view's rendering: Markdown with Pygments colours and token-source backgrounds
in one document, streamed block by block; the drafting line and chart under an answer.
Messages and stats are built directly (no model), offscreen."""

import random
import statistics
import time

import pytest

pytest.importorskip("PySide6", reason="the GUI tests need PySide6 (pip install -e '.[test]')")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QColor, QHelpEvent, QPalette, QTextCursor  # noqa: E402
from PySide6.QtWidgets import QApplication, QToolTip  # noqa: E402

from gui.chat.chat_view import SOURCE_COLOURS, ChatView, tooltip_for  # noqa: E402
from gui.chat.draft_chart import ACCEPTED, chart_bars, chart_image, mix_text  # noqa: E402
from gui.chat.message import Message, Segment  # noqa: E402
from gui.chat.token_colours import contrast_ratio  # noqa: E402
from gui.markdown.markdown_render import parse_markdown  # noqa: E402

# (text, source) per token: Markdown markup, a heading, bold, and a fenced Python block
TOKENS = [
    ("# Plan", "target"),
    ("\n\n", "accepted"),
    ("Use ", "target"),
    ("**bold**", "accepted"),
    (" words", "correction"),
    (".\n\n", "accepted"),
    ("```python\n", "accepted"),
    ("def", "accepted"),
    (" add", "correction"),
    ("(a, b):\n", "target"),
    ("    return", "accepted"),
    (" a + b\n", "forced"),
    ("```\n", "accepted"),
]
STATS = {
    "drafted_tokens": 130,
    "accepted_tokens": 95,
    "rounds": 40,
    "generated_tokens": 140,
    "drafted_by_drafter": {"draft-model": 100, "suffix": 20, "prompt-lookup": 10},
    "accepted_by_drafter": {"draft-model": 80, "suffix": 12, "prompt-lookup": 3},
    "drafted_per_position": [40, 35, 30, 25],
    "accepted_at_position": [36, 28, 18, 13],
}


@pytest.fixture
def view(qtbot):
    v = ChatView()
    qtbot.addWidget(v)
    v.resize(700, 500)
    v.show()
    return v


def stream(view, tokens, per_round=1, p=(0.9, 0.8), paint=False):
    """Stream ``tokens`` ((text, source) pairs) as an answer, ``per_round`` a round; the
    time of each update in seconds, and with ``paint`` the time until it is painted."""
    answer = Message("assistant", "", id=None)
    view.set_messages([Message("user", "question"), answer])
    view.begin_answer(answer)
    times, painted = [], []
    for i in range(0, len(tokens), per_round):
        started = time.perf_counter()
        view.append_segments([Segment(t, s, *p) for t, s in tokens[i : i + per_round]])
        times.append(time.perf_counter() - started)
        if paint:
            view.browser.viewport().repaint()
            painted.append(time.perf_counter() - started)
    return answer, (times, painted) if paint else times


def char_format(view, text, offset=0):
    """The char format of the character ``offset`` into the first ``text`` shown."""
    doc = view.browser.document()
    cursor = QTextCursor(doc)
    cursor.setPosition(doc.toPlainText().index(text) + offset + 1)  # charFormat(): the char before
    return cursor.charFormat()


def background(view, text):
    brush = char_format(view, text).background()
    return brush.color().name() if brush.style() != Qt.NoBrush else None


def test_a_streamed_markdown_answer_keeps_token_colours_and_gets_syntax_colours(view):
    stream(view, TOKENS)
    shown = view.browser.toPlainText()
    assert "**" not in shown and "```" not in shown and "#" not in shown
    assert (
        "Plan" in shown
        and "Use bold words." in shown
        and "def add(a, b):\n    return a + b" in shown
    )
    doc = view.browser.document()
    assert doc.findBlock(shown.index("Plan")).blockFormat().headingLevel() == 1
    assert char_format(view, "bold").fontWeight() == 700
    assert background(view, "bold") == SOURCE_COLOURS["accepted"].name()
    assert background(view, "def") == SOURCE_COLOURS["accepted"].name()
    assert background(view, " add") == SOURCE_COLOURS["correction"].name()
    assert background(view, " a + b") == SOURCE_COLOURS["forced"].name()
    assert background(view, "Use") is None and background(view, "(a, b)") is None  # target tokens
    # syntax colours: the keyword differs from plain code text, and from the body text
    keyword = char_format(view, "return").foreground().color()
    assert keyword != char_format(view, "(a, b)", 1).foreground().color()
    assert keyword != char_format(view, "Use").foreground().color()
    assert char_format(view, "def").font().family() == char_format(view, "(a, b)").font().family()
    assert char_format(view, "def").toolTip() == tooltip_for(Segment("def", "accepted", 0.9, 0.8))


def test_the_streamed_document_equals_a_fresh_render(view):
    stream(view, TOKENS, per_round=2)
    streamed, sources = view.browser.toPlainText(), view.sources_in_document()
    view.end_answer()
    assert view.browser.toPlainText() == streamed and view.sources_in_document() == sources
    assert sources["accepted"] > 0 and sources["correction"] == len(" words") + len(" add")


def test_toggling_the_highlight_keeps_the_text(view):
    stream(view, TOKENS)
    view.end_answer()
    text, sources = view.browser.toPlainText(), view.sources_in_document()
    keyword = char_format(view, "def").foreground().color()
    view.set_highlight(False)
    assert view.browser.toPlainText() == text and view.sources_in_document() == {}
    assert background(view, "def") != SOURCE_COLOURS["accepted"].name()
    assert char_format(view, "def").toolTip() == ""
    assert (
        char_format(view, "def").foreground().color()
        != char_format(view, "(a, b)", 1).foreground().color()
    )
    view.set_highlight(True)
    assert view.browser.toPlainText() == text and view.sources_in_document() == sources
    assert char_format(view, "def").foreground().color() == keyword


def test_hovering_a_token_shows_its_source_and_probabilities(view):
    stream(view, TOKENS)
    doc = view.browser.document()
    cursor = QTextCursor(doc)
    cursor.setPosition(doc.toPlainText().index(" add") + 2)
    point = view.browser.cursorRect(cursor).center() - QPoint(3, 0)
    event = QHelpEvent(QHelpEvent.ToolTip, point, view.browser.viewport().mapToGlobal(point))
    QApplication.sendEvent(view.browser.viewport(), event)
    assert QToolTip.text() == tooltip_for(Segment(" add", "correction", 0.9, 0.8))
    QToolTip.hideText()


def test_colours_stay_readable_in_a_dark_palette(view):
    dark = QPalette()
    dark.setColor(QPalette.Base, QColor("#17181a"))
    dark.setColor(QPalette.Text, QColor("#e8eaed"))
    view.setPalette(dark)
    stream(view, TOKENS)
    for text in ("(a, b)", "return", "def", " add", "Use", "bold"):
        fmt = char_format(view, text)
        bg = (
            fmt.background().color()
            if fmt.background().style() != Qt.NoBrush
            else dark.color(QPalette.Base)
        )
        assert contrast_ratio(fmt.foreground().color(), bg) >= 4.5, text


def test_markdown_blocks_and_inline_styles_map_back_to_their_source():
    source = (
        "Intro with `code`, *it*, ~~gone~~, snake_case_name and [a link](https://x.org).\n"
        "- one\n  - nested **b**\n1. first\n\n| a | b |\n|---|---|\n| `1` | **2** |\n\n> quoted\n\n---\n"
        "```js\nlet x = 1;\n"  # an unclosed fence: a code block still streaming
    )
    units = parse_markdown(source, streaming=True)
    assert [u.kind for u in units] == [
        "para",
        "item",
        "item",
        "item",
        "table",
        "quote",
        "rule",
        "code",
    ]
    assert [u.level for u in units[1:4]] == [0, 1, 0] and units[3].number == 1
    assert units[1].group != units[3].group  # a numbered list after a bulleted one: a new list
    spans = [s for u in units for s in u.spans] + [
        s for row in units[4].cells for cell in row for s in cell
    ]
    for s in spans:
        assert source[s.src : s.src + len(s.text)].replace("\n", " ") == s.text
    styles = {s.text: (s.style, s.href) for s in units[0].spans}
    assert styles["code"] == ("c", "") and styles["it"] == ("i", "") and styles["gone"] == ("s", "")
    assert styles["a link"] == ("", "https://x.org") and "snake_case_name" in "".join(styles)
    assert any(s.style.startswith("tok:Keyword") for s in units[-1].spans)


def test_the_drafter_mix_line_and_chart_match_the_stats(view):
    assert mix_text(STATS) == (
        "Drafted by draft model 80/100 · suffix 12/20 · prompt lookup 3/10"
        " · accepted by position 90 % › 80 % › 60 % › 52 %"
    )
    assert (
        mix_text({"drafted_tokens": 0}) == ""
        and chart_image({}, view.palette(), view.font()) is None
    )
    drafters, positions = chart_bars(STATS)
    assert [(b.label, b.accepted, b.drafted) for b in drafters] == [
        ("draft model", 80, 100),
        ("suffix", 12, 20),
        ("prompt lookup", 3, 10),
    ]
    assert drafters[1].whole.width() == pytest.approx(drafters[0].whole.width() * 20 / 100)
    assert drafters[0].part.width() == pytest.approx(drafters[0].whole.width() * 0.8)
    assert [round(b.part.height() / b.whole.height(), 2) for b in positions] == [
        0.9,
        0.8,
        0.6,
        0.52,
    ]
    image = chart_image(STATS, view.palette(), view.font())
    inside = drafters[0].part.center().toPoint()
    assert image.pixelColor(inside) == ACCEPTED
    rejected = drafters[0].whole.topRight().toPoint() + QPoint(-2, 2)
    assert image.pixelColor(rejected) != ACCEPTED and image.pixelColor(rejected).alpha() == 255

    view.set_messages([Message("user", "q"), Message("assistant", "answer", stats=STATS, id=2)])
    shown = view.browser.toPlainText()
    assert mix_text(STATS) in shown and "Accepted 95/130 draft tokens" in shown
    assert "\ufffc" in shown  # the chart, an image in the document


def long_answer(n_tokens):
    """A Markdown answer of ``n_tokens`` (2-5 characters each): headings, paragraphs,
    a numbered list, two code blocks and a table."""
    rng = random.Random(1)
    words = "the draft proposes tokens and the target checks them all in one batch".split()

    def para(k):
        return " ".join(rng.choice(words) for _ in range(k)) + ".\n\n"

    code = (
        "```python\n"
        + "".join(f"def f{i}(x):\n    return x * {i}  # step\n\n" for i in range(20))
        + "```\n\n"
    )
    steps = "".join(f"{i}. **Step {i}**: {para(10).strip()}\n" for i in range(1, 8))
    table = "| a | b |\n|---|---|\n" + "".join(f"| `x{i}` | {i} |\n" for i in range(6))
    text = ""
    while len(text) < 6 * n_tokens:
        text += (
            "# Speculative decoding\n\n"
            + para(60)
            + steps
            + "\n"
            + code
            + para(80)
            + table
            + "\n"
            + para(100)
        )
    tokens, i = [], 0
    while i < len(text) and len(tokens) < n_tokens:
        k = rng.choice([2, 3, 4, 5])
        tokens.append(
            (text[i : i + k], rng.choice(["accepted", "accepted", "correction", "target"]))
        )
        i += k
    return tokens


def test_a_2000_token_answer_streams_block_by_block_and_stays_at_the_bottom(view, capsys):
    tokens = long_answer(2000)
    assert len(tokens) == 2000
    _, (times, painted) = stream(view, tokens, per_round=3, paint=True)
    bar = view.browser.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    streamed, sources = view.browser.toPlainText(), view.sources_in_document()
    started = time.perf_counter()
    view.end_answer()
    full_ms = 1000 * (time.perf_counter() - started)
    assert view.browser.toPlainText() == streamed and view.sources_in_document() == sources
    assert bar.value() == bar.maximum()
    with capsys.disabled():
        print(
            f"\n2,000-token answer ({sum(len(t) for t, _ in tokens)} characters), {len(times)} updates of 3 tokens:"
        )
        for name, values in (("render per update", times), ("render + repaint", painted)):
            ms = sorted(1000 * t for t in values)
            p95 = ms[int(0.95 * len(ms))]
            print(
                f"  {name}: median {statistics.median(ms):.2f} ms, p95 {p95:.2f} ms, max {ms[-1]:.2f} ms"
            )
        print(f"  full re-render at the end: {full_ms:.0f} ms")


def test_the_scroll_position_is_kept_while_an_answer_streams_above_it(view):
    tokens = long_answer(600)
    stream(view, tokens[:500], per_round=5)
    bar = view.browser.verticalScrollBar()
    bar.setValue(bar.maximum() // 3)
    kept = bar.value()
    for i in range(500, 600, 5):
        view.append_segments([Segment(t, s) for t, s in tokens[i : i + 5]])
        assert bar.value() == kept


def fragments(view):
    """(text, background, tooltip, bold, link, list marker style) per fragment of the document."""
    out = []
    block = view.browser.document().begin()
    while block.isValid():
        marker = block.textList().format().style() if block.textList() else None
        it = block.begin()
        while not it.atEnd():
            f = it.fragment().charFormat()
            bg = f.background().color().name() if f.background().style() != Qt.NoBrush else None
            out.append(
                (it.fragment().text(), bg, f.toolTip(), f.fontWeight(), f.anchorHref(), marker)
            )
            it += 1
        block = block.next()
    return out


PIECES = [
    "# Head *one*\n\n",
    "Plain **bold** and `code` text\ncontinued [link](http://x.y) here.\n\n",
    "- a\n- b **c**\n  - nested\n",
    "1. one\n2. two\n\n",
    "```python\ndef f(x):\n    return x  # c\n```\n\n",
    "| a | b |\n|---|---|\n| 1 | `2` |\n\n",
    "> quoted *q*\n\n",
    "---\n\n",
    "Tail with snake_case and 2 * 3.\n",
    "```sh\necho unclosed\n",
]


@pytest.mark.parametrize("seed", range(6))
def test_streaming_in_any_cut_gives_the_same_document_as_one_render(view, seed):
    rng = random.Random(seed)
    text = "".join(rng.choice(PIECES[:-1]) for _ in range(8)) + rng.choice(["", PIECES[-1]])
    tokens, i = [], 0
    while i < len(text):
        k = rng.randint(1, 6)
        tokens.append((text[i : i + k], rng.choice(["accepted", "correction", "target", "forced"])))
        i += k
    stream(view, tokens, per_round=rng.randint(1, 4))
    streamed = fragments(view)
    view.end_answer()
    assert fragments(view) == streamed
