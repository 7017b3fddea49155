"""What coding agents send (tests/data/agents/, captured from their releases) is accepted:
every captured body translates into one GenerationRequest and renders with the default
pair's chat template; shortened Claude Code and Codex bodies are answered 200 through the
anthropic and openai SDKs; a stream carries keep-alives while its prompt is read; each
request writes one log line; a non-streaming request whose client left is cancelled."""

import dataclasses
import json
import logging
import time
from pathlib import Path

import anthropic
import httpx
import pytest
from support.served import KEY, RunningServer, answer_batches

from localspec.api import SpeculativeModel
from localspec.server import answering
from localspec.server.access_log import LineFormatter
from localspec.server.anthropic_messages import MessagesRequest, messages_request
from localspec.server.openai_chat import chat_request
from localspec.server.openai_responses import ResponsesRequest, responses_request
from localspec.server.request import Limits, fold_late_system
from localspec.server.schemas import ChatRequest

AGENTS = Path(__file__).parent / "data" / "agents"
CAPTURED = sorted(p for p in AGENTS.glob("*.json") if json.loads(p.read_text())["body"] is not None)
PARSERS = {
    "/v1/messages": (MessagesRequest, messages_request),
    "/v1/responses": (ResponsesRequest, responses_request),
    "/v1/chat/completions": (ChatRequest, chat_request),
}
LIMITS = Limits("pair", max_tokens=32000, tools=True, fim=False)


def captured(path: Path) -> dict:
    return json.loads(path.read_text())


def translated(path: Path):
    capture = captured(path)
    body_type, translate = PARSERS[capture["path"]]
    request = translate(body_type.model_validate_json(json.dumps(capture["body"])), LIMITS)
    return request, request.options


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: p.stem)
def test_every_captured_body_translates(path):
    request, options = translated(path)
    assert request.messages and request.messages[-1]["role"] in ("user", "tool", "system")
    body = captured(path)["body"]
    if body.get("tools"):
        assert options.tools and all(t["function"]["name"] for t in options.tools)
    if "claude-code" in path.stem:
        assert request.thinking == "adaptive" and request.effort in ("medium", "high")
        assert [m["role"] for m in request.messages[:3]] == ["system", "user", "system"]
    if "codex" in path.stem:
        names = [t["function"]["name"] for t in options.tools]
        assert "web_search" not in names and "tool_search" not in names
        assert options.prompt_cache_key == body["prompt_cache_key"]
        assert ("spawn_agent" in names) == ("gpt-5.5" not in path.stem)
        assert ("apply_patch" in names) == ("gpt-5.5" in path.stem)


@pytest.mark.real_pair
@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: p.stem)
def test_every_captured_prompt_renders_with_the_default_template(real_model, path):
    request, options = translated(path)
    text = real_model.target.render_chat(list(request.messages), options.tools)
    assert text.count("<|im_start|>system") == sum(
        m["role"] == "system" for m in request.messages[:1]
    ) + sum(m["role"] == "system" for m in request.messages[1:])
    assert text.endswith("<|im_start|>assistant\n")


def test_late_system_messages_fold_into_the_nearest_user_turn():
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "system", "content": "E"},
    ]
    assert fold_late_system(messages) == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U\n\nE"},
    ]
    messages.insert(1, {"role": "system", "content": "M"})
    assert fold_late_system(messages)[1] == {"role": "user", "content": "M\n\nU\n\nE"}


# --- end to end with the default pair ---------------------------------------------------

TOOL_SCHEMA = {
    "type": "object",
    "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
}


def short_claude_code_body() -> dict:
    body = captured(AGENTS / "claude-code-2.1.332-01-messages.json")["body"]
    write = next(t for t in body["tools"] if t["name"] == "Write")
    deferred = {
        "name": "DeferredToolPlaceholder",
        "description": "x",
        "input_schema": TOOL_SCHEMA,
        "defer_loading": True,
    }
    system = [{**b, "text": b["text"][:200]} for b in body["system"]]
    env = {
        "role": "system",
        "content": [
            {"type": "text", "text": "cwd: /tmp/REPO", "cache_control": {"type": "ephemeral"}}
        ],
    }
    ask = {
        "role": "user",
        "content": [{"type": "text", "text": "create hello.py that prints hello"}],
    }
    short = {
        **body,
        "system": system,
        "messages": [ask, env],
        "tools": [write, deferred],
        "max_tokens": 32000,
    }
    return {**short, "messages": [ask, env, {"role": "user", "content": "go"}]}


