"""The Responses API's answer, whole or streamed (:class:`ResponseShape`), for
:mod:`.openai_responses`: output items (a reasoning model's ``reasoning`` item, a
``message`` item, call items), ``usage`` and llama.cpp's ``timings``."""

from __future__ import annotations

import time
import uuid

from localspec.decoding.stats import GenerationResult
from localspec.decoding.tool_parser import CallDelta
from localspec.server import sse
from localspec.server.openai_shapes import timings
from localspec.server.openai_tools import StreamedTextAndCalls
from localspec.server.reasoning_fields import ReasoningKeys, reasoning_item, reasoning_tokens
from localspec.server.responses_tools import Toolset, output_item


def _usage(result: GenerationResult) -> dict:
    """``input_tokens`` is the whole prompt, ``cached_tokens`` the KV prefix reused from the last
    request."""
    s, output = result.stats, len(result.tokens)
    details = {"cached_tokens": s.prompt_cached_tokens, "cache_write_tokens": 0}
    usage = {
        "input_tokens": s.prompt_tokens,
        "input_tokens_details": details,
        "output_tokens": output,
    }
    thinking = {"reasoning_tokens": reasoning_tokens(result)}
    return {**usage, "output_tokens_details": thinking, "total_tokens": s.prompt_tokens + output}


def _status(result: GenerationResult) -> str:
    return (
        "incomplete" if result.finish_reason in ("length", "context", "cancelled") else "completed"
    )


def _part(text: str = "") -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(text: str, status: str) -> dict:
    item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant"}
    return {**item, "status": status, "content": [_part(text)]}


