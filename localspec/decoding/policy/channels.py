"""The adaptive policy's estimates kept per channel of a reasoning model's output.

A draft model, prompt lookup or the suffix drafter fare differently in a model's thinking
and in its answer (reasoning text copies less from the prompt and wanders more), so a
generation split into ``reasoning`` and ``content`` (:mod:`localspec.decoding.reasoning`)
judges each channel's rounds with that channel's own
:class:`~localspec.decoding.policy.adaptive.AdaptivePolicy`: drafters' acceptance, confidence
calibration and text trust apart, the pair's measured costs shared (they belong to the
machine).  A round belongs to the channel in force when it starts, as
:class:`~localspec.decoding.stats.ChannelStats` counts it; the loop says which
(:meth:`ChannelPolicy.enter_channel`).  The answer's policy is the one a generation without
thinking uses; the thinking's is stored under its own kind
(:func:`~localspec.decoding.policy.learned.kind_name`, ``"auto|greedy|reasoning"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from localspec.decoding.drafters import Draft, Drafter
from localspec.decoding.policy.adaptive import AdaptivePolicy
from localspec.decoding.policy.protocol import Policy
from localspec.decoding.reasoning import CONTENT
from localspec.decoding.rounds import RoundOutcome


class ChannelPolicy:
    """A :class:`~localspec.decoding.policy.protocol.Policy` that hands every call to the policy of
    the channel the current round started in.  ``policies``: channel name -> policy (``content``
    required; a channel without one, a marker, uses ``content``'s).  Every generation starts in
    ``content`` until :meth:`enter_channel` says otherwise."""

    def __init__(self, policies: Mapping[str, Policy]):
        if CONTENT not in policies:
            raise ValueError("a ChannelPolicy needs a policy for the content channel")
        self.policies = dict(policies)
        self.current: Policy = self.policies[CONTENT]

    @property
    def free_drafters(self) -> Sequence[Drafter]:
        return self.current.free_drafters

    def prefill_drafters(self, n_prompt: int, k_cap: int) -> Sequence[Drafter]:
        return self.current.prefill_drafters(n_prompt, k_cap)

    def new_generation(self) -> None:
        """Each channel's policy starts a new text; the answer's is current."""
        for policy in self.policies.values():
            policy.new_generation()
        self.current = self.policies[CONTENT]

    def enter_channel(self, channel: str) -> None:
        self.current = self.policies.get(channel, self.policies[CONTENT])

    def cap(self, drafter: Drafter) -> int:
        return self.current.cap(drafter)

    def may_pay(self, k_cap: int, others: tuple[int, int] = (0, 0)) -> bool:
        return self.current.may_pay(k_cap, others)

    def plan(
        self,
        k_cap: int,
        proposals: Mapping[str, Draft] | None = None,
        n_context: int = 0,
        others: tuple[int, int] = (0, 0),
    ) -> tuple[Drafter | None, int]:
        return self.current.plan(k_cap, proposals, n_context, others)

    def length(self, drafter: Drafter, draft: Draft, k: int) -> int:
        return self.current.length(drafter, draft, k)

    def chances(self, drafter: Drafter, draft: Draft) -> Sequence[float] | None:
        return self.current.chances(drafter, draft)

    def observe(self, outcome: RoundOutcome) -> None:
        self.current.observe(outcome)

    def verify_s(self, batch: int = 1) -> float | None:
        return self.current.verify_s(batch)


def adaptive_parts(policy: Policy) -> list[tuple[str, AdaptivePolicy]]:
    """(channel, adaptive policy) of each channel ``policy`` keeps estimates for: one
    ``content`` entry for an :class:`AdaptivePolicy`, one per channel for a
    :class:`ChannelPolicy` (its adaptive ones), none for a fixed policy."""
    if isinstance(policy, AdaptivePolicy):
        return [(CONTENT, policy)]
    if isinstance(policy, ChannelPolicy):
        return [
            (channel, p) for channel, p in policy.policies.items() if isinstance(p, AdaptivePolicy)
        ]
    return []
