"""localspec serve's Anthropic Messages API through the real ``anthropic`` SDK, on 127.0.0.1,
with the real pair: answers equal the library's greedy ones, streams reassemble to the whole
answer, tool use round-trips, errors come in Anthropic's shape."""

import json

import anthropic
import httpx
import jsonschema
import pytest
from support.greedy import assert_same_greedy
from support.served import KEY, RunningServer, answer_batches, serve_once
from support.tools import WEATHER

from localspec.server.anthropic_messages import (
    CountTokensRequest,
    MessagesRequest,
    conversation,
    error_response,
    messages_request,
)
from localspec.server.errors import RequestError
from localspec.server.request import Limits

SYSTEM = "You are a helpful programming assistant."
ASK = [{"role": "user", "content": "Write a Python function that reverses a string."}]
WEATHER_ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ADD = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
TOOLS = [
    {"name": "get_weather", "description": "The weather in a city now", "input_schema": WEATHER},
    {"name": "add", "description": "Add two numbers", "input_schema": ADD},
]
LIMITS = Limits("pair", max_tokens=100, tools=True, fim=False)
SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
GREEDY = {"extra_body": {"temperature": 0}}  # the SDK no longer has a temperature argument
RAW = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
}


def prompt_of(usage) -> int:
    """The whole prompt, as Anthropic's usage splits it: tokens read plus tokens from the cache."""
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


@pytest.fixture(scope="module")
def server(real_model):
    running = RunningServer(real_model, api_key=KEY)
    yield running
    running.stop()


def client(server, key=KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base, api_key=key, max_retries=0)


def assert_block_order(kinds: list[str], blocks: int) -> None:
    """message_start, then per block start / delta... / stop, then message_delta, message_stop."""
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
    body = kinds[1:-2]
    assert body.count("content_block_start") == body.count("content_block_stop") == blocks, kinds
    for i, kind in enumerate(body):
        if kind == "content_block_delta":
            assert (
                body[:i].count("content_block_start") == body[:i].count("content_block_stop") + 1
            ), kinds


@pytest.fixture(scope="module")
def weather_call(server):
    """A required tool call, not streamed."""
    return client(server).messages.create(
        model="m",
        max_tokens=48,
        messages=WEATHER_ASK,
        tools=TOOLS,
        tool_choice={"type": "any"},
        **GREEDY,
    )


def test_a_message_equals_the_library_call_and_counts_its_prompt(server, real_model, tie_tolerance):
    real_model.reset_cache()
    direct = real_model.chat(
        [{"role": "system", "content": SYSTEM}, *ASK], max_tokens=32, temperature=0
    )
    real_model.reset_cache()
    c = client(server)
    m = c.messages.create(model="claude-any", system=SYSTEM, messages=ASK, max_tokens=32, **GREEDY)
    assert (
        m.type == "message"
        and m.role == "assistant"
        and m.model == "test-pair"
        and m.id.startswith("msg_")
    )
    assert [b.type for b in m.content] == ["text"]
    assert_same_greedy(
        real_model,
        [{"role": "system", "content": SYSTEM}, *ASK],
        direct.text,
        m.content[0].text,
        tie_tolerance,
    )
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert prompt_of(m.usage) == direct.stats.prompt_tokens and 0 < m.usage.output_tokens <= 32
    timings = m.model_extra["timings"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    system_blocks = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    count = c.messages.count_tokens(model="claude-any", system=system_blocks, messages=ASK)
    assert count.input_tokens == prompt_of(m.usage)


def test_a_stream_reassembles_to_the_whole_answer(server, real_model, tie_tolerance):
    c = client(server)
    real_model.reset_cache()
    whole = c.messages.create(model="m", messages=ASK, max_tokens=32, **GREEDY)
    real_model.reset_cache()
    with c.messages.stream(model="m", messages=ASK, max_tokens=32, **GREEDY) as stream:
        events = list(stream)
        text = stream.get_final_text()
        final = stream.get_final_message()
    assert_block_order([e.type for e in events if e.type in RAW], blocks=1)
    assert "".join(e.text for e in events if e.type == "text") == text
    assert_same_greedy(real_model, ASK, whole.content[0].text, text, tie_tolerance)
    start = next(e for e in events if e.type == "message_start")
    assert start.message.id == final.id and prompt_of(start.message.usage) == prompt_of(whole.usage)
    delta = next(e for e in events if e.type == "message_delta")
    assert (
        delta.delta.stop_reason == final.stop_reason
        and delta.usage.output_tokens == final.usage.output_tokens
    )
    assert delta.model_extra["timings"]["draft_n"] >= 0


def test_a_tool_use_round_trip(server, weather_call):
    """tool_choice any gives a tool_use block that fits its input_schema; its result sent
    back gets a text answer; count_tokens renders the tools as the message did."""
    c = client(server)
    m = weather_call
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and all(u.id.startswith("toolu_") for u in uses)
    jsonschema.validate(uses[0].input, SCHEMAS[uses[0].name])
    count = c.messages.count_tokens(
        model="m", messages=WEATHER_ASK, tools=TOOLS, tool_choice={"type": "any"}
    )
    assert count.input_tokens == prompt_of(m.usage)
    follow = [
        *WEATHER_ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": u.id,
                    "content": [{"type": "text", "text": '{"celsius": 21}'}],
                }
                for u in uses
            ],
        },
    ]
    final = c.messages.create(
        model="m",
        max_tokens=32,
        messages=follow,
        tools=TOOLS,
        tool_choice={"type": "none"},
        **GREEDY,
    )
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in final.content] == ["text"] and final.content[0].text.strip()


