"""What one speculative round hands on to the policy: its outcome (:class:`RoundOutcome`).
The tokens it emits are :class:`~localspec.decoding.stats.TokenEvent`s, handed to the caller.

The names follow the field's (transformers' ``CandidateGenerator``, vLLM's
``SpecDecodeMetadata``): a drafter proposes a draft, the target verifies it in one decode,
keeps the first ``n_accepted`` draft tokens and adds one of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.decoding.drafters import Draft, Drafter


@dataclass(frozen=True)
class RoundOutcome:
    """What one verify round did, for the policy to learn from.

    ``verify_s``: seconds of the target's verify decode, of ``verify_batch`` tokens (with
    several sequences sharing the decode, the whole batch's, ``verify_sequences`` of them).
    ``drafter``: whose draft was verified, or who spent time drafting (a draft model whose
    draft was cut to nothing); None for a plain round.  ``draft``: the draft tokens verified
    (empty: a plain round), with their confidences, depths and forced flags.  ``n_accepted``
    of them were kept.  ``draft_s``: seconds spent drafting, catch-up on unseen context
    excluded.  ``emitted``: the token ids the round emitted (the accepted draft tokens, then
    the target's own), or empty where the caller does not judge the drafts it did not
    verify."""

    verify_s: float
    verify_batch: int
    drafter: Drafter | None = None
    draft: Draft = field(default_factory=Draft.empty)
    n_accepted: int = 0
    draft_s: float = 0.0
    emitted: tuple[int, ...] = ()
    verify_sequences: int = 1

    @property
    def n_drafted(self) -> int:
        return len(self.draft.tokens)

    @property
    def n_forced(self) -> int:
        """Draft tokens verified that a grammar forced (all of a forcing drafter's own)."""
        if self.draft.forced is not None:
            return sum(self.draft.forced)
        return self.n_drafted if self.drafter is not None and self.drafter.forces else 0
