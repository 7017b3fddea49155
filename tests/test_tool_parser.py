"""The one tool-call parser: text fed in any pieces (markers, escapes and non-ASCII
characters split anywhere) gives the same content and calls as the whole text, each call's
streamed pieces add up to its arguments, and a call goes out while it is written."""

from __future__ import annotations

import json

import pytest

from localspec.decoding.tool_calls import LLAMA3_JSON, ToolFormat
from localspec.decoding.tool_parser import ToolCallParser, split_tool_calls

HERMES = ToolFormat("hermes", open_token=0, close_token=3, tools=("write", "écrire"))
OWN = (
    'Sure.\n<tool_call>\n{"name": "write", "arguments": {"path": "a.py", "text": "x = \\"}\\"\\n"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "écrire", "arguments": {"texte": "café 😀 \\u00e9"}}\n</tool_call>'
)
FENCED = 'Je vais écrire 😀.\n```json\n{\n  "name": "écrire",\n  "arguments": {\n    "texte": "{[\\"]}"\n  }\n}\n```\nFini.'
WRAPPED = '<tools>\n{"type": "function", "function": {"name": "write", "parameters": {"path": "b"}}}\n</tools>'
LLAMA = '{"name": "forecast", "parameters": {"days": [1, {"x": "}"}], "unit": "é"}}'
CASES = [
    (OWN, HERMES),
    (FENCED, HERMES),
    (WRAPPED, HERMES),
    (LLAMA, LLAMA3_JSON),
    ("Just prose 😀 <to", HERMES),
]


def _stream(text: str, fmt: ToolFormat, cuts: list[int]) -> tuple[str, dict, ToolCallParser]:
    parser, content, calls = ToolCallParser(fmt), "", {}
    for start, end in zip([0, *cuts], [*cuts, len(text)]):
        piece, deltas = parser.feed(text[start:end])
        content += piece
        for d in deltas:
            calls.setdefault(d.index, {"id": d.id, "name": d.name, "arguments": ""})[
                "arguments"
            ] += d.arguments
    piece, deltas = parser.close()
    for d in deltas:
        calls.setdefault(d.index, {"id": d.id, "name": d.name, "arguments": ""})["arguments"] += (
            d.arguments
        )
    return content + piece, calls, parser


def _shape(calls) -> list[tuple]:
    return [(c.name, c.arguments, c.index) for c in calls]


@pytest.mark.parametrize(("text", "fmt"), CASES)
def test_any_pieces_give_the_calls_and_content_of_the_whole_text(text, fmt):
    content, calls = split_tool_calls(text, fmt)
    for step in (1, 2, 3, 5, 8, 13):
        streamed, pieces, parser = _stream(text, fmt, list(range(step, len(text), step)))
        finished = parser.finish()
        assert _shape(finished) == _shape(calls) and parser.content == content, step
        assert [(c.id, c.name, c.arguments) for c in finished] == [
            (pieces[c.index]["id"], pieces[c.index]["name"], pieces[c.index]["arguments"])
            for c in finished
        ]
        assert parser.finish() == finished  # finishing again changes nothing


def test_every_single_split_of_a_marker_or_an_escape_reads_the_same():
    for text, fmt in CASES[:2]:
        _, calls = split_tool_calls(text, fmt)
        for cut in range(1, len(text)):
            assert _shape(_stream(text, fmt, [cut])[2].finish()) == _shape(calls), (text, cut)


def test_what_each_form_gives():
    content, calls = split_tool_calls(OWN, HERMES)
    assert content == "Sure." and [c.name for c in calls] == ["write", "écrire"]
    assert json.loads(calls[0].arguments) == {"path": "a.py", "text": 'x = "}"\n'}
    assert json.loads(calls[1].arguments) == {"texte": "café 😀 é"}
    content, [call] = split_tool_calls(FENCED, HERMES)
    assert content == "Je vais écrire 😀.\n\nFini." and json.loads(call.arguments) == {
        "texte": '{["]}'
    }
    assert split_tool_calls(WRAPPED, HERMES)[1][0].arguments == '{"path": "b"}'
    assert split_tool_calls(LLAMA, LLAMA3_JSON)[0] == ""
    assert split_tool_calls("Just prose 😀 <to", HERMES) == ("Just prose 😀 <to", [])


def test_a_call_goes_out_while_it_is_written_and_its_ids_are_made_once():
    parser = ToolCallParser(HERMES)
    head = 'Ok.\n```json\n{"name": "write", "arguments": {"text": "'
    content, deltas = parser.feed(head)
    assert content == "Ok.\n" and deltas[0].name == "write" and deltas[0].id.startswith("call_")
    _, more = parser.feed("line one\\nline ")
    assert [d.arguments for d in more] == ["line one\\nline "]  # no end seen yet, nothing held back
    parser.feed('two"}}\n```')
    [call] = parser.finish()
    assert call.id == deltas[0].id and json.loads(call.arguments) == {"text": "line one\nline two"}


def test_arguments_written_as_json_text_come_whole_at_the_call_s_end():
    parser = ToolCallParser(HERMES)
    _, early = parser.feed('{"name": "write", "arguments": "{\\"path\\": \\"a\\"}"')
    _, late = parser.feed("}")
    assert early == [] and [d.arguments for d in late] == ["", '{"path": "a"}']


def test_a_call_cut_short_is_neither_a_call_nor_content():
    for text in (OWN[: OWN.index("café")], FENCED[: FENCED.index("]}")]):
        content, calls = split_tool_calls(text, HERMES)
        assert "name" not in content and len(calls) == (1 if text.startswith("Sure") else 0)
