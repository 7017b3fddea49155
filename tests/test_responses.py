"""localspec serve's OpenAI Responses API through the real ``openai`` SDK and the OpenAI Agents
SDK, on 127.0.0.1, with the real pair: answers equal the library's greedy ones, streams
reassemble to the whole answer, function calls round-trip through ``previous_response_id``,
errors come in OpenAI's shape; offline, the translation of input items and the stream's
events as the SDK's own types validate them."""

import asyncio
import json

import jsonschema
import openai
import pytest
from pydantic import TypeAdapter
from support.greedy import assert_same_greedy
from support.served import KEY, RunningServer, answer_batches, serve_once
from support.tools import WEATHER

from localspec.decoding.stats import GenerationResult, GenerationStats
from localspec.decoding.tool_calls import ToolFormat, normalise_messages
from localspec.server.errors import RequestError
from localspec.server.openai_responses import (
    ResponseShape,
    ResponsesRequest,
    messages_from,
    responses_request,
)
from localspec.server.request import Limits

INSTRUCTIONS = "You are a helpful programming assistant."
ASK = "Write a Python function that reverses a string."
WEATHER_ASK = "What is the weather in Paris?"
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city now",
        "parameters": WEATHER,
    },
    {
        "type": "function",
        "name": "add",
        "description": "Add two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        },
    },
]
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}
ECHO = {
    "model": "pair",
    "tools": [],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
}  # what Response requires
HERMES = ToolFormat("hermes", open_token=1, close_token=2)


@pytest.fixture(scope="module")
def server(real_model):
    running = RunningServer(real_model, api_key=KEY)
    yield running
    running.stop()


def assert_sequenced(events: list) -> None:
    """created, in_progress first, completed or incomplete last, sequence numbers 0, 1, 2, ..."""
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert (
        kinds[-1] in ("response.completed", "response.incomplete") and kinds.count(kinds[-1]) == 1
    ), kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done")


