"""localspec serve through the real ``openai`` client, on 127.0.0.1, with the real pair
(the queue limit: test_worker.py)."""

import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
from support.greedy import assert_same_greedy, messages_for
from support.served import KEY, RunningServer

from localspec.bench.workloads import edit_prompts, humaneval_tasks


@pytest.fixture(scope="module")
def server(real_model):
    running = RunningServer(real_model, api_key=KEY)
    yield running
    running.stop()


def test_models_lists_the_loaded_pair(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["test-pair"] and models.data[0].owned_by == "localspec"
    with urllib.request.urlopen(server.base + "/health", timeout=10) as r:
        assert json.loads(r.read())["status"] == "ok"


def test_chat_equals_the_library_call_and_reports_statistics(server, real_model, tie_tolerance):
    messages = messages_for(0)
    real_model.reset_cache()
    direct = real_model.chat(messages, max_tokens=48)
    real_model.reset_cache()
    r = server.client().chat.completions.create(
        model="anything", messages=messages, max_tokens=48, temperature=0
    )
    assert r.model == "test-pair" and r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert_same_greedy(
        real_model, messages, direct.text, r.choices[0].message.content, tie_tolerance
    )
    assert r.choices[0].finish_reason in ("stop", "length")
    assert (
        r.usage.completion_tokens == len(direct.tokens)
        and r.usage.prompt_tokens == direct.stats.prompt_tokens
    )
    timings = r.model_extra["timings"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert (
        timings["predicted_n"]
        == r.usage.completion_tokens + (r.choices[0].finish_reason == "stop") - 1
    )
    assert timings["predicted_per_second"] > 0 and timings["prompt_ms"] > 0
    against = timings["against_plain"]  # in milliseconds, as llama.cpp's timings
    assert against["rejected_tokens"] == timings["draft_n"] - timings["draft_n_accepted"]
    assert against["net_ms"] == pytest.approx(
        against["won_ms"]
        - against["lost_ms"]
        - against["catch_up_ms"]
        - against["draft_prompt_ms"]
        - against["policy_ms"]
        - against["batch_wait_ms"]
    )
    # the same conversation again: its prompt comes from the KV cache
    again = server.client().chat.completions.create(
        model="x", messages=messages, max_tokens=8, temperature=0
    )
    assert again.usage.prompt_tokens_details.cached_tokens >= again.usage.prompt_tokens - 1


def test_streaming_chunks_as_the_sdk_reads_them(server, real_model, tie_tolerance):
    messages = messages_for(1)
    real_model.reset_cache()
    whole = server.client().chat.completions.create(model="m", messages=messages, max_tokens=40)
    real_model.reset_cache()
    chunks = list(
        server.client().chat.completions.create(
            model="m",
            messages=messages,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1].choices == []
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert_same_greedy(real_model, messages, whole.choices[0].message.content, text, tie_tolerance)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].model_extra["timings"]["draft_n"] >= 0
    assert usage_chunks[0].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_stream_and_not(server, real_model):
    client = server.client()
    prompt = "def fibonacci(n):\n"
    real_model.reset_cache()  # both runs from a cold cache: the same kernels, the same logits
    r = client.completions.create(model="m", prompt=prompt, max_tokens=24, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    real_model.reset_cache()
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model="m", prompt=prompt, max_tokens=24, temperature=0, stream=True
        )
        if c.choices
    )
    assert streamed == r.choices[0].text
    lp = (
        client.completions.create(model="m", prompt=prompt, max_tokens=4, temperature=0, logprobs=3)
        .choices[0]
        .logprobs
    )
    assert len(lp.tokens) == 4 and all(len(t) == 3 for t in lp.top_logprobs)


def test_logprobs_are_the_targets_own(server, real_model):
    messages = [{"role": "user", "content": "Say hello."}]
    r = server.client().chat.completions.create(
        model="m", messages=messages, max_tokens=6, logprobs=True, top_logprobs=5
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 5
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-6  # greedy picks the best
    assert "".join(e.token for e in content) == r.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as err:
        server.client().chat.completions.create(
            model="m", messages=messages, logprobs=True, top_logprobs=21
        )
    assert err.value.body["param"] == "top_logprobs"


def test_prediction_drafts_the_edit_and_keeps_the_greedy_text(server, real_model, tie_tolerance):
    prompt = edit_prompts(1)[0]
    task = humaneval_tasks(1)[0]
    original = task["prompt"] + task["canonical_solution"]
    messages = [{"role": "user", "content": prompt.text}]
    client = server.client()
    plain = client.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=96,
        extra_body={"speculative": {"strategy": "none"}},
    )
    predicted = client.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=96,
        prediction={"type": "content", "content": original},
    )
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0
    assert (
        details.accepted_prediction_tokens + details.rejected_prediction_tokens
        <= predicted.model_extra["timings"]["draft_n"]
    )
    assert_same_greedy(
        real_model,
        messages,
        plain.choices[0].message.content,
        predicted.choices[0].message.content,
        tie_tolerance,
    )
    parts = client.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=16,
        prediction={"type": "content", "content": [{"type": "text", "text": original}]},
    )
    assert parts.usage.completion_tokens_details.accepted_prediction_tokens > 0


