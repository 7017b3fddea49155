"""The servers a benchmark talks to: a ``localspec serve`` started for it (waited for on
``/health``, stopped after), a ``llama-server`` binary started the same way, or an
OpenAI-compatible server already running (``--endpoint URL``: llama-server, vLLM, ...)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def localspec_serve(port: int, *args: str) -> list[str]:
    """``localspec serve`` from this interpreter's environment, as the README starts it."""
    return [str(Path(sys.executable).with_name("localspec")), "serve", "--port", str(port), *args]


def llama_server(binary: str, port: int, *args: str) -> list[str]:
    """llama.cpp's ``llama-server`` at ``binary`` on ``port`` with ``args``."""
    return [binary, *args, "--port", str(port)]


def base_url(endpoint: str) -> str:
    """A server's base URL from what a user passes as ``--endpoint``: ``http://host:port``,
    with or without a trailing ``/v1`` or ``/``."""
    url = endpoint.rstrip("/")
    return url.removesuffix("/v1").rstrip("/")


@contextmanager
def running(command: list[str], port: int, timeout_s: float = 300) -> Iterator[str]:
    """Start ``command`` (a server listening on ``port``), yield its base URL once
    ``/health`` answers; RuntimeError when it exits or does not come up in time."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(server, base, command[0], timeout_s)
        yield base
    finally:
        server.terminate()
        server.wait(60)


@contextmanager
def serving(*args: str, endpoint: str | None = None) -> Iterator[str]:
    """The base URL of a fresh ``localspec serve ARGS`` (stopped on exit), or of ``endpoint``
    when one is given (left running)."""
    if endpoint:
        yield base_url(endpoint)
        return
    port = free_port()
    with running(localspec_serve(port, *args), port) as base:
        yield base


def _wait_healthy(server: subprocess.Popen, base: str, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not come up on {base}") from None
            time.sleep(0.5)


@contextmanager
def in_process(model, name: str = "localspec") -> Iterator[str]:
    """The base URL of a server on ``model`` (a loaded SpeculativeModel) in this process, on a
    thread of its own: for a benchmark that must reach into the model between requests
    (empty its cache); every other benchmark starts ``localspec serve`` (:func:`serving`)."""
    import threading

    import uvicorn

    from localspec.server.app import ServerConfig, create_app

    port = free_port()
    app = create_app(model, ServerConfig(model_name=name))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
