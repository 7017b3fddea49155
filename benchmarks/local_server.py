"""A server process for a benchmark: started, waited for on ``/health``, stopped."""

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


@contextmanager
def running(command: list[str], port: int, timeout_s: float = 300) -> Iterator[str]:
    """Start ``command`` (a server listening on ``port``), yield its base URL once
    ``/health`` answers; RuntimeError when it exits or does not come up in time."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{command[0]} did not come up on port {port}") from None
                time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        server.wait(60)
