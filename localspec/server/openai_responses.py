"""OpenAI's Responses API, ``POST /v1/responses`` and ``GET`` / ``DELETE /v1/responses/{id}``,
for the openai SDK's ``client.responses`` and the OpenAI Agents SDK (docs/server.md).

Requests: ``input`` (a string, or message items with text content (``developer`` ones are
system turns), ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` items and
their ``*_output`` items, an output a string or text parts; a ``reasoning`` item's
``encrypted_content`` made by this server is decrypted and given to the template as the next
assistant turn's ``reasoning_content``, any other reasoning item and hosted tools' items are
dropped), ``instructions``, ``tools`` (function, namespace, custom,
local_shell; hosted ones dropped: :mod:`.responses_tools`), ``tool_choice``,
``parallel_tool_calls``, ``max_output_tokens``, ``temperature``, ``top_p``, ``text.format``,
``stream``, ``store`` (default true), ``previous_response_id`` and our ``speculative``;
``reasoning.effort`` (a thinking budget: :mod:`.reasoning_fields`), ``include``
(``reasoning.encrypted_content``; our ``reasoning.content``: the thinking's text) and
``prompt_cache_key``; other fields (``client_metadata``, ``text.verbosity``, ...) are
ignored.  Images, files, ``conversation``, ``prompt`` and ``background`` get a 400 naming
the param.

Responses: ``{"id": "resp_…", "object": "response", "status": "completed" | "incomplete",
"output": [a reasoning model's ``reasoning`` item, a ``message`` item, ``function_call``
items], "usage" (``output_tokens_details.reasoning_tokens``), ...}`` with the request's
settings echoed and llama.cpp's ``timings``; streams as the Responses API's named events,
each with ``type`` and ``sequence_number`` (:class:`~.responses_shape.ResponseShape`).  The last
:data:`STORE_SIZE` stored responses are kept in memory with the conversation they end, for
``previous_response_id`` (an unknown id is a 404).  Errors are OpenAI's shape.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from localspec.decoding.params import CallOptions
from localspec.server.content import need, text_of
from localspec.server.errors import FieldPath, RequestError, dotted
from localspec.server.reasoning_fields import ReasoningKeys, effort_reasoning
from localspec.server.request import (
    FLAT_TOOLS,
    FieldPaths,
    GenerationRequest,
    Limits,
    generation_request,
    sampling_of,
)
from localspec.server.responses_shape import ResponseShape
from localspec.server.responses_store import ResponseStore
from localspec.server.responses_tools import Toolset, call_arguments, toolset
from localspec.server.schemas import SpeculativeOptions, speculative_options

__all__ = [
    "ResponseShape",
    "ResponsesRequest",
    "assistant_message",
    "messages_from",
    "responses_request",
    "routes",
]

STORE_SIZE = 256
_REFUSED = (
    "conversation",
    "prompt",
    "background",
)  # server-side conversations, prompt templates, background runs


# --- request -----------------------------------------------------------------------------


class Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # annotations, logprobs, ...
    type: str
    text: str | None = None


class Item(BaseModel):
    """An input item; which fields its ``type`` needs is checked when translating."""

    model_config = ConfigDict(extra="allow", strict=True)  # id, status, ...
    type: str = "message"
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[Part] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[Part] | None = None
    input: str | None = None  # a custom_tool_call's freeform text
    namespace: str | None = None  # a function_call of a namespace tool's function


class Function(BaseModel):
    """A tool (function, namespace, custom, local_shell, hosted: :mod:`.responses_tools`), or
    a ``tool_choice`` naming one."""

    model_config = ConfigDict(
        extra="allow", strict=True
    )  # a namespace's tools, a custom tool's format
    type: str
    name: str | None = Field(None, min_length=1)
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: str = Field("response", max_length=64)
    schema_: dict = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    format: TextFormat | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow", strict=True
    )  # unknown fields: ignored, or refused (_REFUSED)
    model: str | None = None
    input: str | list[Item]
    instructions: str | None = None
    tools: list[Function] | None = None
    tool_choice: Literal["auto", "none", "required"] | Function | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    text: TextConfig | None = None
    stream: bool | None = False
    store: bool | None = True
    previous_response_id: str | None = None
    metadata: dict | None = None
    speculative: SpeculativeOptions | None = None
    include: list[str] | None = None


def _not_text(part: Part, path: FieldPath) -> RequestError | None:
    if part.type in ("input_text", "output_text", "text") and part.text is not None:
        return None
    return RequestError(
        f"{dotted(path)}: {part.type!r} content is not supported (the model reads text only)", path
    )


def _text(content: str | list[Part] | None, path: FieldPath) -> str:
    """A string, or text parts joined; RequestError (400) for images, files, audio."""
    return text_of(content, path, _not_text, "")


def _need(item: Item, path: FieldPath, *fields: str) -> None:
    need(item, path, *fields, noun="item", name_field=True)


def _function_call(item: Item, path: FieldPath) -> dict:
    """A ``function_call`` item as a chat ``tool_calls`` entry; its arguments must be JSON."""
    _need(item, path, "call_id", "name", "arguments")
    try:
        json.loads(item.arguments or "{}")
    except ValueError:
        at = path + ("arguments",)
        raise RequestError(f"{dotted(at)} must be JSON text", at) from None
    return {
        "id": item.call_id,
        "type": "function",
        "function": {"name": item.name, "arguments": item.arguments},
    }


_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_DROPPED = ("web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call")
_DROPPED += (
    "computer_call",
    "computer_call_output",
    "tool_search_call",
    "tool_search_output",
    "mcp_list_tools",
)


def _call(item: Item, at: FieldPath, tools: Toolset) -> dict:
    """A call item (function, custom or local shell) as a chat ``tool_calls`` entry."""
    if item.type == "function_call":
        call = _function_call(item, at)
        call["function"]["name"] = tools.model_name(item.name, item.namespace)
        return call
    _need(item, at, "call_id")
    name = "local_shell" if item.type == "local_shell_call" else item.name
    if name is None:
        raise RequestError(f"{dotted(at)}: a {item.type} item needs name", at + ("name",))
    function = {"name": tools.model_name(name), "arguments": call_arguments(item.type, item)}
    return {"id": item.call_id, "type": "function", "function": function}


def _output(item: Item, at: FieldPath) -> dict:
    """A call's output item as a ``tool`` message.  Codex also sends outputs that answer no
    call (no ``call_id``; ``name: "goal_objective"``, its own goal text): those keep their
    name instead of an id."""
    _need(item, at, "output")
    message = {"role": "tool", "content": _text(item.output, at + ("output",))}
    if item.call_id is None and item.name is not None:
        return {**message, "name": item.name}
    _need(item, at, "call_id")
    return {**message, "tool_call_id": item.call_id}


def messages_from(
    items: str | list[Item], tools: Toolset | None = None, keys: ReasoningKeys | None = None
) -> list[dict]:
    """``input`` as chat messages for :meth:`SpeculativeModel.chat`: a call item (function,
    custom, local shell) joins the assistant message before it (or starts one), a call's
    output is a ``tool`` message; ``developer`` messages are system turns; a reasoning
    item's ``encrypted_content`` (decrypted with ``keys``) is the next assistant message's
    ``reasoning_content``; other reasoning items and hosted tools' items are dropped;
    RequestError (400) naming ``input.N`` for what cannot be translated."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    tools = tools or Toolset()
    out: list[dict] = []
    thinking = ""  # replayed reasoning, for the assistant turn after it
    for i, item in enumerate(items):
        at = ("input", i)
        if item.type == "reasoning":
            blob = (item.model_extra or {}).get("encrypted_content")
            thinking += (
                (keys.decrypt(blob) or "") if keys is not None and isinstance(blob, str) else ""
            )
        elif item.type == "message":
            _need(item, at, "role")
            role = "system" if item.role == "developer" else item.role
            out.append({"role": role, "content": _text(item.content, at + ("content",))})
        elif item.type in _CALLS:
            call = _call(item, at, tools)
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item.type in _OUTPUTS:
            out.append(_output(item, at))
        elif item.type not in _DROPPED:
            message = f"{dotted(at)}: input items of type {item.type!r} are not supported"
            raise RequestError(message, at + ("type",))
        if (
            thinking and item.type != "reasoning"
        ):  # it belongs to this item's assistant turn, if any
            if out and out[-1]["role"] == "assistant":
                out[-1]["reasoning_content"] = out[-1].get("reasoning_content", "") + thinking
            thinking = ""
    return out


