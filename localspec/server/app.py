"""``localspec serve``: an OpenAI-compatible HTTP server over one loaded model pair.

Built on Starlette (routing, SSE through ``StreamingResponse``) served by uvicorn, with
request bodies validated by pydantic models.  Endpoints: ``GET /health``,
``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``; each other
protocol in its own module: llama-server's ``POST /infill`` (:mod:`.infill`), Anthropic's
``POST /v1/messages`` (:mod:`.anthropic_messages`), OpenAI's ``POST /v1/responses``
(:mod:`.openai_responses`).

Shapes follow the OpenAI API reference (openai-python ``types/chat/*``): chat
completion objects and ``chat.completion.chunk`` streams ending in ``data: [DONE]``,
``usage`` with ``prompt_tokens_details.cached_tokens`` (the reused KV prefix) and
``completion_tokens_details.accepted_prediction_tokens`` / ``rejected_prediction_tokens``,
errors as ``{"error": {message, type, param, code}}``.  Speculative statistics also come
as llama.cpp's server ``timings`` (milliseconds), and per-request speculative options
under its names (``speculative: {n_max, n_min, p_min}``, plus our ``strategy``).

Predicted Outputs: ``prediction.content`` drafts through
:class:`localspec.decoding.drafters.PredictionDrafter`.  ``accepted_prediction_tokens`` counts
prediction tokens that were drafted and kept by the target, ``rejected_prediction_tokens``
those drafted and rejected (tokens of the prediction never drafted count in neither;
OpenAI's billing counts differ).

The model's workers (:class:`ModelWorker`, one thread per slot, ``--parallel``) run
requests concurrently, their target decodes batched; the rest wait in a bounded FIFO
queue (a full one answers 503 with ``Retry-After``).  ``GET /metrics`` gives
Prometheus counters (:mod:`.metrics`).  A client that disconnects cancels
its generation after the current speculative round, and a queued request whose client
left never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from localspec.api import check_response_format
from localspec.decoding.tool_calls import check_tools
from localspec.errors import InvalidOptionError, LocalspecError
from localspec.server import anthropic_messages, infill, openai_responses
from localspec.server.errors import APIError, from_localspec_error, from_validation_error
from localspec.server.infill import NO_FIM
from localspec.server.metrics import CONTENT_TYPE as METRICS_TYPE
from localspec.server.metrics import Metrics
from localspec.server.openai_shapes import ChatShape, CompletionShape
from localspec.server.schemas import ChatRequest, CommonRequest, CompletionRequest
from localspec.server.worker import DEFAULT_QUEUE, Job, ModelWorker

log = logging.getLogger("localspec.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
BODY_TIMEOUT_S = 60.0  # a body announced but never sent does not hold a connection forever
_POLL_S = 0.1  # how often a waiting handler checks that its client is still there


@dataclass
class ServerConfig:
    """``model_name``: the id /v1/models lists and every response names.  ``api_key``:
    None accepts any (or no) Bearer token.  ``max_tokens_limit``: the most tokens one
    request may ask for (default: the context size).  ``defaults``: generation options
    for fields a request leaves out (e.g. the CLI's --temp).  ``loopback_only``: the server
    listens on a loopback address only; without an ``api_key``, a request must then name the
    host as ``localhost`` or by IP address (:func:`host_allowed`)."""

    model_name: str
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    queue_size: int = DEFAULT_QUEUE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_tokens_limit: int | None = None
    defaults: dict = field(default_factory=dict)
    loopback_only: bool = False


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def host_allowed(host_header: str) -> bool:
    """Whether a request's ``Host`` header may reach a key-less server on a loopback
    address: ``localhost`` (or a ``*.localhost`` name), an IP address, or this machine's
    own name.  Any other name means a web page whose domain was made to resolve to
    127.0.0.1 (DNS rebinding, as in Ollama's CVE-2024-28224): its scripts would then read
    the server's answers as their own origin's."""
    name = (urlsplit("//" + host_header).hostname or "") if host_header else ""
    if name in ("", "localhost") or name.endswith(".localhost") or name == socket.gethostname().lower():
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def create_app(model, config: ServerConfig, worker: ModelWorker | None = None) -> Starlette:
    """The ASGI app serving ``model`` (a :class:`~localspec.api.SpeculativeModel`).  A
    ``worker`` may be passed in; otherwise one is started, and it is closed when the app
    shuts down."""
    own_worker = worker is None
    state = _State(model, config, worker or ModelWorker(model, config.queue_size))
    state.worker.metrics = state.metrics = Metrics(model, state.worker)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if own_worker:
            await asyncio.to_thread(state.worker.close)

    middleware = []
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["*"],
            )
        )
    routes = [
        Route("/health", state.health, methods=["GET"]),
        Route("/metrics", state.metrics_text, methods=["GET"]),
        Route("/v1/models", state.models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", state.model_by_id, methods=["GET"]),
        Route("/v1/chat/completions", state.chat, methods=["POST"]),
        Route("/v1/completions", state.completions, methods=["POST"]),
        *infill.routes(state),
        *anthropic_messages.routes(state),
        *openai_responses.routes(state),
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.router.redirect_slashes = False  # "/v1/chat/completions/" is a 404, not a redirect around the key check
    app.state.localspec = state
    return app


async def _http_error(request: Request, exc: HTTPException) -> Response:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    message = {
        404: f"no route {request.method} {request.url.path}",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    return APIError(exc.status_code, message, code=code).response()


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error")
    return APIError(500, "internal server error", type="server_error", retry=True).response()


class _State:
    def __init__(self, model, config: ServerConfig, worker: ModelWorker):
        self.tool_format = getattr(model, "tool_format", None)  # read once, not per request
        self.supports_tools = self.tool_format is not None
        self.fim_tokens = model.target.fim_tokens() if hasattr(model, "target") else {}
        self.model, self.config, self.worker = model, config, worker
        self.created = int(time.time())

    # --- plumbing --------------------------------------------------------------------------

    def _check_key(self, request: Request) -> None:
        """Bearer token (OpenAI's clients) or ``x-api-key`` (Anthropic's; either may carry
        the key when both are sent); with no key on a loopback address, the ``Host``
        header (:func:`host_allowed`)."""
        if self.config.api_key is None:
            self._check_host(request)
            return
        header = request.headers.get("authorization", "")
        bearer = header[7:].strip() if header.lower().startswith("bearer ") else ""
        tokens = [t for t in (bearer, request.headers.get("x-api-key", "")) if t]
        if not any([hmac.compare_digest(t.encode(), self.config.api_key.encode()) for t in tokens]):
            raise APIError(
                401,
                "Incorrect API key provided" if tokens else "Missing API key (Authorization: Bearer ... or x-api-key)",
                code="invalid_api_key",
            )

    def _check_host(self, request: Request) -> None:
        host = request.headers.get("host", "")
        if self.config.loopback_only and not host_allowed(host):
            raise APIError(
                403,
                f"this server answers requests for localhost, not {host!r} (a web page could reach it by DNS "
                "rebinding); behind a proxy, start it with --api-key or forward Host: localhost",
                type="permission_error",
                code="host_not_allowed",
            )

    async def read_body(self, request: Request, model_type: type[BaseModel]) -> BaseModel:
        """The request's JSON body validated as ``model_type``; APIError (400 / 408 / 413)."""
        limit = self.config.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            raise APIError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
        try:
            body = await asyncio.wait_for(self._read(request, limit), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise APIError(
                408, f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s", code="request_timeout"
            ) from None
        except ClientDisconnect:
            raise APIError(
                400, "the client disconnected while sending the request", code="client_disconnected"
            ) from None
        if not body.lstrip().startswith(b"{"):
            raise APIError(400, "The request body must be a JSON object.", code="invalid_json")
        try:
            return model_type.model_validate_json(body)
        except ValidationError as exc:
            raise from_validation_error(exc) from None

    @staticmethod
    async def _read(request: Request, limit: int) -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise APIError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    def base_options(self, max_tokens: int | None, param: str = "max_tokens") -> dict:
        """The server's default generation options with the request's ``max_tokens``
        (checked against the server's limit; ``param`` names the field in the error)."""
        options = dict(self.config.defaults)
        limit = self.config.max_tokens_limit or self.model.target.n_ctx
        if max_tokens is not None and max_tokens > limit:
            raise APIError(
                400,
                f"{param} is {max_tokens}; this server allows at most {limit}",
                param=param,
                code="invalid_value",
            )
        options["max_tokens"] = min(max_tokens or options.get("max_tokens") or limit, limit)
        return options

    def _options(self, body: CommonRequest, max_tokens: int | None) -> dict:
        options = self.base_options(max_tokens)
        for name in ("temperature", "top_p", "top_k", "min_p", "seed"):
            value = getattr(body, name)
            if value is not None:
                options[name] = value
        if body.stop is not None:
            options["stop"] = [body.stop] if isinstance(body.stop, str) else body.stop
        fmt = body.response_format.as_option() if body.response_format is not None else None
        if fmt is not None:
            try:
                check_response_format(fmt)
            except LocalspecError as exc:
                raise APIError(400, str(exc), param="response_format", code="invalid_value") from None
            options["response_format"] = fmt
        if body.speculative is not None:
            options.update(body.speculative.as_options())
        return options

    async def handle(self, request: Request, handler, render=APIError.response) -> Response:
        """``await handler(request)`` after the key check; an APIError is answered by
        ``render(error)`` (a protocol's own error shape; OpenAI's by default)."""
        try:
            self._check_key(request)
            return await handler(request)
        except APIError as exc:
            return render(exc)

    # --- endpoints --------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "model": self.config.model_name,
                "busy": self.worker.busy,
                "running": self.worker.running,
                "waiting": self.worker.waiting,
                "slots": getattr(self.model, "parallel", 1),
            }
        )

    async def metrics_text(self, request: Request) -> Response:
        """``GET /metrics``: Prometheus' text format (:mod:`localspec.server.metrics`)."""

        async def answer(_):
            return Response(self.metrics.render(), media_type=METRICS_TYPE)

        return await self.handle(request, answer)

    def _model_object(self) -> dict:
        return {"id": self.config.model_name, "object": "model", "created": self.created, "owned_by": "localspec"}

    async def models(self, request: Request) -> Response:
        async def answer(_):
            return JSONResponse({"object": "list", "data": [self._model_object()]})

        return await self.handle(request, answer)

    async def model_by_id(self, request: Request) -> Response:
        """``GET /v1/models/{id}``: the loaded pair under any id, as every request is served by it."""

        async def answer(_):
            return JSONResponse({**self._model_object(), "id": request.path_params["model_id"]})

        return await self.handle(request, answer)

    async def chat(self, request: Request) -> Response:
        return await self.handle(request, self._chat)

    async def completions(self, request: Request) -> Response:
        return await self.handle(request, self._completions)

    async def _chat(self, request: Request) -> Response:
        body = await self.read_body(request, ChatRequest)
        options = self._options(body, body.max_completion_tokens or body.max_tokens)
        if body.logprobs:
            options["logprobs"] = body.top_logprobs or 0
        if body.prediction is not None:
            options["prediction"] = body.prediction.text()
        elif options.get("strategy") == "prediction":
            raise APIError(
                400,
                "speculative.strategy 'prediction' needs a prediction",
                param="speculative.strategy",
                code="invalid_value",
            )
        messages = [m.for_model() for m in body.messages]
        options.update(self._tool_options(body))
        if "tools" in options and "response_format" in options:
            raise APIError(400, "response_format and tools cannot be combined in one request", param="response_format")
        job = Job(
            lambda model: model.chat(messages, stream=True, **options),
            asyncio.get_running_loop(),
            logprobs=options.get("logprobs"),
        )
        tool_format = self.tool_format if "tools" in options else None
        shape = ChatShape(self.config.model_name, body.logprobs, tool_format=tool_format)
        return await self.run(request, job, body, shape)

    def _tool_options(self, body: ChatRequest) -> dict:
        if body.tools is None:
            if body.tool_choice not in (None, "none", "auto"):
                raise APIError(400, "tool_choice needs tools", param="tool_choice", code="invalid_value")
            return {}
        tools = [t.for_model() for t in body.tools]
        choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, BaseModel) else body.tool_choice
        try:
            check_tools(tools, choice or "auto")
        except LocalspecError as exc:
            param = getattr(exc, "param", None) or ("tool_choice" if "tool_choice" in str(exc) else "tools")
            raise APIError(400, str(exc), param=param, code="invalid_value") from None
        if choice != "none" and not self.supports_tools:
            raise APIError(
                400,
                f"{self.config.model_name} has no tool-call format in its chat template",
                param="tools",
                code="unsupported_value",
            )
        if choice == "none":
            return {}
        options = {"tools": tools, "tool_choice": choice or "auto"}
        if body.parallel_tool_calls is not None:
            options["parallel_tool_calls"] = body.parallel_tool_calls
        return options

    async def _completions(self, request: Request) -> Response:
        body = await self.read_body(request, CompletionRequest)
        options = self._options(body, body.max_tokens)
        if body.logprobs is not None:
            options["logprobs"] = body.logprobs
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        if body.suffix is not None and "pre" not in self.fim_tokens:
            raise APIError(400, NO_FIM.format(self.config.model_name), param="suffix", code="unsupported_value")
        job = Job(
            lambda model: (
                model.generate(prompt, stream=True, **options)
                if body.suffix is None
                else model.infill(prompt, body.suffix, stream=True, **options)
            ),
            asyncio.get_running_loop(),
            logprobs=options.get("logprobs"),
        )
        shape = CompletionShape(self.config.model_name, body.logprobs is not None)
        return await self.run(request, job, body, shape, prompt_param="prompt")

    async def run(self, request: Request, job: Job, body, shape, prompt_param: str = "messages") -> Response:
        """Queue ``job`` and answer in ``shape``'s protocol: a stream of its events when
        ``body.stream``, else its whole response.  ``shape`` gives ``stream_start()``,
        ``stream_events(events)``, ``stream_end(result, include_usage)``, ``stream_error()``
        (lists of SSE text) and ``whole(pieces, result)`` (a JSON body)."""
        self.worker.submit(job)
        first = await _next(job, request)
        if first is None:  # the client left while the request waited
            self.worker.withdraw(job)
            return Response(status_code=499)
        kind, value = first
        if kind == "error":
            raise (
                from_localspec_error(value, prompt_param)
                if isinstance(value, LocalspecError)
                else APIError(500, "internal server error", type="server_error", retry=True)
            )
        if kind == "skipped":
            raise APIError(503, "the server is shutting down", type="server_error", retry=True)
        stream_options = getattr(body, "stream_options", None)
        include_usage = bool(stream_options and stream_options.include_usage)
        if body.stream:
            return StreamingResponse(
                self._sse(request, job, shape, include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        pieces: list = []
        while True:
            item = await _next(job, request)
            if item is None:
                return Response(status_code=499)
            kind, value = item
            if kind == "event":
                pieces.append(value)
            elif kind == "done":
                return JSONResponse(shape.whole(pieces, value))
            elif kind == "error":
                raise APIError(500, "internal server error", type="server_error", retry=True)

    async def _sse(self, request: Request, job: Job, shape, include_usage: bool) -> AsyncIterator[str]:
        try:
            for text in shape.stream_start():
                yield text
            while True:
                item = await _next(job, request)
                if item is None or await request.is_disconnected():
                    return
                batch = [item]
                while not job.events.empty() and batch[-1][0] == "event":  # one chunk per round, or so
                    batch.append(job.events.get_nowait())
                events = [v for k, v in batch if k == "event"]
                for text in shape.stream_events(events) if events else ():
                    yield text
                end = batch[-1]
                if end[0] in ("done", "error"):
                    for text in shape.stream_end(end[1], include_usage) if end[0] == "done" else shape.stream_error():
                        yield text
                    return
        finally:
            job.cancel()  # the client left mid-stream (or the stream ended): stop within one round


async def _next(job: Job, request: Request):
    """The job's next item, or None (and the job cancelled) once the client is gone."""
    while True:
        try:
            return await asyncio.wait_for(job.events.get(), _POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                job.cancel()
                return None


def check_port_free(host: str, port: int) -> None:
    """Refuse a port that is taken before spending a minute loading models."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise InvalidOptionError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