def test_a_response_equals_the_library_call(server, real_model, tie_tolerance):
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": ASK}]
    real_model.reset_cache()
    direct = real_model.chat(messages, max_tokens=32, temperature=0)
    real_model.reset_cache()
    client = server.client()
    r = client.responses.create(
        model="anything", instructions=INSTRUCTIONS, input=ASK, max_output_tokens=32, temperature=0
    )
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "test-pair"
    assert [o.type for o in r.output] == ["message"] and r.output[0].id.startswith("msg_")
    assert_same_greedy(real_model, messages, direct.text, r.output_text, tie_tolerance)
    assert r.status == ("incomplete" if direct.finish_reason == "length" else "completed")
    assert r.usage.input_tokens == direct.stats.prompt_tokens and 0 < r.usage.output_tokens <= 32
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == INSTRUCTIONS and r.max_output_tokens == 32 and r.store is True
    timings = r.model_extra["timings"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert client.responses.retrieve(r.id).output_text == r.output_text
    cut = client.responses.create(model="m", input=ASK, max_output_tokens=3, temperature=0)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 3 and cut.output[0].status == "incomplete"


def test_a_stream_reassembles_to_the_whole_answer(server, real_model, tie_tolerance):
    client = server.client()
    real_model.reset_cache()
    whole = client.responses.create(model="m", input=ASK, max_output_tokens=32, temperature=0)
    real_model.reset_cache()
    with client.responses.stream(
        model="m", input=ASK, max_output_tokens=32, temperature=0
    ) as stream:
        events = list(stream)
    assert_sequenced(events)
    final = events[
        -1
    ].response  # get_final_response() wants response.completed; a cut answer is incomplete
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (
        text
        == final.output_text
        == next(e.text for e in events if e.type == "response.output_text.done")
    )
    assert_same_greedy(
        real_model, [{"role": "user", "content": ASK}], whole.output_text, text, tie_tolerance
    )
    assert events[0].response.id == final.id and final.status == whole.status
    assert (
        final.usage.output_tokens == whole.usage.output_tokens
        and final.model_extra["timings"]["draft_n"] >= 0
    )


def _chat_call(call) -> dict:
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def test_a_function_call_round_trips_through_previous_response_id(server, real_model):
    client = server.client()
    first = client.responses.create(
        model="m",
        input=WEATHER_ASK,
        tools=TOOLS,
        tool_choice="required",
        max_output_tokens=48,
        temperature=0,
    )
    calls = [o for o in first.output if o.type == "function_call"]
    assert (
        calls and first.status == "completed" and all(c.call_id.startswith("call_") for c in calls)
    )
    assert calls[0].id.startswith("fc_") and calls[0].status == "completed"
    jsonschema.validate(json.loads(calls[0].arguments), SCHEMAS[calls[0].name])
    outputs = [
        {"type": "function_call_output", "call_id": c.call_id, "output": '{"celsius": 21}'}
        for c in calls
    ]
    final = client.responses.create(
        model="m",
        previous_response_id=first.id,
        input=outputs,
        tools=TOOLS,
        tool_choice="none",
        max_output_tokens=32,
    )
    assert [o.type for o in final.output] == ["message"] and final.output_text.strip()
    assert final.previous_response_id == first.id
    conversation = [  # what the stored conversation and the new items make, as chat messages
        {"role": "user", "content": WEATHER_ASK},
        {"role": "assistant", "content": "", "tool_calls": [_chat_call(c) for c in calls]},
        *({"role": "tool", "tool_call_id": o["call_id"], "content": o["output"]} for o in outputs),
    ]
    assert final.usage.input_tokens == len(
        real_model.target.chat_tokens(normalise_messages(conversation))
    )
    # the same call streamed: one function_call item whose argument deltas make its arguments
    with client.responses.stream(
        model="m",
        input=WEATHER_ASK,
        tools=TOOLS,
        tool_choice="required",
        max_output_tokens=48,
        temperature=0,
    ) as stream:
        events = list(stream)
        streamed = stream.get_final_response()
    assert_sequenced(events)
    call = next(o for o in streamed.output if o.type == "function_call")
    deltas = "".join(
        e.delta
        for e in events
        if e.type == "response.function_call_arguments.delta" and e.output_index == 0
    )
    assert json.loads(deltas) == json.loads(call.arguments) == json.loads(calls[0].arguments)
    assert (
        next(e for e in events if e.type == "response.function_call_arguments.done").arguments
        == call.arguments
    )


def test_an_auto_function_call_s_arguments_stream_while_they_are_written(server):
    """Under tool_choice auto the function_call item is added once the name is known and its
    arguments arrive in many response.function_call_arguments.delta events (issue 49)."""
    from test_tools import WRITE_ASK, WRITE_TOOLS

    function = WRITE_TOOLS[0]["function"]
    tools = [{"type": "function", "name": "write", "parameters": function["parameters"]}]
    ask = dict(
        model="m",
        input=WRITE_ASK[0]["content"],
        tools=tools,
        tool_choice="auto",
        max_output_tokens=200,
    )
    with server.client().responses.stream(**ask, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert_sequenced(events)
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    [call] = [o for o in final.output if o.type == "function_call"]
    assert call.name == "write" and len(pieces) > 1 and "".join(pieces) == call.arguments
    assert json.loads(call.arguments)["filePath"] == "hello.py"


def test_text_format_json_schema_parses(server):
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int

    r = server.client().responses.parse(
        model="m",
        input="Invent a person. Reply in JSON.",
        text_format=Person,
        max_output_tokens=48,
        temperature=0,
    )
    assert isinstance(r.output_parsed, Person)


IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
BAD_CALL = {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{not json"}


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(input=[{"role": "user", "content": [IMAGE]}]), "input.0.content.0"),
        (dict(input=[{"type": "item_reference", "id": "msg_1"}]), "input.0.type"),
        (dict(input=[BAD_CALL]), "input.0.arguments"),
        (dict(input=[{"type": "function_call_output", "output": "3"}]), "input.0.call_id"),
        (
            dict(input="Hi", tools=[{"type": "frobnicate"}]),
            "tools.0",
        ),  # hosted tools are dropped; unknown ones named
        (dict(input="Hi", tool_choice="required"), "tool_choice"),
        (
            dict(input="Hi", tools=TOOLS, tool_choice={"type": "function", "name": "nope"}),
            "tool_choice",
        ),
        (dict(input="Hi", temperature="hot"), "temperature"),
        (dict(input="Hi", max_output_tokens=0), "max_output_tokens"),
        (
            dict(
                input="Hi",
                text={"format": {"type": "json_schema", "name": "x", "schema": {"$ref": "#/no"}}},
            ),
            "text.format",
        ),
        (dict(input=[]), "input"),
        (dict(input="Hi", extra_body={"conversation": "conv_1"}), "conversation"),
    ],
)
def test_bad_input_is_a_400_naming_the_param(server, kwargs, param):
    with pytest.raises(openai.BadRequestError) as err:
        server.client().responses.create(model="m", **kwargs)
    assert err.value.body["param"] == param, (kwargs, err.value.body)
    assert set(err.value.body) == {"message", "type", "param", "code"}


def test_unstored_and_unknown_responses_are_404_and_the_server_keeps_serving(server):
    client = server.client()
    unstored = client.responses.create(model="m", input="Hi", max_output_tokens=2, store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(
            model="m", input="Hi", previous_response_id=unstored.id, max_output_tokens=2
        )
    assert err.value.body["param"] == "previous_response_id"
    assert err.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nothing")
    with pytest.raises(openai.AuthenticationError):
        server.client(key="wrong").responses.create(model="m", input="Hi")
    after = client.responses.create(model="m", input="Hi", max_output_tokens=2)
    assert after.output_text and client.responses.retrieve(after.id).id == after.id
    client.responses.delete(after.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(after.id)


def test_the_agents_sdk_calls_a_tool_and_finishes(server):
    """An Agent with one function tool on OpenAIResponsesModel: with stop_on_first_tool the
    run ends with the tool's result; streamed and run again, the tool's output goes back to
    the model (the SDK's own output items as input) and the run ends with a message."""
    import agents
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool

    agents.set_tracing_disabled(True)
    cities = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        cities.append(city)
        return "21 degrees Celsius and sunny"

    def agent(behavior: str) -> Agent:
        client = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0)
        settings = ModelSettings(tool_choice="required", max_tokens=48, temperature=0)
        model = OpenAIResponsesModel(model="m", openai_client=client)
        instructions = "Answer questions about the weather."
        return Agent(
            name="weather",
            instructions=instructions,
            tools=[get_weather],
            model=model,
            model_settings=settings,
            tool_use_behavior=behavior,
        )

    async def runs():
        first = await Runner.run(agent("stop_on_first_tool"), WEATHER_ASK)
        streamed = Runner.run_streamed(agent("run_llm_again"), WEATHER_ASK, max_turns=3)
        kinds = []
        try:
            async for event in streamed.stream_events():
                kinds.append(event.type)
        except agents.MaxTurnsExceeded:
            kinds.append("max_turns")
        return first, streamed, kinds

    first, streamed, kinds = asyncio.run(runs())
    assert first.final_output == "21 degrees Celsius and sunny" and cities[0].strip()
    assert [type(i).__name__ for i in first.new_items] == ["ToolCallItem", "ToolCallOutputItem"]
    # The tool's output went back to the model and it answered again.  The 1.5B target then
    # writes the same call once more as a fenced JSON block, which is a call since issue 37
    # (before, it came back as the final text), so the run may end at max_turns instead.
    assert len(cities) >= 2 and "raw_response_event" in kinds
    if "max_turns" not in kinds:
        assert isinstance(streamed.final_output, str) and streamed.final_output.strip()
        assert type(streamed.new_items[-1]).__name__ == "MessageOutputItem"
    else:
        assert all(city.strip() == "Paris" for city in cities)


# --- offline: the translation and the stream shape, without the model ---------------------


def test_input_items_translate_to_the_models_messages():
    items = ResponsesRequest.model_validate(
        {
            "input": [
                {"role": "developer", "content": "Be brief."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Add 1 and 2."}],
                },
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Sure.", "annotations": []}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "add",
                    "arguments": '{"a": 1}',
                },
                {
                    "type": "function_call",
                    "call_id": "call_2",
                    "name": "add",
                    "arguments": '{"b": 2}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "3"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "x"}],
                },
            ]
        }
    ).input
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
        {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": '{"b": 2}'}},
    ]
    assert messages_from(items) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add 1 and 2."},
        {"role": "assistant", "content": "Sure.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        {"role": "tool", "tool_call_id": "call_2", "content": "x"},
    ]
    assert messages_from("Hi") == [{"role": "user", "content": "Hi"}]


LIMITS = Limits("pair", max_tokens=100, tools=True, fim=False)


def test_a_body_translates_to_the_generation_request_and_its_options():
    body = ResponsesRequest.model_validate(
        {
            "input": "x",
            "tools": TOOLS,
            "tool_choice": {"type": "function", "name": "add"},
            "parallel_tool_calls": False,
        }
    )
    request = responses_request(body, LIMITS)
    assert request.protocol == "openai.responses" and request.messages == (
        {"role": "user", "content": "x"},
    )
    options = request.options
    assert options.tool_choice == {"type": "function", "function": {"name": "add"}}
    assert options.tools[0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city now",
            "parameters": WEATHER,
        },
    }
    assert options.parallel_tool_calls is False and options.params.max_tokens == 100
    body = ResponsesRequest.model_validate(
        {"input": "x", "tools": TOOLS, "text": {"format": {"type": "json_object"}}}
    )
    with pytest.raises(RequestError, match="cannot be combined") as err:
        responses_request(body, LIMITS)
    assert err.value.path == ("text", "format")
    schema = {"type": "json_schema", "name": "p", "schema": WEATHER, "strict": True}
    body = ResponsesRequest.model_validate(
        {"input": "x", "max_output_tokens": 7, "text": {"format": schema}}
    )
    options = responses_request(body, LIMITS).options
    assert options.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "p", "schema": WEATHER},
    }
    assert options.params.max_tokens == 7
    body = ResponsesRequest.model_validate({"input": "x", "max_output_tokens": 101})
    with pytest.raises(
        RequestError, match="max_output_tokens is 101; this server allows at most 100"
    ) as err:
        responses_request(body, LIMITS)
    assert err.value.param == "max_output_tokens"


