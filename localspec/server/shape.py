"""What the server needs of a protocol's answer: a :class:`Shape` renders one generation's
tokens and result in that protocol, whole (one JSON body) or streamed (server-sent events)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod

from localspec.decoding.stats import GenerationResult, TokenEvent
from localspec.server import sse


class Shape(ABC):
    """One answer in a protocol's shape.  The stream methods return lists of SSE texts: the
    stream's opening, the texts for a batch of the generation's events (one round or so;
    empty while the answer's text is held back), its end (``include_usage``: the protocol's
    usage record, where it has one) or an error event.  ``whole`` gives the JSON body of an
    answer that is not streamed.  ``keep_alive`` goes out while the prompt is read
    (``progress``: llama-server's ``prompt_progress``), ``idle_keep_alive`` while the answer
    is held back; both default to an SSE comment, which every client skips."""

    @abstractmethod
    def stream_start(self) -> list[str]: ...

    @abstractmethod
    def stream_events(self, events: list[TokenEvent]) -> list[str]: ...

    @abstractmethod
    def stream_end(self, result: GenerationResult, include_usage: bool) -> list[str]: ...

    @abstractmethod
    def stream_error(self, message: str = "internal server error") -> list[str]: ...

    @abstractmethod
    def whole(self, events: list[TokenEvent], result: GenerationResult) -> dict: ...

    def keep_alive(self, progress: dict | None) -> list[str]:
        note = f" prompt_progress={json.dumps(progress)}" if progress else ""
        return [sse.comment("keep-alive" + note)]

    def idle_keep_alive(self) -> list[str]:
        return [sse.comment("keep-alive")]