def _choice(choice: str | Function | None, tools: Toolset) -> str | dict | None:
    """``tool_choice`` as chat's; RequestError for a built-in tool."""
    if not isinstance(choice, Function):
        return choice
    if choice.type not in ("function", "custom") or not choice.name:
        raise RequestError(
            f"tool_choice {choice.type!r} is not supported (only functions)", ("tool_choice",)
        )
    namespace = (choice.model_extra or {}).get("namespace")
    return {"type": "function", "function": {"name": tools.model_name(choice.name, namespace)}}


def _format(body: ResponsesRequest) -> dict | None:
    """``text.format`` as chat's ``response_format`` (None: free text)."""
    fmt = body.text.format if body.text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.name, "schema": fmt.schema_}}
    return {"type": "json_object"}


def responses_request(
    body: ResponsesRequest,
    limits: Limits,
    history: list[dict] = (),
    keys: ReasoningKeys | None = None,
) -> GenerationRequest:
    """A Responses body as the generation it asks for, under the server's ``limits``, after
    ``history`` (the stored conversation ``previous_response_id`` names, as chat messages);
    ``keys``: the server's, decrypting replayed reasoning; RequestError (400)."""
    for name in _REFUSED:
        if (body.model_extra or {}).get(name):
            raise RequestError(f"{name} is not supported by localspec serve", (name,))
    tools = tools_of(body)
    conversation = [*history, *messages_from(body.input, tools, keys)]
    if not conversation:
        raise RequestError("input is empty", ("input",))
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    choice = _choice(body.tool_choice, tools)
    effort = _effort(body)
    key = (body.model_extra or {}).get("prompt_cache_key")
    return generation_request(
        "openai.responses",
        limits,
        messages=[*system, *conversation],
        tools=list(tools.tools) or None,
        tool_choice=None if not tools.tools and choice == "auto" else choice,
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=_format(body),
        max_tokens=body.max_output_tokens,
        stream=body.stream,
        effort=effort,
        prompt_cache_key=key,
        paths=FieldPaths(
            max_tokens=("max_output_tokens",),
            response_format=("text", "format"),
            prompt=("input",),
            tool_fields=FLAT_TOOLS,
        ),
        **sampling_of(body),
        **speculative_options(body.speculative),
        **effort_reasoning(effort),
    )


