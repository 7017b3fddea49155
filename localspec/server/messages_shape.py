"""Anthropic's Messages answer, whole or streamed (:class:`MessagesShape`), for
:mod:`.anthropic_messages`: the message with its thinking, text and tool_use blocks, the
stream's events, ``stop_reason``, ``usage`` and llama.cpp's ``timings``."""

from __future__ import annotations

import json
import uuid

from localspec.decoding.stats import GenerationResult
from localspec.decoding.tool_parser import CallDelta, ToolCall
from localspec.server import sse
from localspec.server.openai_shapes import timings
from localspec.server.openai_tools import StreamedTextAndCalls
from localspec.server.reasoning_fields import ReasoningKeys


def usage(result: GenerationResult) -> dict:
    """Anthropic's usage: the prompt tokens read, those reused from the prompt cache, the
    answer's."""
    s = result.stats
    return {
        "input_tokens": s.prompt_tokens - s.prompt_cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": s.prompt_cached_tokens,
        "output_tokens": len(result.tokens),
    }


def tool_use_id(call_id: str) -> str:
    """A call's id as Anthropic writes it (``toolu_…``), whole or streamed."""
    return "toolu_" + call_id.removeprefix("call_")


def _tool_use(call: ToolCall) -> dict:
    arguments = json.loads(call.arguments)
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": arguments}


def _after_answer(full: str, result: GenerationResult) -> str:
    """The tokens' text after the answer's (``full``: all of it; a reasoning model's begins
    with its thinking and the format's tags)."""
    if result.reasoning is None:
        return full[len(result.text) :]
    start = full.find(result.reasoning) + len(result.reasoning) if result.reasoning else 0
    at = full.find(result.text, start)
    return full[at + len(result.text) :] if at >= 0 else ""


class MessagesShape(StreamedTextAndCalls):
    """One answer in Anthropic's shapes, for :meth:`ServerState.run`.  ``stops``: the request's
    stop sequences; ``token_bytes``: the target's (to tell which stop sequence ended it);
    ``keys``: the server's, signing the thinking (a fresh pair when None)."""

    def __init__(self, model_name: str, stops: list[str], token_bytes, keys=None):
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model_name, self.stops, self.token_bytes = model_name, stops, token_bytes
        self.keys, self.thinking = keys or ReasoningKeys(), ""  # the thinking streamed so far
        self.input_tokens = 0  # set by the job once the prompt is rendered
        self.index, self.open, self.sent, self.calls = -1, None, "", 0

    def _message(self, content: list, stop: tuple, usage: dict) -> dict:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model_name,
            "content": content,
            "stop_reason": stop[0],
            "stop_sequence": stop[1],
            "usage": usage,
        }

    def stop_reason(self, result: GenerationResult) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence)."""
        if result.finish_reason in ("tool_calls", "length", "context"):
            reason = {
                "tool_calls": "tool_use",
                "length": "max_tokens",
                "context": "model_context_window_exceeded",
            }
            return reason[result.finish_reason], None
        if self.stops:  # a stop sequence ended it when the tokens' text goes on past the answer's
            full = b"".join(self.token_bytes(t) for t in result.tokens).decode("utf-8", "replace")
            after = _after_answer(full, result)
            found = sorted((s for s in self.stops if after.startswith(s)), key=len)
            if found:
                return "stop_sequence", found[0]
        return "end_turn", None

    def whole(self, events: list, result: GenerationResult) -> dict:
        text = result.content
        content = ([{"type": "text", "text": text}] if text else []) + [
            _tool_use(c) for c in result.tool_calls or []
        ]
        if result.reasoning:
            signature = self.keys.sign(result.reasoning)
            content.insert(
                0, {"type": "thinking", "thinking": result.reasoning, "signature": signature}
            )
        return {
            **self._message(content, self.stop_reason(result), usage(result)),
            "timings": timings(result),
        }

    # --- streaming ---

    def stream_start(self) -> list[str]:
        counts = {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        start = self._message([], (None, None), {**counts, "output_tokens": 0})
        return [
            sse.event("message_start", {"type": "message_start", "message": start}),
            sse.event("ping", {"type": "ping"}),
        ]

    def stream_end(self, result: GenerationResult, include_usage: bool) -> list[str]:
        out = self._close()
        reason, sequence = self.stop_reason(result)
        stop = {"stop_reason": reason, "stop_sequence": sequence}
        delta = {"type": "message_delta", "delta": stop, "usage": usage(result)}
        delta["timings"] = timings(result)
        return out + [
            sse.event("message_delta", delta),
            sse.event("message_stop", {"type": "message_stop"}),
        ]

    def keep_alive(self, progress: dict | None) -> list[str]:
        """A ``ping`` while the prompt is read (with llama-server's ``prompt_progress``)."""
        return [
            sse.event(
                "ping", {"type": "ping", **({"prompt_progress": progress} if progress else {})}
            )
        ]

    def idle_keep_alive(self) -> list[str]:
        """A ``ping`` while the answer's text is held back (it may be a tool call)."""
        return self.keep_alive(None)

    def stream_error(self, message: str = "internal server error") -> list[str]:
        error = {"type": "error", "error": {"type": "api_error", "message": message}}
        return [sse.event("error", error)]

    def _thinking(self, text: str) -> list[str]:
        opened = self.open == "thinking"
        out = (
            []
            if opened
            else self._start_block({"type": "thinking", "thinking": "", "signature": ""})
        )
        self.thinking += text
        return out + [self._delta({"type": "thinking_delta", "thinking": text})]

    def _text(self, text: str) -> list[str]:
        if not text:
            return []
        out = [] if self.open == "text" else self._start_block({"type": "text", "text": ""})
        self.sent += text
        return out + [self._delta({"type": "text_delta", "text": text})]

    def _call(self, delta: CallDelta) -> list[str]:
        """A call's piece: its first opens a tool_use block, its arguments text goes out as
        ``input_json_delta``."""
        out = []
        if delta.id is not None:
            self.calls += 1
            block = {"type": "tool_use", "id": tool_use_id(delta.id), "name": delta.name}
            block["input"] = {}
            out += self._start_block(block)
        if delta.arguments:
            out.append(self._delta({"type": "input_json_delta", "partial_json": delta.arguments}))
        return out

    def _start_block(self, block: dict) -> list[str]:
        out = self._close()
        self.index, self.open = self.index + 1, block["type"]
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return out + [sse.event("content_block_start", start)]

    def _delta(self, delta: dict) -> str:
        return sse.event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self.index, "delta": delta},
        )

    def _close(self) -> list[str]:
        """The open block's end; a thinking block's signature (of all its text) first."""
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            out.append(
                self._delta({"type": "signature_delta", "signature": self.keys.sign(self.thinking)})
            )
        self.open = None
        return out + [
            sse.event("content_block_stop", {"type": "content_block_stop", "index": self.index})
        ]
