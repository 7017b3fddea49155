"""The data a chat holds: messages and, for answers, the source of every piece of text,
the answer's and its thinking's apart."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

REASONING = "reasoning"  # a Segment's channel for a reasoning model's thinking
CONTENT = "content"


@dataclass
class Segment:
    """The text one token added, where it came from (a ``TokenSource`` value:
    "accepted", "correction", "bonus", "target", "forced") and, when sampling, its probability
    under the target and the draft (0..1, None in greedy mode).  ``channel``: "content"
    (the answer) or "reasoning" (a reasoning model's thinking); not stored, since a
    message keeps the two in lists of their own."""

    text: str
    source: str
    p_target: float | None = None
    p_draft: float | None = None
    channel: str = CONTENT

    @classmethod
    def from_event(cls, event) -> Segment:
        return cls(
            event.text,
            getattr(event.source, "value", str(event.source)),
            event.p_target,
            event.p_draft,
        )

    def stored(self) -> dict:
        """The fields a store or an export keeps: text, source, p_target, p_draft."""
        fields = asdict(self)
        del fields["channel"]
        return fields


def event_segments(event) -> list[Segment]:
    """The segments of one ``TokenEvent``: its thinking text (``event.reasoning``) as a
    "reasoning" segment, its answer text as a "content" one; one token may release both.
    An event with neither (a marker such as ``</think>``, or a model without a reasoning
    format writing nothing) gives one empty content segment, as before reasoning models."""
    out = []
    thinking = getattr(event, "reasoning", "")
    if thinking:
        seg = Segment.from_event(event)
        seg.text, seg.channel = thinking, REASONING
        out.append(seg)
    if event.text or not thinking:
        out.append(Segment.from_event(event))
    return out


@dataclass
class Message:
    """One chat message.  ``role``: "user" or "assistant".  ``kind``: "chat", or
    "baseline" for a plain-decoding rerun of the previous answer (never sent back to
    the model).  ``stats`` is ``GenerationStats.to_dict()`` (times in seconds; with a
    reasoning model ``thinking_s``, the seconds from the request to the end of the
    thinking).  A regenerated answer or an edited question is a new version: a sibling
    under the same ``parent_id`` (see :mod:`gui.chat.store`).  ``content`` and
    ``segments`` are the answer only; a reasoning model's thinking is ``reasoning`` (its
    text, without the ``<think>`` tags) and ``reasoning_segments``."""

    role: str
    content: str
    segments: list[Segment] = field(default_factory=list)
    stats: dict | None = None
    finish_reason: str | None = None
    kind: str = "chat"
    id: int | None = None
    parent_id: int | None = None  # the message this one follows in the conversation's tree
    versions: tuple[int, int] = (1, 1)  # (this one's number, how many) among its siblings
    reasoning: str = ""
    reasoning_segments: list[Segment] = field(default_factory=list)

    def segments_json(self) -> list[dict]:
        return [s.stored() for s in self.segments]

    def reasoning_segments_json(self) -> list[dict]:
        return [s.stored() for s in self.reasoning_segments]


def stored_segments(rows: list[dict], channel: str = CONTENT) -> list[Segment]:
    """Segments from their stored fields (:meth:`Segment.stored`), labelled ``channel``."""
    return [Segment(**row, channel=channel) for row in rows]


def chat_history(messages: list[Message], system_prompt: str = "") -> list[dict]:
    """The OpenAI-style message list sent to the model (baseline reruns left out).  Earlier
    answers go back without their thinking, as the reasoning models' templates expect."""
    history = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    history += [{"role": m.role, "content": m.content} for m in messages if m.kind == "chat"]
    return history