def test_four_clients_at_once_each_get_their_own_answer(server, real_model, tie_tolerance):
    prompts = [messages_for(i) for i in range(4)]
    sequential = [
        server.client()
        .chat.completions.create(model="m", messages=m, max_tokens=24)
        .choices[0]
        .message.content
        for m in prompts
    ]
    answers = [None] * 4

    def ask(i):
        answers[i] = (
            server.client()
            .chat.completions.create(model="m", messages=prompts[i], max_tokens=24)
            .choices[0]
            .message.content
        )

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    server.wait_idle()
    for m, seq, par in zip(prompts, sequential, answers):
        assert par is not None
        assert_same_greedy(real_model, m, seq, par, tie_tolerance)


def test_dropped_streams_cancel_and_leak_nothing(server, real_model, tie_tolerance):
    messages = [{"role": "user", "content": "Count from 1 to 500, one number per line."}]
    client = server.client()
    server.wait_idle()
    threads_before = threading.active_count()
    for _ in range(50):
        with client.chat.completions.create(
            model="m", messages=messages, max_tokens=400, stream=True
        ) as stream:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break  # the client leaves mid-answer
        started = time.perf_counter()
        server.wait_idle(timeout_s=10)
        assert time.perf_counter() - started < 5
        assert server.worker.last_result.finish_reason == "cancelled"
        assert server.worker.last_result.stats.generated_tokens < 60
    assert threading.active_count() <= threads_before + 1  # uvicorn may keep one helper thread
    assert server.worker.waiting == 0
    assert len(real_model.target.cache_tokens) < real_model.target.n_ctx // 2
    # and the model still answers as before
    a = (
        client.chat.completions.create(model="m", messages=messages_for(0), max_tokens=16)
        .choices[0]
        .message.content
    )
    b = (
        client.chat.completions.create(model="m", messages=messages_for(0), max_tokens=16)
        .choices[0]
        .message.content
    )
    assert_same_greedy(real_model, messages_for(0), a, b, tie_tolerance)


def test_a_queued_request_whose_client_left_never_starts(server):
    client = server.client(timeout=1.0)
    long = [{"role": "user", "content": "Write a long essay about rivers."}]
    holder = threading.Thread(
        target=lambda: server.client().chat.completions.create(
            model="m", messages=long, max_tokens=120
        )
    )
    skipped = server.worker.skipped
    holder.start()
    while not server.worker.busy:
        time.sleep(0.01)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "never"}], max_tokens=5
        )
    holder.join(300)
    server.wait_idle()
    assert server.worker.skipped == skipped + 1
    assert server.worker.last_result.stats.generated_tokens > 5  # the essay, not "never"


class Raw:
    def __init__(self, status_code, headers, body):
        self.status_code, self.headers, self._body = status_code, headers, body

    def json(self):
        return json.loads(self._body)