def short_codex_body() -> dict:
    body = captured(AGENTS / "codex-0.171.0-workspace-write-02-responses.json")["body"]
    namespace = next(t for t in body["tools"] if t["type"] == "namespace")
    patch = next(
        t
        for t in captured(AGENTS / "codex-0.171.0-gpt-5.5-01-responses.json")["body"]["tools"]
        if t["type"] == "custom"
    )
    custom = {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": patch.get("format"),
    }
    exec_command = next(t for t in body["tools"] if t.get("name") == "exec_command")
    items = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "You are Codex."}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "create hello.py"}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        *[i for i in body["input"] if i["type"] in ("function_call", "function_call_output")],
    ]
    tools = [
        exec_command,
        {**namespace, "tools": namespace["tools"][:1]},
        custom,
        {"type": "web_search"},
    ]
    return {**body, "input": items, "tools": tools, "max_output_tokens": 8}


@pytest.fixture(scope="module")
def pair_server(real_model):
    running = RunningServer(real_model, api_key=KEY, max_tokens_limit=64)
    yield running
    running.stop()


@pytest.mark.real_pair
def test_a_shortened_claude_code_request_streams_through_the_anthropic_sdk(pair_server):
    body = short_claude_code_body()
    sdk = anthropic.Anthropic(base_url=pair_server.base, api_key=KEY, max_retries=0)
    fields = {k: body[k] for k in ("system", "messages", "tools", "max_tokens", "metadata")}
    extra = {k: body[k] for k in ("thinking", "output_config", "context_management")}
    headers = {"anthropic-beta": "claude-code-20250219,context-management-2025-06-27"}
    with sdk.messages.stream(
        model="claude-opus-5-5",
        **fields,
        extra_body=extra,
        extra_headers=headers,
        extra_query={"beta": "true"},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens > 50


@pytest.mark.real_pair
def test_a_shortened_codex_request_streams_through_the_responses_api(pair_server):
    body = short_codex_body()
    sdk = pair_server.client()
    known = (
        "input",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "store",
        "include",
        "max_output_tokens",
    )
    extra = {k: body[k] for k in ("prompt_cache_key", "client_metadata", "reasoning")}
    events = list(
        sdk.responses.create(
            model="local", stream=True, **{k: body[k] for k in known}, extra_body=extra
        )
    )
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")


# --- keep-alive, log lines, cancel on disconnect (synthetic model) ----------------------


class SlowStart:
    """The model, with ``delay_s`` before each answer starts (as a long prompt read would)."""

    def __init__(self, model, delay_s: float):
        self._model, self.delay_s = model, delay_s

    def __getattr__(self, name):
        return getattr(self._model, name)

    def chat(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return self._model.chat(*args, **kwargs)


@pytest.fixture
def slow_server(target_gguf, monkeypatch, caplog):
    monkeypatch.setattr(answering, "KEEPALIVE_S", 0.2)
    caplog.set_level(logging.INFO, logger="localspec.server.requests")
    with SpeculativeModel(target_gguf, None, n_ctx=1024) as model:
        running = RunningServer(SlowStart(model, 1.2), api_key=KEY)
        yield running
        running.stop()


class HeldBack:
    """The model, with every token's text held back (as the tool-call parser holds text that
    may be a call) and ``delay_s`` between tokens: the answer's events carry nothing to send
    until the end."""

    def __init__(self, model, delay_s: float):
        self._model, self.delay_s = model, delay_s

    def __getattr__(self, name):
        return getattr(self._model, name)

    def chat(self, *args, **kwargs):
        return _HeldBackStream(self._model.chat(*args, **kwargs), self.delay_s)


class _HeldBackStream:
    def __init__(self, generation, delay_s: float):
        self._generation, self.delay_s = generation, delay_s

    def __getattr__(self, name):
        return getattr(self._generation, name)

    def __iter__(self):
        for event in self._generation:
            if event.token != -1:
                time.sleep(self.delay_s)
                event = dataclasses.replace(event, text="", content="", reasoning="")
            yield event


@pytest.fixture
def held_back_server(target_gguf, monkeypatch):
    monkeypatch.setattr(answering, "KEEPALIVE_S", 0.2)
    with SpeculativeModel(target_gguf, None, n_ctx=1024) as model:
        running = RunningServer(HeldBack(model, 0.15), api_key=KEY)
        yield running
        running.stop()


def test_each_protocol_keeps_its_stream_alive_while_the_answer_is_held_back(held_back_server):
    """Text that may be a tool call is held back; the stream is never silent meanwhile: a
    comment (OpenAI chat, Responses), a ping (Anthropic) every KEEPALIVE_S, then the answer."""
    headers = {"Authorization": f"Bearer {KEY}"}
    ask = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "stream": True}
    cases = [
        ("/v1/chat/completions", {"model": "m", **ask}, ": keep-alive", "data: [DONE]"),
        ("/v1/messages", {"model": "m", **ask}, "event: ping", "event: message_stop"),
        (
            "/v1/responses",
            {"model": "m", "input": "Hi", "max_output_tokens": 12, "stream": True},
            ": keep-alive",
            "event: response.incomplete",  # its 12 tokens were all it could write
        ),
    ]
    for path, body, keep_alive, end in cases:
        with httpx.stream(
            "POST", held_back_server.base + path, json=body, headers=headers, timeout=30
        ) as r:
            text = "".join(r.iter_text())
        assert r.status_code == 200 and text.count(keep_alive) >= 3, (path, text[:600])
        assert end in text, (path, text[-300:])


def request_lines(caplog) -> list[dict]:
    return [
        json.loads(LineFormatter("json").format(r)) for r in caplog.records if hasattr(r, "request")
    ]


ASK = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def test_each_protocol_keeps_its_stream_alive_while_the_prompt_is_read(slow_server):
    headers = {"Authorization": f"Bearer {KEY}"}
    cases = [
        ("/v1/chat/completions", {"model": "m", **ASK, "stream": True}, ": keep-alive"),
        ("/v1/messages", {"model": "m", **ASK, "stream": True}, "event: ping"),
        (
            "/v1/responses",
            {"model": "m", "input": "Hi", "max_output_tokens": 4, "stream": True},
            "response.in_progress",
        ),
    ]
    for path, body, keep_alive in cases:
        with httpx.stream(
            "POST", slow_server.base + path, json=body, headers=headers, timeout=30
        ) as r:
            text = "".join(r.iter_text())
        assert r.status_code == 200 and text.count(keep_alive) >= 3, (path, text[:600])


def test_a_log_line_per_request_with_its_counts_and_errors(slow_server, caplog):
    headers = {"Authorization": f"Bearer {KEY}", "User-Agent": "agent/1.0"}
    ok = httpx.post(
        slow_server.base + "/v1/chat/completions",
        json={"model": "m", **ASK},
        headers=headers,
        timeout=30,
    )
    bad = httpx.post(
        slow_server.base + "/v1/messages", json={"model": "m", "messages": []}, headers=headers
    )
    assert ok.status_code == 200 and bad.status_code == 400
    first, second = request_lines(caplog)[-2:]
    assert (
        first["protocol"] == "openai.chat"
        and first["status"] == 200
        and first["user_agent"] == "agent/1.0"
    )
    assert (
        first["prompt_tokens"] > 0 and first["completion_tokens"] > 0 and first["duration_s"] >= 1.2
    )
    assert first["cancelled"] is False and first["error"] is None and first["ttft_s"] is not None
    assert (
        second["status"] == 400
        and second["path"] == "/v1/messages"
        and "max_tokens" in second["error"]
    )
    keys = {"protocol", "method", "path", "status", "user_agent", "prompt_tokens", "cached_tokens"}
    keys |= {
        "completion_tokens",
        "drafted",
        "accepted",
        "ttft_s",
        "duration_s",
        "cancelled",
        "error",
    }
    assert set(first) == keys | {"event"} and first["event"] == "request"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_request_whose_client_left_is_cancelled_and_logged_with_its_prompt(
    slow_server, caplog, stream
):
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "m", "messages": ASK["messages"], "max_tokens": 200, "stream": stream}
    if stream:  # the client reads the first keep-alive, then leaves
        with httpx.stream(
            "POST", slow_server.base + "/v1/chat/completions", json=body, headers=headers
        ) as r:
            next(r.iter_text())
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                slow_server.base + "/v1/chat/completions", json=body, headers=headers, timeout=0.5
            )
    deadline = time.time() + 20
    while not any(line["cancelled"] for line in request_lines(caplog)):
        assert time.time() < deadline, request_lines(caplog)
        time.sleep(0.1)
    slow_server.wait_idle()
    assert slow_server.worker.last_result.finish_reason == "cancelled"
    line = next(line for line in request_lines(caplog) if line["cancelled"])
    result = slow_server.worker.last_result
    assert (
        line["prompt_tokens"] == result.stats.prompt_tokens > 0
        and line["cached_tokens"] is not None
    )
    assert line["completion_tokens"] == len(result.tokens) and line["status"] == (
        200 if stream else 499
    )


