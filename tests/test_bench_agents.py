"""``localspec bench agents``: the recorded sessions it loads, the bodies it sends, the usage
it reads from each protocol's answers and events, and the session table it writes (no model
loads: the replay against real servers is ``localspec bench agents --smoke`` in .ci/run)."""

from __future__ import annotations

import json

import pytest
from support.bench import MACHINE_RECORD, bench_args

from localspec.bench import agent_replay, agents
from localspec.bench.agent_replay import (
    Turn,
    TurnResult,
    generated,
    load_session,
    replayable,
    usage_counts,
)
from localspec.errors import InvalidOptionError


def _args(*argv):
    return bench_args("agents", *argv)


def test_the_default_sessions_load_in_order_without_the_probe():
    claude = load_session("claude-code-2.1.332-default")
    assert [(t.index, t.path, t.protocol) for t in claude] == [
        (2, "/v1/messages", "messages"),
        (3, "/v1/messages", "messages"),
    ]
    assert claude[0].query == "beta=true" and "anthropic-version" in claude[0].headers
    assert "authorization" not in claude[0].headers and "host" not in claude[0].headers


@pytest.mark.parametrize("name", agents.SESSIONS)
def test_every_default_session_has_two_turns_or_more(name):
    turns = load_session(name)
    assert len(turns) >= 2 and [t.index for t in turns] == sorted(t.index for t in turns)


def test_a_missing_session_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_session("nobody-1.0", tmp_path)


def _turn(protocol: str, body: dict) -> Turn:
    path = {v: k for k, v in agent_replay.PROTOCOLS.items()}[protocol]
    return Turn("s", 1, path, "", {}, body, protocol)


@pytest.mark.parametrize(
    ("protocol", "body", "field", "expected"),
    [
        ("messages", {"max_tokens": 32000, "temperature": 1}, "max_tokens", 128),
        ("messages", {"max_tokens": 50}, "max_tokens", 50),
        ("chat", {}, "max_tokens", 128),
        ("responses", {"stream": True}, "max_output_tokens", 128),
    ],
)
def test_a_replayed_body_is_greedy_and_capped_in_its_protocols_field(
    protocol, body, field, expected
):
    sent = replayable(_turn(protocol, body), 128)
    assert sent[field] == expected and sent["temperature"] == 0
    assert body.get("temperature") != 0 or body == {}  # the recorded body is left as it was


def test_a_streamed_chat_completion_asks_for_its_usage():
    sent = replayable(_turn("chat", {"stream": True, "stream_options": {"x": 1}}), 16)
    assert sent["stream_options"] == {"x": 1, "include_usage": True}
    assert "stream_options" not in replayable(_turn("chat", {}), 16)
    assert "stream_options" not in replayable(_turn("messages", {"stream": True}), 16)


@pytest.mark.parametrize(
    ("protocol", "event", "expected"),
    [
        ("chat", {"choices": [{"delta": {"role": "assistant"}}]}, False),
        ("chat", {"choices": [{"delta": {"content": "x"}}]}, True),
        ("chat", {"choices": [{"delta": {"reasoning_content": "hm"}}]}, True),
        ("chat", {"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}, True),
        ("chat", {"choices": [], "usage": {"prompt_tokens": 3}}, False),
        ("messages", {"type": "ping"}, False),
        ("messages", {"type": "message_start", "message": {}}, False),
        (
            "messages",
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}},
            True,
        ),
        ("responses", {"type": "response.in_progress"}, False),
        ("responses", {"type": "response.output_text.delta", "delta": "x"}, True),
        ("responses", {"type": "response.function_call_arguments.delta", "delta": "{"}, True),
    ],
)
def test_the_first_generated_event_is_told_from_openings_and_keep_alives(protocol, event, expected):
    assert generated(protocol, event) is expected


