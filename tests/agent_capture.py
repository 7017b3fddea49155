"""A logging stub of the model APIs that coding agents call, to capture what they really send.

Run it, point an agent at it, and every request lands in ``OUT/PREFIX-NN-SLUG.json``:
``{"method", "path", "query", "headers", "body", "stub_reply"}`` (auth header values replaced by
``<redacted>``, each ``--replace OLD=NEW`` applied to the whole record).  It answers just well enough
for the agent to go on:

- Anthropic Messages (``POST /v1/messages``, SSE when ``stream``), ``count_tokens``;
- OpenAI Responses (``POST /v1/responses``, SSE when ``stream``);
- OpenAI chat completions (``POST /v1/chat/completions``, SSE with ``data: [DONE]``), ``GET /v1/models``.

The first answer of a conversation whose tools include a file-writing tool (``Write``, ``write``,
``apply_patch``, ``shell`` …) is a call of it that creates ``hello.py``; once the conversation carries a
tool result the answer is plain text, so the agent's second turn is captured too.  A request without
tools (aider, titles, summaries) gets text: a whole-file or SEARCH/REPLACE edit when its prompt asks
for one.  Standard library only::

    python tests/agent_capture.py --port 8765 --out tests/data/agents --prefix claude-code-2.1.332 \\
        --workdir /tmp/tmp.abc --replace /tmp/tmp.abc=/tmp/REPO
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

HELLO = "print('hello')\n"
DONE_TEXT = "Created hello.py, which prints hello."
SECRET_HEADER_WORDS = ("auth", "key", "token", "cookie", "secret")
MODEL = "stub-model"
# per-install random identifiers that are not the point of a fixture
SCRUB = [(re.compile(r'(device_id\\":\\")[0-9a-f]{64}'), r"\g<1>" + "0" * 64)]


def redact_headers(headers) -> dict:
    """Headers as a dict, values of auth-like names (``authorization``, ``x-api-key`` …) replaced."""
    out = {}
    for name, value in headers.items():
        secret = any(word in name.lower() for word in SECRET_HEADER_WORDS)
        out[name.lower()] = "<redacted>" if secret else value
    return out


def has_tool_result(protocol: str, body: dict) -> bool:
    """Whether the conversation already carries the result of a tool call."""
    if protocol == "anthropic":
        for message in body.get("messages", []):
            content = message.get("content")
            if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
                return True
        return False
    if protocol == "responses":
        items = body.get("input") if isinstance(body.get("input"), list) else []
        return any(str(item.get("type", "")).endswith("_output") for item in items)
    return any(message.get("role") == "tool" for message in body.get("messages", []))


def tool_names(protocol: str, body: dict) -> list[str]:
    """Names of the declared tools, whatever the protocol's tool shape."""
    names = []
    for tool in body.get("tools") or []:
        if protocol == "chat" and "function" in tool:
            names.append(tool["function"].get("name", ""))
        else:
            names.append(tool.get("name", ""))
    return names


def tool_kind(body: dict, name: str) -> str:
    """A Responses tool's type (``function`` or ``custom``)."""
    for tool in body.get("tools") or []:
        if tool.get("name") == name:
            return tool.get("type", "function")
    return "function"


def plan_call(protocol: str, body: dict, workdir: str) -> dict | None:
    """The tool call that writes hello.py: ``{"name", "input" (dict) or "text" (str), "kind"}``, or None."""
    names = tool_names(protocol, body)
    path = f"{workdir}/hello.py"
    patch = f"*** Begin Patch\n*** Add File: {path}\n+print('hello')\n*** End Patch\n"
    shell_cmd = f"printf \"print('hello')\\n\" > {path}"
    for name in names:
        if name == "Write":
            return {"name": name, "input": {"file_path": path, "content": HELLO}}
        if name == "write":
            return {"name": name, "input": {"filePath": path, "content": HELLO}}
    if "apply_patch" in names:
        if tool_kind(body, "apply_patch") == "custom":
            return {"name": "apply_patch", "text": patch}
        return {"name": "apply_patch", "input": {"input": patch}}
    if "exec_command" in names:
        return {"name": "exec_command", "input": {"cmd": shell_cmd, "workdir": workdir}}
    for name in ("shell", "shell_command", "bash", "Bash"):
        if name in names:
            command = ["bash", "-lc", shell_cmd] if name == "shell" else shell_cmd
            return {"name": name, "input": {"command": command, "workdir": workdir}}
    return None


def prompt_text(body: dict) -> str:
    """All of a request's text, flattened, to look for the edit format its prompt asks for."""
    return json.dumps(body, ensure_ascii=False)


