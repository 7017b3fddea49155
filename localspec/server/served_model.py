"""What the server needs of the model it serves (:class:`ServedModel`):
:class:`~localspec.api.SpeculativeModel` is one, and so is a test's wrapper around one."""

from __future__ import annotations

from typing import Protocol

from localspec.decoding.params import CallOptions, DraftParams
from localspec.decoding.slots import SlotPool
from localspec.decoding.thinking import ChatReasoning
from localspec.decoding.tool_calls import ToolFormat
from localspec.llama.engine import Engine


class ServedModel(Protocol):
    """A loaded model as the server uses it: its target engine (context size, token bytes,
    FIM tokens, KV cells), how many generations run at once (``parallel``), its draft
    defaults, its reasoning format and thinking budget (``reasoning``), its tool-call format,
    the built-in drafter it names in /v1/models, its slots (their batcher, for /metrics) and
    the three calls, each given one :class:`CallOptions` and ``stream=True``."""

    target: Engine
    parallel: int
    default_draft: DraftParams
    reasoning: ChatReasoning
    slots: SlotPool

    @property
    def tool_format(self) -> ToolFormat | None: ...

    @property
    def builtin_drafter(self) -> str: ...

    def chat(self, messages, options: CallOptions, *, stream: bool): ...

    def generate(self, prompt, options: CallOptions, *, stream: bool): ...

    def infill(self, prefix, suffix, options: CallOptions, *, extra, stream: bool): ...