def test_streamed_tool_use_reassembles_to_the_same_input(server, weather_call):
    first = next(b for b in weather_call.content if b.type == "tool_use")
    with client(server).messages.stream(
        model="m",
        max_tokens=48,
        messages=WEATHER_ASK,
        tools=TOOLS,
        tool_choice={"type": "any"},
        **GREEDY,
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert_block_order([e.type for e in events if e.type in RAW], blocks=len(final.content))
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert starts[-len(uses) :][0].name == first.name and starts[-len(uses) :][0].id.startswith(
        "toolu_"
    )
    index = next(
        e.index
        for e in events
        if e.type == "content_block_start" and e.content_block.type == "tool_use"
    )
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta"
        and e.index == index
        and e.delta.type == "input_json_delta"
    )
    assert json.loads(partial) == uses[0].input == first.input
    assert final.stop_reason == "tool_use"
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.delta.stop_reason == "tool_use"


def test_an_auto_tool_use_s_input_streams_while_it_is_written(server):
    """Under tool_choice auto the tool_use block opens once the name is known and its input
    arrives in many input_json_delta events (issue 49)."""
    from test_tools import WRITE_ASK, WRITE_TOOLS

    tools = [{"name": "write", "input_schema": WRITE_TOOLS[0]["function"]["parameters"]}]
    ask = dict(
        model="m",
        max_tokens=200,
        messages=WRITE_ASK,
        tools=tools,
        tool_choice={"type": "auto"},
        **GREEDY,
    )
    with client(server).messages.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_message()
    pieces = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    [use] = [b for b in final.content if b.type == "tool_use"]
    assert use.name == "write" and use.id.startswith("toolu_") and final.stop_reason == "tool_use"
    assert (
        len(pieces) > 1
        and json.loads("".join(pieces)) == use.input
        and use.input["filePath"] == "hello.py"
    )


def test_a_prefill_is_continued_and_a_stop_sequence_named(server):
    c = client(server)
    messages = [*ASK, {"role": "assistant", "content": "```python\ndef reverse_string"}]
    m = c.messages.create(
        model="m", max_tokens=16, messages=messages, stop_sequences=[")"], **GREEDY
    )
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == ")"
    assert m.content[0].text.startswith("(") and ")" not in m.content[0].text
    assert c.messages.count_tokens(model="m", messages=messages).input_tokens == prompt_of(m.usage)


def test_errors_come_in_anthropics_shape(server, real_model):
    c = client(server)
    with pytest.raises(anthropic.AuthenticationError) as err:
        client(server, key="wrong").messages.create(model="m", max_tokens=4, messages=ASK)
    assert (
        err.value.body["type"] == "error"
        and err.value.body["error"]["type"] == "authentication_error"
    )
    both = {
        "x-api-key": KEY,
        "Authorization": "Bearer a-stale-token",
    }  # either header may hold the key
    count = httpx.post(
        server.base + "/v1/messages/count_tokens",
        headers=both,
        json={"model": "m", "messages": ASK},
    )
    assert count.status_code == 200 and count.json()["input_tokens"] > 0
    with pytest.raises(anthropic.BadRequestError) as err:  # the SDK itself insists on max_tokens
        c.post("/v1/messages", body={"model": "m", "messages": ASK}, cast_to=object)
    assert set(err.value.body) == {"type", "error"} and set(err.value.body["error"]) == {
        "type",
        "message",
    }
    assert (
        err.value.body["error"]["type"] == "invalid_request_error"
        and "max_tokens" in err.value.message
    )
    too_long = [{"role": "user", "content": "word " * (real_model.target.n_ctx + 100)}]
    with pytest.raises(anthropic.BadRequestError) as err:
        c.messages.create(model="m", max_tokens=4, messages=too_long)
    assert (
        err.value.body["error"]["type"] == "invalid_request_error"
        and "prompt is too long" in err.value.message
    )
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    with pytest.raises(anthropic.BadRequestError, match="image blocks are not supported"):
        c.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": [image]}])
    with pytest.raises(anthropic.BadRequestError, match="tool_choice needs tools"):
        c.messages.create(model="m", max_tokens=4, messages=ASK, tool_choice={"type": "any"})
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        c.messages.create(model="m", max_tokens=4, messages=ASK, extra_body={"temperature": 1.5})
    with pytest.raises(anthropic.BadRequestError, match="model"):  # required, as Anthropic has it
        c.post("/v1/messages", body={"max_tokens": 4, "messages": ASK}, cast_to=object)
    after = c.messages.create(model="m", max_tokens=4, messages=ASK, **GREEDY)
    assert after.content and after.usage.output_tokens <= 4


