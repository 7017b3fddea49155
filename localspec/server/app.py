"""``localspec serve``: an OpenAI-compatible HTTP server over one loaded model pair.

Built on Starlette (routing, SSE through ``StreamingResponse``) served by uvicorn, with
request bodies validated by pydantic models.  Endpoints: ``GET /health``, ``GET /metrics``
(Prometheus counters, :mod:`.metrics`), ``GET /v1/models``; each protocol in its own module,
which translates its body into one :class:`~localspec.server.request.GenerationRequest` and
the answer back into its shapes: OpenAI's ``POST /v1/chat/completions`` and
``POST /v1/completions`` (:mod:`.openai_chat`), llama-server's ``POST /infill``
(:mod:`.infill`), Anthropic's ``POST /v1/messages`` (:mod:`.anthropic_messages`), OpenAI's
``POST /v1/responses`` (:mod:`.openai_responses`).  What they share, the key check, body
reading, queueing and streaming, is :class:`~localspec.server.state.ServerState`.

The model's workers (:class:`ModelWorker`, one thread per slot, ``--parallel``) run
requests concurrently, their target decodes batched; the rest wait in a bounded FIFO
queue (a full one answers 503 with ``Retry-After``).  A client that disconnects cancels
its generation after the current speculative round, and a queued request whose client
left never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from localspec.errors import InvalidOptionError
from localspec.server import anthropic_messages, infill, openai_chat, openai_responses
from localspec.server.errors import APIError
from localspec.server.metrics import CONTENT_TYPE as METRICS_TYPE
from localspec.server.state import LOOPBACK_HOSTS, ServerConfig, ServerState, host_allowed
from localspec.server.worker import ModelWorker

__all__ = [
    "LOOPBACK_HOSTS",
    "ServerConfig",
    "ServerState",
    "check_port_free",
    "create_app",
    "host_allowed",
]

log = logging.getLogger("localspec.server")

PROTOCOLS = (openai_chat, infill, anthropic_messages, openai_responses)  # each gives routes(state)


def create_app(model, config: ServerConfig, worker: ModelWorker | None = None) -> Starlette:
    """The ASGI app serving ``model`` (a :class:`~localspec.api.SpeculativeModel`).  A
    ``worker`` may be passed in; otherwise one is started, and it is closed when the app
    shuts down.  ``app.state.localspec`` is its :class:`ServerState`."""
    own_worker = worker is None
    state = ServerState(model, config, worker or ModelWorker(model, config.queue_size))

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
    app = Starlette(
        routes=[
            *_routes(state),
            *(route for protocol in PROTOCOLS for route in protocol.routes(state)),
        ],
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.router.redirect_slashes = (
        False  # "/v1/chat/completions/" is a 404, not a redirect around the key check
    )
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


def _routes(state: ServerState) -> list[Route]:
    """``GET /health``, ``/metrics``, ``/v1/models`` and ``/v1/models/{id}``."""

    async def health(request: Request) -> Response:
        worker = state.worker
        answer = {
            "status": "ok",
            "model": state.config.model_name,
            "busy": worker.busy,
            "running": worker.running,
        }
        return JSONResponse({**answer, "waiting": worker.waiting, "slots": state.model.parallel})

    def model_object(model_id: str) -> dict:
        drafter = state.model.builtin_drafter
        return {
            "id": model_id,
            "object": "model",
            "created": state.created,
            "owned_by": "localspec",
            **({"builtin_drafter": drafter} if drafter else {}),
        }

    async def metrics(_):
        return Response(state.metrics.render(), media_type=METRICS_TYPE)

    async def models(_):
        return JSONResponse({"object": "list", "data": [model_object(state.config.model_name)]})

    async def model_by_id(request: Request):
        """The loaded pair under any id, as every request is served by it."""
        return JSONResponse(model_object(request.path_params["model_id"]))

    async def hello(_):
        """Claude Code's connectivity probe (``HEAD /api/hello``): an empty 200."""
        return Response(status_code=200)

    return [
        Route("/health", health, methods=["GET"]),  # no key: a load balancer's probe
        Route(
            "/api/hello", hello, methods=["HEAD", "GET"]
        ),  # no key: Claude Code probes without one
        state.route("/metrics", metrics, methods=["GET"]),
        state.route("/v1/models", models, methods=["GET"]),
        state.route("/v1/models/{model_id:path}", model_by_id, methods=["GET"]),
    ]


def check_port_free(host: str, port: int) -> None:
    """Refuse a port that is taken before spending a minute loading models."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise InvalidOptionError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
