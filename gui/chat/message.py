"""The data a chat holds: messages and, for answers, the source of every piece of text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Segment:
    """The text one token added, where it came from (a ``TokenSource`` value:
    "accepted", "correction", "bonus", "target") and, when sampling, its probability
    under the target and the draft (0..1, None in greedy mode)."""

    text: str
    source: str
    p_target: float | None = None
    p_draft: float | None = None

    @classmethod
    def from_event(cls, event) -> Segment:
        return cls(event.text, getattr(event.source, "value", str(event.source)), event.p_target, event.p_draft)


@dataclass
class Message:
    """One chat message.  ``role``: "user" or "assistant".  ``kind``: "chat", or
    "baseline" for a plain-decoding rerun of the previous answer (never sent back to
    the model).  ``stats`` is ``GenerationStats.to_dict()`` (times in seconds).  A
    regenerated answer or an edited question is a new version: a sibling under the
    same ``parent_id`` (see :mod:`gui.chat.store`)."""

    role: str
    content: str
    segments: list[Segment] = field(default_factory=list)
    stats: dict | None = None
    finish_reason: str | None = None
    kind: str = "chat"
    id: int | None = None
    parent_id: int | None = None  # the message this one follows in the conversation's tree
    versions: tuple[int, int] = (1, 1)  # (this one's number, how many) among its siblings

    def segments_json(self) -> list[dict]:
        return [asdict(s) for s in self.segments]


def chat_history(messages: list[Message], system_prompt: str = "") -> list[dict]:
    """The OpenAI-style message list sent to the model (baseline reruns left out)."""
    history = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    history += [{"role": m.role, "content": m.content} for m in messages if m.kind == "chat"]
    return history