def _payloads(sse: list[str]) -> list[dict]:
    out = []
    for chunk in sse:
        name, data = chunk.split("\n", 1)
        payload = json.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}" and chunk.endswith("\n\n")
        out.append(payload)
    return out


def test_the_stream_shape_as_the_sdks_types_and_reader_take_it():
    """A scripted Hermes answer fed in small pieces: a message item, then a function_call item
    whose argument deltas make its arguments; every event validates as the SDK's own
    ResponseStreamEvent, and its stream reader assembles the final response."""
    from openai.types.responses import Response, ResponseStreamEvent

    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    stored = []
    shape = ResponseShape(ECHO, stored.append)
    sse = shape.stream_start()
    batches, parser = answer_batches(text, HERMES)
    for batch in batches:
        sse += shape.stream_events(batch)
    stats = GenerationStats(prompt_tokens=12, generated_tokens=20)
    calls = parser.finish()
    result = GenerationResult(
        text, list(range(20)), [], "tool_calls", stats, tool_calls=calls, content=parser.content
    )
    sse += shape.stream_end(result, False)
    payloads = _payloads(sse)
    adapter = TypeAdapter(ResponseStreamEvent)
    for payload in payloads:
        adapter.validate_python(payload)
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert stored[0]["status"] == "completed" and stored[0]["usage"]["output_tokens"] == 20
    sdk = openai.OpenAI(base_url=serve_once("".join(sse).encode()), api_key="x", max_retries=0)
    with sdk.responses.stream(model="m", input="x", tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert_sequenced(events)
    assert [o.type for o in final.output] == [
        "message",
        "function_call",
    ] and final.output_text == "Let me check.\n"
    assert final.output[1].name == "get_weather" and json.loads(final.output[1].arguments) == {
        "city": "Paris"
    }
    assert final.output[1].parsed_arguments is None  # not a strict tool: the SDK leaves it unparsed
    whole = Response.model_validate(ResponseShape(ECHO, stored.append).whole([], result))
    assert [o.type for o in whole.output] == [
        "message",
        "function_call",
    ] and whole.output_text == "Let me check."


def test_a_cut_or_empty_stream_ends_incomplete_with_a_message_item():
    from openai.types.responses import ResponseStreamEvent

    shape = ResponseShape(ECHO, lambda r: None)
    sse = shape.stream_start()
    for batch in answer_batches("1 <", HERMES, step=3)[0]:  # "<" may begin a call: held to the end
        sse += shape.stream_events(batch)
    sse += shape.stream_end(
        GenerationResult("1 <", [1, 2], [], "length", GenerationStats(prompt_tokens=3)), False
    )
    payloads = _payloads(sse)
    for payload in payloads:
        TypeAdapter(ResponseStreamEvent).validate_python(payload)
    assert (
        "".join(p["delta"] for p in payloads if p["type"] == "response.output_text.delta") == "1 <"
    )
    last = payloads[-1]
    assert (
        last["type"] == "response.incomplete"
        and last["response"]["incomplete_details"]["reason"] == "max_output_tokens"
    )
    assert last["response"]["output"][0]["status"] == "incomplete"
    empty = ResponseShape(ECHO, lambda r: None)
    result = GenerationResult("", [], [], "stop", GenerationStats())
    payloads = _payloads(empty.stream_start() + empty.stream_end(result, False))
    for payload in payloads:
        TypeAdapter(ResponseStreamEvent).validate_python(payload)
    assert payloads[-1]["response"]["output"][0]["content"][0]["text"] == ""
    assert [p["type"] for p in payloads].count("response.content_part.done") == 1


@pytest.mark.parametrize(
    "tool, param",
    [
        ({"type": "function", "name": "a\nb", "parameters": {"type": "object"}}, "tools.0.name"),
        ({"type": "function", "name": "f", "parameters": {"type": "banana"}}, "tools.0.parameters"),
    ],
)
def test_a_bad_tool_is_named_in_the_responses_own_tool_shape(tool, param):
    body = ResponsesRequest.model_validate({"input": "x", "tools": [tool]})
    with pytest.raises(RequestError) as err:
        responses_request(body, LIMITS)
    assert err.value.param == param and err.value.code == "invalid_value"


def test_a_prompt_cache_key_that_is_not_text_is_refused_naming_it():
    body = ResponsesRequest.model_validate({"input": "x", "prompt_cache_key": 5})
    with pytest.raises(RequestError, match="must be a string") as err:
        responses_request(body, LIMITS)
    assert err.value.param == "prompt_cache_key"
