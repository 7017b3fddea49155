"""Stand-ins the tests share."""

from __future__ import annotations

from localspec.decoding.drafters import Drafter


class FakeDrafter(Drafter):
    """A drafter the adaptive policy can price and learn about, which never drafts itself:
    its ``name`` and ``prior`` acceptance; ``free`` (asked every round, like the copy
    drafters), ``prior_cost_s`` (seconds per draft token before any is measured) and ``lag``
    (context tokens it has not read, like a draft model that sat rounds out)."""

    def __init__(self, name, prior=0.5, free=False, prior_cost_s=None, lag=0):
        self.name, self.prior_acceptance, self.free = name, prior, free
        self.prior_cost_s, self._lag = prior_cost_s, lag

    def lag(self, n_context: int) -> int:
        return self._lag