@pytest.mark.parametrize(
    ("protocol", "obj", "expected"),
    [
        ("chat", {"usage": {"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 850}, "completion_tokens": 7}}, (900, 850, 7)),
        ("chat", {"usage": {"prompt_tokens": 900, "completion_tokens": 7}, "timings": {"cache_n": 640}}, (900, 640, 7)),
        ("chat", {"choices": [{"delta": {"content": "x"}}]}, (None, None, None)),
        ("chat", {"choices": [], "timings": {"prompt_n": 307, "cache_n": 12, "predicted_n": 5}}, (319, 12, None)),
        ("messages", {"type": "message_start", "message": {"usage": {"input_tokens": 12, "cache_read_input_tokens": 11000, "output_tokens": 1}}}, (11012, 11000, 1)),
        ("messages", {"type": "message_delta", "usage": {"output_tokens": 40}}, (None, None, 40)),
        ("messages", {"usage": {"input_tokens": 5, "cache_creation_input_tokens": 20, "output_tokens": 2}}, (25, 0, 2)),
        ("responses", {"type": "response.completed", "response": {"usage": {"input_tokens": 9127, "input_tokens_details": {"cached_tokens": 8893}, "output_tokens": 60}}}, (9127, 8893, 60)),
    ],
)  # fmt: skip
def test_usage_is_read_in_each_protocols_own_fields(protocol, obj, expected):
    assert usage_counts(protocol, obj) == expected


def test_a_turns_read_tokens_are_its_prompt_less_the_cached():
    assert (
        TurnResult("s", 1, "chat", 200, 1.0, prompt_tokens=900, cached_tokens=850).read_tokens == 50
    )
    assert TurnResult("s", 1, "chat", 200, 1.0, prompt_tokens=900).read_tokens == 900
    assert TurnResult("s", 1, "chat", 400, 0.1).record()["read_tokens"] is None


def _record(session, turn, status, seconds, read, cached):
    got = {"session": session, "turn": turn, "status": status, "duration_s": seconds}
    timing = {"ttft_s": seconds / 2 if read else None, "decode_tps": 20.0 if read else None}
    return got | {"read_tokens": read, "cached_tokens": cached} | timing


def test_session_walls_add_the_turns_and_compare_with_llama_server():
    turns = {
        "default": [_record("a", 1, 200, 30.0, 900, 0), _record("a", 2, 200, 2.0, 40, 880), _record("b", 1, 200, 5.0, 100, 0)],
        "llama-server": [_record("a", 1, 200, 40.0, 900, 0), _record("a", 2, 200, 8.0, 920, 0), _record("b", 1, 400, 0.1, None, None)],
    }  # fmt: skip
    rows = agents.summary(turns)
    assert [r["session"] for r in rows] == ["a", "b"]
    a = rows[0]
    assert a["servers"]["default"] == {
        "wall_s": 32.0,
        "run_walls": [32.0],
        "read_tokens": 940,
        "cached_tokens": 880,
        "all_2xx": True,
        "against_plain": None,
    }
    assert a["over_llama_server"] == {"default": 32.0 / 48.0, "llama-server": 1.0}
    assert (
        rows[1]["servers"]["llama-server"]["all_2xx"] is False
        and "over_llama_server" not in rows[1]
    )
    text = agents.markdown(
        {"machine": MACHINE_RECORD, "max_tokens": 16, "summary": rows, "turns": turns}
    )
    assert "| a | 32 (×0.67) | 48 |" in text and "| b | 5 | 0 (refused) |" in text
    assert "| llama-server | a | 2 | 200 | 920 / 0 | 4.0 | 20.0 | 8.0 |" in text
    assert "| llama-server | b | 1 | 400 |  /  |  |  | 0.1 |" in text


def test_the_options_parse_and_bad_ones_are_refused():
    args = _args()
    assert (args.max_tokens, args.smoke, args.sessions_dir) == (128, False, None)
    assert args.servers.split(",") == list(agents.SERVERS) and args.sessions.split(",") == list(
        agents.SESSIONS
    )
    agents.check(args)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["-n", "0"], "--max-tokens"),
        (["--servers", "vllm"], "vllm"),
        (["--sessions", ","], "--sessions"),
    ],
)
def test_bad_options_are_refused_before_anything_loads(argv, says):
    with pytest.raises(InvalidOptionError, match=says):
        agents.check(_args(*argv))


