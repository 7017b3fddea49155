"""A coding agent's recorded session sent again, request by request, to any server.

A session is the files ``<session>-NN-<endpoint>.json`` of ``tests/data/agents`` (captured
from the agents' own releases, see that folder's README): each ``{"method", "path",
"query", "headers", "body", ...}``.  :func:`load_session` reads the POST requests in
arrival order (the connectivity probe ``HEAD /api/hello`` is left out);
:func:`replayable` makes a body greedy with a token cap, so every server generates the same
kind of answer; :func:`send` posts it and times it from the wire: the time to the first
generated event (text, thinking or a tool call's arguments) and to the end, the prompt
tokens read and cached as the answer's usage (or llama.cpp ``timings``) reports them.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

SESSIONS_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "agents"  # the checkout's
PROTOCOLS = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "messages",
    "/v1/responses": "responses",
}
SENT_HEADERS = ("content-type", "anthropic-version", "anthropic-beta", "user-agent", "accept")
TIMEOUT_S = 1800  # an agent's first prompt takes minutes to read on 2 cores


@dataclass(frozen=True)
class Turn:
    """One recorded request: ``index`` its place in the session (from 1), ``protocol`` one of
    :data:`PROTOCOLS`' values."""

    session: str
    index: int
    path: str
    query: str
    headers: dict
    body: dict
    protocol: str


@dataclass
class TurnResult:
    """What one request cost: seconds from sending (``ttft_s`` to the first generated event,
    ``duration_s`` to the last byte), tokens as the answer reports them (None where it says
    nothing), the decode t/s (llama.cpp's ``timings`` where the answer has them, else
    :func:`wire_decode_tps`), the HTTP status (0: no answer), for a refusal or a failure
    the first 300 characters of its body or error, and where localspec answered, where its
    time went against plain decoding (``against_plain``, its ``timings``' milliseconds)."""

    session: str
    turn: int
    protocol: str
    status: int
    duration_s: float
    ttft_s: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    decode_tps: float | None = None
    error: str | None = None
    against_plain: dict | None = None

    @property
    def read_tokens(self) -> int | None:
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens - (self.cached_tokens or 0)

    def record(self) -> dict:
        return {**asdict(self), "read_tokens": self.read_tokens}


def load_session(name: str, folder: str | Path = SESSIONS_DIR) -> list[Turn]:
    """The POST requests of session ``name`` in ``folder``, in arrival order; FileNotFoundError
    naming the folder when it has none."""
    turns = []
    for path in sorted(Path(folder).glob(f"{name}-[0-9][0-9]-*.json")):
        raw = json.loads(path.read_text())
        if raw.get("method") != "POST" or raw.get("path") not in PROTOCOLS:
            continue
        query = urllib.parse.urlencode(raw.get("query") or {}, doseq=True)
        headers = {k: v for k, v in (raw.get("headers") or {}).items() if k in SENT_HEADERS}
        index = int(path.name[len(name) + 1 : len(name) + 3])
        turns.append(
            Turn(name, index, raw["path"], query, headers, raw["body"], PROTOCOLS[raw["path"]])
        )
    if not turns:
        raise FileNotFoundError(f"no recorded requests of session {name!r} in {folder}")
    return turns


def replayable(turn: Turn, max_tokens: int) -> dict:
    """``turn``'s body, greedy (temperature 0) and capped at ``max_tokens`` generated tokens
    (in the protocol's own field), a streamed chat completion asking for its usage
    (``stream_options.include_usage``), everything else as the agent sent it."""
    body = dict(turn.body)
    field = "max_output_tokens" if turn.protocol == "responses" else "max_tokens"
    body[field] = min(body.get(field) or max_tokens, max_tokens)
    body["temperature"] = 0
    if turn.protocol == "chat" and body.get("stream"):
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body


def send(base: str, turn: Turn, body: dict) -> TurnResult:
    """POST ``body`` as ``turn`` (its path, query and headers) to the server at ``base``; a
    streamed answer is read event by event."""
    url = f"{base}{turn.path}" + (f"?{turn.query}" if turn.query else "")
    headers = {
        "content-type": "application/json",
        **turn.headers,
        "x-api-key": "none",
        "authorization": "Bearer none",
    }
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    start = time.monotonic()
    result = TurnResult(turn.session, turn.index, turn.protocol, 0, 0.0)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            result.status = answer.status
            if body.get("stream"):
                _read_stream(answer, turn.protocol, start, result)
            else:
                take_counts(turn.protocol, json.loads(answer.read()), result)
    except urllib.error.HTTPError as refused:
        result.status, result.error = refused.code, refused.read().decode(errors="replace")[:300]
    except OSError as failed:  # the server went away or did not answer in TIMEOUT_S: status 0
        result.error = f"{type(failed).__name__}: {failed}"[:300]
    result.duration_s = time.monotonic() - start
    if result.decode_tps is None:
        result.decode_tps = wire_decode_tps(result)
    return result