# --- offline: the translation and the stream shape, without the model ---------------------


def test_blocks_translate_to_the_models_messages_and_tools():
    body = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 8,
            "system": [
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
            ],
            "tools": TOOLS,
            "tool_choice": {"type": "tool", "name": "add", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Add 1 and 2."}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "...", "signature": "x"},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "add",
                            "input": {"a": 1, "b": 2},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "is_error": True,
                            "content": "boom",
                        },
                        {"type": "text", "text": "Thanks."},
                    ],
                },
                {"role": "assistant", "content": "The sum"},
            ],
        }
    )
    messages, prefill = conversation(body)
    assert prefill == "The sum"
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add 1 and 2."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "3"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: boom"},
        {"role": "user", "content": "Thanks."},
    ]
    counted = CountTokensRequest.model_validate(body.model_dump(exclude={"max_tokens"}))
    request = messages_request(counted, LIMITS)  # count_tokens: a prefill counts beside tools
    assert request.prefill == "The sum" and list(request.messages) == messages
    asked = body.model_copy(update={"messages": body.messages[:-1]})
    options = messages_request(asked, LIMITS).options  # a prefill is not combined with tools
    assert options.tool_choice == {"type": "function", "function": {"name": "add"}}
    assert (
        options.parallel_tool_calls is False
        and options.tools[0]["function"]["parameters"] == WEATHER
    )
    assert options.params.max_tokens == 8


def _body(**fields) -> MessagesRequest:
    return MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 8, "messages": ASK, **fields}
    )


@pytest.mark.parametrize(
    "choice, expected",
    [({"type": "any"}, "required"), ({"type": "auto"}, "auto"), ({"type": "none"}, "none")],
)
def test_tool_choice_translates_to_openais(choice, expected):
    assert (
        messages_request(_body(tools=TOOLS, tool_choice=choice), LIMITS).options.tool_choice
        == expected
    )


@pytest.mark.parametrize(
    "bad, words, path",
    [
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "server tool",
            ("tools", 0),
        ),
        (
            {"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}},
            "names no tool of this request: 'nope'",
            ("tool_choice",),
        ),
        (
            {"tools": [{"name": "add", "description": "Add."}]},
            "tools.0.input_schema: Field required",
            ("tools", 0, "input_schema"),
        ),
        ({"tool_choice": {"type": "any"}}, "tool_choice needs tools", ("tool_choice",)),
    ],
)
def test_bad_tools_are_refused_naming_the_field(bad, words, path):
    with pytest.raises(RequestError, match=words) as err:
        messages_request(_body(**bad), LIMITS)
    assert err.value.path == path


def test_a_document_block_is_refused_and_max_tokens_lowered_to_the_limit():
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    with pytest.raises(
        RequestError, match="messages.0.content.0: document blocks are not supported"
    ) as err:
        conversation(_body(messages=[{"role": "user", "content": [doc]}]))
    assert err.value.path == ("messages", 0, "content", 0)
    assert (
        messages_request(_body(max_tokens=32000), LIMITS).options.params.max_tokens
        == LIMITS.max_tokens
    )
    prefill = [*ASK, {"role": "assistant", "content": "Sure"}]
    with pytest.raises(RequestError, match="prefill"):
        messages_request(_body(messages=prefill, tools=TOOLS), LIMITS)


