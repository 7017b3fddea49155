"""localspec serve with a reasoning model (docs/reasoning.md): the thinking kept apart from the
answer in every protocol, read by the real SDKs.  OpenAI chat's ``reasoning_content`` (whole and
streamed), ``reasoning_format`` / ``chat_template_kwargs`` / ``reasoning_effort``, usage's
``reasoning_tokens`` and per-channel ``timings``; Anthropic ``thinking`` blocks with a signature
the server checks when they come back; Responses ``reasoning`` items whose ``encrypted_content``
the server decrypts on replay with ``store: false``; ``serve --reasoning-budget`` /
``--chat-template-file``.

A synthetic target and same-seed draft whose vocabulary holds ``<think>`` / ``</think>``, under
DeepSeek-R1-Distill's template (its generation prompt opens ``<think>\\n``), served with a
thinking budget of :data:`BUDGET` tokens as ``--reasoning-budget`` sets it: every answer thinks
for the budget, then the forced close, then answers.  Answers are greedy and equal the
library's own for the same call."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import anthropic
import pytest
from support.served import KEY, RunningServer

from localspec.api import SpeculativeModel
from localspec.cli import commands, loading
from localspec.decoding.reasoning import REASONING
from localspec.llama.synthetic import write_model
from localspec.server.anthropic_messages import MessagesRequest, messages_request
from localspec.server.errors import RequestError
from localspec.server.openai_chat import chat_request
from localspec.server.openai_responses import ResponsesRequest, messages_from, responses_request
from localspec.server.reasoning_fields import ReasoningKeys, channel_runs
from localspec.server.request import Limits, generation_request
from localspec.server.schemas import ChatRequest

TEMPLATES = Path(__file__).parent / "data" / "templates"
R1_DISTILL = TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
BUDGET = 6  # the server's --reasoning-budget
QUESTION = "hello world"
ASK = [{"role": "user", "content": QUESTION}]
MAX = 24
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinking-server")
    target = write_model(folder / "target.gguf", seed=1, added_tokens=("<think>", "</think>"))
    draft = write_model(folder / "draft.gguf", seed=1, added_tokens=("<think>", "</think>"))
    options = dict(
        n_ctx=2048, chat_template=str(R1_DISTILL), reasoning_budget=BUDGET, draft_max=4, p_min=0.0
    )
    with SpeculativeModel(target, draft, **options) as m:
        yield m


@pytest.fixture(scope="module")
def server(model):
    running = RunningServer(model, api_key=KEY)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def direct(model):
    """The library's greedy answer to ASK under the server's budget."""
    result = model.chat(ASK, max_tokens=MAX, **GREEDY)
    assert result.reasoning and result.text and result.stats.channels[REASONING].forced_tokens > 0
    return result


def thinking_tokens(result) -> int:
    return result.stats.channels[REASONING].tokens


def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0)


# --- OpenAI chat completions ------------------------------------------------------------------


def test_chat_gives_the_thinking_as_reasoning_content_with_its_tokens_and_channel_timings(
    server, direct
):
    r = server.client().chat.completions.create(model="m", messages=ASK, max_tokens=MAX, **GREEDY)
    message = r.choices[0].message
    assert (message.reasoning_content, message.content) == (direct.reasoning, direct.text)
    assert (
        r.usage.completion_tokens == MAX
        and r.usage.completion_tokens_details.reasoning_tokens == thinking_tokens(direct)
    )
    channels = r.model_extra["timings"]["channels"]
    assert set(channels) == {"reasoning", "content"}
    expected = direct.stats.channels
    for name in ("reasoning", "content"):
        got = channels[name]
        assert (got["tokens"], got["forced_tokens"]) == (
            expected[name].tokens,
            expected[name].forced_tokens,
        )
        assert got["accepted_tokens"] <= got["drafted_tokens"] and got["tokens_per_s"] > 0
    assert channels["reasoning"]["forced_tokens"] > 0 and channels["content"]["forced_tokens"] == 0


def test_a_chat_stream_sends_the_thinking_as_delta_reasoning_content_before_the_answer(
    server, direct
):
    stream = server.client().chat.completions.create(
        model="m",
        messages=ASK,
        max_tokens=MAX,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    thinking = [getattr(d, "reasoning_content", None) or "" for d in deltas]
    kinds = ["reasoning" if t else "content" for t, d in zip(thinking, deltas) if t or d.content]
    assert kinds == ["reasoning"] * kinds.count("reasoning") + ["content"] * kinds.count("content")
    assert (
        "".join(thinking) == direct.reasoning
        and "".join(d.content or "" for d in deltas) == direct.text
    )
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == thinking_tokens(direct)


@pytest.mark.parametrize(
    ("fields", "library"),
    [
        ({"reasoning_effort": "none"}, {"enable_thinking": False}),
        ({"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False}),
        ({"reasoning_budget": 2}, {"reasoning_budget": 2}),
        ({"reasoning_format": "none"}, {"reasoning_format": "none"}),
    ],
)
def test_chat_reasoning_fields_ask_what_the_library_options_do(server, model, fields, library):
    expected = model.chat(ASK, max_tokens=MAX, **GREEDY, **library)
    r = server.client().chat.completions.create(
        model="m", messages=ASK, max_tokens=MAX, extra_body=fields, **GREEDY
    )
    message = r.choices[0].message
    assert message.content == expected.text
    assert getattr(message, "reasoning_content", None) == (expected.reasoning or None)
    tokens = expected.stats.channels.get(REASONING)
    assert r.usage.completion_tokens_details.reasoning_tokens == (tokens.tokens if tokens else 0)


def test_reasoning_format_none_leaves_the_thinking_in_the_content(server, model):
    r = server.client().chat.completions.create(
        model="m", messages=ASK, max_tokens=MAX, extra_body={"reasoning_format": "none"}, **GREEDY
    )
    assert (
        r.choices[0].message.content
        == model.chat(ASK, max_tokens=MAX, reasoning_format="none", **GREEDY).text
    )
    assert (
        r.model_extra["timings"]["channels"] == {}
        and r.usage.completion_tokens_details.reasoning_tokens == 0
    )


def test_an_earlier_turns_reasoning_content_goes_to_the_template_which_drops_it(server, direct):
    turn = {"role": "assistant", "content": direct.text}
    later = [{"role": "user", "content": "and again"}]
    c = server.client()
    plain = c.chat.completions.create(
        model="m", messages=[*ASK, turn, *later], max_tokens=4, **GREEDY
    )
    thought = {**turn, "reasoning_content": direct.reasoning}
    kept = c.chat.completions.create(
        model="m", messages=[*ASK, thought, *later], max_tokens=4, **GREEDY
    )
    assert (
        kept.usage.prompt_tokens == plain.usage.prompt_tokens
        and kept.choices[0].message == plain.choices[0].message
    )
    body = ChatRequest.model_validate({"messages": [*ASK, thought, *later]})
    assert chat_request(body, LIMITS).messages[1] == {
        "role": "assistant",
        **{k: thought[k] for k in ("content", "reasoning_content")},
    }


# --- Anthropic Messages -------------------------------------------------------------------------


def test_a_thinking_block_streams_then_the_text_and_its_signature_is_the_servers(server, direct):
    with claude(server).messages.stream(
        model="m", max_tokens=MAX, messages=ASK, thinking={"type": "adaptive"}, extra_body=GREEDY
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    raw = [(e.type, getattr(e, "content_block", None) or getattr(e, "delta", None)) for e in events]
    starts = [block.type for kind, block in raw if kind == "content_block_start"]
    deltas = [delta.type for kind, delta in raw if kind == "content_block_delta"]
    assert starts == ["thinking", "text"]
    first_text = deltas.index("text_delta")
    assert (
        set(deltas[: first_text - 1]) == {"thinking_delta"}
        and deltas[first_text - 1] == "signature_delta"
    )
    assert deltas.count("signature_delta") == 1 and set(deltas[first_text:]) == {"text_delta"}
    thinking, text = message.content
    assert (thinking.type, thinking.thinking, text.text) == (
        "thinking",
        direct.reasoning,
        direct.text,
    )
    assert (
        server.state.keys.verify(direct.reasoning, thinking.signature)
        and len(thinking.signature) == 44
    )
    assert message.usage.output_tokens == MAX and message.stop_reason == "max_tokens"


def test_a_thinking_block_sent_back_is_verified_and_dropped_by_the_template(server, direct):
    c = claude(server)
    first = c.messages.create(model="m", max_tokens=MAX, messages=ASK, extra_body=GREEDY)
    assert [b.type for b in first.content] == ["thinking", "text"] and first.content[
        0
    ].thinking == direct.reasoning
    later = {"role": "user", "content": "and again"}
    blocks = [b.model_dump(exclude_none=True) for b in first.content]
    back = c.messages.create(
        model="m",
        max_tokens=4,
        messages=[*ASK, {"role": "assistant", "content": blocks}, later],
        extra_body=GREEDY,
    )
    text_only = [*ASK, {"role": "assistant", "content": [blocks[1]]}, later]
    plain = c.messages.create(model="m", max_tokens=4, messages=text_only, extra_body=GREEDY)
    prompt = back.usage.input_tokens + back.usage.cache_read_input_tokens
    assert prompt == plain.usage.input_tokens + plain.usage.cache_read_input_tokens
    assert back.content == plain.content
    # the first turn's prompt was read again up to its last two tokens (``<think>`` ``\n``, which the
    # template writes as ``<｜Assistant｜>`` + answer in the second): the earlier thinking costs no re-read
    first_prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert back.usage.cache_read_input_tokens == first_prompt - 2
    forged = [{**blocks[0], "signature": ReasoningKeys().sign(direct.reasoning)}, blocks[1]]
    for endpoint in (c.messages.create, c.messages.count_tokens):
        extra = {"max_tokens": 4} if endpoint == c.messages.create else {}
        with pytest.raises(anthropic.BadRequestError) as err:
            endpoint(
                model="m", messages=[*ASK, {"role": "assistant", "content": forged}, later], **extra
            )
        assert err.value.body == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "messages.1.content.0.signature: Invalid `signature` in `thinking` block",
            },
        }


def test_thinking_enabled_takes_a_budget_of_1024_or_more_and_disabled_answers_at_once(
    server, model
):
    c = claude(server)
    whole = c.messages.create(
        model="m",
        max_tokens=12,
        messages=ASK,
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_body=GREEDY,
    )
    long = model.chat(ASK, max_tokens=12, reasoning_budget=1024, **GREEDY)
    assert [b.type for b in whole.content] == ["thinking"] and whole.content[
        0
    ].thinking == long.reasoning
    assert whole.stop_reason == "max_tokens" and not long.text
    with pytest.raises(anthropic.BadRequestError) as err:
        c.messages.create(
            model="m",
            max_tokens=12,
            messages=ASK,
            thinking={"type": "enabled", "budget_tokens": 512},
        )
    assert err.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "thinking.budget_tokens: Input should be an integer greater than or equal to 1024",
    }
    off = c.messages.create(
        model="m", max_tokens=12, messages=ASK, thinking={"type": "disabled"}, extra_body=GREEDY
    )
    assert [b.type for b in off.content] == ["text"]
    assert (
        off.content[0].text == model.chat(ASK, max_tokens=12, enable_thinking=False, **GREEDY).text
    )


# --- Responses ----------------------------------------------------------------------------------


ENCRYPTED = ["reasoning.encrypted_content"]


def test_a_response_has_a_reasoning_item_with_encrypted_content_only_this_server_reads(
    server, direct
):
    r = server.client().responses.create(
        model="m", input=QUESTION, include=ENCRYPTED, store=False, max_output_tokens=MAX, **GREEDY
    )
    reasoning, message = r.output
    assert (reasoning.type, reasoning.summary, reasoning.content) == ("reasoning", [], None)
    assert direct.reasoning not in reasoning.encrypted_content
    assert server.state.keys.decrypt(reasoning.encrypted_content) == direct.reasoning
    assert ReasoningKeys().decrypt(reasoning.encrypted_content) is None  # another server's key
    assert (
        r.output_text == direct.text
        and r.usage.output_tokens_details.reasoning_tokens == thinking_tokens(direct)
    )
    assert r.reasoning.effort is None
    unasked = server.client().responses.create(
        model="m", input=QUESTION, max_output_tokens=MAX, **GREEDY
    )
    assert unasked.output[0].type == "reasoning" and unasked.output[0].encrypted_content is None


def test_a_streamed_reasoning_item_is_replayed_with_store_false_and_decrypted(server, direct):
    c = server.client()
    with c.responses.stream(
        model="m", input=QUESTION, include=ENCRYPTED, store=False, max_output_tokens=MAX, **GREEDY
    ) as stream:
        events = list(stream)
    first = events[
        -1
    ].response  # cut by max_output_tokens: response.incomplete, which the reader does not finish on
    assert events[-1].type == "response.incomplete"
    added_items = [e.item for e in events if e.type == "response.output_item.added"]
    added = [item.type for item in added_items]
    assert (
        added_items[0].encrypted_content is None
    )  # sealed once the thinking is whole, in output_item.done
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert added == ["reasoning", "message"] and [o.type for o in first.output] == [
        "reasoning",
        "message",
    ]
    assert server.state.keys.decrypt(done[0].encrypted_content) == direct.reasoning
    assert first.output_text == direct.text
    replay = [
        {"role": "user", "content": QUESTION},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"role": "user", "content": "and again"},
    ]
    again = c.responses.create(
        model="m", input=replay, include=ENCRYPTED, store=False, max_output_tokens=4, **GREEDY
    )
    assert again.status == "incomplete" and again.output[0].type == "reasoning"
    translated = messages_from(
        ResponsesRequest.model_validate({"input": replay}).input, keys=server.state.keys
    )
    assert translated[1] == {
        "role": "assistant",
        "content": direct.text,
        "reasoning_content": direct.reasoning,
    }
    without = [replay[0], replay[2], replay[3]]
    plain = c.responses.create(model="m", input=without, store=False, max_output_tokens=4, **GREEDY)
    assert (
        again.usage.input_tokens == plain.usage.input_tokens
    )  # the template drops earlier thinking
    foreign = [replay[0], {**replay[1], "encrypted_content": "not-this-servers"}, *replay[2:]]
    kept = c.responses.create(model="m", input=foreign, store=False, max_output_tokens=4, **GREEDY)
    assert (
        kept.status == "incomplete" and kept.usage.input_tokens == plain.usage.input_tokens
    )  # dropped, no error


def test_the_thinking_text_comes_only_when_asked_and_effort_none_turns_it_off(
    server, model, direct
):
    c = server.client()
    asked = ["reasoning.content"]
    with c.responses.stream(
        model="m", input=QUESTION, include=asked, max_output_tokens=MAX, **GREEDY
    ) as stream:
        events = list(stream)
    final = events[-1].response
    assert (
        "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        == direct.reasoning
    )
    assert [e.text for e in events if e.type == "response.reasoning_text.done"] == [
        direct.reasoning
    ]
    assert (
        final.output[0].content[0].text == direct.reasoning
        and final.output[0].encrypted_content is None
    )
    off = c.responses.create(
        model="m", input=QUESTION, reasoning={"effort": "none"}, max_output_tokens=MAX, **GREEDY
    )
    assert [o.type for o in off.output] == ["message"] and off.reasoning.effort == "none"
    assert off.output_text == model.chat(ASK, max_tokens=MAX, enable_thinking=False, **GREEDY).text
    assert off.usage.output_tokens_details.reasoning_tokens == 0


# --- offline: the fields as the library's options -----------------------------------------------

LIMITS = Limits("pair", max_tokens=100, tools=True, fim=False, reasoning_budget=BUDGET)
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


REASONING_OPTIONS = (
    "reasoning_budget",
    "reasoning_budget_message",
    "enable_thinking",
    "reasoning_format",
    "chat_template_kwargs",
)


def _given(request) -> dict:
    """The call's max_tokens and the reasoning options it sets (the rest left to the model)."""
    options = request.options
    reasoning = {name: getattr(options, name) for name in REASONING_OPTIONS}
    return {
        "max_tokens": options.params.max_tokens,
        **{name: value for name, value in reasoning.items() if value is not None},
    }


