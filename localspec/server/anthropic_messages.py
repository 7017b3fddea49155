"""Anthropic's Messages API, ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``,
for the anthropic SDK and Claude Code.  Here: the request bodies, their translation into a
:class:`~localspec.server.request.GenerationRequest` (content blocks, tools, thinking), the
error shape and the routes; the answer, whole or streamed, is :mod:`.messages_shape`'s.

Request (also with a query string: Claude Code calls ``/v1/messages?beta=true``): ``model``
(any name), ``system`` (a string or text blocks), ``messages`` (content a string or ``text``
/ ``tool_use`` / ``tool_result`` blocks, a tool_result's content a string or text blocks;
an assistant's ``thinking`` blocks must carry this server's ``signature`` (a 400 otherwise)
and go to the template as the turn's ``reasoning_content``, which most templates drop;
``redacted_thinking`` blocks are dropped; ``role: "system"`` messages anywhere, as Claude
Code sends them mid-conversation, are system turns where the chat template writes them, else folded
into the nearest user turn; a final assistant message is a prefill the answer continues),
``max_tokens`` (required; lowered to the server's limit, as Claude Code asks for 32000),
``stop_sequences``, ``temperature``, ``top_p``, ``top_k``, ``tools`` (``[{name,
description, input_schema}]``, any name without control characters), ``tool_choice``
(``{"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}``),
``stream``.  ``thinking`` (``{"type": "enabled", "budget_tokens": N >= 1024}``: a thinking
budget of N; ``adaptive``: ``output_config.effort``'s budget, else the server's;
``disabled``: no thinking; :mod:`.reasoning_fields`); other fields
(``metadata``, ``context_management``, ``cache_control`` on any block, ``defer_loading`` on
tools, ``anthropic-beta`` headers, ...) are ignored; images, documents and server tools get
a 400.

Response: ``{"id": "msg_…", "type": "message", "role": "assistant", "model", "content": [a
reasoning model's ``{"type": "thinking", "thinking", "signature"}`` block, a text block,
tool_use blocks {"id": "toolu_…", "name", "input"}], "stop_reason" (end_turn,
max_tokens, stop_sequence, tool_use, model_context_window_exceeded), "stop_sequence",
"usage": {"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
"output_tokens"}}`` plus llama.cpp's ``timings``.  As Anthropic counts them, ``input_tokens``
are the prompt tokens read, ``cache_read_input_tokens`` those reused from the prompt cache
(their sum is the prompt), ``cache_creation_input_tokens`` 0.  A stream sends ``ping`` events
every :data:`~localspec.server.answering.KEEPALIVE_S` while the prompt is read.  A stream:
``message_start``, ``ping``, per block
``content_block_start`` / ``content_block_delta`` (``thinking_delta`` then one
``signature_delta``, ``text_delta``, ``input_json_delta``) / ``content_block_stop``, then
``message_delta`` (stop_reason, usage, timings), ``message_stop``.
``count_tokens`` answers ``{"input_tokens": N}`` (the template rendered on the model's thread).

Errors: ``{"type": "error", "error": {"type", "message"}}``: 400 invalid_request_error, 401
authentication_error, 404 not_found_error, 408 timeout_error, 413 request_too_large, 429
rate_limit_error, 503 overloaded_error, 500 api_error.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from localspec.errors import LocalspecError
from localspec.server.content import missing, need, text_of
from localspec.server.errors import APIError, FieldPath, RequestError, dotted, from_localspec_error
from localspec.server.messages_shape import MessagesShape
from localspec.server.reasoning_fields import (
    ReasoningKeys,
    anthropic_reasoning,
    checked_thinking,
)
from localspec.server.request import (
    ANTHROPIC_TOOLS,
    FieldPaths,
    GenerationRequest,
    Limits,
    generation_request,
    prompt_tokens,
    sampling_of,
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_response(exc: APIError) -> JSONResponse:
    """An APIError in Anthropic's shape, keeping its status and retry headers; a prompt over
    the context starts "prompt is too long" as Anthropic's does (Claude Code compacts on it).
    Anthropic's error has no ``param``: the field a refusal names leads its message."""
    kind = _ERROR_TYPES.get(
        exc.status, "api_error" if exc.status >= 500 else "invalid_request_error"
    )
    headers = {"x-should-retry": "true" if exc.retry else "false", **exc.headers}
    message = exc.message
    if exc.code == "context_length_exceeded":
        message = f"prompt is too long: {message}"
    elif exc.param and exc.param not in message:
        message = f"{exc.param}: {message}"
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=exc.status, headers=headers)


