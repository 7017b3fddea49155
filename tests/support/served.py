"""A localspec server for tests: uvicorn in a thread on 127.0.0.1, stopped by the test."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import openai
import uvicorn

from localspec.server.app import ServerConfig, ServerState, create_app
from localspec.server.worker import ModelWorker

KEY = "test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningServer:
    def __init__(self, model, **config):
        self.port = free_port()
        self.app = create_app(model, ServerConfig(model_name="test-pair", **config))
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                timeout_graceful_shutdown=2,
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.05)
        self.base = f"http://127.0.0.1:{self.port}"

    @property
    def state(self) -> ServerState:
        """The app's public :class:`ServerState` (``app.state.localspec``)."""
        return self.app.state.localspec

    @property
    def worker(self) -> ModelWorker:
        return self.state.worker

    def client(self, key=KEY, **kw):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0, **kw)

    def wait_idle(self, timeout_s=30.0):
        deadline = time.time() + timeout_s
        while self.worker.busy or self.worker.waiting:
            assert time.time() < deadline, "the model thread did not become idle"
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)


def serve_once(body: bytes) -> str:
    """A local URL that answers one POST with ``body`` as an event stream."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.handle_request, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_port}"


def answer_batches(text: str, fmt=None, step: int = 5) -> tuple[list[list], object]:
    """``text`` read as the generation reads it, ``step`` characters an event: batches of
    events that carry ``content`` and ``calls`` (the last what the answer's end released),
    and the parser (its ``finish()`` and ``content``)."""
    from types import SimpleNamespace

    from localspec.decoding.tool_parser import ToolCallParser

    parser, batches = ToolCallParser(fmt), []
    for i in range(0, len(text), step):
        content, calls = parser.feed(text[i : i + step])
        batches.append(
            [SimpleNamespace(text=text[i : i + step], content=content, calls=tuple(calls))]
        )
    content, calls = parser.close()
    batches.append([SimpleNamespace(text="", content=content, calls=tuple(calls))])
    return batches, parser
