"""What the loop (:class:`~localspec.decoding.loop.Generation`) asks of a policy, and the
arithmetic every policy shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from localspec.decoding.drafters import Draft, Drafter
from localspec.decoding.rounds import RoundOutcome


@runtime_checkable
class Policy(Protocol):
    """What the loop (:class:`~localspec.decoding.loop.Generation`) asks of a policy.

    Per generation: :meth:`new_generation`, then :meth:`prefill_drafters` read the prompt
    during prompt eval.  Per round: each of :attr:`free_drafters` drafts up to
    ``min(k_cap, cap(d))`` tokens, :meth:`plan` picks (drafter, k) given those drafts,
    a drafter not yet asked drafts k and :meth:`length` says how much of it to verify,
    :meth:`chances` judges each token of the draft for a shared decode, and
    :meth:`observe` learns from the round's :class:`RoundOutcome`."""

    @property
    def free_drafters(self) -> Sequence[Drafter]: ...

    def prefill_drafters(self, n_prompt: int, k_cap: int) -> Sequence[Drafter]:
        """The drafters that read the prompt (``n_prompt`` tokens) during prompt eval, for a
        generation of at most ``k_cap`` more tokens."""
        ...

    def new_generation(self) -> None: ...

    def cap(self, drafter: Drafter) -> int: ...

    def may_pay(self, k_cap: int, others: tuple[int, int] = (0, 0)) -> bool:
        """Whether any draft of at most ``k_cap`` tokens could pay this round, beside
        ``others`` (as :meth:`plan`): False, and no drafter is asked."""
        ...

    def plan(
        self,
        k_cap: int,
        proposals: Mapping[str, Draft] | None = None,
        n_context: int = 0,
        others: tuple[int, int] = (0, 0),
    ) -> tuple[Drafter | None, int]:
        """(drafter, k <= ``k_cap``) for the next round, (None, 0) for a plain one.
        ``proposals``: drafter name -> the free drafters' drafts of this round;
        ``n_context``: tokens in the context; ``others``: (tokens, sequences) of the other
        sequences sharing the verify decode."""
        ...

    def length(self, drafter: Drafter, draft: Draft, k: int) -> int:
        """How many tokens of ``draft`` (just made by ``drafter``, asked for ``k``) to verify."""
        ...

    def chances(self, drafter: Drafter, draft: Draft) -> Sequence[float] | None:
        """Each token's chance that the target accepts it, given the ones before it were,
        as this policy judges ``draft`` (made by ``drafter``): a decode shared with other
        sequences verifies only what pays of it.  None: verify it whole."""
        ...

    def observe(self, outcome: RoundOutcome) -> None: ...

    def verify_s(self, batch: int = 1) -> float | None:
        """Seconds of a target decode of ``batch`` tokens as this policy prices it (None: not
        known); a round is judged against its decode without its draft, c(1) alone
        (:class:`~localspec.decoding.attribution.TimeAccount`)."""
        ...

    def enter_channel(self, channel: str) -> None:
        """The next round starts in ``channel``: ``reasoning``, or ``content`` (always, without
        thinking)."""


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens emitted by a round drafting k tokens with acceptance ``alpha``
    (accepted draft tokens plus the target's correction or bonus token)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