def raw(server, body: bytes | str, key=KEY, path="/v1/chat/completions") -> Raw:
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(
        server.base + path,
        data=data,
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return Raw(r.status, r.headers, r.read())
    except urllib.error.HTTPError as err:
        return Raw(err.code, err.headers, err.read())


OK = [{"role": "user", "content": "Hi"}]
F = {"type": "function", "function": {"name": "f"}}


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(messages=OK, temperature="hot"), "temperature"),
        (dict(messages=OK, n=2), "n"),
        (dict(messages=OK, max_tokens=-5), "max_tokens"),
        (dict(messages=OK, max_tokens=10**6), "max_tokens"),  # over the context
        (dict(messages=[{"role": "wizard", "content": "Hi"}]), "messages.0.role"),
        (dict(messages="Hi"), "messages"),
        (dict(messages=[{"role": "user", "content": None}]), "messages.0"),
        (dict(messages=[*OK, {"role": "tool", "content": "3"}]), "messages.1"),  # no tool_call_id
        (dict(messages=OK, stop=["a", "b", "c", "d", "e"]), "stop"),
        (dict(messages=OK, prediction={"type": "content", "content": "x"}, n=3), "n"),
        (
            dict(messages=OK, extra_body={"speculative": {"strategy": "prediction"}}),
            "speculative.strategy",
        ),
        (dict(messages=OK, tools=[{"type": "function"}]), "tools.0.function"),
        (dict(messages=OK, tools=[F], tool_choice="sometimes"), "tool_choice"),
        (dict(messages=OK, tool_choice="required"), "tool_choice"),  # no tools
        (
            dict(
                messages=OK, tools=[F], tool_choice={"type": "function", "function": {"name": "g"}}
            ),
            "tool_choice",
        ),
        (
            dict(messages=OK, tools=[{"type": "function", "function": {"name": "get\nweather"}}]),
            "tools.0.function.name",
        ),
        (
            dict(
                messages=OK,
                tools=[
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "x"}}}
                ],
            ),
            "tools.0.function.parameters",
        ),
        (dict(messages=OK, tools=[F], response_format={"type": "json_object"}), "response_format"),
    ],
)
def test_bad_chat_fields_are_a_400_naming_the_param(server, kwargs, param):
    with pytest.raises(openai.BadRequestError) as err:
        server.client().chat.completions.create(model="m", **kwargs)
    assert err.value.status_code == 400 and err.value.body["param"] == param, (
        kwargs,
        err.value.body,
    )


def test_bad_input_gets_openai_errors_and_the_server_keeps_serving(server, real_model):
    client = server.client()
    ok = [{"role": "user", "content": "Hi"}]
    r = raw(server, b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert r.headers["x-should-retry"] == "false"
    with pytest.raises(openai.BadRequestError, match="only best_of = 1"):
        client.completions.create(model="m", prompt="x", best_of=3)
    too_long = [{"role": "user", "content": "word " * (real_model.target.n_ctx + 100)}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=too_long)
    assert err.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.AuthenticationError) as err:
        server.client(key="wrong").chat.completions.create(model="m", messages=ok)
    assert err.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x" * (9 << 20)}]
        )
    assert err.value.status_code == 413
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="m", input="hi")
    r = raw(server, json.dumps({"messages": ok}), key="")
    assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    after = client.chat.completions.create(model="m", messages=ok, max_tokens=4)
    assert after.choices[0].message.content
    assert client.models.retrieve("any-name").id == "any-name"


