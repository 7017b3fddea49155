"""What one request brings to its generation besides the prompt and the
:class:`~localspec.decoding.params.GenerationParams`, made whole before the generation is
built and never changed afterwards."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localspec.decoding.drafters import DrafterInputs
from localspec.decoding.grammar import Constraint
from localspec.decoding.thinking import ThinkingPlan
from localspec.decoding.tool_calls import ToolFormat


@dataclass(frozen=True)
class RequestPlan:
    """``constraint``: a grammar every emitted token satisfies (None: free text);
    ``prediction``: the predicted output's tokens (Predicted Outputs; empty: none);
    ``tool_format``: how the answer writes tool calls, read as they are written (None: no
    tools); ``parse``: turns a finished answer into ``result.parsed`` (a response_format's
    model); ``thinking``: how the output splits into thinking and answer (None: all answer);
    ``prompt_truncated``: the caller cut the prompt to fit (a FIM prompt)."""

    constraint: Constraint | None = None
    prediction: tuple[int, ...] = ()
    tool_format: ToolFormat | None = None
    parse: Callable[[str], Any] | None = None
    thinking: ThinkingPlan | None = None
    prompt_truncated: bool = False

    def drafter_inputs(self) -> DrafterInputs:
        """What the drafters take from this request (:meth:`Drafter.begin`)."""
        return DrafterInputs(constraint=self.constraint, prediction=self.prediction)


NO_PLAN = RequestPlan()
