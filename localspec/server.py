"""``localspec serve``: an OpenAI-compatible HTTP server over one loaded model pair.

Built on Starlette (routing, SSE through ``StreamingResponse``) served by uvicorn, with
request bodies validated by pydantic models.  Endpoints: ``GET /health``,
``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``.

Shapes follow the OpenAI API reference (openai-python ``types/chat/*``): chat
completion objects and ``chat.completion.chunk`` streams ending in ``data: [DONE]``,
``usage`` with ``prompt_tokens_details.cached_tokens`` (the reused KV prefix) and
``completion_tokens_details.accepted_prediction_tokens`` / ``rejected_prediction_tokens``,
errors as ``{"error": {message, type, param, code}}``.  Speculative statistics also come
as llama.cpp's server ``timings`` (milliseconds), and per-request speculative options
under its names (``speculative: {n_max, n_min, p_min}``, plus our ``strategy``).

Predicted Outputs: ``prediction.content`` drafts through
:class:`localspec.drafters.PredictionDrafter`.  ``accepted_prediction_tokens`` counts
prediction tokens that were drafted and kept by the target, ``rejected_prediction_tokens``
those drafted and rejected (tokens of the prediction never drafted count in neither;
OpenAI's billing counts differ).

One worker thread owns the model (:class:`ModelWorker`); requests wait in a bounded FIFO
queue (a full one answers 503 with ``Retry-After``).  A client that disconnects cancels
its generation after the current speculative round, and a queued request whose client
left never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .errors import ContextOverflowError, LocalspecError
from .stats import GenerationResult, TokenEvent

log = logging.getLogger("localspec.server")

DEFAULT_QUEUE = 16
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
BODY_TIMEOUT_S = 60.0  # a body announced but never sent does not hold a connection forever
_POLL_S = 0.1  # how often a waiting handler checks that its client is still there


# --- errors ------------------------------------------------------------------------------------


class APIError(Exception):
    """An error answered in OpenAI's shape.  ``retry``: whether a retry may help (the
    SDK retries 408/409/429/5xx unless told ``x-should-retry: false``)."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, retry: bool = False,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.retry, self.headers = retry, headers or {}

    def response(self) -> JSONResponse:
        headers = {"x-should-retry": "true" if self.retry else "false", **self.headers}
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=headers)


def _from_localspec(exc: LocalspecError, prompt_param: str = "messages") -> APIError:
    if isinstance(exc, ContextOverflowError):
        return APIError(400, str(exc), param=prompt_param, code="context_length_exceeded")
    return APIError(400, str(exc), code="invalid_value")


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict", "none"}


def _field_path(loc: tuple) -> str | None:
    """A pydantic error location as the request's own field path ("messages.0.role"),
    without the names of the union members tried ("str", "list[_TextPart]", ...)."""
    parts = [str(p) for p in loc if isinstance(p, int) or (re.fullmatch(r"[a-z_][a-z0-9_]*", str(p))
                                                           and str(p) not in _TYPE_NAMES)]
    return ".".join(parts) or None


def _from_validation(exc: ValidationError) -> APIError:
    first = exc.errors()[0]
    if first["type"] in ("json_invalid", "json_type"):
        return APIError(400, "We could not parse the JSON body of your request.", code="invalid_json")
    param = _field_path(first["loc"])
    message = first["msg"] if param is None else f"{param}: {first['msg']}"
    return APIError(400, f"Invalid request: {message}", param=param, code="invalid_value")


# --- requests ----------------------------------------------------------------------------------


def _refused(*fields: str, why: str):
    """A field validator that refuses any set (truthy) value of ``fields``."""

    def check(cls, value):
        if value:
            raise ValueError(why)
        return value

    return field_validator(*fields)(check)


_STRICT = ConfigDict(strict=True)


class _TextPart(BaseModel):
    model_config = _STRICT
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[_TextPart], None] = None

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class Prediction(BaseModel):
    model_config = _STRICT
    type: Literal["content"]
    content: Union[str, list[_TextPart]]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False