def _chat_options(**fields) -> dict:
    return _given(chat_request(ChatRequest.model_validate({"messages": ASK, **fields}), LIMITS))


def test_efforts_map_to_budgets_and_reach_the_template():
    assert _chat_options(reasoning_effort="low") == {
        "max_tokens": 100,
        "reasoning_budget": 1024,
        "chat_template_kwargs": {"reasoning_effort": "low"},
    }
    budgets = {
        e: _chat_options(reasoning_effort=e).get("reasoning_budget")
        for e in ("minimal", "medium", "high")
    }
    assert budgets == {"minimal": 256, "medium": 4096, "high": 16384}
    assert _chat_options(reasoning_effort="xhigh")["reasoning_budget"] == -1
    assert "reasoning_budget" not in _chat_options(
        reasoning_effort="unknown-effort"
    )  # the server's default
    assert _chat_options(reasoning_effort="high", reasoning_budget=9)["reasoning_budget"] == 9
    off = _chat_options(chat_template_kwargs={"enable_thinking": False, "x": 1})
    assert off["enable_thinking"] is False and off["chat_template_kwargs"] == {
        "enable_thinking": False,
        "x": 1,
    }
    assert _chat_options(reasoning_format="deepseek")["reasoning_format"] == "auto"
    body = ResponsesRequest.model_validate(
        {"input": "x", "reasoning": {"effort": "medium", "summary": "auto"}}
    )
    assert _given(responses_request(body, LIMITS))["reasoning_budget"] == 4096
    for thinking, expected in (
        ({"type": "enabled", "budget_tokens": 2048}, {"reasoning_budget": 2048}),
        ({"type": "disabled"}, {"enable_thinking": False}),
        ({"type": "adaptive"}, {}),
    ):
        body = MessagesRequest.model_validate(
            {"model": "m", "max_tokens": 8, "messages": ASK, "thinking": thinking}
        )
        assert _given(messages_request(body, LIMITS)) == {"max_tokens": 8, **expected}
    adaptive = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}
    body = MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 8, "messages": ASK, **adaptive}
    )
    assert _given(messages_request(body, LIMITS))["reasoning_budget"] == -1


