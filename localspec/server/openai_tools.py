"""Tool calls as the protocols stream them, rendered from what the generation read: each
token event carries its ``content`` (the answer's text that is content) and ``calls``
(:class:`~localspec.decoding.tool_parser.CallDelta` pieces: a call's id and name as soon
as its name is known, then its arguments' JSON text as it is generated), and a result its
:class:`~localspec.decoding.tool_parser.ToolCall` records.  Nothing here parses text.

OpenAI's shapes are here (``message.tool_calls`` entries, ``delta.tool_calls[i]`` pieces
as the openai SDK reassembles them); :class:`StreamedTextAndCalls` is the stream of the
protocols that send text and calls as their own events (Anthropic, Responses).
"""

from __future__ import annotations

from localspec.decoding.tool_parser import CallDelta, ToolCall
from localspec.server.reasoning_fields import REASONING, channel_runs
from localspec.server.shape import Shape


def openai_call(call: ToolCall) -> dict:
    """A call as an entry of OpenAI's ``message.tool_calls``."""
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}


def openai_delta(delta: CallDelta) -> dict:
    """A call's piece as an entry of OpenAI's ``delta.tool_calls``: the first with its id,
    type and name (and no arguments yet), the next ones with arguments text."""
    if delta.id is not None:
        function = {"name": delta.name, "arguments": delta.arguments}
        return {"index": delta.index, "id": delta.id, "type": "function", "function": function}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}


def answer_pieces(events: list) -> tuple[str, list[CallDelta]]:
    """The content and call pieces of a run of ``(TokenEvent, logprobs)`` pairs (an event
    without ``content`` is all content)."""
    content = "".join(_content(e) for e in events)
    return content, [d for e in events for d in getattr(e, "calls", ())]


def _content(event) -> str:
    content = getattr(event, "content", None)
    return event.text if content is None else content


class StreamedTextAndCalls(Shape):
    """For a protocol's answer shape that streams text and tool calls as its own events:
    subclasses keep ``sent`` (the text streamed so far) and ``calls`` (calls opened so far),
    and give ``_thinking(str)``, ``_text(str)`` and ``_call(delta)``, each a list of
    encoded events."""

    sent: str = ""
    calls: int = 0

    def stream_events(self, events: list) -> list[str]:
        """The events for a batch of the generation's events: the
        thinking through ``_thinking(str)``, the answer's text and calls through ``_text`` and
        ``_call``."""
        out = []
        for kind, run in channel_runs(events):
            out += self._thinking(run) if kind == REASONING else self._answer_events(run)
        return out

    def _answer_events(self, events: list) -> list[str]:
        content, calls = answer_pieces(events)
        out = self._text(content)
        for delta in calls:
            out += self._call(delta)
        return out
