"""OpenAI response shapes: chat completion objects and chunks, legacy completions, ``usage``
with the speculative counts, and llama.cpp server's ``timings``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from localspec.decoding.stats import GenerationResult, TokenEvent
from localspec.server import sse
from localspec.server.openai_tools import answer_pieces, openai_call, openai_delta
from localspec.server.reasoning_fields import (
    REASONING,
    channel_runs,
    channel_timings,
    reasoning_tokens,
)
from localspec.server.shape import Shape

TokenBytes = Callable[[int], bytes]


def usage(result: GenerationResult) -> dict:
    s = result.stats
    drafted = s.drafted_by_drafter.get("prediction", 0)
    accepted = s.accepted_by_drafter.get("prediction", 0)
    completion = len(result.tokens)
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": s.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": s.prompt_cached_tokens},
        "completion_tokens_details": {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": drafted - accepted,
            "reasoning_tokens": reasoning_tokens(result),
        },
    }


def timings(result: GenerationResult) -> dict:
    """llama.cpp server's ``timings`` (milliseconds); ``draft_n`` / ``draft_n_accepted``
    count draft tokens of every drafter; ``channels``: a reasoning model's speculation per
    channel (``reasoning`` / ``content``: tokens, rounds, drafted / accepted / forced tokens,
    time_s, acceptance_rate, mean_accepted_length, tokens_per_s; {} without one);
    ``against_plain``: where the time went against plain decoding, in milliseconds
    (:class:`~localspec.decoding.attribution.TimeAccount`)."""
    s = result.stats
    predicted_ms = max(0.0, s.total_s - s.ttft_s) * 1000
    prompt_ms = s.prompt_eval_s * 1000
    predicted_n = max(0, s.generated_tokens - 1)  # the first token came with the prompt eval
    return {
        "prompt_n": s.prompt_eval_tokens,
        "prompt_ms": prompt_ms,
        "prompt_per_second": s.prompt_eval_tokens / prompt_ms * 1000 if prompt_ms else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_second": predicted_n / predicted_ms * 1000 if predicted_ms else 0.0,
        "draft_n": s.drafted_tokens,
        "draft_n_accepted": s.accepted_tokens,
        "cache_n": s.prompt_cached_tokens,
        # ours, beside llama.cpp's: draft tokens per drafter ("grammar": the tokens a schema forced)
        "draft_n_by_drafter": dict(s.drafted_by_drafter),
        "draft_n_accepted_by_drafter": dict(s.accepted_by_drafter),
        "channels": channel_timings(result),
        "against_plain": s.against_plain.in_ms(),
    }


def _finish_reason(result: GenerationResult) -> str:
    if result.finish_reason == "tool_calls":
        return "tool_calls"
    return "length" if result.finish_reason in ("length", "context") else "stop"


def logprob_entries(events: list[TokenEvent], token_bytes: TokenBytes) -> list[dict]:
    """OpenAI's ``logprobs.content`` entries of the events that carry a logprob: each
    token's text, logprob and bytes, and its ``top_logprobs`` alike."""

    def entry(token: int, logprob: float) -> dict:
        piece = token_bytes(token)
        return {"token": piece.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(piece)}

    return [
        {
            **entry(e.token, e.logprob),
            "top_logprobs": [entry(t, lp) for t, lp in (e.top_logprobs or ())],
        }
        for e in events
        if e.logprob is not None
    ]


class _OpenAIStream(Shape):
    """OpenAI's stream: ``data:`` chunks, the usage chunk when asked for, ``data: [DONE]``.
    ``logprobs``: the request asked for them; ``token_bytes``: a token's bytes (the
    target's), to write them."""

    logprobs: bool
    token_bytes: TokenBytes | None

    def _entries(self, events: list[TokenEvent]) -> list[dict]:
        if not self.logprobs or self.token_bytes is None:
            return []
        return logprob_entries(events, self.token_bytes)

    def stream_start(self) -> list[str]:
        return [sse.data(self.first_chunk())]

    def stream_events(self, events: list) -> list[str]:
        chunk = self.delta_chunk(events)
        return [sse.data(chunk)] if chunk is not None else []

    def stream_end(self, result: GenerationResult, include_usage: bool) -> list[str]:
        out = [sse.data(self.final_chunk(result))]
        if include_usage:
            out.append(sse.data(self.usage_chunk(result)))
        return out + ["data: [DONE]\n\n"]

    def stream_error(self, message: str = "internal server error") -> list[str]:
        error = {"message": message, "type": "server_error", "param": None, "code": None}
        return [sse.data({"error": error})]