def test_the_recorded_bodies_are_what_the_agents_sent():
    raw = json.loads(
        (agent_replay.SESSIONS_DIR / "codex-0.171.0-workspace-write-01-responses.json").read_text()
    )
    (first, *_) = load_session("codex-0.171.0-workspace-write")
    assert first.body == raw["body"] and first.protocol == "responses"


@pytest.mark.parametrize(
    ("ttft_s", "duration_s", "output_tokens", "expected"),
    [(2.0, 4.0, 41, 20.0), (2.0, 2.0005, 46, None), (None, 3.0, 10, None), (1.0, 3.0, 1, None)],
)
def test_decode_speed_from_the_wire_only_where_it_can_be_a_decode(
    ttft_s, duration_s, output_tokens, expected
):
    got = TurnResult(
        "s", 1, "messages", 200, duration_s, ttft_s=ttft_s, output_tokens=output_tokens
    )
    assert agent_replay.wire_decode_tps(got) == expected


def test_llama_cpps_timings_give_the_decode_speed_of_a_whole_answer():
    got = TurnResult("s", 1, "chat", 200, 3.0)
    agent_replay.take_counts(
        "chat", {"usage": {"completion_tokens": 5}, "timings": {"predicted_per_second": 11.8}}, got
    )
    assert (got.decode_tps, got.output_tokens) == (11.8, 5)


def _account(net_ms):
    return {"won_ms": 10.0, "lost_ms": 10.0 - net_ms, "catch_up_ms": 0.0, "draft_prompt_ms": 0.0,
            "policy_ms": 0.0, "batch_wait_ms": 0.0, "net_ms": net_ms, "won_rounds": 1}  # fmt: skip


def test_runs_give_default_over_plain_with_its_interval_and_where_the_time_went():
    """Three fresh runs of each server on one first turn: the ratio per run of the walls, its
    mean and 95 % interval, and default's account against plain in seconds per run."""
    default = [(100.0, -2000.0), (102.0, -1000.0), (98.0, 0.0)]
    turns = {
        "default": [
            _record("codex", 1, 200, s, 8588, 0) | {"run": r, "against_plain": _account(net)}
            for r, (s, net) in enumerate(default)
        ],
        "plain": [
            _record("codex", 1, 200, s, 8588, 0) | {"run": r} for r, s in enumerate((100, 100, 100))
        ],
    }
    (row,) = agents.summary(turns)
    assert row["servers"]["default"]["run_walls"] == [100.0, 102.0, 98.0]
    assert row["servers"]["default"]["wall_s"] == pytest.approx(100.0)
    ratio = row["default_over_plain"]
    assert ratio["n"] == 3 and ratio["mean"] == pytest.approx(1.0)
    assert ratio["low"] == pytest.approx(1.0 - 4.303 * 0.02 / 3**0.5)
    account = row["servers"]["default"]["against_plain"]
    assert account["net_s"] == pytest.approx(-1.0) and account["won_s"] == pytest.approx(0.01)
    assert "won_rounds" not in account  # counts are not seconds
    text = agents.markdown(
        {"machine": MACHINE_RECORD, "max_tokens": 32000, "summary": [row], "turns": turns}
    )
    assert "| codex | 3 | 1.00 [0.95, 1.05] | +0.01 | +1.01 | +0.00 | +0.00 | +0.00 | -1.00 |" in (
        text
    )


def test_a_responses_streams_timings_come_in_its_completed_event():
    got = TurnResult("s", 1, "responses", 200, 3.0)
    completed = {
        "type": "response.completed",
        "response": {"timings": {"predicted_per_second": 9.5, "against_plain": _account(-5.0)}},
    }
    agent_replay.take_counts("responses", completed, got)
    assert got.decode_tps == 9.5 and got.against_plain["net_ms"] == -5.0


def test_first_turn_and_runs_parse_and_bad_runs_are_refused():
    args = _args("--first-turn", "--runs", "3")
    assert args.first_turn and args.runs == 3
    with pytest.raises(InvalidOptionError, match="--runs"):
        agents.check(_args("--runs", "0"))