def plan_text(body: dict) -> str:
    """A text answer: an aider-style edit when a tool-less prompt asks for one, else a short final answer."""
    if body.get("tools"):
        return DONE_TEXT
    text = prompt_text(body)
    if "SEARCH/REPLACE" in text:
        return f"hello.py\n```python\n<<<<<<< SEARCH\n=======\n{HELLO}>>>>>>> REPLACE\n```\n"
    if "file listing" in text.lower() or "whole file" in text.lower():
        return f"hello.py\n```python\n{HELLO}```\n"
    return DONE_TEXT


def sse(events: list[tuple[str | None, dict | str]]) -> bytes:
    """Server-sent events text: ``event:`` lines where a name is given, ``data:`` JSON or raw text."""
    lines = []
    for name, data in events:
        if name:
            lines.append(f"event: {name}")
        lines.append("data: " + (data if isinstance(data, str) else json.dumps(data)))
        lines.append("")
    return ("\n".join(lines) + "\n").encode()


def anthropic_reply(body: dict, call: dict | None, text: str) -> tuple[bytes, str]:
    """Anthropic Messages answer (SSE or JSON) and its content type."""
    usage = {
        "input_tokens": 100,
        "output_tokens": 10,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    if call:
        block = {
            "type": "tool_use",
            "id": "toolu_stub01",
            "name": call["name"],
            "input": call["input"],
        }
        stop = "tool_use"
    else:
        block = {"type": "text", "text": text}
        stop = "end_turn"
    message = {
        "id": "msg_stub01",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", MODEL),
    }
    if not body.get("stream"):
        full = {
            **message,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        return json.dumps(full).encode(), "application/json"
    start = {**block, "input": {}} if call else {"type": "text", "text": ""}
    delta = (
        {"type": "input_json_delta", "partial_json": json.dumps(call["input"])}
        if call
        else {"type": "text_delta", "text": text}
    )
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    **message,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": start},
        ),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return sse(events), "text/event-stream"


def responses_item(call: dict | None, text: str) -> dict:
    """The one output item of a Responses answer: a message, a function_call or a custom_tool_call."""
    if call and "text" in call:
        return {
            "type": "custom_tool_call",
            "id": "ctc_stub01",
            "call_id": "call_stub01",
            "name": call["name"],
            "input": call["text"],
            "status": "completed",
        }
    if call:
        return {
            "type": "function_call",
            "id": "fc_stub01",
            "call_id": "call_stub01",
            "name": call["name"],
            "arguments": json.dumps(call["input"]),
            "status": "completed",
        }
    return {
        "type": "message",
        "id": "msg_stub01",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_reply(body: dict, call: dict | None, text: str) -> tuple[bytes, str]:
    """OpenAI Responses answer (SSE or JSON) and its content type."""
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 110,
    }
    item = responses_item(call, text)
    base = {
        "id": "resp_stub01",
        "object": "response",
        "created_at": int(time.time()),
        "model": body.get("model", MODEL),
    }
    done = {**base, "status": "completed", "output": [item], "usage": usage}
    if not body.get("stream"):
        return json.dumps(done).encode(), "application/json"
    pending = {**item, "status": "in_progress"}
    if item["type"] == "message":
        pending["content"] = []
    events = [
        {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
        {
            "type": "response.in_progress",
            "response": {**base, "status": "in_progress", "output": []},
        },
        {"type": "response.output_item.added", "output_index": 0, "item": pending},
    ]
    if item["type"] == "message":
        part = {"type": "output_text", "text": "", "annotations": []}
        ids = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        events += [
            {"type": "response.content_part.added", **ids, "part": part},
            {"type": "response.output_text.delta", **ids, "delta": text},
            {"type": "response.output_text.done", **ids, "text": text},
            {"type": "response.content_part.done", **ids, "part": {**part, "text": text}},
        ]
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": done},
    ]
    numbered = [(e["type"], {**e, "sequence_number": i}) for i, e in enumerate(events)]
    return sse(numbered), "text/event-stream"


def chat_reply(body: dict, call: dict | None, text: str) -> tuple[bytes, str]:
    """OpenAI chat completions answer (SSE chunks ending ``data: [DONE]``, or JSON) and its content type."""
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    base = {"id": "chatcmpl-stub01", "created": int(time.time()), "model": body.get("model", MODEL)}
    if call:
        tool_call = {
            "id": "call_stub01",
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["input"])},
        }
        message, finish = (
            {"role": "assistant", "content": None, "tool_calls": [tool_call]},
            "tool_calls",
        )
    else:
        message, finish = {"role": "assistant", "content": text}, "stop"
    if not body.get("stream"):
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return json.dumps(
            {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        ).encode(), ("application/json")
    chunk = {**base, "object": "chat.completion.chunk"}
    delta = {
        "role": "assistant",
        **({"tool_calls": [{"index": 0, **tool_call}]} if call else {"content": text}),
    }
    events = [
        (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
        (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, {**chunk, "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return sse(events), "text/event-stream"


REPLIES = {"anthropic": anthropic_reply, "responses": responses_reply, "chat": chat_reply}


def protocol_of(path: str) -> str | None:
    """Which protocol a POST path speaks, or None."""
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/chat/completions"):
        return "chat"
    return None


class Recorder:
    """Numbers the requests and writes each one as pretty JSON under ``out``."""

    def __init__(self, out: Path, prefix: str, replacements: list[tuple[str, str]]):
        self.out, self.prefix, self.replacements = out, prefix, replacements
        self.counter, self.lock = itertools.count(1), threading.Lock()
        out.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict) -> Path:
        text = json.dumps(record, indent=2, ensure_ascii=False)
        for old, new in self.replacements:
            text = text.replace(old, new)
        for pattern, new in SCRUB:
            text = pattern.sub(new, text)
        parts = record["path"].strip("/").split("/")
        slug = (
            "-".join(parts[-2:] if parts[-1] == "completions" else parts[-1:]).replace("_", "-")
            or "root"
        )
        with self.lock:
            path = self.out / f"{self.prefix}-{next(self.counter):02d}-{slug}.json"
            path.write_text(text + "\n")
        return path


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    recorder: Recorder
    workdir: str

    def log_message(self, fmt, *args):  # one line per request on stderr, like a server log
        print(f"[capture] {self.command} {self.path} -> " + (fmt % args), flush=True)

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while size := int(self.rfile.readline().strip() or b"0", 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            raw = gzip.decompress(raw)
        return raw

    def answer(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        self.handle_any()

    def do_HEAD(self):  # Claude Code's connectivity probe (HEAD /api/hello): logged, answered empty
        self.recorder.write(
            {
                "method": "HEAD",
                "path": urlsplit(self.path).path,
                "query": parse_qs(urlsplit(self.path).query),
                "headers": redact_headers(self.headers),
                "body": None,
                "stub_reply": "200 empty",
            }
        )
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        self.handle_any()

    def handle_any(self) -> None:
        url = urlsplit(self.path)
        raw = self.read_body() if self.command == "POST" else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        status, payload, content_type, note = self.reply(url.path, body)
        record = {
            "method": self.command,
            "path": url.path,
            "query": parse_qs(url.query),
            "headers": redact_headers(self.headers),
            "body": body,
            "stub_reply": note,
        }
        self.recorder.write(record)
        self.answer(status, payload, content_type)

    def reply(self, path: str, body) -> tuple[int, bytes, str, str]:
        """(status, payload, content type, a note of what was answered)."""
        if self.command == "GET" and path.endswith("/models"):
            models = {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "owned_by": "stub"}],
            }
            return 200, json.dumps(models).encode(), "application/json", "model list"
        if path.endswith("/count_tokens") and isinstance(body, dict):
            return (
                200,
                json.dumps({"input_tokens": 100}).encode(),
                "application/json",
                "count_tokens 100",
            )
        protocol = protocol_of(path)
        if self.command != "POST" or protocol is None or not isinstance(body, dict):
            error = {
                "type": "error",
                "error": {"type": "not_found_error", "message": f"stub: no {path}"},
            }
            return 404, json.dumps(error).encode(), "application/json", "404"
        call = None if has_tool_result(protocol, body) else plan_call(protocol, body, self.workdir)
        text = plan_text(body)
        payload, content_type = REPLIES[protocol](body, call, text)
        note = f"tool call {call['name']}" if call else f"text: {text[:60]!r}"
        return (
            200,
            payload,
            content_type,
            f"{protocol} {'stream' if body.get('stream') else 'json'}; {note}",
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", type=Path, required=True, help="folder for the request files")
    parser.add_argument(
        "--prefix", required=True, help="file name prefix, e.g. claude-code-2.1.332"
    )
    parser.add_argument(
        "--workdir", required=True, help="the agent's repo: hello.py is written there"
    )
    parser.add_argument(
        "--replace", action="append", default=[], metavar="OLD=NEW", help="text to rewrite"
    )
    args = parser.parse_args(argv)
    replacements = [tuple(pair.split("=", 1)) for pair in args.replace]
    Handler.recorder = Recorder(args.out, args.prefix, replacements)
    Handler.workdir = args.workdir
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"[capture] listening on http://127.0.0.1:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
