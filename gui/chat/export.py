"""A conversation as Markdown (to read or share) and as JSON (to keep or load again).

Both export the path shown (see :mod:`gui.chat.store`): the messages in order, each answer
with its stats line (a reasoning model's thinking before it, apart); the JSON also keeps
every answer's token sources and stats, so :func:`from_json` gives back equal messages.
"""

from __future__ import annotations

import json

from .chat_view import format_stats
from .message import REASONING, Message, stored_segments

FORMAT = "localspec-conversation"
VERSION = 1


def to_markdown(title: str, messages: list[Message]) -> str:
    """``# title``, then each message under "## You" / "## Assistant" (answers keep their
    Markdown, code blocks included) with the answer's stats line in italics."""
    parts = [f"# {title}\n"]
    for m in messages:
        heading = (
            "You"
            if m.role == "user"
            else ("Plain decoding (no draft)" if m.kind == "baseline" else "Assistant")
        )
        if m.reasoning:
            parts.append(
                f"## {heading}\n\n<details><summary>Thinking</summary>\n\n"
                f"{m.reasoning.strip()}\n\n</details>\n"
            )
            parts.append(f"{m.content.rstrip()}\n")
        else:
            parts.append(f"## {heading}\n\n{m.content.rstrip()}\n")
        line = format_stats(m.stats, m.finish_reason) if m.role == "assistant" else ""
        if line:
            parts.append(f"*{line}*\n")
    return "\n".join(parts)


def to_json(title: str, messages: list[Message]) -> str:
    """``{"format", "version", "title", "messages": [{role, content, kind, finish_reason,
    stats, segments: [{text, source, p_target, p_draft}]}]}``, indented UTF-8 text; an
    answer with thinking also has ``reasoning`` and ``reasoning_segments`` (same shape)."""
    return json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "title": title,
            "messages": [
                {
                    "role": m.role,
                    "content": m.content,
                    "kind": m.kind,
                    "finish_reason": m.finish_reason,
                    "stats": m.stats,
                    "segments": m.segments_json(),
                    **_thinking_json(m),
                }
                for m in messages
            ],
        },
        indent=1,
        ensure_ascii=False,
    )


def _thinking_json(m: Message) -> dict:
    if not m.reasoning:
        return {}
    return {"reasoning": m.reasoning, "reasoning_segments": m.reasoning_segments_json()}


_SEGMENT_TYPES = {
    "text": (str,),
    "source": (str,),
    "p_target": (int, float, type(None)),
    "p_draft": (int, float, type(None)),
}


def from_json(text: str) -> tuple[str, list[Message]]:
    """(title, messages) from :func:`to_json`'s text.  Raises ValueError on anything
    else (not JSON, another format or version, a message without role or content, token
    segments or stats of the wrong shape)."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"not a JSON file: {type(exc).__name__}: {exc}"[:200]) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    if data.get("version") != VERSION:
        raise ValueError(
            f"{FORMAT} version {data.get('version')!r} is not supported (this reads {VERSION})"
        )
    raw = data.get("messages") or []
    if not isinstance(raw, list):
        raise ValueError("messages must be a list")
    messages = [_message(i, m) for i, m in enumerate(raw)]
    title = data.get("title")
    return (title if isinstance(title, str) and title else "Imported chat"), messages


def _message(i: int, m) -> Message:
    if (
        not isinstance(m, dict)
        or m.get("role") not in ("user", "assistant")
        or not isinstance(m.get("content"), str)
    ):
        raise ValueError(f"message {i + 1} has no valid role and content")
    segments, thinking = m.get("segments") or [], m.get("reasoning_segments") or []
    if not (_valid_segments(segments) and _valid_segments(thinking)):
        raise ValueError(
            f"message {i + 1}: segments must be objects with text, source, p_target, p_draft"
        )
    reasoning = m.get("reasoning", "")
    if not isinstance(reasoning, str):
        raise ValueError(f"message {i + 1}: reasoning must be text")
    stats = m.get("stats")
    if stats is not None and not (
        isinstance(stats, dict)
        and all(
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            or isinstance(v, (str, dict))
            or v is None
            for v in stats.values()
        )
    ):
        raise ValueError(f"message {i + 1}: stats must be an object of numbers")
    finish, kind = m.get("finish_reason"), m.get("kind", "chat")
    if not isinstance(finish, (str, type(None))) or kind not in ("chat", "baseline"):
        raise ValueError(f"message {i + 1}: bad finish_reason or kind")
    message = Message(m["role"], m["content"], stored_segments(segments), stats, finish, kind)
    message.reasoning, message.reasoning_segments = reasoning, stored_segments(thinking, REASONING)
    return message


def _valid_segments(segments) -> bool:
    return isinstance(segments, list) and all(
        isinstance(s, dict)
        and set(s) == set(_SEGMENT_TYPES)
        and all(
            isinstance(s[k], t) and not isinstance(s[k], bool) for k, t in _SEGMENT_TYPES.items()
        )
        for s in segments
    )