def test_with_tools_no_budget_is_forced_and_raw_text_has_no_reasoning_options():
    assert _chat_options(tools=[TOOL], reasoning_budget=8)["reasoning_budget"] == -1
    assert (
        _chat_options(tools=[TOOL])["reasoning_budget"] == -1
    )  # the server's budget is not forced either
    thinks_off = Limits(
        "pair", 100, tools=True, fim=False, reasoning_budget=0, reads_enable_thinking=True
    )
    request = chat_request(
        ChatRequest.model_validate({"messages": ASK, "tools": [TOOL]}), thinks_off
    )
    options = _given(request)
    assert options["enable_thinking"] is False and "reasoning_budget" not in options
    raw = generation_request("openai.completions", LIMITS, prompt="x", reasoning_budget=3)
    assert "reasoning_budget" not in _given(raw)
    prefill = generation_request(
        "anthropic.messages", LIMITS, messages=ASK, prefill="Sure", reasoning_budget=3
    )
    assert "reasoning_budget" not in _given(prefill)


def test_a_thinking_block_sent_back_must_be_whole_and_signed():
    keys = ReasoningKeys()
    turn = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "4"}],
    }
    body = MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 8, "messages": [*ASK, turn, *ASK]}
    )
    with pytest.raises(RequestError, match="a thinking block needs thinking, signature") as err:
        messages_request(body, LIMITS, keys)
    assert err.value.path == ("messages", 1, "content", 0)
    turn["content"][0]["signature"] = keys.sign("hmm")
    body = MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 8, "messages": [*ASK, turn, *ASK]}
    )
    assert messages_request(body, LIMITS, keys).messages[1] == {
        "role": "assistant",
        "content": "4",
        "reasoning_content": "hmm",
    }
    assert messages_request(body, LIMITS).messages[1] == {
        "role": "assistant",
        "content": "4",
    }  # no keys: dropped