# --- request -----------------------------------------------------------------------------


class Block(BaseModel):
    """A content block; which fields a ``type`` needs is checked when translating."""

    model_config = ConfigDict(extra="allow", strict=True)  # cache_control, citations, source, ...
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict | None = None
    tool_use_id: str | None = None
    content: str | list[Block] | None = None
    is_error: bool | None = None
    thinking: str | None = None
    signature: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: str | None = None
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict | None = None  # defer_loading, cache_control, ...: ignored


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class CountTokensRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # metadata, thinking, service_tier, ...
    model: str = Field(min_length=1)  # required, as in Anthropic's API; any name answers
    messages: list[Message] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: dict | None = (
        None  # {"type": "enabled" | "adaptive" | "disabled", "budget_tokens", "display"}
    )
    output_config: dict | None = None  # {"effort": "low" | "medium" | "high" | "max", ...}


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    stream: bool = False


def _refuse(path: FieldPath, block: Block) -> RequestError:
    if block.type in ("image", "document"):
        why = f"{block.type} blocks are not supported: the model reads text only"
    else:
        why = f"a {block.type!r} block is not supported here"
    return RequestError(f"{dotted(path)}: {why}", path)


def _not_text(block: Block, path: FieldPath) -> RequestError | None:
    return (
        _refuse(path, block) if block.type != "text" else missing(block, path, "text", noun="block")
    )


def _text(content: str | list[Block] | None, path: FieldPath) -> str:
    """Text content: a string or text blocks (joined by newlines); RequestError otherwise."""
    return text_of(content, path, _not_text, "\n")