class ChatShape(_OpenAIStream):
    def __init__(self, model_name: str, logprobs: bool, token_bytes: TokenBytes | None = None):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_name, self.logprobs, self.token_bytes = model_name, logprobs, token_bytes

    def _chunk(self, choices: list) -> dict:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model_name,
            "system_fingerprint": None,
            "choices": choices,
        }

    def first_chunk(self) -> dict:
        return self._chunk(
            [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )

    def stream_events(self, events: list) -> list[str]:
        """A reasoning model's thinking as ``delta.reasoning_content`` chunks, its answer as
        ``delta.content`` (and tool calls), in the order they came."""
        out = []
        for kind, run in channel_runs(events):
            chunk = self._reasoning_chunk(run) if kind == REASONING else self.delta_chunk(run)
            out += [sse.data(chunk)] if chunk is not None else []
        return out

    def _reasoning_chunk(self, text: str) -> dict:
        delta = {"reasoning_content": text}
        return self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def delta_chunk(self, events: list) -> dict | None:
        """The answer's content and tool-call pieces (read by the generation) as one chunk."""
        content, calls = answer_pieces(events)
        entries = self._entries(events)
        if not content and not calls and not entries:
            return None
        logprobs = {"content": entries} if self.logprobs else None
        delta: dict = {"content": content} if content or not calls else {}
        if calls:
            delta["tool_calls"] = [openai_delta(d) for d in calls]
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}
        return self._chunk([choice])

    def final_chunk(self, result: GenerationResult) -> dict:
        chunk = self._chunk(
            [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": _finish_reason(result)}]
        )
        chunk["timings"] = timings(result)
        return chunk

    def usage_chunk(self, result: GenerationResult) -> dict:
        chunk = self._chunk([])
        chunk["usage"] = usage(result)
        return chunk

    def whole(self, events: list[TokenEvent], result: GenerationResult) -> dict:
        entries = self._entries(events)
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model_name,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": _message(result),
                    "logprobs": {"content": entries} if self.logprobs else None,
                    "finish_reason": _finish_reason(result),
                }
            ],
            "usage": usage(result),
            "timings": timings(result),
        }


def _message(result: GenerationResult) -> dict:
    """The answer's message; a reasoning model's thinking in ``reasoning_content`` (llama-server's
    field)."""
    thinking = {"reasoning_content": result.reasoning} if result.reasoning else {}
    if not result.tool_calls:  # a call cut by max_tokens is not content (nor streamed as such)
        return {"role": "assistant", "content": result.content, "refusal": None, **thinking}
    calls = {"tool_calls": [openai_call(c) for c in result.tool_calls]}
    return {
        "role": "assistant",
        "content": result.content or None,
        "refusal": None,
        **thinking,
        **calls,
    }


class CompletionShape(_OpenAIStream):
    def __init__(self, model_name: str, logprobs: bool, token_bytes: TokenBytes | None = None):
        self.id = f"cmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_name, self.logprobs, self.token_bytes = model_name, logprobs, token_bytes
        self.sent = 0  # characters of logprob tokens streamed so far

    def _obj(self, text: str, finish: str | None, logprobs: dict | None) -> dict:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model_name,
            "system_fingerprint": None,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}],
        }

    def _legacy_logprobs(self, entries: list, offset: int = 0) -> dict | None:
        if not self.logprobs:
            return None
        offsets, at = [], offset
        for e in entries:
            offsets.append(at)
            at += len(e["token"])
        return {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [
                {t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries
            ],
            "text_offset": offsets,
        }

    def first_chunk(self) -> dict:
        return self._obj("", None, None)

    def delta_chunk(self, events: list) -> dict | None:
        text = "".join(e.text for e in events)
        entries = self._entries(events)
        if not text and not entries:
            return None
        logprobs = self._legacy_logprobs(
            entries, self.sent
        )  # offsets into the whole text, as unstreamed
        self.sent += sum(len(e["token"]) for e in entries)
        return self._obj(text, None, logprobs)

    def final_chunk(self, result: GenerationResult) -> dict:
        obj = self._obj("", _finish_reason(result), None)
        obj["timings"] = timings(result)
        return obj

    def usage_chunk(self, result: GenerationResult) -> dict:
        obj = self._obj("", None, None)
        obj["choices"] = []
        obj["usage"] = usage(result)
        return obj

    def whole(self, events: list[TokenEvent], result: GenerationResult) -> dict:
        obj = self._obj(
            result.text, _finish_reason(result), self._legacy_logprobs(self._entries(events))
        )
        obj["usage"] = usage(result)
        obj["timings"] = timings(result)
        return obj