# --- Codex's tools, offline ---------------------------------------------------------------


def codex_tools(stem: str):
    from localspec.server.openai_responses import tools_of

    body = ResponsesRequest.model_validate_json(
        json.dumps(captured(AGENTS / f"{stem}.json")["body"])
    )
    return tools_of(body)


def test_namespace_custom_and_shell_calls_come_back_as_codex_routes_them():
    from localspec.server.openai_responses import Function
    from localspec.server.responses_tools import output_item, toolset

    tools = codex_tools("codex-0.171.0-default-01-responses")
    spawn = output_item(tools, "call_1", "spawn_agent", '{"message": "hi"}', "completed")
    assert spawn["type"] == "function_call" and spawn["name"] == "spawn_agent"
    assert spawn["namespace"] == "multi_agent_v1" and spawn["arguments"] == '{"message": "hi"}'
    assert "namespace" not in output_item(tools, "call_2", "exec_command", "{}", "completed")
    patch = codex_tools("codex-0.171.0-gpt-5.5-01-responses")
    offered = next(t["function"] for t in patch.tools if t["function"]["name"] == "apply_patch")
    assert (
        offered["parameters"]["required"] == ["input"]
        and "*** Begin Patch" in offered["description"]
    )
    text = "*** Begin Patch\n*** Add File: hello.py\n+print('hello')\n*** End Patch\n"
    item = output_item(patch, "call_3", "apply_patch", json.dumps({"input": text}), "completed")
    assert (
        item["type"] == "custom_tool_call" and item["input"] == text and item["call_id"] == "call_3"
    )
    shell = toolset([Function(type="local_shell")])
    item = output_item(shell, "call_4", "local_shell", '{"command": ["ls"]}', "completed")
    assert item["type"] == "local_shell_call" and item["action"] == {
        "type": "exec",
        "command": ["ls"],
    }