def test_a_call_cut_by_max_tokens_is_no_content_streamed_or_not(server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    ask = dict(
        model="m",
        messages=[{"role": "user", "content": "Call f."}],
        tools=tools,
        tool_choice="required",
    )
    whole = server.client().chat.completions.create(**ask, max_tokens=3).choices[0]
    assert (whole.finish_reason, whole.message.content, whole.message.tool_calls) == (
        "length",
        "",
        None,
    )
    pieces = [
        c.choices[0].delta.content or ""
        for c in server.client().chat.completions.create(**ask, max_tokens=3, stream=True)
        if c.choices
    ]
    assert "".join(pieces) == ""


def test_streamed_completion_logprobs_count_offsets_into_the_whole_text(server):
    ask = dict(model="m", prompt="def f():", max_tokens=6, logprobs=1, temperature=0)
    whole = server.client().completions.create(**ask).choices[0].logprobs
    offsets = []
    for chunk in server.client().completions.create(**ask, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            offsets += chunk.choices[0].logprobs.text_offset
    assert offsets == whole.text_offset and len(set(offsets)) > 1


def test_llama_servers_flat_speculative_keys_are_understood(server):
    """Requests written for llama-server ("speculative.n_max": ...) work unchanged: the same
    settings as the nested form, and the same 400 on a bad value."""
    client = server.client()
    messages = messages_for(0)
    off = client.chat.completions.create(
        model="m", messages=messages, max_tokens=12, extra_body={"speculative.n_max": 0}
    )
    assert off.model_extra["timings"]["draft_n"] == 0
    drafted = client.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=12,
        extra_body={
            "speculative.n_max": 4,
            "speculative.p_min": 0.0,
            "speculative": {"strategy": "draft-model"},
        },
    )
    assert drafted.model_extra["timings"]["draft_n"] > 0
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="m", messages=messages, max_tokens=4, extra_body={"speculative.p_min": 2}
        )
    assert err.value.body["param"] == "speculative.p_min"
    with pytest.raises(
        openai.BadRequestError
    ) as err:  # a non-object "speculative" is not hidden by flat keys
        client.chat.completions.create(
            model="m",
            messages=messages,
            max_tokens=4,
            extra_body={"speculative": 5, "speculative.n_max": 3},
        )
    assert err.value.body["param"] == "speculative"


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_response_format_json_schema_through_the_sdk(server):
    """A schema answer validates; the SDK's ``parse`` returns the pydantic object; a stream
    reassembles to the same JSON."""
    import jsonschema
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int

    client = server.client()
    ask = [{"role": "user", "content": "Invent a person. Reply in JSON."}]
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": PERSON, "strict": True},
    }
    r = client.chat.completions.create(model="m", messages=ask, response_format=fmt, max_tokens=64)
    answer = json.loads(r.choices[0].message.content)
    jsonschema.validate(answer, PERSON)
    assert r.model_extra["timings"]["draft_n"] >= 0
    parsed = client.chat.completions.parse(
        model="m", messages=ask, response_format=Person, max_tokens=64
    )
    assert isinstance(parsed.choices[0].message.parsed, Person)
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="m", messages=ask, response_format=fmt, max_tokens=64, stream=True
        )
        if c.choices
    ]
    assert json.loads("".join(pieces)) == answer
    short = [
        {"role": "user", "content": "Reply with a JSON object whose only key is ok, set to true."}
    ]
    json_mode = client.chat.completions.create(
        model="m", messages=short, response_format={"type": "json_object"}, max_tokens=200
    )
    assert json_mode.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(json_mode.choices[0].message.content), dict)
    cut = client.chat.completions.create(model="m", messages=ask, response_format=fmt, max_tokens=3)
    assert cut.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}},
        {"type": "json_schema"},
        {"type": "yaml"},
    ],
)
def test_a_response_format_that_cannot_be_compiled_is_a_400(server, bad):
    ask = [{"role": "user", "content": "Invent a person. Reply in JSON."}]
    with pytest.raises(openai.BadRequestError) as err:
        server.client().chat.completions.create(model="m", messages=ask, response_format=bad)
    assert err.value.body["param"].startswith("response_format"), err.value.body


def test_a_tool_call_round_trip_through_the_sdk_and_its_stream(server):
    """A required call comes back in message.tool_calls with finish_reason tool_calls; the
    stream's deltas reassemble to the same call; the tool's reply renders for the next turn."""
    import jsonschema
    from test_tools import ASK, TOOLS, WEATHER

    client = server.client()
    r = client.chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=96
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    if call.function.name == "get_weather":
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    pieces, finish, names = {}, None, {}
    for chunk in client.chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=96, stream=True
    ):
        if not chunk.choices:
            continue
        for d in chunk.choices[0].delta.tool_calls or []:
            pieces[d.index] = pieces.get(d.index, "") + (d.function.arguments or "")
            if d.function.name:
                names[d.index] = d.function.name
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert names[0] == call.function.name and json.loads(pieces[0]) == json.loads(
        call.function.arguments
    )
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 21}'},
    ]
    final = client.chat.completions.create(
        model="m", messages=follow, tools=TOOLS, tool_choice="none", max_tokens=48
    )
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls


def test_an_auto_call_s_arguments_stream_while_they_are_written(server):
    """Under tool_choice auto the call goes out as it is generated: its id and name, then its
    arguments in many deltas, not one at its end (issue 49)."""
    from test_tools import WRITE_ASK, WRITE_TOOLS

    ask = dict(
        model="m",
        messages=WRITE_ASK,
        tools=WRITE_TOOLS,
        tool_choice="auto",
        max_tokens=200,
        temperature=0,
    )
    pieces, names, finish = [], [], None
    for chunk in server.client().chat.completions.create(**ask, stream=True):
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            names += [d.function.name] if d.function.name else []
            pieces += [d.function.arguments] if d.function.arguments else []
        finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
    assert names == ["write"] and finish == "tool_calls" and len(pieces) > 1, pieces
    assert json.loads("".join(pieces))["filePath"] == "hello.py"
    whole = (
        server.client().chat.completions.create(**ask).choices[0].message
    )  # greedy, may part at a tie
    assert whole.tool_calls[0].function.name == "write" and whole.tool_calls[0].id.startswith(
        "call_"
    )
    assert json.loads(whole.tool_calls[0].function.arguments)["filePath"] == "hello.py"


