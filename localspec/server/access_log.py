"""One log line per request, as llama-server prints them: :class:`RequestRecord` (what the
line says), :func:`configure` (where lines go, as text or JSON), :func:`log_request`.

The JSON form is one object per line: ``{"event": "request", "protocol", "method", "path",
"status", "user_agent", "prompt_tokens", "cached_tokens", "completion_tokens", "drafted",
"accepted", "ttft_s", "duration_s", "cancelled", "error"}`` (counts in tokens, times in
seconds, null where a request did not get that far); other server notes are
``{"event": "note", "level", "message"}``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field

log = logging.getLogger("localspec.server.requests")
FORMATS = ("text", "json")


@dataclass
class RequestRecord:
    """What one request's log line says; ``protocol`` None for the server's own routes."""

    method: str
    path: str
    user_agent: str | None = None
    protocol: str | None = None
    status: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    ttft_s: float | None = None
    cancelled: bool = False
    error: str | None = None
    log_later: bool = (
        False  # written when the stream ends or a cancelled generation stops, not by the handler
    )
    started: float = field(default_factory=time.perf_counter)

    def observe(self, result) -> None:
        """Take the counts of a finished :class:`~localspec.decoding.stats.GenerationResult`."""
        s = result.stats
        self.prompt_tokens, self.cached_tokens = s.prompt_tokens, s.prompt_cached_tokens
        self.completion_tokens, self.drafted, self.accepted = (
            len(result.tokens),
            s.drafted_tokens,
            s.accepted_tokens,
        )
        self.ttft_s = round(s.ttft_s, 3)
        self.cancelled = self.cancelled or result.finish_reason == "cancelled"

    def fields(self) -> dict:
        keys = (
            "protocol",
            "method",
            "path",
            "status",
            "user_agent",
            "prompt_tokens",
            "cached_tokens",
        )
        keys += ("completion_tokens", "drafted", "accepted", "ttft_s")
        out = {"event": "request", **{k: getattr(self, k) for k in keys}}
        duration = round(time.perf_counter() - self.started, 3)
        return {**out, "duration_s": duration, "cancelled": self.cancelled, "error": self.error}


def text_line(f: dict) -> str:
    """``POST /v1/messages 200 anthropic.messages prompt 11703 (cached 0) gen 45 draft 30/22
    ttft 350.1s 360.2s ua="claude-cli/2.1.332"`` (plus ``cancelled`` and ``error="…"``)."""
    parts = [f["method"], f["path"], str(f["status"]), f["protocol"] or "-"]
    if f["prompt_tokens"] is not None:
        parts.append(f"prompt {f['prompt_tokens']} (cached {f['cached_tokens']})")
        parts.append(
            f"gen {f['completion_tokens']} draft {f['accepted']}/{f['drafted']} ttft "
            f"{f['ttft_s']:.2f}s"
        )
    parts.append(f"{f['duration_s']:.2f}s")
    if f["cancelled"]:
        parts.append("cancelled")
    parts.append(f"ua={json.dumps(f['user_agent'])}")
    if f["error"]:
        parts.append(f"error={json.dumps(f['error'])}")
    return " ".join(parts)


class LineFormatter(logging.Formatter):
    """Request records (``extra={"request": fields}``) and other notes, as text or JSON lines."""

    def __init__(self, fmt: str = "text"):
        super().__init__()
        self.json = fmt == "json"

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "request", None)
        if self.json:
            note = {
                "event": "note",
                "level": record.levelname.lower(),
                "message": record.getMessage(),
            }
            return json.dumps(fields if fields is not None else note)
        return "localspec: " + (text_line(fields) if fields is not None else record.getMessage())


def configure(fmt: str = "text", stream=None) -> logging.Handler:
    """Write the server's log (``localspec.server``: request lines and notes) to ``stream``
    (default stderr) in ``fmt`` ("text" or "json"); returns the handler (to remove it)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(LineFormatter(fmt))
    server_log = logging.getLogger("localspec.server")
    server_log.addHandler(handler)
    server_log.setLevel(logging.INFO)
    server_log.propagate = False
    return handler


def log_request(record: RequestRecord) -> None:
    fields = record.fields()
    log.info(
        "%s %s %s", fields["method"], fields["path"], fields["status"], extra={"request": fields}
    )
