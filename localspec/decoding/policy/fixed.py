"""A fixed draft length with one drafter, as llama.cpp drafts."""

from __future__ import annotations

from collections.abc import Mapping

from localspec.decoding.drafters import Drafter
from localspec.decoding.policy.costs import CostModel
from localspec.decoding.rounds import RoundOutcome


class FixedPolicy:
    """One drafter, ``draft_max`` tokens every round (clamped by the loop).  A draft model
    reads the prompt during prompt eval (:meth:`prefill_drafters`), as llama.cpp's server
    does, since it drafts from the first round on.

    A drafter with a ``max_spec_factor`` (the suffix drafter) has each draft cut to that
    many times the match it rests on (``Draft.depth[0]``; at least one token), as
    ArcticInference and vLLM's ``suffix`` method do with the same name and default
    (1.0): a 2-token match drafts 2 tokens, a 16-token match 16."""

    free_drafters: tuple = ()

    def __init__(self, drafter: Drafter | None, draft_max: int, costs: CostModel | None = None):
        self.drafter = drafter
        self.draft_max = draft_max
        self.costs = costs  # the pair's, read only: its rounds are judged by c(1) when known

    def prefill_drafters(self, n_prompt: int, k_cap: int) -> list:
        d = self.drafter
        return [d] if d is not None and not d.free and self.draft_max > 0 else []

    def new_generation(self) -> None:
        pass

    def cap(self, drafter) -> int:
        return self.draft_max

    def may_pay(self, k_cap: int, others: tuple[int, int] = (0, 0)) -> bool:
        """True: a fixed length drafts every round, as llama.cpp does."""
        return True

    def plan(
        self,
        k_cap: int,
        proposals: Mapping | None = None,
        n_context: int = 0,
        others: tuple[int, int] = (0, 0),
    ) -> tuple[Drafter | None, int]:
        k = min(self.draft_max, k_cap)
        return (self.drafter, k) if self.drafter is not None and k > 0 else (None, 0)

    def length(self, drafter, draft, k: int) -> int:
        factor = drafter.max_spec_factor
        if draft.depth and factor is not None:
            return min(k, max(1, int(factor * draft.depth[0])))
        return k

    def chances(self, drafter, draft) -> None:
        """None: a fixed length is verified whole, as llama.cpp does."""
        return None

    def observe(self, outcome: RoundOutcome) -> None:
        pass

    def verify_s(self, batch: int = 1) -> float | None:
        known = self.costs is not None and self.costs.measured
        return self.costs.verify_s(max(1, batch)) if known else None

    def enter_channel(self, channel: str) -> None:
        pass
