"""The draft model: a small model of the same family drafts autoregressively."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from localspec.decoding.drafters.base import NO_INPUTS, Draft, Drafter, DrafterInputs
from localspec.decoding.sampling import Candidates, row_candidates, top_probability
from localspec.llama.engine import Engine


class DraftModelDrafter(Drafter):
    """Drafts autoregressively with a small model of the same family.

    Its KV cache always holds a prefix of the context: ``feedback`` trims the rejected
    tokens, and ``propose`` first decodes whatever the cache lacks (the prompt on the
    first round; the last accepted draft token and the target's token after a round
    where every draft token was accepted).
    """

    name = "draft-model"
    prior_acceptance = 0.7

    def __init__(self, engine: Engine, n_vocab_target: int, is_eog):
        self.engine = engine
        self.n_vocab_target = n_vocab_target
        self.is_eog = is_eog
        self.catch_up_s = 0.0
        self.constraint = None  # the current generation's grammar (given at begin)

    @property
    def decode_s(self) -> float:
        return self.engine.decode_s

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        """Up to ``max_tokens`` draft tokens after ``context``.  With several slots, each
        step's decode is shared with the other sequences drafting at the same time (the
        draft engine's sequence has a batcher)."""
        if max_tokens <= 0:
            return Draft.empty()
        with self._shared_decodes():
            return self._draft(context, max_tokens, params, p_min, rng)

    def _shared_decodes(self):
        batcher = self.engine.batcher
        return batcher.round(self.engine.seq) if batcher is not None else contextlib.nullcontext()

    def _draft(self, context, max_tokens, params, p_min, rng) -> Draft:
        logits = self._catch_up(context)
        if logits is None:
            return Draft.empty()
        self.engine.prepare_rollback(max_tokens, decodes=max_tokens)  # a recurrent draft model
        tokens: list[int] = []
        rows: list[Candidates] = []
        confidence: list[float] = []
        constraint, advanced = self.constraint, 0
        try:
            while True:
                if constraint is not None:  # q masked and renormalised as the target's p is
                    logits = constraint.masked(logits)
                if params.greedy:
                    top = top_probability(logits)
                    if top < p_min:
                        break
                    token = int(np.argmax(logits))
                else:
                    q = row_candidates(logits, params)
                    if q.top < p_min:
                        break
                    token = q.sample(rng)
                    rows.append(q)
                    top = q.prob(token)
                tokens.append(token)
                confidence.append(top)
                if len(tokens) >= max_tokens or self.is_eog(token):
                    break
                if constraint is not None:
                    advanced += constraint.advance([token])
                logits = self._fit(self.engine.decode([token], [0], copy=False)[0])
        finally:
            if constraint is not None:
                constraint.back(advanced)
        if params.greedy or not tokens:
            return Draft(tokens=tokens, confidence=confidence)
        return Draft(tokens=tokens, probs=rows, confidence=confidence)

    def lag(self, n_context: int) -> int:
        return max(0, n_context - len(self.engine.cache_tokens))

    def prefill(self, prompt: Sequence[int]) -> None:
        """Read ``prompt`` now (during prompt eval), so the first draft does not pay for it."""
        if prompt:
            with self._shared_decodes():
                self._catch_up(prompt, lagging=False)

    def begin(self, prompt, inputs: DrafterInputs = NO_INPUTS) -> None:
        self.constraint = inputs.constraint
        # Keep only what the new prompt shares with the cache (a continued conversation),
        # so lag() counts what must really be read, not a previous request's tokens.
        self.engine.reuse_prefix(prompt)

    def _catch_up(self, context: Sequence[int], lagging: bool = True) -> np.ndarray | None:
        """Decode what the cache lacks; the logits after the last token, or None when a
        lacking token is one only the target has (ids >= this model's vocabulary).  Its time
        counts in ``catch_up_s`` when ``lagging`` (mid-answer, not as the prompt is read)."""
        n = self.engine.reuse_prefix(context)
        if n == len(context):  # need the logits after the last token: decode it again
            n -= 1
            self.engine.trim(n)
        pending = list(context[n:])
        if max(pending) >= self.engine.n_vocab:
            return None
        start = self.engine.decode_s
        logits = self.engine.decode(pending, [len(pending) - 1])[0]
        # Drafting every round leaves at most two tokens to decode here (the last draft
        # token and the target's correction or bonus): that is the drafter's own cost.
        # More is lag from rounds it sat out, which the policy must not charge per token.
        if lagging and len(pending) > 2:
            self.catch_up_s += (self.engine.decode_s - start) * (len(pending) - 2) / len(pending)
        return self._fit(logits)

    def _fit(self, logits: np.ndarray) -> np.ndarray:
        """Draft logits over the target's vocabulary (ids the target lacks are cut,
        ids the draft lacks get -inf)."""
        n = self.n_vocab_target
        if logits.shape[0] == n:
            return logits
        if logits.shape[0] > n:
            return logits[:n]
        return np.concatenate([logits, np.full(n - logits.shape[0], -np.inf, dtype=logits.dtype)])

    def feedback(self, context, n_drafted, n_accepted) -> None:
        self.engine.reuse_prefix(context)

    def close(self) -> None:
        self.engine.close()