class SpeculativeOptions(BaseModel):
    """llama.cpp's server names: n_max = draft_max, n_min = draft_min, p_min; plus strategy."""

    model_config = ConfigDict(extra="forbid", strict=True)
    n_max: Union[int, Literal["auto"], None] = None
    n_min: int | None = Field(None, ge=0)
    p_min: float | None = Field(None, ge=0.0, le=1.0)
    strategy: Literal["auto", "draft-model", "prompt-lookup", "suffix", "prediction", "none"] | None = None

    @field_validator("n_max")
    @classmethod
    def _non_negative(cls, v):
        if isinstance(v, int) and v < 0:
            raise ValueError("must be 'auto' or an integer >= 0")
        return v

    @model_validator(mode="after")
    def _min_below_max(self):
        if isinstance(self.n_max, int) and self.n_min is not None and self.n_min > self.n_max:
            raise ValueError(f"n_min ({self.n_min}) must not exceed n_max ({self.n_max})")
        return self


class _Common(BaseModel):
    # Unknown fields are ignored (clients send user, metadata, store, ...); types are strict
    # ("0.5" is not a number, true is not 1), as OpenAI's API has them.
    model_config = ConfigDict(extra="ignore", strict=True)
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=-1)
    stop: Union[str, list[str], None] = None
    n: int | None = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    speculative: SpeculativeOptions | None = None
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict | None = None
    response_format: dict | None = None

    @model_validator(mode="before")
    @classmethod
    def _flat_speculative_keys(cls, data):
        """llama-server's own request keys (``"speculative.n_max": 4``, ...) are folded
        into ``speculative``, so requests written for it work here unchanged."""
        if not isinstance(data, dict):
            return data
        flat = {k: v for k, v in data.items() if isinstance(k, str) and k.startswith("speculative.")}
        if not flat:
            return data
        nested = data.get("speculative")
        if nested is not None and not isinstance(nested, dict):
            return data  # the nested value is refused on its own (400, param "speculative")
        rest = {k: v for k, v in data.items() if k not in flat}
        return {**rest, "speculative": {**(nested or {}), **{k.split(".", 1)[1]: v for k, v in flat.items()}}}

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, v):
        stops = [v] if isinstance(v, str) else v or []
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return v

    @field_validator("n")
    @classmethod
    def _one_choice(cls, v):
        if v not in (None, 1):
            raise ValueError("only n = 1 is supported")
        return v

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, v):
        if v and v.get("type") not in (None, "text"):
            raise ValueError("only response_format {\"type\": \"text\"} is supported (no JSON mode or schemas)")
        return v

    _no_penalties = _refused("presence_penalty", "frequency_penalty", "logit_bias",
                             why="penalties and logit_bias are not supported (they would change the target's distribution)")


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    prediction: Prediction | None = None
    tools: list | None = None

    _no_tools = _refused("tools", why="tools are not supported by this server")


