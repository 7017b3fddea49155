"""Choosing each round's drafter and draft length.

:class:`FixedPolicy` drafts ``draft_max`` tokens every round with one drafter (what llama.cpp
does); :class:`AdaptivePolicy` picks the drafter and length with the most expected tokens per
second from the pair's :class:`CostModel` (:mod:`.costs`: measured, learnt, stored) and one
:class:`~localspec.decoding.policy.estimates.DrafterRecord` per drafter (:mod:`.estimates`);
:class:`ChannelPolicy` keeps an adaptive policy per channel of a reasoning model.  All of them
are a :class:`Policy` (:mod:`.protocol`), what the loop asks.  What they learn is kept
between processes by :mod:`.learned` (imported by name: it reads the machine's store).
"""

from localspec.decoding.policy.adaptive import AdaptivePolicy, draft_cap
from localspec.decoding.policy.channels import ChannelPolicy, adaptive_parts
from localspec.decoding.policy.costs import BATCH_SIZES, CostAverage, CostModel, batch_sizes
from localspec.decoding.policy.fixed import FixedPolicy
from localspec.decoding.policy.pricing import RoundPricing
from localspec.decoding.policy.protocol import Policy, expected_tokens

__all__ = [
    "BATCH_SIZES",
    "AdaptivePolicy",
    "ChannelPolicy",
    "CostAverage",
    "CostModel",
    "FixedPolicy",
    "Policy",
    "RoundPricing",
    "adaptive_parts",
    "batch_sizes",
    "draft_cap",
    "expected_tokens",
]
