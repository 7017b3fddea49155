"""The server's state and plumbing shared by every protocol: :class:`ServerConfig`,
:class:`ServerState` (the model, its worker, the key and ``Host`` checks, reading a body,
validating a :class:`~localspec.server.request.GenerationRequest` and answering it in a
protocol's shape, whole or streamed)."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from localspec.errors import LocalspecError
from localspec.server import sse
from localspec.server.access_log import RequestRecord, log_request
from localspec.server.errors import APIError, from_localspec_error, from_validation_error
from localspec.server.metrics import Metrics
from localspec.server.reasoning_fields import ReasoningKeys
from localspec.server.request import GenerationRequest, Limits, model_options, start_generation
from localspec.server.worker import DEFAULT_QUEUE, Job, ModelWorker

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
BODY_TIMEOUT_S = 60.0  # a body announced but never sent does not hold a connection forever
_POLL_S = 0.1  # how often a waiting handler checks that its client is still there
KEEPALIVE_S = 10.0  # a stream sends its protocol's keep-alive after this long with nothing sent
CANCEL_LOG_WAIT_S = (
    30.0  # a cancelled request's log line waits this long for its generation's counts
)
_WAITING = object()  # _next's answer when nothing came within its wait
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


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


def host_allowed(host_header: str) -> bool:
    """Whether a request's ``Host`` header may reach a key-less server on a loopback
    address: ``localhost`` (or a ``*.localhost`` name), an IP address, or this machine's
    own name.  Any other name means a web page whose domain was made to resolve to
    127.0.0.1 (DNS rebinding, as in Ollama's CVE-2024-28224): its scripts would then read
    the server's answers as their own origin's."""
    name = (urlsplit("//" + host_header).hostname or "") if host_header else ""
    if (
        name in ("", "localhost")
        or name.endswith(".localhost")
        or name == socket.gethostname().lower()
    ):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class ServerState:
    """One served model: ``model`` (a :class:`~localspec.api.SpeculativeModel`), ``config``,
    ``worker`` (its :class:`ModelWorker`), ``metrics``, ``tool_format`` (the chat template's
    tool-call format, None: none), ``fim_tokens`` and ``keys`` (this server's
    :class:`~localspec.server.reasoning_fields.ReasoningKeys`).  Every protocol's routes take it."""

    def __init__(self, model, config: ServerConfig, worker: ModelWorker):
        self.tool_format = getattr(model, "tool_format", None)  # read once, not per request
        self.fim_tokens = model.target.fim_tokens() if hasattr(model, "target") else {}
        self.model, self.config, self.worker = model, config, worker
        self.created = int(time.time())
        self.keys = ReasoningKeys()
        reasoning = getattr(
            model, "reasoning", None
        )  # its ChatReasoning, read once (a stand-in may have none)
        self._reads_enable = (
            getattr(getattr(reasoning, "format", None), "reads_enable_thinking", False) is True
        )
        self.worker.metrics = self.metrics = Metrics(model, worker)
        self._lines_waiting: set[asyncio.Task] = (
            set()
        )  # cancelled requests' log lines (_log_once_stopped)

    @property
    def supports_tools(self) -> bool:
        return self.tool_format is not None

    def limits(self) -> Limits:
        """What a request is checked against (read from ``config`` each time)."""
        limit = self.config.max_tokens_limit or self.model.target.n_ctx
        fim = "pre" in self.fim_tokens
        budget = getattr(getattr(self.model, "reasoning", None), "load_budget", -1)
        defaults = self.config.defaults
        return Limits(
            self.config.model_name,
            limit,
            self.supports_tools,
            fim,
            defaults,
            budget,
            self._reads_enable,
        )

    def options(self, request: GenerationRequest) -> dict:
        """:func:`~localspec.server.request.model_options` under this server's limits."""
        return model_options(request, self.limits())

    # --- plumbing --------------------------------------------------------------------------

    def check_key(self, request: Request) -> None:
        """Bearer token (OpenAI's clients) or ``x-api-key`` (Anthropic's; either may carry
        the key when both are sent); with no key on a loopback address, the ``Host``
        header (:func:`host_allowed`).  APIError 401 / 403."""
        if self.config.api_key is None:
            self._check_host(request)
            return
        header = request.headers.get("authorization", "")
        bearer = header[7:].strip() if header.lower().startswith("bearer ") else ""
        tokens = [t for t in (bearer, request.headers.get("x-api-key", "")) if t]
        if not any([hmac.compare_digest(t.encode(), self.config.api_key.encode()) for t in tokens]):
            raise APIError(
                401,
                "Incorrect API key provided"
                if tokens
                else "Missing API key (Authorization: Bearer ... or x-api-key)",
                code="invalid_api_key",
            )

    def _check_host(self, request: Request) -> None:
        host = request.headers.get("host", "")
        if self.config.loopback_only and not host_allowed(host):
            raise APIError(
                403,
                f"this server answers requests for localhost, not {host!r} (a web page could "
                "reach it by DNS "
                "rebinding); behind a proxy, start it with --api-key or forward Host: localhost",
                type="permission_error",
                code="host_not_allowed",
            )

    async def read_body(self, request: Request, model_type: type[BaseModel]) -> BaseModel:
        """The request's JSON body validated as ``model_type``; APIError (400 / 408 / 413)."""
        limit = self.config.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            raise APIError(
                413, f"the request body is larger than {limit} bytes", code="request_too_large"
            )
        try:
            body = await asyncio.wait_for(_read(request, limit), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise APIError(
                408,
                f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s",
                code="request_timeout",
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

    async def handle(
        self, request: Request, handler, render=APIError.response, protocol: str | None = None
    ) -> Response:
        """``await handler(request)`` after the key check; an APIError (a RequestError too)
        is answered by ``render(error)`` (a protocol's own error shape; OpenAI's by default).
        Each request's log line (:mod:`.access_log`) is written when its answer is done."""
        ua = request.headers.get("user-agent")
        record = request.state.localspec_record = RequestRecord(
            request.method, request.url.path, ua, protocol
        )
        try:
            self.check_key(request)
            response = await handler(request)
        except APIError as exc:
            response = render(exc)
            record.error = exc.message
        except Exception as exc:
            record.status, record.error = 500, f"internal server error: {exc!r}"
            log_request(record)
            raise
        record.status = response.status_code
        if not record.log_later:
            log_request(record)
        return response

    def route(
        self,
        path: str,
        handler,
        methods=("POST",),
        render=APIError.response,
        protocol: str | None = None,
    ) -> Route:
        """A route answering ``path`` with ``handler(request)`` through :meth:`handle`."""

        async def endpoint(request: Request) -> Response:
            return await self.handle(request, handler, render, protocol)

        return Route(path, endpoint, methods=list(methods))

    # --- answering --------------------------------------------------------------------------

    async def run(
        self,
        http: Request,
        request: GenerationRequest,
        options: dict,
        shape,
        on_start: Callable | None = None,
    ) -> Response:
        """Queue ``request`` (with its :meth:`options`) and answer in ``shape``'s protocol: a
        stream of its events when ``request.stream``, else its whole response.  ``shape``
        gives ``stream_start()``, ``stream_events(events)``, ``stream_end(result,
        include_usage)``, ``stream_error(message)`` (lists of SSE text), ``whole(pieces,
        result)`` (a JSON body) and optionally ``keep_alive(progress)`` (default: an SSE
        comment).  ``on_start(generation)`` is called on the model's thread once the prompt
        is rendered.  A stream starts once the prompt is rendered, or after
        :data:`KEEPALIVE_S` in the queue; from then on it carries a keep-alive whenever
        nothing else was sent for KEEPALIVE_S (the prompt is being read)."""

        def start(model):
            generation = start_generation(model, request, options)
            if on_start is not None:
                on_start(generation)
            return generation

        record = _record(http)
        record.protocol = request.protocol
        job = Job(start, asyncio.get_running_loop(), logprobs=options.get("logprobs"))
        self.worker.submit(job)
        first = await _next(job, http, KEEPALIVE_S if request.stream else None)
        if first is None:  # the client left while the request waited or started
            record.cancelled = True
            if not self.worker.withdraw(job):
                self._log_once_stopped(job, record)
            return Response(status_code=499)
        if first is not _WAITING:
            _raise_for_start(first, request)
        if request.stream:
            record.log_later = True
            return StreamingResponse(
                self._sse(http, job, shape, request, record),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        response = await _whole(http, job, shape, record)
        if record.cancelled:
            self._log_once_stopped(job, record)
        return response

    def _log_once_stopped(self, job: Job, record: RequestRecord) -> None:
        """A cancelled request's log line, written once its generation has stopped (within one
        round, at most ``CANCEL_LOG_WAIT_S``), so that it says how long the prompt was and how
        much of it was cached; at once when the job had already ended."""
        record.log_later = True
        if job.finished:
            log_request(record)
            return
        task = asyncio.get_running_loop().create_task(_log_when_done(job, record))
        self._lines_waiting.add(task)
        task.add_done_callback(self._lines_waiting.discard)

    async def _sse(
        self, http: Request, job: Job, shape, request: GenerationRequest, record
    ) -> AsyncIterator[str]:
        """The stream's texts; a keep-alive whenever nothing went out for KEEPALIVE_S: while
        the prompt is read, or while the answer's text is held back (it may be a tool call)."""
        quiet = _Quiet()
        try:
            for text in shape.stream_start():
                yield text
            async for batch in _batches(job, http, quiet.left_s):
                if batch is None:
                    texts = _keep_alive(shape, job.prompt_progress()) if not quiet.answering else []
                else:
                    texts, quiet.answering = _stream_texts(shape, batch, request, record), True
                if not texts and quiet.due():
                    texts = _idle_keep_alive(shape)
                for text in texts:
                    yield text
                quiet.sent(texts)
        finally:
            job.cancel()  # the client left mid-stream (or the stream ended): stop within one round
            record.cancelled = record.cancelled or not job.finished
            self._log_once_stopped(job, record)


def _record(http: Request) -> RequestRecord:
    record = getattr(http.state, "localspec_record", None)
    if record is None:  # a handler called without ServerState.handle (tests)
        record = http.state.localspec_record = RequestRecord(http.method, http.url.path)
    return record


class _Quiet:
    """How long a stream has sent nothing; ``answering`` once the answer's events began."""

    def __init__(self):
        self.at, self.answering = time.monotonic(), False

    def left_s(self) -> float:
        return max(_POLL_S, KEEPALIVE_S - (time.monotonic() - self.at))

    def due(self) -> bool:
        return time.monotonic() - self.at >= KEEPALIVE_S

    def sent(self, texts: list[str]) -> None:
        if texts:
            self.at = time.monotonic()


async def _batches(job: Job, http: Request, wait_s: Callable[[], float]) -> AsyncIterator[list]:
    """The job's items, one batch per round or so, up to its end; None after ``wait_s()``
    of nothing; stops when the client is gone."""
    while True:
        item = await _next(job, http, wait_s())
        if item is _WAITING:
            yield None
            continue
        if item is None or await http.is_disconnected():
            return
        batch = [item]
        while not job.events.empty() and batch[-1][0] == "event":
            batch.append(job.events.get_nowait())
        yield batch
        if batch[-1][0] in ("done", "error", "skipped"):
            return


def _stream_texts(shape, batch: list, request: GenerationRequest, record) -> list[str]:
    """A batch of job items as the stream's texts: events, then the end (or an error event)."""
    events = [v for k, v in batch if k == "event"]
    out = shape.stream_events(events) if events else []
    kind, value = batch[-1]
    if kind == "done":
        record.observe(value)
        return out + shape.stream_end(value, request.include_usage)
    if kind in ("error", "skipped"):
        error = _start_error(batch[-1], request)
        record.error = error.message
        return out + shape.stream_error(error.message)
    return out


def _keep_alive(shape, progress: dict | None) -> list[str]:
    keep_alive = getattr(shape, "keep_alive", None)
    if keep_alive is not None:
        return keep_alive(progress)
    return [
        sse.comment("keep-alive" + (f" prompt_progress={json.dumps(progress)}" if progress else ""))
    ]


def _idle_keep_alive(shape) -> list[str]:
    """While the answer is held back: the protocol's own (Anthropic's ``ping``), else an SSE
    comment, which every client skips."""
    idle = getattr(shape, "idle_keep_alive", None)
    return idle() if idle is not None else [sse.comment("keep-alive")]


def _internal() -> APIError:
    return APIError(500, "internal server error", type="server_error", retry=True)


def _start_error(item: tuple, request: GenerationRequest) -> APIError | None:
    """The error a job's item means for the request (None: not an error)."""
    kind, value = item
    if kind == "error":
        return (
            from_localspec_error(value, request.paths.prompt)
            if isinstance(value, LocalspecError)
            else _internal()
        )
    if kind == "skipped":
        return APIError(503, "the server is shutting down", type="server_error", retry=True)
    return None


def _raise_for_start(first: tuple, request: GenerationRequest) -> None:
    """The job's first item: an error before any token is the request's answer."""
    error = _start_error(first, request)
    if error is not None:
        raise error


async def _whole(http: Request, job: Job, shape, record) -> Response:
    """The whole answer; a client that leaves first cancels the job (499)."""
    pieces: list = []
    while True:
        item = await _next(job, http)
        if item is None:
            record.cancelled = True
            return Response(status_code=499)
        kind, value = item
        if kind == "event":
            pieces.append(value)
        elif kind == "done":
            record.observe(value)
            return JSONResponse(shape.whole(pieces, value))
        elif kind == "error":
            raise _internal()


async def _read(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(
                413, f"the request body is larger than {limit} bytes", code="request_too_large"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def _log_when_done(job: Job, record: RequestRecord) -> None:
    async def take_counts() -> None:
        while True:
            kind, value = await job.events.get()
            if kind == "done":
                record.observe(value)
            if kind in ("done", "error", "skipped"):
                return

    try:
        await asyncio.wait_for(take_counts(), CANCEL_LOG_WAIT_S)
    except asyncio.TimeoutError:
        pass
    log_request(record)


async def _next(job: Job, request: Request, wait_s: float | None = None):
    """The job's next item; None (and the job cancelled) once the client is gone;
    ``_WAITING`` when ``wait_s`` passed with no item."""
    waited = 0.0
    while True:
        try:
            return await asyncio.wait_for(job.events.get(), _POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                job.cancel()
                return None
            waited += _POLL_S
            if wait_s is not None and waited >= wait_s:
                return _WAITING
