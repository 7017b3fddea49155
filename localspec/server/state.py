"""The server's state and plumbing shared by every protocol: :class:`ServerConfig`,
:class:`ServerState` (the model, its worker, the key and ``Host`` checks, reading a body,
the limits a :class:`~localspec.server.request.GenerationRequest` is made under; answering it in a
protocol's shape, whole or streamed, is :class:`~localspec.server.answering.Answering`'s)."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from localspec.server.access_log import RequestRecord, log_request
from localspec.server.answering import Answering
from localspec.server.errors import APIError, from_validation_error
from localspec.server.metrics import Metrics
from localspec.server.reasoning_fields import ReasoningKeys
from localspec.server.request import Limits
from localspec.server.served_model import ServedModel
from localspec.server.worker import DEFAULT_QUEUE, ModelWorker

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
BODY_TIMEOUT_S = 60.0  # a body announced but never sent does not hold a connection forever
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


class ServerState(Answering):
    """One served model: ``model`` (a :class:`~localspec.api.SpeculativeModel`), ``config``,
    ``worker`` (its :class:`ModelWorker`), ``metrics``, ``tool_format`` (the chat template's
    tool-call format, None: none), ``fim_tokens`` and ``keys`` (this server's
    :class:`~localspec.server.reasoning_fields.ReasoningKeys`).  Every protocol's routes take it."""

    def __init__(self, model: ServedModel, config: ServerConfig, worker: ModelWorker):
        self.tool_format = model.tool_format  # read once, not per request
        self.fim_tokens = model.target.fim_tokens()
        self.model, self.config, self.worker = model, config, worker
        self.created = int(time.time())
        self.keys = ReasoningKeys()
        self._reads_enable = model.reasoning.format.reads_enable_thinking is True
        self.worker.metrics = self.metrics = Metrics(model, worker)
        self._lines_waiting: set[asyncio.Task] = set()  # cancelled requests' log lines

    @property
    def supports_tools(self) -> bool:
        return self.tool_format is not None

    def limits(self) -> Limits:
        """What a request is checked against (read from ``config`` each time)."""
        limit = self.config.max_tokens_limit or self.model.target.n_ctx
        fim = "pre" in self.fim_tokens
        budget = self.model.reasoning.load_budget
        defaults = self.config.defaults
        return Limits(
            self.config.model_name,
            limit,
            self.supports_tools,
            fim,
            defaults,
            budget,
            self._reads_enable,
            self.model.default_draft,
        )

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
