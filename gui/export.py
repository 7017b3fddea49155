"""A conversation as Markdown (to read or share) and as JSON (to keep or load again).

Both export the path shown (see :mod:`gui.store`): the messages in order, each answer
with its stats line; the JSON also keeps every answer's token sources and stats, so
:func:`from_json` gives back equal messages.
"""

from __future__ import annotations

import json

from .chat_view import format_stats
from .message import Message, Segment

FORMAT = "localspec-conversation"
VERSION = 1


def to_markdown(title: str, messages: list[Message]) -> str:
    """``# title``, then each message under "## You" / "## Assistant" (answers keep their
    Markdown, code blocks included) with the answer's stats line in italics."""
    parts = [f"# {title}\n"]
    for m in messages:
        heading = "You" if m.role == "user" else ("Plain decoding (no draft)" if m.kind == "baseline" else "Assistant")
        parts.append(f"## {heading}\n\n{m.content.rstrip()}\n")
        line = format_stats(m.stats, m.finish_reason) if m.role == "assistant" else ""
        if line:
            parts.append(f"*{line}*\n")
    return "\n".join(parts)


def to_json(title: str, messages: list[Message]) -> str:
    """``{"format", "version", "title", "messages": [{role, content, kind, finish_reason,
    stats, segments: [{text, source, p_target, p_draft}]}]}``, indented UTF-8 text."""
    return json.dumps({"format": FORMAT, "version": VERSION, "title": title, "messages": [
        {"role": m.role, "content": m.content, "kind": m.kind, "finish_reason": m.finish_reason,
         "stats": m.stats, "segments": m.segments_json()} for m in messages]}, indent=1, ensure_ascii=False)


def from_json(text: str) -> tuple[str, list[Message]]:
    """(title, messages) from :func:`to_json`'s text.  Raises ValueError on anything
    else (not JSON, another format, a message without role or content)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not a JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    messages = []
    for i, m in enumerate(data.get("messages") or []):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") or not isinstance(m.get("content"), str):
            raise ValueError(f"message {i + 1} has no valid role and content")
        segments = [Segment(**s) for s in m.get("segments") or []]
        messages.append(Message(m["role"], m["content"], segments, m.get("stats"), m.get("finish_reason"),
                                m.get("kind", "chat")))
    return str(data.get("title", "Imported chat")), messages
