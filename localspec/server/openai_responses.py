"""OpenAI's Responses API, ``POST /v1/responses`` and ``GET`` / ``DELETE /v1/responses/{id}``,
for the openai SDK's ``client.responses`` and the OpenAI Agents SDK (docs/server.md).

Requests: ``input`` (a string, or message items with text content (``developer`` ones are
system turns), ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` items and
their ``*_output`` items, an output a string or text parts; ``reasoning`` items and hosted
tools' items are dropped), ``instructions``, ``tools`` (function, namespace, custom,
local_shell; hosted ones dropped: :mod:`.responses_tools`), ``tool_choice``,
``parallel_tool_calls``, ``max_output_tokens``, ``temperature``, ``top_p``, ``text.format``,
``stream``, ``store`` (default true), ``previous_response_id`` and our ``speculative``;
``reasoning.effort`` and ``prompt_cache_key`` are kept on the request; other fields
(``include``, ``client_metadata``, ``text.verbosity``, ...) are ignored.  Images, files,
``conversation``, ``prompt`` and ``background`` get a 400 naming the param.

Responses: ``{"id": "resp_…", "object": "response", "status": "completed" | "incomplete",
"output": [a ``message`` item, ``function_call`` items], "usage", ...}`` with the request's
settings echoed and llama.cpp's ``timings``; streams as the Responses API's named events,
each with ``type`` and ``sequence_number`` (:class:`ResponseShape`).  The last
:data:`STORE_SIZE` stored responses are kept in memory with the conversation they end, for
``previous_response_id`` (an unknown id is a 404).  Errors are OpenAI's shape.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from localspec.decoding.stats import GenerationResult
from localspec.server import sse
from localspec.server.content import need, text_of
from localspec.server.errors import APIError, FieldPath, RequestError, dotted
from localspec.server.openai_shapes import timings
from localspec.server.openai_tools import StreamedTextAndCalls, tool_call_stream
from localspec.server.request import FieldPaths, GenerationRequest, Sampling
from localspec.server.responses_tools import Toolset, call_arguments, output_item, toolset
from localspec.server.schemas import SpeculativeOptions

STORE_SIZE = 256
_REFUSED = ("conversation", "prompt", "background")  # server-side conversations, prompt templates, background runs


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

    model_config = ConfigDict(extra="allow", strict=True)  # a namespace's tools, a custom tool's format
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
    model_config = ConfigDict(extra="allow", strict=True)  # unknown fields: ignored, or refused (_REFUSED)
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


def _not_text(part: Part, path: FieldPath) -> RequestError | None:
    if part.type in ("input_text", "output_text", "text") and part.text is not None:
        return None
    return RequestError(f"{dotted(path)}: {part.type!r} content is not supported (the model reads text only)", path)


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
    return {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}


_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_DROPPED = ("reasoning", "web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call")
_DROPPED += ("computer_call", "computer_call_output", "tool_search_call", "tool_search_output", "mcp_list_tools")


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


def messages_from(items: str | list[Item], tools: Toolset | None = None) -> list[dict]:
    """``input`` as chat messages for :meth:`SpeculativeModel.chat`: a call item (function,
    custom, local shell) joins the assistant message before it (or starts one), a call's
    output is a ``tool`` message; ``developer`` messages are system turns; reasoning and
    hosted tools' items are dropped; RequestError (400) naming ``input.N`` for what cannot
    be translated."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    tools = tools or Toolset()
    out: list[dict] = []
    for i, item in enumerate(items):
        at = ("input", i)
        if item.type == "message":
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
            _need(item, at, "call_id", "output")
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output, at + ("output",))})
        elif item.type not in _DROPPED:
            message = f"{dotted(at)}: input items of type {item.type!r} are not supported"
            raise RequestError(message, at + ("type",))
    return out


def _choice(choice: str | Function | None, tools: Toolset) -> str | dict | None:
    """``tool_choice`` as chat's; RequestError for a built-in tool."""
    if not isinstance(choice, Function):
        return choice
    if choice.type not in ("function", "custom") or not choice.name:
        raise RequestError(f"tool_choice {choice.type!r} is not supported (only functions)", ("tool_choice",))
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


def responses_request(body: ResponsesRequest, history: list[dict] = ()) -> GenerationRequest:
    """A Responses body as the generation it asks for, after ``history`` (the stored
    conversation ``previous_response_id`` names, as chat messages); RequestError (400)."""
    for name in _REFUSED:
        if (body.model_extra or {}).get(name):
            raise RequestError(f"{name} is not supported by localspec serve", (name,))
    tools = tools_of(body)
    conversation = [*history, *messages_from(body.input, tools)]
    if not conversation:
        raise RequestError("input is empty", ("input",))
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    choice = _choice(body.tool_choice, tools)
    effort = (body.model_extra or {}).get("reasoning") or {}
    return GenerationRequest(
        "openai.responses",
        messages=(*system, *conversation),
        tools=tuple(tools.tools) or None,
        tool_choice=None if not tools.tools and choice == "auto" else choice,
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=_format(body),
        sampling=Sampling.of(body),
        speculative=SpeculativeOptions.of(body.speculative),
        max_tokens=body.max_output_tokens,
        stream=bool(body.stream),
        effort=effort.get("effort") if isinstance(effort, dict) and isinstance(effort.get("effort"), str) else None,
        cache_key=key if isinstance(key := (body.model_extra or {}).get("prompt_cache_key"), str) else None,
        paths=FieldPaths(max_tokens=("max_output_tokens",), response_format=("text", "format"), prompt=("input",)),
    )