def test_events_split_into_runs_thinking_first():
    events = [
        SimpleNamespace(text="", reasoning="a"),
        SimpleNamespace(text="", reasoning="b"),
        SimpleNamespace(text="c", reasoning="d"),
        SimpleNamespace(text="e"),
    ]
    runs = channel_runs(events)
    assert [
        (kind, value if kind == "reasoning" else [e.text for e in value]) for kind, value in runs
    ] == [
        ("reasoning", "abd"),
        ("content", ["c", "e"]),
    ]


# --- the serve command's flags ------------------------------------------------------------------


def test_serve_passes_its_reasoning_flags_to_the_model(monkeypatch):
    loaded = {}

    def load(target, draft, **kwargs):
        loaded.update(kwargs)
        return SimpleNamespace(drafter=object())

    monkeypatch.setattr(loading, "load", load)
    flags = [
        "--reasoning-budget",
        "0",
        "--reasoning-format",
        "none",
        "--chat-template-file",
        str(R1_DISTILL),
    ]
    args = commands._parser().parse_args(["serve", *flags])
    commands.check_args(args)
    loading.load_models(args)
    assert (loaded["reasoning_budget"], loaded["reasoning_format"], loaded["chat_template"]) == (
        0,
        "none",
        str(R1_DISTILL),
    )
    assert not hasattr(
        args, "think"
    )  # serve turns thinking off with --reasoning-budget 0, as llama-server
    bad = commands._parser().parse_args(["serve", "--reasoning-budget", "-2"])
    with pytest.raises(Exception, match="reasoning_budget must be an integer >= -1"):
        commands.check_args(bad)