class CompletionRequest(_Common):
    prompt: Union[str, list[str]] = Field(min_length=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("exactly one prompt is supported")
        return v

    _no_echo = _refused("echo", why="echo is not supported")
    _no_suffix = _refused("suffix", why="suffix (insertion) is not supported")


# --- the model thread ---------------------------------------------------------------------------


@dataclass
class Job:
    """One request for the model thread.  ``start(model)`` returns a streaming
    :class:`~localspec.speculative.Generation`; items come back on ``events``:
    ("started", None), ("event", (TokenEvent, logprobs entry or None)), ("done", GenerationResult),
    ("error", exception) or ("skipped", None)."""

    start: Any
    loop: asyncio.AbstractEventLoop
    logprobs: int | None = None
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def post(self, kind: str, value: Any = None) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the event loop is gone (server shutting down)
            pass

    def cancel(self) -> None:
        self.cancelled.set()


class ModelWorker:
    """One thread that owns the model and runs queued :class:`Job`s first in, first out.

    ``submit`` raises :class:`APIError` (503, with Retry-After) when ``queue_size`` jobs
    already wait.  A job cancelled while queued is skipped; one cancelled while running
    stops after its current speculative round.

    ``run_in``: None starts the worker's own thread; otherwise a function that asks a
    thread which already owns the model (the desktop chat's) to call :meth:`run_one`
    soon, once per submitted job, so outside requests queue with that thread's own work.
    """

    def __init__(self, model, queue_size: int = DEFAULT_QUEUE, run_in=None):
        self.model = model
        self.queue_size = queue_size
        self._jobs: queue.Queue = queue.Queue(maxsize=queue_size)
        self._current: Job | None = None
        self.last_result: GenerationResult | None = None  # of the latest finished generation
        self.skipped = 0  # queued jobs dropped because their client had left
        self._run_in = run_in
        self._closed = False
        self._thread = None
        if run_in is None:
            self._thread = threading.Thread(target=self._run, name="localspec-model", daemon=True)
            self._thread.start()

    @property
    def waiting(self) -> int:
        return self._jobs.qsize()

    @property
    def busy(self) -> bool:
        return self._current is not None

    def submit(self, job: Job) -> None:
        if self._closed:
            raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down", retry=True)
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise APIError(503, f"the server is busy: {self.queue_size} requests are already waiting",
                           type="server_error", code="queue_full", retry=True, headers={"Retry-After": "1"}) from None
        if self._run_in is not None:
            try:
                self._run_in()
            except BaseException:
                self.withdraw(job)  # never run: its place is free again
                raise

    def withdraw(self, job: Job) -> None:
        """Take a job whose client left out of the queue at once (its place is free)."""
        with self._jobs.mutex:
            try:
                self._jobs.queue.remove(job)
            except ValueError:
                return  # running or done already
            self._jobs.not_full.notify()
        self.skipped += 1

    def cancel_all(self) -> None:
        """Cancel the running job (it ends after its current round) and every waiting one."""
        for job in list(self._jobs.queue):
            if isinstance(job, Job):
                job.cancel()
        if self._current is not None:
            self._current.cancel()

    def close(self) -> None:
        """Refuse new jobs, cancel the running one, drop the waiting ones, and stop the
        thread; returns once the model is no longer in use (a running job stops within one
        round, or one prompt batch), so the caller may free it.  With ``run_in`` there is no
        thread to wait for: the owning thread ends the running job within one round."""
        self._closed = True
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, Job):
                job.cancel()
                job.post("skipped")
        if self._current is not None:
            self._current.cancel()
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._run_job(job)

    def run_one(self) -> None:
        """Run the next waiting job, if any, in the calling thread (see ``run_in``)."""
        try:
            job = self._jobs.get_nowait()
        except queue.Empty:
            return
        if job is not None:
            self._run_job(job)

    def _run_job(self, job: Job) -> None:
        if job.cancelled.is_set():
            self.skipped += 1
            job.post("skipped")
            return
        self._current = job
        try:
            self._generate(job)
        finally:
            self._current = None

    def _generate(self, job: Job) -> None:
        try:
            generation = job.start(self.model)
            job.post("started")
            for event in generation:
                if job.cancelled.is_set():
                    generation.cancel()
                job.post("event", (event, self._logprob_entry(event, job.logprobs)))
            self.last_result = generation.result
            job.post("done", generation.result)
        except LocalspecError as exc:
            job.post("error", exc)
        except Exception as exc:  # a bug: answer 500, keep serving
            log.exception("generation failed")
            job.post("error", exc)

    def _logprob_entry(self, event: TokenEvent, top: int | None) -> dict | None:
        if top is None or event.logprob is None:
            return None
        piece = self.model.target.token_bytes
        return {
            "token": piece(event.token).decode("utf-8", "replace"), "logprob": event.logprob,
            "bytes": list(piece(event.token)),
            "top_logprobs": [{"token": piece(t).decode("utf-8", "replace"), "logprob": lp, "bytes": list(piece(t))}
                             for t, lp in (event.top_logprobs or ())],
        }


# --- the app ------------------------------------------------------------------------------------


@dataclass
class ServerConfig:
    """``model_name``: the id /v1/models lists and every response names.  ``api_key``:
    None accepts any (or no) Bearer token.  ``max_tokens_limit``: the most tokens one
    request may ask for (default: the context size).  ``defaults``: generation options
    for fields a request leaves out (e.g. the CLI's --temp)."""

    model_name: str
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    queue_size: int = DEFAULT_QUEUE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_tokens_limit: int | None = None
    defaults: dict = field(default_factory=dict)