def tools_of(body: ResponsesRequest) -> Toolset:
    """The request's tools as the model is offered them (:func:`~.responses_tools.toolset`)."""
    return toolset(body.tools or [])


def _echo(state, body: ResponsesRequest, options: dict) -> dict:
    """The request's settings as a response repeats them."""
    choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, BaseModel) else body.tool_choice
    fmt = body.text.format.model_dump(by_alias=True, exclude_none=True) if body.text and body.text.format else None
    echo = {name: getattr(body, name) for name in ("instructions", "max_output_tokens", "previous_response_id")}
    echo.update(model=state.config.model_name, tools=[t.model_dump() for t in body.tools or []])
    echo.update(tool_choice=choice or "auto", parallel_tool_calls=body.parallel_tool_calls is not False)
    echo.update(temperature=options.get("temperature"), top_p=options.get("top_p"), store=body.store is not False)
    return {**echo, "text": {"format": fmt or {"type": "text"}}, "metadata": body.metadata or {}}


# --- response ----------------------------------------------------------------------------


def _usage(result: GenerationResult) -> dict:
    """``input_tokens`` is the whole prompt, ``cached_tokens`` the KV prefix reused from the last request."""
    s, output = result.stats, len(result.tokens)
    details = {"cached_tokens": s.prompt_cached_tokens, "cache_write_tokens": 0}
    usage = {"input_tokens": s.prompt_tokens, "input_tokens_details": details, "output_tokens": output}
    return {**usage, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": s.prompt_tokens + output}


def _status(result: GenerationResult) -> str:
    return "incomplete" if result.finish_reason in ("length", "context", "cancelled") else "completed"


def _part(text: str = "") -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(text: str, status: str) -> dict:
    item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant"}
    return {**item, "status": status, "content": [_part(text)]}


def assistant_message(output: list[dict], tools: Toolset | None = None) -> dict:
    """A response's output items as one chat assistant message (its finished calls as
    ``tool_calls``, under the names the model knows them by)."""
    text = "".join(p["text"] for item in output if item["type"] == "message" for p in item["content"])
    items = [Item.model_validate(i, strict=False) for i in output if i["type"] in _CALLS and i["status"] == "completed"]
    calls = [_call(item, ("output", i), tools or Toolset()) for i, item in enumerate(items)]
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


class ResponseShape(StreamedTextAndCalls):
    """One answer as a Responses object or stream, for :meth:`ServerState.run`.  ``echo``: the
    request's settings (:func:`_echo`); ``done(response)`` is called with the finished
    response (to store it).  A stream: ``response.created``, ``response.in_progress``; per
    output item ``response.output_item.added`` … ``.done`` around, for a message,
    ``response.content_part.added``, ``response.output_text.delta``…, ``.output_text.done``,
    ``response.content_part.done``, for a call ``response.function_call_arguments.delta``… /
    ``.done``; then ``response.completed`` / ``response.incomplete`` with the whole response
    (``response.failed`` on an internal error)."""

    def __init__(self, echo: dict, tool_format, done, tools: Toolset | None = None):
        self.id, self.created = f"resp_{uuid.uuid4().hex[:24]}", int(time.time())
        self.echo, self.done, self.tools = echo, done, tools or Toolset()
        self.call_name, self.arguments = "", ""  # the open call's model-facing name and arguments so far
        self.tool_stream = tool_call_stream(tool_format) if tool_format is not None else None
        self.seq, self.items, self.open, self.sent, self.calls = 0, [], None, "", 0

    def _response(self, status: str, output: list, result: GenerationResult | None = None) -> dict:
        response = {"id": self.id, "object": "response", "created_at": self.created, "status": status}
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
        self.done(response)
        return response

    def whole(self, pieces: list, result: GenerationResult) -> dict:
        status = _status(result)
        text = result.content if result.tool_calls else result.text
        output = [_message_item(text, status)] if text or not result.tool_calls else []
        for call in result.tool_calls or []:
            function = call["function"]
            output.append(output_item(self.tools, call["id"], function["name"], function["arguments"], "completed"))
        return self._finish(output, result)

    # --- streaming ---

    def _event(self, kind: str, **payload) -> str:
        self.seq += 1
        return sse.event(kind, {"type": kind, "sequence_number": self.seq - 1, **payload})

    def _at(self) -> dict:
        return {"item_id": self.open["id"], "output_index": len(self.items) - 1}

    def stream_start(self) -> list[str]:
        skeleton = self._response("in_progress", [])
        return [self._event(kind, response=skeleton) for kind in ("response.created", "response.in_progress")]

    def stream_end(self, result: GenerationResult, include_usage: bool) -> list[str]:
        out = self.held_back(result.text, result.tool_calls)
        if not self.items:
            out += self._open_message()
        status = _status(result)
        out += self._close(status)
        return out + [self._event(f"response.{status}", response=self._finish(self.items, result))]

    def keep_alive(self, progress: dict | None) -> list[str]:
        """``response.in_progress`` again while the prompt is read (with llama-server's ``prompt_progress``)."""
        extra = {"prompt_progress": progress} if progress else {}
        return [self._event("response.in_progress", response=self._response("in_progress", []), **extra)]

    def stream_error(self, message: str = "internal server error") -> list[str]:
        response = self._response("failed", self.items)
        response["error"] = {"code": "server_error", "message": message}
        return [self._event("response.failed", response=response)]

    def _add(self, item: dict) -> list[str]:
        out = self._close()
        self.items.append(item)
        self.open = item
        return out + [self._event("response.output_item.added", output_index=len(self.items) - 1, item=item)]

    def _open_message(self) -> list[str]:
        out = self._add(_message_item("", "in_progress"))
        return out + [self._event("response.content_part.added", **self._at(), content_index=0, part=_part())]

    def _text(self, text: str) -> list[str]:
        if not text:
            return []
        out = [] if self.open is not None and self.open["type"] == "message" else self._open_message()
        self.sent += text
        self.open["content"][0]["text"] += text
        delta = {"content_index": 0, "delta": text, "logprobs": []}
        return out + [self._event("response.output_text.delta", **self._at(), **delta)]

    def _call(self, delta: dict) -> list[str]:
        """One OpenAI tool-call delta: a call's header opens a function_call item, its
        arguments text goes out as ``response.function_call_arguments.delta``."""
        out = []
        if "id" in delta:
            self.calls += 1
            self.call_name, self.arguments = delta["function"]["name"], ""
            out += self._add(output_item(self.tools, delta["id"], self.call_name, "", "in_progress"))
        piece = delta["function"].get("arguments")
        if piece:
            self.arguments += piece
            if self.open["type"] == "function_call":  # a custom or shell call's item is whole at its end
                self.open["arguments"] += piece
                out.append(self._event("response.function_call_arguments.delta", **self._at(), delta=piece))
        return out

    def _close(self, status: str = "completed") -> list[str]:
        item = self.open
        if item is None:
            return []
        at, self.open = self._at(), None
        item["status"] = status
        if item["type"] == "message":
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
        return out + [self._event("response.output_item.done", output_index=at["output_index"], item=item)]


# --- endpoints ---------------------------------------------------------------------------


def routes(state) -> list[Route]:
    """``POST /v1/responses`` and ``GET`` / ``DELETE /v1/responses/{id}`` on a :class:`ServerState`.
    ``store``: response id -> (response object, the conversation it ends as chat messages,
    instructions excluded), the last :data:`STORE_SIZE`."""
    store: OrderedDict[str, tuple[dict, list[dict]]] = OrderedDict()

    def stored(response_id: str, param: str | None = None) -> tuple[dict, list[dict]]:
        """APIError 404 (``param`` named) for an id not (or no longer) stored."""
        if response_id not in store:
            previous = param == "previous_response_id"
            message = f"{'Previous response' if previous else 'Response'} with id '{response_id}' not found."
            raise APIError(404, message, param=param, code="previous_response_not_found" if previous else "not_found")
        return store[response_id]

    async def answer(http: Request) -> Response:
        body = await state.read_body(http, ResponsesRequest)
        history = stored(body.previous_response_id, "previous_response_id")[1] if body.previous_response_id else []
        request = responses_request(body, history)
        tools = tools_of(body)
        conversation = list(request.messages[1:] if body.instructions else request.messages)
        options = state.options(request)

        def done(response: dict) -> None:
            if body.store is not False:
                store[response["id"]] = (response, conversation + [assistant_message(response["output"], tools)])
                while len(store) > STORE_SIZE:
                    store.popitem(last=False)

        shape = ResponseShape(_echo(state, body, options), state.call_format(options), done, tools)
        return await state.run(http, request, options, shape)

    async def look_up(http: Request) -> Response:
        response_id = http.path_params["response_id"]
        response = stored(response_id)[0]
        if http.method == "DELETE":
            del store[response_id]
            return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
        return JSONResponse(response)

    return [
        state.route("/v1/responses", answer, protocol="openai.responses"),
        state.route("/v1/responses/{response_id}", look_up, methods=("GET", "DELETE"), protocol="openai.responses"),
    ]