def test_the_stream_shape_splits_text_and_tool_use_as_the_sdk_reads_it():
    """A scripted Hermes answer fed in small pieces: a text block, then a tool_use block whose
    input_json_delta pieces make its input, as the SDK's own stream reader assembles them."""

    from localspec.decoding.stats import GenerationResult, GenerationStats
    from localspec.decoding.tool_calls import ToolFormat
    from localspec.server.messages_shape import MessagesShape

    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    shape = MessagesShape("pair", [], lambda t: b"")
    shape.input_tokens = 12
    sse = shape.stream_start()
    batches, parser = answer_batches(text, ToolFormat("hermes", open_token=1, close_token=2))
    for batch in batches:
        sse += shape.stream_events(batch)
    stats = GenerationStats(prompt_tokens=12, generated_tokens=20)
    calls = parser.finish()
    result = GenerationResult(
        text, list(range(20)), [], "tool_calls", stats, tool_calls=calls, content=parser.content
    )
    sse += shape.stream_end(result, False)
    assert all(chunk.startswith("event: ") and chunk.endswith("\n\n") for chunk in sse)
    sdk = anthropic.Anthropic(
        base_url=serve_once("".join(sse).encode()), api_key="x", max_retries=0
    )
    with sdk.messages.stream(model="m", max_tokens=8, messages=ASK) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert_block_order([e.type for e in events if e.type in RAW], blocks=2)
    assert [b.type for b in final.content] == ["text", "tool_use"] and final.content[
        0
    ].text == "Let me check.\n"
    assert final.content[1].name == "get_weather" and final.content[1].input == {"city": "Paris"}
    assert (
        final.stop_reason == "tool_use"
        and final.usage.input_tokens == 12
        and final.usage.output_tokens == 20
    )
    whole = shape.whole([], result)
    assert whole["content"][0] == {"type": "text", "text": "Let me check."}
    assert whole["content"][1]["input"] == {"city": "Paris"} and whole["content"][1][
        "id"
    ].startswith("toolu_")
    assert (
        whole["content"][1]["id"]
        == final.content[1].id
        == "toolu_" + calls[0].id.removeprefix("call_")
    )


@pytest.mark.parametrize(
    "finish, reason", [("length", "max_tokens"), ("context", "model_context_window_exceeded")]
)
def test_a_cut_answer_names_its_stop_reason(finish, reason):
    from localspec.decoding.stats import GenerationResult, GenerationStats
    from localspec.server.messages_shape import MessagesShape

    shape = MessagesShape("pair", ["D"], {1: b"ab"}.get)
    assert (
        shape.stop_reason(GenerationResult("ab", [1], [], finish, GenerationStats()))[0] == reason
    )


def test_stop_reasons_and_text_held_back_for_a_tool_call_that_never_came():

    from localspec.decoding.stats import GenerationResult, GenerationStats
    from localspec.decoding.tool_calls import ToolFormat
    from localspec.server.messages_shape import MessagesShape

    pieces = {1: b"ab", 2: b"cEN", 3: b"D and more"}
    shape = MessagesShape("pair", ["D", "END"], pieces.get)
    result = GenerationResult("abc", [1, 2, 3], [], "stop", GenerationStats())
    assert shape.stop_reason(result) == ("stop_sequence", "END")
    assert shape.stop_reason(GenerationResult("ab", [1], [], "stop", GenerationStats())) == (
        "end_turn",
        None,
    )
    hermes, sse = MessagesShape("pair", [], pieces.get), []
    for batch in answer_batches("1 <", ToolFormat("hermes", open_token=1, close_token=2), step=3)[
        0
    ]:
        sse += hermes.stream_events(batch)  # "<" may begin <tool_call>: held back to the end
    sse += hermes.stream_end(GenerationResult("1 <", [1], [], "stop", GenerationStats()), False)
    deltas = [
        json.loads(c.split("data: ", 1)[1])["delta"] for c in sse if "content_block_delta" in c
    ]
    assert "".join(d["text"] for d in deltas) == "1 <"


def test_a_prefill_beside_tools_it_may_not_call_is_taken():
    prefill = [*ASK, {"role": "assistant", "content": "Sure"}]
    body = _body(messages=prefill, tools=TOOLS, tool_choice={"type": "none"})
    options = messages_request(body, LIMITS).options
    assert options.tool_choice == "none" and not options.calls_tools


def test_refusals_name_the_messages_fields_in_the_text_anthropic_shows():
    """Anthropic's error has no param: the field leads the message.  stop_sequences (empty
    strings refused; [] clears the server's default stops), a "tool" choice without a name."""
    with pytest.raises(RequestError) as err:
        messages_request(_body(stop_sequences=[""]), LIMITS)
    assert err.value.param == "stop_sequences"
    assert json.loads(error_response(err.value).body)["error"]["message"].startswith(
        "stop_sequences strings must be non-empty"
    )
    stops = Limits("pair", max_tokens=100, tools=True, fim=False, defaults={"stop": ["!"]})
    assert messages_request(_body(), stops).options.params.stop == ("!",)
    assert messages_request(_body(stop_sequences=[]), stops).options.params.stop == ()
    with pytest.raises(RequestError) as err:
        messages_request(_body(tools=TOOLS, tool_choice={"type": "tool"}), LIMITS)
    assert err.value.param == "tool_choice.name"
    bad = [{**TOOLS[0], "input_schema": {"type": "nonsense"}}]
    with pytest.raises(RequestError) as err:
        messages_request(_body(tools=bad), LIMITS)
    shown = json.loads(error_response(err.value).body)["error"]["message"]
    assert err.value.param == "tools.0.input_schema" and shown.startswith("tools.0.input_schema: ")