def test_codex_s_output_that_answers_no_call_is_a_tool_message_with_its_name():
    request, _ = translated(AGENTS / "codex-0.171.0-create-goal-02-responses.json")
    call, goal = request.messages[-2:]
    assert call["role"] == goal["role"] == "tool" and call["tool_call_id"] == "call_stub01"
    assert goal == {"role": "tool", "content": "create hello.py", "name": "goal_objective"}


def test_replayed_custom_calls_render_as_the_model_wrote_them():
    request, _ = translated(AGENTS / "codex-0.171.0-gpt-5.5-02-responses.json")
    call = next(m for m in request.messages if m.get("tool_calls"))["tool_calls"][0]
    assert call["function"]["name"] == "apply_patch"
    assert json.loads(call["function"]["arguments"])["input"].startswith("*** Begin Patch")
    assert request.messages[-1]["role"] == "tool" and "Success" in request.messages[-1]["content"]


def test_a_streamed_custom_call_ends_as_a_custom_tool_call_item():

    from localspec.decoding.stats import GenerationResult, GenerationStats
    from localspec.decoding.tool_calls import ToolFormat
    from localspec.server.openai_responses import ResponseShape

    tools = codex_tools("codex-0.171.0-gpt-5.5-01-responses")
    shape = ResponseShape({}, lambda r: None, tools)
    args = json.dumps({"input": "*** Begin Patch\n*** End Patch\n"})
    text = '<tool_call>\n{"name": "apply_patch", "arguments": ' + args + "}\n</tool_call>"
    events = shape.stream_start()
    batches, parser = answer_batches(
        text, ToolFormat("hermes", open_token=1, close_token=2), step=7
    )
    for batch in batches:
        events += shape.stream_events(batch)
    calls = parser.finish()
    result = GenerationResult(
        text,
        [1, 2],
        [],
        "tool_calls",
        GenerationStats(prompt_tokens=3),
        tool_calls=calls,
        content=parser.content,
    )
    events += shape.stream_end(result, False)
    payloads = [json.loads(e.split("data: ", 1)[1]) for e in events]
    done = [p["item"] for p in payloads if p["type"] == "response.output_item.done"]
    assert [d["type"] for d in done] == ["custom_tool_call"] and done[0][
        "input"
    ] == "*** Begin Patch\n*** End Patch\n"
    assert not any(p["type"] == "response.function_call_arguments.delta" for p in payloads)
    assert payloads[-1]["response"]["output"][0]["type"] == "custom_tool_call"


