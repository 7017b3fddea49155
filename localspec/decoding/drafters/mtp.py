"""The target's own MTP (NextN) block as a drafter: no second model, the block the target's
GGUF ships (:class:`~localspec.llama.mtp.MtpHead`) applied once per draft token."""

from __future__ import annotations

import numpy as np

from localspec.decoding.drafters.base import NO_INPUTS, Draft, Drafter, DrafterInputs
from localspec.decoding.sampling import Candidates, row_candidates, top_probability


class MtpDrafter(Drafter):
    """Drafts with ``head`` (the target engine's :class:`~localspec.llama.mtp.MtpHead`), which
    follows every target decode, so it never lags.  Greedy: each draft token is the block's
    most likely one, its probability the confidence; sampled: drawn from the block's own
    distribution under the call's sampling settings, which the acceptance rule takes as q, so
    the output keeps the target's distribution.  A token the block is less sure of than
    ``p_min`` ends the draft.  Under a grammar, the block's distribution is masked as the
    target's is."""

    name = "mtp"
    prior_acceptance = 0.6

    def __init__(self, head, is_eog):
        self.head = head
        self.is_eog = is_eog
        self.constraint = None
        self.most_tokens = head.max_draft  # one token per block where the blocks chain

    @property
    def decode_s(self) -> float:
        return self.head.decode_s

    def begin(self, prompt, inputs: DrafterInputs = NO_INPUTS) -> None:
        self.constraint = inputs.constraint

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        if max_tokens <= 0 or not context:
            return Draft.empty()
        rows: list[Candidates] = []
        advanced = 0

        def pick(logits: np.ndarray):
            nonlocal advanced
            if self.constraint is not None:
                logits = self.constraint.masked(logits)
            if params.greedy:
                top = top_probability(logits)
                if top < p_min:
                    return None
                token = int(np.argmax(logits))
            else:
                q = row_candidates(logits, params)
                if q.top < p_min:
                    return None
                token = q.sample(rng)
                rows.append(q)
                top = q.prob(token)
            if self.constraint is not None:
                advanced += self.constraint.advance([token])
            return token, top, self.is_eog(token)

        try:
            tokens, picked = self.head.draft(context[-1], max_tokens, pick)
        finally:
            if self.constraint is not None:
                self.constraint.back(advanced)
        confidence = [p[1] for p in picked]
        if params.greedy or not tokens:
            return Draft(tokens=tokens, confidence=confidence)
        return Draft(tokens=tokens, probs=rows, confidence=confidence)
