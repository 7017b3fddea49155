"""Tool calls: OpenAI's tools rendered by the GGUF's own chat template, the call made under
its function's schema (the call grammar), parsed back, and streamed as OpenAI streams it."""

from __future__ import annotations

import json

import jsonschema
import pytest
from support.tools import WEATHER

from localspec.api import SpeculativeModel
from localspec.decoding.tool_parser import ToolCallParser, split_tool_calls
from localspec.errors import InvalidOptionError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city now",
            "parameters": WEATHER,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    },
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# under tool_choice "auto" the default pair writes this call as a fenced JSON block, its
# arguments some 60 tokens: they must stream while written (issue 49)
WRITE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write",
            "description": "Write a file",
            "parameters": {
                "type": "object",
                "properties": {"filePath": {"type": "string"}, "content": {"type": "string"}},
                "required": ["filePath", "content"],
            },
        },
    }
]
WRITE_ASK = [
    {
        "role": "user",
        "content": "Create the file hello.py with a Python program that prints hello world three times, "
        "using the write tool.",
    }
]


def test_the_stream_splits_content_and_call_pieces_as_the_sdk_reassembles_them():
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": {"x": "}"}}}\n</tool_call>'
    )
    for step in (1, 3, 7, len(text)):
        stream, content, calls = ToolCallParser(), "", {}
        for i in range(0, len(text), step):
            piece, deltas = stream.feed(text[i : i + step])
            content += piece
            for d in deltas:
                call = calls.setdefault(d.index, {"name": None, "arguments": "", "id": None})
                call["id"] = call["id"] or d.id
                call["name"] = call["name"] or d.name
                call["arguments"] += d.arguments
        assert content == "Let me check.\n"
        assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
            ("get_weather", {"city": "Paris"}),
            ("add", {"a": 1, "b": {"x": "}"}}),
        ]
        assert all(c["id"].startswith("call_") for c in calls.values())
        assert [(c.id, c.arguments) for c in stream.finish()] == [
            (c["id"], c["arguments"]) for c in calls.values()
        ]
    assert split_tool_calls(text)[0] == "Let me check."


@pytest.mark.real_pair
def test_a_required_call_follows_its_schema_and_the_round_trip_answers(real_model):
    r = real_model.chat(ASK, tools=TOOLS, tool_choice="required", max_tokens=96)
    assert r.finish_reason == "tool_calls" and r.tool_calls, r.text
    call = r.tool_calls[0]
    assert call.name in ("get_weather", "add") and call.id.startswith("call_") and call.index == 0
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.name)
    jsonschema.validate(json.loads(call.arguments), schema)
    assert (
        r.stats.accepted_by_drafter.get("grammar", 0) >= 5
    )  # the call's keys and quotes, drafted for free
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": r.tool_calls},
        {"role": "tool", "tool_call_id": r.tool_calls[0].id, "content": '{"celsius": 21}'},
    ]
    final = real_model.chat(follow, tools=TOOLS, tool_choice="none", max_tokens=64)
    assert final.finish_reason in ("stop", "length") and final.text and not final.tool_calls


@pytest.mark.real_pair
def test_a_named_function_is_the_one_called_once(real_model):
    r = real_model.chat(
        ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "add"}},
        max_tokens=96,
    )
    assert [c.name for c in r.tool_calls] == ["add"]


@pytest.mark.real_pair
@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        ([{"type": "function"}], "auto", "function.name"),
        (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
        (TOOLS, "sometimes", "tool_choice"),
        (TOOLS + TOOLS[:1], "auto", "unique"),
    ],
)
def test_bad_tools_are_refused_before_anything_runs(real_model, tools, choice, message):
    with pytest.raises(InvalidOptionError, match=message):
        real_model.chat(ASK, tools=tools, tool_choice=choice)


@pytest.mark.real_pair
def test_tools_and_a_response_format_together_are_refused(real_model):
    with pytest.raises(InvalidOptionError, match="combined"):
        real_model.chat(ASK, tools=TOOLS, response_format={"type": "json_object"})


def test_a_template_without_a_call_format_is_refused(smollm2_gguf):
    with SpeculativeModel(smollm2_gguf, None, n_ctx=512) as m:
        if "<tool_call>" in (m.target.info.chat_template or ""):
            pytest.fail("SmolLM2's template was expected to have no <tool_call> format")
        with pytest.raises(InvalidOptionError, match="no tool-call format"):
            m.chat(ASK, tools=TOOLS)
        assert m.chat(ASK, max_tokens=2).finish_reason == "length"


@pytest.mark.real_pair
def test_an_auto_call_streams_as_the_model_writes_it(real_model):
    """The loop's events carry the call's pieces while it is generated, and the finished
    result holds the same call (its id made once)."""
    generation = real_model.chat(
        WRITE_ASK, tools=WRITE_TOOLS, tool_choice="auto", max_tokens=200, stream=True
    )
    pieces = [d for event in generation if event.token != -1 for d in event.calls]
    [call] = generation.result.tool_calls
    assert pieces[0].id == call.id and pieces[0].name == call.name == "write"
    assert len([d for d in pieces if d.arguments]) > 1
    assert "".join(d.arguments for d in pieces) == call.arguments
    assert (
        json.loads(call.arguments)["filePath"] == "hello.py"
        and generation.result.finish_reason == "tool_calls"
    )
