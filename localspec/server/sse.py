"""Server-sent events as the protocols write them: OpenAI's ``data:`` lines, and the named
``event:`` + ``data:`` pairs of the Anthropic Messages and OpenAI Responses streams."""

from __future__ import annotations

import json


def data(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def event(name: str, payload: dict) -> str:
    return f"event: {name}\n{data(payload)}"


def comment(text: str) -> str:
    """An SSE comment line (clients skip it): a keep-alive that any protocol's stream may carry."""
    return f": {text}\n\n"