def _turn(message: Message, path: FieldPath, keys: ReasoningKeys | None = None) -> list[dict]:
    """One turn as OpenAI messages: an assistant's text with its tool_use blocks as
    ``tool_calls`` and its thinking blocks (checked with ``keys``; dropped without) as
    ``reasoning_content``; a user's tool_result blocks as ``tool`` messages, then its text."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "system":
        return [{"role": "system", "content": _text(message.content, path)}]
    texts, calls, replies, thinking = [], [], [], []
    for j, block in enumerate(message.content):
        at, kind = path + (j,), (message.role, block.type)
        if block.type == "text":
            need(block, at, "text", noun="block")
            texts.append(block.text)
        elif kind == ("assistant", "tool_use"):
            need(block, at, "id", "name", "input", noun="block")
            function = {"name": block.name, "arguments": json.dumps(block.input)}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif kind == ("user", "tool_result"):
            need(block, at, "tool_use_id", noun="block")
            text = _text(block.content, at + ("content",))
            content = f"Error: {text}" if block.is_error else text
            replies.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        elif kind == ("assistant", "thinking") and keys is not None:
            thinking.append(checked_thinking(block.thinking, block.signature, at, keys))
        elif block.type not in ("thinking", "redacted_thinking"):
            raise _refuse(at, block)
    if message.role == "assistant":
        extra = {"reasoning_content": "".join(thinking)} if thinking else {}
        return [
            {
                "role": "assistant",
                "content": "".join(texts),
                **extra,
                **({"tool_calls": calls} if calls else {}),
            }
        ]
    return replies + (
        [{"role": "user", "content": "\n".join(texts)}] if texts or not replies else []
    )


BILLING_HEADER = "x-anthropic-billing-header:"


def _system_text(system: str | list[Block] | None) -> str:
    """The ``system`` text, without Claude Code's ``x-anthropic-billing-header: …`` block: a
    per-client line at token 0 would make every cached prefix miss (llama.cpp #19494), and
    it tells the model nothing."""
    if isinstance(system, list):
        system = [
            b
            for b in system
            if not (b.type == "text" and (b.text or "").startswith(BILLING_HEADER))
        ]
    return _text(system, ("system",))


def conversation(
    body: CountTokensRequest, keys: ReasoningKeys | None = None
) -> tuple[list[dict], str | None]:
    """(OpenAI-style messages for :meth:`SpeculativeModel.chat`, the prefill: the text of a
    final assistant message, which the answer continues, or None); RequestError (400).
    ``keys``: the server's, checking thinking blocks sent back (None: they are dropped)."""
    system = _system_text(body.system)
    out = [{"role": "system", "content": system}] if system else []
    for i, m in enumerate(body.messages):
        out += _turn(m, ("messages", i, "content"), keys)
    if body.messages[-1].role != "assistant":
        return out, None
    last = out.pop()
    if last.get("tool_calls"):
        raise RequestError("the final assistant message cannot hold tool_use blocks", ("messages",))
    return out, last["content"] or None


def _function(tool: Tool) -> dict:
    function = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _choice(choice: ToolChoice | None) -> str | dict | None:
    """Anthropic's ``tool_choice`` as OpenAI's; RequestError for a "tool" choice without a
    name."""
    if choice is None:
        return None
    if choice.type == "tool" and not choice.name:
        raise RequestError("tool_choice.name: Field required", ("tool_choice", "name"))
    named = {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(choice.type, named)


def _tools(body: CountTokensRequest) -> tuple[dict, ...] | None:
    """The custom tools as OpenAI's; RequestError for server tools or one without input_schema."""
    if body.tools is None:
        return None
    for i, t in enumerate(body.tools):
        if t.type not in (None, "custom"):
            raise RequestError(
                f"tools.{i}: server tool {t.type!r} is not supported (only custom tools)",
                ("tools", i),
            )
        if t.input_schema is None:
            message = f"tools.{i}.input_schema: Field required (a JSON Schema of the tool's input)"
            raise RequestError(message, ("tools", i, "input_schema"))
    return tuple(_function(t) for t in body.tools)


def messages_request(
    body: CountTokensRequest, limits: Limits, keys: ReasoningKeys | None = None
) -> GenerationRequest:
    """A Messages (or count_tokens) body as the generation it asks for, under the server's
    ``limits``; ``max_tokens`` is lowered to the server's limit (Claude Code asks for 32000);
    RequestError (400).  A count_tokens body's prefill is counted beside its tools."""
    messages, prefill = conversation(body, keys)
    choice = body.tool_choice
    asked = {
        "messages": messages,
        "tools": _tools(body),
        "tool_choice": _choice(choice),
        "parallel_tool_calls": False
        if choice is not None and choice.disable_parallel_tool_use
        else None,
        "paths": FieldPaths(stop=("stop_sequences",), tool_fields=ANTHROPIC_TOOLS),
    }
    if not isinstance(body, MessagesRequest):
        request = generation_request("anthropic.messages", limits, **asked)
        return replace(request, prefill=prefill)
    thinking, effort = _reasoning(body)
    return generation_request(
        "anthropic.messages",
        limits,
        prefill=prefill,
        stop=body.stop_sequences,
        max_tokens=body.max_tokens,
        clip_max_tokens=True,
        stream=body.stream,
        thinking=thinking,
        effort=effort,
        **asked,
        **sampling_of(body),
        **anthropic_reasoning(body.thinking, effort),
    )


def _reasoning(body: CountTokensRequest) -> tuple[str | None, str | None]:
    """(``thinking.type``, ``output_config.effort``), each None when not a string."""
    kind = (body.thinking or {}).get("type")
    effort = (body.output_config or {}).get("effort")
    return (kind if isinstance(kind, str) else None), (effort if isinstance(effort, str) else None)


# --- endpoints ---------------------------------------------------------------------------


def routes(state) -> list[Route]:
    """``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` on a :class:`ServerState`."""

    async def answer(http: Request) -> Response:
        body = await state.read_body(http, MessagesRequest)
        request = messages_request(body, state.limits(), state.keys)
        stops, token_bytes = list(request.options.params.stop), state.model.target.token_bytes
        shape = MessagesShape(state.config.model_name, stops, token_bytes, state.keys)

        def started(generation) -> None:
            shape.input_tokens = len(generation.prompt_tokens)

        return await state.run(http, request, shape, on_start=started)

    async def count(http: Request) -> Response:
        body = await state.read_body(http, CountTokensRequest)
        request = messages_request(body, state.limits(), state.keys)
        tools = request.options.tools if request.options.calls_tools else None
        try:
            tokens = await asyncio.to_thread(
                prompt_tokens, state.model.target, request.messages, request.prefill, tools
            )
        except LocalspecError as exc:
            raise from_localspec_error(exc) from None
        return JSONResponse({"input_tokens": len(tokens)})

    return [
        state.route("/v1/messages", answer, render=error_response, protocol="anthropic.messages"),
        state.route(
            "/v1/messages/count_tokens",
            count,
            render=error_response,
            protocol="anthropic.count_tokens",
        ),
    ]