def _effort(body: ResponsesRequest) -> str | None:
    """``reasoning.effort`` (None: not a string)."""
    reasoning = (body.model_extra or {}).get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    return effort if isinstance(effort, str) else None


def tools_of(body: ResponsesRequest) -> Toolset:
    """The request's tools as the model is offered them (:func:`~.responses_tools.toolset`)."""
    return toolset(body.tools or [])


def _echo(state, body: ResponsesRequest, options: CallOptions) -> dict:
    """The request's settings as a response repeats them."""
    choice = (
        body.tool_choice.model_dump()
        if isinstance(body.tool_choice, BaseModel)
        else body.tool_choice
    )
    fmt = (
        body.text.format.model_dump(by_alias=True, exclude_none=True)
        if body.text and body.text.format
        else None
    )
    echo = {
        name: getattr(body, name)
        for name in ("instructions", "max_output_tokens", "previous_response_id")
    }
    echo.update(model=state.config.model_name, tools=[t.model_dump() for t in body.tools or []])
    echo.update(
        tool_choice=choice or "auto", parallel_tool_calls=body.parallel_tool_calls is not False
    )
    echo.update(
        temperature=options.params.sampling.temperature,
        top_p=options.params.sampling.top_p,
        store=body.store is not False,
    )
    asked = (body.model_extra or {}).get("reasoning")
    summary = asked.get("summary") if isinstance(asked, dict) else None
    echo["reasoning"] = {
        "effort": _effort(body),
        "summary": summary if isinstance(summary, str) else None,
    }
    return {**echo, "text": {"format": fmt or {"type": "text"}}, "metadata": body.metadata or {}}


# --- response ----------------------------------------------------------------------------


def assistant_message(
    output: list[dict], tools: Toolset | None = None, reasoning: str | None = None
) -> dict:
    """A response's output items as one chat assistant message (its finished calls as
    ``tool_calls``, under the names the model knows them by; ``reasoning``: its thinking,
    as ``reasoning_content``)."""
    text = "".join(
        p["text"] for item in output if item["type"] == "message" for p in item["content"]
    )
    items = [
        Item.model_validate(i, strict=False)
        for i in output
        if i["type"] in _CALLS and i["status"] == "completed"
    ]
    calls = [_call(item, ("output", i), tools or Toolset()) for i, item in enumerate(items)]
    thinking = {"reasoning_content": reasoning} if reasoning else {}
    return {
        "role": "assistant",
        "content": text,
        **thinking,
        **({"tool_calls": calls} if calls else {}),
    }


# --- endpoints ---------------------------------------------------------------------------


def routes(state) -> list[Route]:
    """``POST /v1/responses`` and ``GET`` / ``DELETE /v1/responses/{id}`` on a :class:`ServerState`.
    ``store``: response id -> (response object, the conversation it ends as chat messages,
    instructions excluded), the last :data:`STORE_SIZE`."""
    store = ResponseStore(STORE_SIZE)

    async def answer(http: Request) -> Response:
        body = await state.read_body(http, ResponsesRequest)
        history = (
            store.lookup(body.previous_response_id, "previous_response_id")[1]
            if body.previous_response_id
            else []
        )
        request = responses_request(body, state.limits(), history, state.keys)
        tools = tools_of(body)
        conversation = list(request.messages[1:] if body.instructions else request.messages)

        def done(response: dict) -> None:
            if body.store is not False:
                answer = assistant_message(response["output"], tools, shape.reasoning)
                store.keep(response, conversation + [answer])

        include = tuple(body.include or ())
        shape = ResponseShape(_echo(state, body, request.options), done, tools, state.keys, include)
        return await state.run(http, request, shape)

    async def look_up(http: Request) -> Response:
        response_id = http.path_params["response_id"]
        response = store.lookup(response_id)[0]
        if http.method == "DELETE":
            store.delete(response_id)
            return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
        return JSONResponse(response)

    return [
        state.route("/v1/responses", answer, protocol="openai.responses"),
        state.route(
            "/v1/responses/{response_id}",
            look_up,
            methods=("GET", "DELETE"),
            protocol="openai.responses",
        ),
    ]