def create_app(model, config: ServerConfig, worker: ModelWorker | None = None) -> Starlette:
    """The ASGI app serving ``model`` (a :class:`~localspec.api.SpeculativeModel`).  A
    ``worker`` may be passed in; otherwise one is started, and it is closed when the app
    shuts down."""
    own_worker = worker is None
    state = _State(model, config, worker or ModelWorker(model, config.queue_size))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if own_worker:
            await asyncio.to_thread(state.worker.close)

    middleware = []
    if config.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"], allow_headers=["*"]))
    routes = [
        Route("/health", state.health, methods=["GET"]),
        Route("/v1/models", state.models, methods=["GET"]),
        Route("/v1/chat/completions", state.chat, methods=["POST"]),
        Route("/v1/completions", state.completions, methods=["POST"]),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error, Exception: _internal_error})
    app.router.redirect_slashes = False  # "/v1/chat/completions/" is a 404, not a redirect around the key check
    app.state.localspec = state
    return app


async def _http_error(request: Request, exc: HTTPException) -> Response:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    message = {404: f"no route {request.method} {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
    return APIError(exc.status_code, message, code=code).response()


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error")
    return APIError(500, "internal server error", type="server_error", retry=True).response()


class _State:
    def __init__(self, model, config: ServerConfig, worker: ModelWorker):
        self.model, self.config, self.worker = model, config, worker
        self.created = int(time.time())

    # --- plumbing --------------------------------------------------------------------------

    def _check_key(self, request: Request) -> None:
        if self.config.api_key is None:
            return
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(token.encode(), self.config.api_key.encode()):
            raise APIError(401, "Incorrect API key provided" if token else "Missing API key (Authorization: Bearer ...)",
                           code="invalid_api_key")

    async def _body(self, request: Request, model_type: type[BaseModel]) -> BaseModel:
        limit = self.config.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            raise APIError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
        try:
            body = await asyncio.wait_for(self._read(request, limit), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise APIError(408, f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s",
                           code="request_timeout") from None
        except ClientDisconnect:
            raise APIError(400, "the client disconnected while sending the request", code="client_disconnected") from None
        if not body.lstrip().startswith(b"{"):
            raise APIError(400, "The request body must be a JSON object.", code="invalid_json")
        try:
            return model_type.model_validate_json(body)
        except ValidationError as exc:
            raise _from_validation(exc) from None

    @staticmethod
    async def _read(request: Request, limit: int) -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise APIError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    def _options(self, body: _Common, max_tokens: int | None) -> dict:
        options = dict(self.config.defaults)
        limit = self.config.max_tokens_limit or self.model.target.n_ctx
        if max_tokens is not None and max_tokens > limit:
            raise APIError(400, f"max_tokens is {max_tokens}; this server allows at most {limit}", param="max_tokens",
                           code="invalid_value")
        options["max_tokens"] = min(max_tokens or options.get("max_tokens") or limit, limit)
        for name in ("temperature", "top_p", "top_k", "min_p", "seed"):
            value = getattr(body, name)
            if value is not None:
                options[name] = value
        if body.stop is not None:
            options["stop"] = [body.stop] if isinstance(body.stop, str) else body.stop
        spec = body.speculative
        if spec is not None:
            for ours, theirs in (("draft_max", spec.n_max), ("draft_min", spec.n_min), ("p_min", spec.p_min),
                                 ("strategy", spec.strategy)):
                if theirs is not None:
                    options[ours] = theirs
        return options

    async def _handle(self, request: Request, handler) -> Response:
        try:
            self._check_key(request)
            return await handler(request)
        except APIError as exc:
            return exc.response()

    # --- endpoints --------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.config.model_name, "busy": self.worker.busy,
                             "waiting": self.worker.waiting})

    async def models(self, request: Request) -> Response:
        async def answer(_):
            return JSONResponse({"object": "list", "data": [
                {"id": self.config.model_name, "object": "model", "created": self.created, "owned_by": "localspec"}]})
        return await self._handle(request, answer)

    async def chat(self, request: Request) -> Response:
        return await self._handle(request, self._chat)

    async def completions(self, request: Request) -> Response:
        return await self._handle(request, self._completions)

    async def _chat(self, request: Request) -> Response:
        body = await self._body(request, ChatRequest)
        options = self._options(body, body.max_completion_tokens or body.max_tokens)
        if body.logprobs:
            options["logprobs"] = body.top_logprobs or 0
        if body.prediction is not None:
            options["prediction"] = body.prediction.text()
        elif options.get("strategy") == "prediction":
            raise APIError(400, "speculative.strategy 'prediction' needs a prediction", param="speculative.strategy",
                           code="invalid_value")
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in body.messages]
        job = Job(lambda model: model.chat(messages, stream=True, **options), asyncio.get_running_loop(),
                  logprobs=options.get("logprobs"))
        return await self._run(request, job, body, _ChatShape(self.config.model_name, body.logprobs))

    async def _completions(self, request: Request) -> Response:
        body = await self._body(request, CompletionRequest)
        options = self._options(body, body.max_tokens)
        if body.logprobs is not None:
            options["logprobs"] = body.logprobs
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        job = Job(lambda model: model.generate(prompt, stream=True, **options), asyncio.get_running_loop(),
                  logprobs=options.get("logprobs"))
        return await self._run(request, job, body, _CompletionShape(self.config.model_name, body.logprobs is not None))

    async def _run(self, request: Request, job: Job, body: _Common, shape) -> Response:
        self.worker.submit(job)
        first = await _next(job, request)
        if first is None:  # the client left while the request waited
            self.worker.withdraw(job)
            return Response(status_code=499)
        kind, value = first
        if kind == "error":
            prompt_param = "prompt" if isinstance(body, CompletionRequest) else "messages"
            raise _from_localspec(value, prompt_param) if isinstance(value, LocalspecError) else APIError(
                500, "internal server error", type="server_error", retry=True)
        if kind == "skipped":
            raise APIError(503, "the server is shutting down", type="server_error", retry=True)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        if body.stream:
            return StreamingResponse(self._sse(request, job, shape, include_usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        pieces: list = []
        while True:
            item = await _next(job, request)
            if item is None:
                return Response(status_code=499)
            kind, value = item
            if kind == "event":
                pieces.append(value)
            elif kind == "done":
                return JSONResponse(shape.whole(pieces, value, self.model))
            elif kind == "error":
                raise APIError(500, "internal server error", type="server_error", retry=True)

    async def _sse(self, request: Request, job: Job, shape, include_usage: bool) -> AsyncIterator[str]:
        try:
            yield _sse(shape.first_chunk())
            while True:
                item = await _next(job, request)
                if item is None or await request.is_disconnected():
                    return
                batch = [item]
                while not job.events.empty() and batch[-1][0] == "event":  # one chunk per round, or so
                    batch.append(job.events.get_nowait())
                events = [v for k, v in batch if k == "event"]
                if events:
                    chunk = shape.delta_chunk(events)
                    if chunk is not None:
                        yield _sse(chunk)
                end = batch[-1]
                if end[0] == "done":
                    yield _sse(shape.final_chunk(end[1], self.model))
                    if include_usage:
                        yield _sse(shape.usage_chunk(end[1], self.model))
                    yield "data: [DONE]\n\n"
                    return
                if end[0] == "error":
                    yield _sse({"error": {"message": "internal server error", "type": "server_error",
                                          "param": None, "code": None}})
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


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


# --- response shapes ----------------------------------------------------------------------------


def usage(result: GenerationResult) -> dict:
    s = result.stats
    drafted = s.drafted_by_drafter.get("prediction", 0)
    accepted = s.accepted_by_drafter.get("prediction", 0)
    completion = len(result.tokens)
    return {
        "prompt_tokens": s.prompt_tokens, "completion_tokens": completion, "total_tokens": s.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": s.prompt_cached_tokens},
        "completion_tokens_details": {"accepted_prediction_tokens": accepted,
                                      "rejected_prediction_tokens": drafted - accepted, "reasoning_tokens": 0},
    }


def timings(result: GenerationResult) -> dict:
    """llama.cpp server's ``timings`` (milliseconds); ``draft_n`` / ``draft_n_accepted``
    count draft tokens of every drafter."""
    s = result.stats
    predicted_ms = max(0.0, s.total_s - s.ttft_s) * 1000
    prompt_ms = s.prompt_eval_s * 1000
    predicted_n = max(0, s.generated_tokens - 1)  # the first token came with the prompt eval
    return {
        "prompt_n": s.prompt_eval_tokens, "prompt_ms": prompt_ms,
        "prompt_per_second": s.prompt_eval_tokens / prompt_ms * 1000 if prompt_ms else 0.0,
        "predicted_n": predicted_n, "predicted_ms": predicted_ms,
        "predicted_per_second": predicted_n / predicted_ms * 1000 if predicted_ms else 0.0,
        "draft_n": s.drafted_tokens, "draft_n_accepted": s.accepted_tokens,
        "cache_n": s.prompt_cached_tokens,
    }


def _finish_reason(result: GenerationResult) -> str:
    return "length" if result.finish_reason in ("length", "context") else "stop"


class _ChatShape:
    def __init__(self, model_name: str, logprobs: bool):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_name, self.logprobs = model_name, logprobs

    def _chunk(self, choices: list) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model_name,
                "system_fingerprint": None, "choices": choices}

    def first_chunk(self) -> dict:
        return self._chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}])

    def delta_chunk(self, events: list) -> dict | None:
        text = "".join(e.text for e, _ in events)
        entries = [lp for _, lp in events if lp is not None]
        if not text and not entries:
            return None
        logprobs = {"content": entries} if self.logprobs else None
        return self._chunk([{"index": 0, "delta": {"content": text}, "logprobs": logprobs, "finish_reason": None}])

    def final_chunk(self, result: GenerationResult, model) -> dict:
        chunk = self._chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": _finish_reason(result)}])
        chunk["timings"] = timings(result)
        return chunk

    def usage_chunk(self, result: GenerationResult, model) -> dict:
        chunk = self._chunk([])
        chunk["usage"] = usage(result)
        return chunk

    def whole(self, pieces: list, result: GenerationResult, model) -> dict:
        entries = [lp for _, lp in pieces if lp is not None]
        return {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model_name,
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text, "refusal": None},
                         "logprobs": {"content": entries} if self.logprobs else None,
                         "finish_reason": _finish_reason(result)}],
            "usage": usage(result), "timings": timings(result),
        }