def test_langchain_structured_output_returns_the_pydantic_model(server):
    """LangChain's ``ChatOpenAI(...).with_structured_output(Model)`` (a json_schema
    response_format through the openai SDK) gets the model back."""
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, ConfigDict

    class City(BaseModel):
        model_config = ConfigDict(extra="forbid")
        name: str
        country: str

    llm = ChatOpenAI(
        base_url=server.base + "/v1",
        api_key=KEY,
        model="local",
        temperature=0,
        max_tokens=64,
        max_retries=0,
    )
    city = llm.with_structured_output(City).invoke("Name the capital of France.")
    assert isinstance(city, City) and city.name


def test_a_keyless_loopback_server_answers_only_requests_naming_localhost(real_model):
    """DNS rebinding: a page on evil.example, its name resolved to 127.0.0.1, is refused."""
    running = RunningServer(real_model, loopback_only=True)

    def ask(host: str, path: str = "/v1/models", body: dict | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=30)
        data = json.dumps(body).encode() if body is not None else None
        connection.request("POST" if body else "GET", path, body=data, headers={"Host": host})
        response = connection.getresponse()
        return response.status, json.loads(response.read())

    try:
        for host in (
            f"localhost:{running.port}",
            f"127.0.0.1:{running.port}",
            f"[::1]:{running.port}",
            "app.localhost",
        ):
            assert ask(host)[0] == 200, host
        status, body = ask(f"evil.example:{running.port}")
        assert (
            status == 403
            and body["error"]["code"] == "host_not_allowed"
            and "evil.example" in body["error"]["message"]
        )
        count = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
        status, body = ask("evil.example", "/v1/messages/count_tokens", count)
        assert (
            status == 403
            and body["type"] == "error"
            and body["error"]["type"] == "permission_error"
        )
    finally:
        running.stop()
    keyed = RunningServer(real_model, loopback_only=True, api_key=KEY)  # the key guards it instead
    try:
        assert keyed.client(default_headers={"Host": "evil.example"}).models.list().data
    finally:
        keyed.stop()


# --- offline: the one request core, without the model ---------------------------------------


def test_a_chat_body_becomes_one_request_validated_once():
    from localspec.decoding.params import DraftParams, GenerationParams
    from localspec.decoding.sampling import SamplingParams
    from localspec.server.anthropic_messages import error_response
    from localspec.server.errors import RequestError
    from localspec.server.openai_chat import chat_request
    from localspec.server.request import Limits
    from localspec.server.schemas import ChatRequest

    limits = Limits(
        "pair",
        max_tokens=64,
        tools=True,
        fim=False,
        defaults={"temperature": 0.5, "max_tokens": 16},
    )
    body = ChatRequest.model_validate(
        {
            "messages": OK,
            "stop": "x",
            "top_k": 3,
            "logprobs": True,
            "speculative": {"n_max": 4},
            "stream": True,
        }
    )
    request = chat_request(body, limits)
    assert request.protocol == "openai.chat" and request.stream
    options = request.options
    assert options.params == GenerationParams(
        max_tokens=16,
        sampling=SamplingParams(temperature=0.5, top_k=3),
        draft=DraftParams(draft_max=4),
        stop=("x",),
        logprobs=0,
    )
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "x"}}}
    with pytest.raises(RequestError) as err:
        chat_request(ChatRequest.model_validate({"messages": OK, "tools": [bad]}), limits)
    assert err.value.path == ("tools", 0, "function", "parameters")
    assert json.loads(err.value.response().body)["error"]["param"] == "tools.0.function.parameters"
    anthropic = json.loads(error_response(err.value).body)
    assert anthropic == {  # no param in Anthropic's shape: the field leads the message
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"tools.0.function.parameters: {err.value.message}",
        },
    }
    no_tools = Limits("pair", max_tokens=64, tools=False, fim=False)
    with pytest.raises(RequestError, match="no tool-call format") as err:
        chat_request(ChatRequest.model_validate({"messages": OK, "tools": [F]}), no_tools)
    assert err.value.param == "tools" and err.value.code == "unsupported_value"