def wire_decode_tps(result: TurnResult) -> float | None:
    """Tokens after the first over the seconds after the first generated event, for a server
    whose answers carry no ``timings``; None where that cannot be a decode (a stream that
    held its text back until the end arrives faster than 1,000 t/s)."""
    if result.ttft_s is None or not result.output_tokens or result.output_tokens < 2:
        return None
    decode_s = result.duration_s - result.ttft_s
    tps = (result.output_tokens - 1) / decode_s if decode_s > 0 else None
    return tps if tps is not None and tps < 1000 else None


def _take_timings(obj: dict, result: TurnResult) -> None:
    """The decode t/s from llama.cpp's ``timings`` where an answer or event has them (the
    server's own clock: a stream may hold text back, so the wire cannot always tell), at the
    top or in a Responses event's ``response``; localspec's ``against_plain`` beside."""
    timings = obj.get("timings") or (obj.get("response") or {}).get("timings") or {}
    tps = timings.get("predicted_per_second")
    if tps:
        result.decode_tps = tps
    if timings.get("against_plain"):
        result.against_plain = timings["against_plain"]


def _read_stream(answer, protocol: str, start: float, result: TurnResult) -> None:
    for raw in answer:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        event = json.loads(line[5:])
        if result.ttft_s is None and generated(protocol, event):
            result.ttft_s = time.monotonic() - start
        take_counts(protocol, event, result)


def generated(protocol: str, event: dict) -> bool:
    """Whether a streamed ``event`` of ``protocol`` carries generated text, thinking or a
    tool call (not the stream's opening, a keep-alive or its usage)."""
    if protocol == "chat":
        delta = (event.get("choices") or [{}])[0].get("delta") or {}
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
        )
    if protocol == "messages":
        return event.get("type") == "content_block_delta"
    return str(event.get("type", "")).endswith(".delta")


def take_counts(protocol: str, obj: dict, result: TurnResult) -> None:
    """Fill ``result``'s token counts (:func:`usage_counts`) and decode t/s (llama.cpp's
    ``timings``) from an answer or a streamed event; what it does not say is kept."""
    _take_timings(obj, result)
    prompt, cached, output = usage_counts(protocol, obj)
    result.prompt_tokens = prompt if prompt is not None else result.prompt_tokens
    result.cached_tokens = cached if cached is not None else result.cached_tokens
    result.output_tokens = output if output is not None else result.output_tokens


def usage_counts(protocol: str, obj: dict) -> tuple[int | None, int | None, int | None]:
    """(prompt tokens, of them cached, generated tokens) from an answer or a streamed event
    of ``protocol``; None for what it does not say.  Where the usage has no cached count,
    llama.cpp's ``timings.cache_n`` stands in, and where it has no prompt count, ``prompt_n``
    (the tokens read) + ``cache_n``."""
    if protocol == "messages":
        usage = (obj.get("message") or {}).get("usage") or obj.get("usage") or {}
        if "input_tokens" not in usage:
            return None, None, usage.get("output_tokens")
        cached = usage.get("cache_read_input_tokens") or 0
        prompt = usage["input_tokens"] + cached + (usage.get("cache_creation_input_tokens") or 0)
        return prompt, cached, usage.get("output_tokens")
    if protocol == "responses":
        usage = (obj.get("response") or {}).get("usage") or obj.get("usage") or {}
        keys = ("input_tokens", "input_tokens_details", "output_tokens")
    else:
        usage, keys = (
            obj.get("usage") or {},
            ("prompt_tokens", "prompt_tokens_details", "completion_tokens"),
        )
    cached = (usage.get(keys[1]) or {}).get("cached_tokens")
    timings = obj.get("timings") or {}
    if cached is None and "cache_n" in timings:
        cached = timings["cache_n"]
    prompt = usage.get(keys[0])
    if prompt is None and "prompt_n" in timings:
        prompt = timings["prompt_n"] + (timings.get("cache_n") or 0)
    return prompt, cached, usage.get(keys[2])
