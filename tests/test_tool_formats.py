"""Tool-call formats other than Hermes: Llama 3.x JSON calls (the whole answer is
``{"name": ..., "parameters": {...}}``), recognised from Meta's own Llama 3.1 Instruct chat
template (tests/data, as the GGUF files carry it), run on a random-weight model whose every
call comes from the call grammar; and templates with no call format (Gemma 3) refused."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import openai
import pytest
from support.served import RunningServer

from localspec.api import SpeculativeModel
from localspec.decoding.params import CallOptions
from localspec.decoding.tool_calls import LLAMA3_JSON, normalise_messages, tool_format, tool_request
from localspec.decoding.tool_parser import ToolCallParser, split_tool_calls
from localspec.errors import InvalidOptionError
from localspec.llama.synthetic import write_model

LLAMA31_TEMPLATE = (
    Path(__file__).parent / "data" / "llama-3.1-instruct.chat_template.jinja"
).read_text()
FORECAST = {
    "type": "object",
    "properties": {
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["unit", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "forecast", "parameters": FORECAST}},
    {
        "type": "function",
        "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
    },
]
ASK = [{"role": "user", "content": "Forecast for three days?"}]


@pytest.fixture(scope="module")
def llama_model(tmp_path_factory):
    path = write_model(
        tmp_path_factory.mktemp("llama3") / "llama3.gguf", seed=1, chat_template=LLAMA31_TEMPLATE
    )
    with SpeculativeModel(path, path, n_ctx=2048) as model:
        yield model


def test_the_llama_template_is_recognised_and_the_others_are_not(llama_model, real_model):
    assert llama_model.tool_format == LLAMA3_JSON
    assert real_model.tool_format.name == "hermes"
    assert tool_format("{{ messages }}", lambda text: [1]) is None
    assert tool_format(None, lambda text: [1]) is None


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "forecast"}}]
)
def test_a_forced_call_is_one_json_call_under_its_schema(llama_model, choice):
    r = llama_model.chat(ASK, tools=TOOLS, tool_choice=choice, max_tokens=200)
    assert r.finish_reason == "tool_calls", r.text
    assert r.text.startswith('{"name": "') and r.content == ""
    [call] = r.tool_calls
    if isinstance(choice, dict):
        assert call.name == "forecast"
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.name)
    jsonschema.validate(json.loads(call.arguments), schema)
    assert (
        r.stats.accepted_by_drafter.get("grammar", 0) > 0
    )  # the keys and quotes were forced drafts


def test_the_call_renders_back_for_the_next_turn(llama_model):
    r = llama_model.chat(ASK, tools=TOOLS, tool_choice="required", max_tokens=200)
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": r.tool_calls},
        {"role": "tool", "tool_call_id": r.tool_calls[0].id, "content": '{"max": 21}'},
    ]
    prompt = llama_model.target.render_chat(normalise_messages(follow), TOOLS)
    assert f'{{"name": "{r.tool_calls[0].name}", "parameters": ' in prompt
    # the template writes a tool's result with tojson, as Meta wrote it (a string is iterable)
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n" + json.dumps('{"max": 21}') in prompt
    final = llama_model.chat(follow, tools=TOOLS, tool_choice="none", max_tokens=4)
    assert final.finish_reason == "length" and not final.tool_calls


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ('{"name": "ping", "parameters": {}}', True),
        ('{"name": "forecast", "parameters": {"unit": "celsius", "days": 3}}', True),
        ("Three days of sun.", True),
        ('{"name": "nope", "parameters": {}}', False),
        ('{"name": "forecast", "parameters": {"unit": "kelvin", "days": 3}}', False),
        (' {"name": "ping", "parameters": {}}', False),
    ],
)
def test_auto_allows_one_call_or_prose_that_does_not_open_one(llama_model, text, ok):
    tools = tool_request(
        CallOptions(tools=TOOLS, tool_choice="auto"), lambda: llama_model.tool_format, "m"
    )
    assert tools.trigger is None  # active from the first token: the call is the whole answer
    constraint = llama_model._constraint(tools.grammar, tools.trigger)
    tokens = list(
        constraint._tokenizer.tokenize_bytes(text.encode())
    )  # no SentencePiece space in front
    allowed = constraint.allowed(tokens)
    complete = (
        allowed == len(tokens) and (constraint.advance(tokens) or True) and constraint.accepting
    )
    assert complete == ok, text


def test_the_answer_is_split_and_streamed_as_openai_shapes_it():
    text = '{"name": "forecast", "parameters": {"unit": "celsius", "days": {"x": "}"}}}'
    content, [call] = split_tool_calls(text, LLAMA3_JSON)
    assert content == "" and json.loads(call.arguments) == {"unit": "celsius", "days": {"x": "}"}}
    assert split_tool_calls("Sunny all week.", LLAMA3_JSON) == ("Sunny all week.", [])
    for step in (1, 2, 5, len(text)):
        stream, args, names = ToolCallParser(LLAMA3_JSON), "", []
        for i in range(0, len(text), step):
            content, deltas = stream.feed(text[i : i + step])
            assert content == ""
            names += [d.name for d in deltas if d.id is not None]
            args += "".join(d.arguments for d in deltas)
        assert names == ["forecast"] and args == call.arguments
    stream = ToolCallParser(LLAMA3_JSON)
    assert "".join(stream.feed(piece)[0] for piece in ("Sun", "ny {", "}")) == "Sunny {}"


def test_the_openai_sdk_reads_a_llama_call_whole_and_streamed(llama_model):
    running = RunningServer(llama_model)
    try:
        client = openai.OpenAI(base_url=running.base + "/v1", api_key="none", max_retries=0)
        whole = client.chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200
        )
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        [call] = choice.message.tool_calls
        args = ""
        with client.chat.completions.stream(
            model="m", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200
        ) as stream:
            for event in stream:
                if event.type == "tool_calls.function.arguments.delta":
                    args += event.arguments_delta
            final = stream.get_final_completion().choices[0]
        [streamed] = final.message.tool_calls
        assert (streamed.function.name, json.loads(args)) == (
            call.function.name,
            json.loads(call.function.arguments),
        )
        assert json.loads(streamed.function.arguments) == json.loads(args)
    finally:
        running.stop()


def test_gemma_3_has_no_call_format_and_is_refused(gemma3_270m_gguf):
    with SpeculativeModel(gemma3_270m_gguf, None, n_ctx=512) as m:
        assert m.tool_format is None
        with pytest.raises(InvalidOptionError, match="no tool-call format localspec knows"):
            m.chat(ASK, tools=TOOLS)