def test_n_min_over_n_max_is_refused_once_by_the_library_naming_the_servers_field():
    from localspec.server.errors import RequestError
    from localspec.server.openai_chat import chat_request
    from localspec.server.request import Limits
    from localspec.server.schemas import ChatRequest

    body = ChatRequest.model_validate({"messages": OK, "speculative": {"n_min": 5, "n_max": 2}})
    with pytest.raises(RequestError) as err:
        chat_request(body, Limits("pair", 64, tools=True, fim=False))
    assert err.value.path == ("speculative", "n_min")
    assert err.value.message == "speculative.n_min (5) must not exceed speculative.n_max (2)"


def test_top_logprobs_without_logprobs_is_refused_naming_it():
    from localspec.server.errors import RequestError
    from localspec.server.openai_chat import chat_request
    from localspec.server.request import Limits
    from localspec.server.schemas import ChatRequest

    limits = Limits("pair", 64, tools=True, fim=False)
    body = ChatRequest.model_validate({"messages": OK, "top_logprobs": 3})
    with pytest.raises(RequestError, match="needs logprobs") as err:
        chat_request(body, limits)
    assert err.value.param == "top_logprobs"
    body = ChatRequest.model_validate({"messages": OK, "top_logprobs": 3, "logprobs": True})
    assert chat_request(body, limits).options.params.logprobs == 3


def test_an_earlier_call_whose_arguments_are_not_json_is_refused_naming_them():
    from pydantic import ValidationError

    from localspec.server.errors import from_validation_error
    from localspec.server.schemas import ChatRequest

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not"}}
    messages = [*OK, {"role": "assistant", "content": None, "tool_calls": [call]}]
    with pytest.raises(ValidationError) as err:
        ChatRequest.model_validate({"messages": messages})
    refused = from_validation_error(err.value)
    assert refused.param == f"messages.{len(OK)}.tool_calls.0.function.arguments"
    assert "must be JSON" in refused.message


def test_refusals_name_the_field_the_body_used():
    """max_completion_tokens when the body sent it; /infill's stop and seed (the library's
    checks, named by the protocol's fields)."""
    from localspec.server.errors import RequestError
    from localspec.server.infill import InfillRequest, infill_request
    from localspec.server.openai_chat import chat_request
    from localspec.server.request import Limits
    from localspec.server.schemas import ChatRequest

    limits = Limits("pair", 64, tools=True, fim=True)
    for field in ("max_completion_tokens", "max_tokens"):
        with pytest.raises(RequestError, match=f"^{field} is 65;") as err:
            chat_request(ChatRequest.model_validate({"messages": OK, field: 65}), limits)
        assert err.value.param == field
    for bad, field in (({"stop": [""]}, "stop"), ({"seed": -5}, "seed")):
        body = InfillRequest.model_validate({"input_prefix": "a", "input_suffix": "b", **bad})
        with pytest.raises(RequestError) as err:
            infill_request(body, limits)
        assert err.value.param == field and err.value.code == "invalid_value"


def test_a_draft_bound_the_request_did_not_set_is_called_the_servers():
    from localspec.decoding.params import DraftParams
    from localspec.server.errors import RequestError
    from localspec.server.openai_chat import chat_request
    from localspec.server.request import Limits
    from localspec.server.schemas import ChatRequest

    limits = Limits("pair", 64, tools=True, fim=False, draft=DraftParams(draft_max=4))
    body = ChatRequest.model_validate({"messages": OK, "speculative": {"n_min": 6}})
    with pytest.raises(RequestError) as err:
        chat_request(body, limits)
    assert err.value.message == (
        "speculative.n_min (6) must not exceed this server's speculative.n_max (4)"
    )


def test_strategy_prediction_without_a_prediction_is_refused_once_by_the_library(target_gguf):
    from starlette.testclient import TestClient

    from localspec.api import SpeculativeModel
    from localspec.server.app import create_app
    from localspec.server.state import ServerConfig

    body = {"messages": OK, "max_tokens": 4, "speculative": {"strategy": "prediction"}}
    with SpeculativeModel(target_gguf, None, n_ctx=256) as model:
        with TestClient(create_app(model, ServerConfig(model_name="m"))) as client:
            got = client.post("/v1/chat/completions", json=body, headers={"host": "localhost"})
            body["prediction"] = {"type": "content", "content": "hello there"}
            taken = client.post("/v1/chat/completions", json=body, headers={"host": "localhost"})
    assert got.status_code == 400 and got.json()["error"]["param"] == "speculative.strategy"
    assert "needs a prediction" in got.json()["error"]["message"]
    assert taken.status_code == 200