class ResponseShape(StreamedTextAndCalls):
    """One answer as a Responses object or stream, for :meth:`ServerState.run`.  ``echo``: the
    request's settings (``openai_responses._echo``); ``done(response)`` is called with the finished
    response (to store it).  A stream: ``response.created``, ``response.in_progress``; per
    output item ``response.output_item.added`` … ``.done`` around, for a message,
    ``response.content_part.added``, ``response.output_text.delta``…, ``.output_text.done``,
    ``response.content_part.done``, for a call ``response.function_call_arguments.delta``… /
    ``.done``, for a reasoning item (first) ``response.reasoning_text.delta``… / ``.done``
    when its text is asked for; then ``response.completed`` / ``response.incomplete`` with
    the whole response (``response.failed`` on an internal error).  ``keys`` / ``include``:
    the server's keys and the request's ``include``, for the reasoning item's
    ``encrypted_content`` (``reasoning.encrypted_content``) and text (``reasoning.content``);
    ``reasoning``: the finished answer's thinking (for :func:`assistant_message`)."""

    def __init__(self, echo: dict, done, tools: Toolset | None = None, keys=None, include=()):
        self.id, self.created = f"resp_{uuid.uuid4().hex[:24]}", int(time.time())
        self.echo, self.done, self.tools = echo, done, tools or Toolset()
        self.keys, self.include, self.reasoning = keys or ReasoningKeys(), tuple(include), None
        self.thinking = ""  # the open reasoning item's text so far
        self.call_name, self.arguments = (
            "",
            "",
        )  # the open call's model-facing name and arguments so far
        self.seq, self.items, self.open, self.sent, self.calls = 0, [], None, "", 0

    def _response(self, status: str, output: list, result: GenerationResult | None = None) -> dict:
        response = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
        }
        response.update(error=None, incomplete_details=None, output=output, usage=None, **self.echo)
        if result is not None:
            response.update(usage=_usage(result), timings=timings(result))
            if status == "incomplete":
                response["incomplete_details"] = {"reason": "max_output_tokens"}
            else:
                response["completed_at"] = int(time.time())
        return response

    def _finish(self, output: list, result: GenerationResult) -> dict:
        response = self._response(_status(result), output, result)
        self.reasoning = result.reasoning
        self.done(response)
        return response

    def _reasoning_item(self, text: str, status: str) -> dict:
        return reasoning_item(text, self.keys, self.include, status)

    def whole(self, events: list, result: GenerationResult) -> dict:
        status = _status(result)
        text = result.content
        output = [_message_item(text, status)] if text or not result.tool_calls else []
        if result.reasoning:
            output.insert(0, self._reasoning_item(result.reasoning, status))
        for call in result.tool_calls or []:
            output.append(output_item(self.tools, call.id, call.name, call.arguments, "completed"))
        return self._finish(output, result)

    # --- streaming ---

    def _event(self, kind: str, **payload) -> str:
        self.seq += 1
        return sse.event(kind, {"type": kind, "sequence_number": self.seq - 1, **payload})

    def _at(self) -> dict:
        return {"item_id": self.open["id"], "output_index": len(self.items) - 1}

    def stream_start(self) -> list[str]:
        skeleton = self._response("in_progress", [])
        return [
            self._event(kind, response=skeleton)
            for kind in ("response.created", "response.in_progress")
        ]

    def stream_end(self, result: GenerationResult, include_usage: bool) -> list[str]:
        out = [] if self.items else self._open_message()
        status = _status(result)
        out += self._close(status)
        return out + [self._event(f"response.{status}", response=self._finish(self.items, result))]

    def keep_alive(self, progress: dict | None) -> list[str]:
        """``response.in_progress`` again while the prompt is read (with llama-server's
        ``prompt_progress``)."""
        extra = {"prompt_progress": progress} if progress else {}
        return [
            self._event("response.in_progress", response=self._response("in_progress", []), **extra)
        ]

    def stream_error(self, message: str = "internal server error") -> list[str]:
        response = self._response("failed", self.items)
        response["error"] = {"code": "server_error", "message": message}
        return [self._event("response.failed", response=response)]

    def _add(self, item: dict) -> list[str]:
        out = self._close()
        self.items.append(item)
        self.open = item
        return out + [
            self._event("response.output_item.added", output_index=len(self.items) - 1, item=item)
        ]

    def _open_message(self) -> list[str]:
        out = self._add(_message_item("", "in_progress"))
        return out + [
            self._event("response.content_part.added", **self._at(), content_index=0, part=_part())
        ]

    def _thinking(self, text: str) -> list[str]:
        opened = self.open is not None and self.open["type"] == "reasoning"
        if not opened:
            item = self._reasoning_item("", "in_progress")
            item.pop(
                "encrypted_content", None
            )  # sealed once the thinking is whole (output_item.done)
            out = self._add(item)
        else:
            out = []
        self.thinking = (self.thinking if opened else "") + text
        if "content" not in self.open:
            return out
        return out + [
            self._event("response.reasoning_text.delta", **self._at(), content_index=0, delta=text)
        ]

    def _text(self, text: str) -> list[str]:
        if not text:
            return []
        out = (
            [] if self.open is not None and self.open["type"] == "message" else self._open_message()
        )
        self.sent += text
        self.open["content"][0]["text"] += text
        delta = {"content_index": 0, "delta": text, "logprobs": []}
        return out + [self._event("response.output_text.delta", **self._at(), **delta)]

    def _call(self, delta: CallDelta) -> list[str]:
        """A call's piece: its first opens a function_call item, its arguments text goes out
        as ``response.function_call_arguments.delta``."""
        out = []
        if delta.id is not None:
            self.calls += 1
            self.call_name, self.arguments = delta.name, ""
            out += self._add(output_item(self.tools, delta.id, self.call_name, "", "in_progress"))
        piece = delta.arguments
        if piece:
            self.arguments += piece
            if (
                self.open["type"] == "function_call"
            ):  # a custom or shell call's item is whole at its end
                self.open["arguments"] += piece
                out.append(
                    self._event("response.function_call_arguments.delta", **self._at(), delta=piece)
                )
        return out

    def _close_reasoning(self, item: dict, at: dict, status: str) -> list[str]:
        """The reasoning item made whole: its ``encrypted_content`` and text (as asked) of all its
        thinking."""
        item.update(self._reasoning_item(self.thinking, status), id=item["id"])
        if "content" not in item:
            return []
        return [
            self._event("response.reasoning_text.done", **at, content_index=0, text=self.thinking)
        ]

    def _close(self, status: str = "completed") -> list[str]:
        item = self.open
        if item is None:
            return []
        at, self.open = self._at(), None
        item["status"] = status
        if item["type"] == "reasoning":
            out = self._close_reasoning(item, at, status)
        elif item["type"] == "message":
            part, at = item["content"][0], {**at, "content_index": 0}
            out = [self._event("response.output_text.done", **at, text=part["text"], logprobs=[])]
            out.append(self._event("response.content_part.done", **at, part=part))
        elif item["type"] == "function_call":
            args = {"name": item["name"], "arguments": item["arguments"]}
            out = [self._event("response.function_call_arguments.done", **at, **args)]
        else:  # the custom / local shell call, now that its arguments are whole
            whole = output_item(self.tools, item["call_id"], self.call_name, self.arguments, status)
            item.update({k: v for k, v in whole.items() if k != "id"})
            out = (
                [self._event("response.custom_tool_call_input.done", **at, input=item["input"])]
                if "input" in item
                else []
            )
        return out + [
            self._event("response.output_item.done", output_index=at["output_index"], item=item)
        ]