class _CompletionShape:
    def __init__(self, model_name: str, logprobs: bool):
        self.id = f"cmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_name, self.logprobs = model_name, logprobs

    def _obj(self, text: str, finish: str | None, logprobs: dict | None) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model_name,
                "system_fingerprint": None,
                "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}]}

    def _legacy_logprobs(self, entries: list, offset: int = 0) -> dict | None:
        if not self.logprobs:
            return None
        offsets, at = [], offset
        for e in entries:
            offsets.append(at)
            at += len(e["token"])
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
                "text_offset": offsets}

    def first_chunk(self) -> dict:
        return self._obj("", None, None)

    def delta_chunk(self, events: list) -> dict | None:
        text = "".join(e.text for e, _ in events)
        entries = [lp for _, lp in events if lp is not None]
        if not text and not entries:
            return None
        return self._obj(text, None, self._legacy_logprobs(entries))

    def final_chunk(self, result: GenerationResult, model) -> dict:
        obj = self._obj("", _finish_reason(result), None)
        obj["timings"] = timings(result)
        return obj

    def usage_chunk(self, result: GenerationResult, model) -> dict:
        obj = self._obj("", None, None)
        obj["choices"] = []
        obj["usage"] = usage(result)
        return obj

    def whole(self, pieces: list, result: GenerationResult, model) -> dict:
        obj = self._obj(result.text, _finish_reason(result), self._legacy_logprobs([lp for _, lp in pieces if lp]))
        obj["usage"] = usage(result)
        obj["timings"] = timings(result)
        return obj