def test_a_streamed_fenced_json_call_is_held_back_and_sent_as_a_call():
    """opencode's failure in issue 37: the right call written as a fenced JSON block; its
    fence and head are held back, its arguments stream as they are written (issue 49)."""
    from localspec.decoding.stats import GenerationResult, GenerationStats
    from localspec.decoding.tool_calls import ToolFormat
    from localspec.server.openai_shapes import ChatShape

    fmt = ToolFormat("hermes", open_token=1, close_token=2, tools=("write",))
    text = (
        'I will write it.\n```json\n{"name": "write", "arguments": {"filePath": "hello.py"}}\n```'
    )
    shape = ChatShape("pair", False)
    chunks = shape.stream_start()
    batches, parser = answer_batches(text, fmt, step=4)
    for batch in batches:
        chunks += shape.stream_events(batch)
    calls = parser.finish()
    result = GenerationResult(
        text, [1, 2], [], "tool_calls", GenerationStats(prompt_tokens=3), tool_calls=calls
    )
    chunks += shape.stream_end(result, False)
    deltas = [json.loads(c[6:])["choices"][0]["delta"] for c in chunks if c.startswith("data: {")]
    content = "".join(d.get("content") or "" for d in deltas)
    pieces = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert content.strip() == "I will write it." and "```" not in content
    assert pieces[0]["function"]["name"] == "write" and pieces[0]["id"] == calls[0].id
    assert json.loads("".join(p["function"].get("arguments", "") for p in pieces)) == {
        "filePath": "hello.py"
    }
    assert (
        len([p for p in pieces if p["function"].get("arguments")]) > 1
    )  # streamed, not sent whole at the end


def test_claude_codes_billing_header_is_left_out_of_the_prompt():
    """The header line differs between Claude Code versions and sessions; at token 0 it
    would make every cached prefix miss."""
    capture = captured(AGENTS / "claude-code-2.1.332-01-messages.json")
    system = capture["body"]["system"]
    assert system[0]["text"].startswith("x-anthropic-billing-header:")
    other = json.loads(json.dumps(capture["body"]))
    other["system"][0]["text"] = (
        "x-anthropic-billing-header: cc_version=9.9.999.abc; cc_entrypoint=cli;"
    )
    first, second = (
        messages_request(MessagesRequest.model_validate_json(json.dumps(b)), LIMITS)
        for b in (capture["body"], other)
    )
    assert first.messages == second.messages
    assert "billing-header" not in first.messages[0]["content"]
    assert first.messages[0]["content"] == "\n".join(block["text"] for block in system[1:])


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_prompt_cache_key_reaches_the_library_as_the_slot_hint(path):
    body_type, translate = PARSERS[path]
    turn = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"input": "hi"}
    body = body_type.model_validate({"model": "pair", "prompt_cache_key": "session-1", **turn})
    assert translate(body, LIMITS).options.prompt_cache_key == "session-1"
