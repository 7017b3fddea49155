"""Verifying: one target decode of the last token and the draft, the acceptance rules
(greedy or sampled), the emitted tokens with their probabilities and logprobs
(:class:`Verifying`, a mixin of :class:`~localspec.decoding.loop.Generation`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.decoding.drafters import Draft
from localspec.decoding.sampling import (
    CandidateRows,
    Candidates,
    RowArgmax,
    accept_greedy,
    accept_sampled,
    token_logprobs,
)
from localspec.decoding.stats import TokenEvent, TokenSource


class Verifying:
    """The target's verdict on a draft."""

    def _verify(self, last: int, draft: Draft, rng: np.random.Generator, forced: bool = False):
        """One target decode of [last, d_1..d_k]; returns (n_accepted, the emitted
        :class:`TokenEvent` list, not yet handed out); kept draft tokens are FORCED when a
        grammar drafted them (``forced``: all; ``draft.forced``: per token), else ACCEPTED."""
        k = len(draft.tokens)
        logits = self.target.decode([last] + draft.tokens, range(k + 1), copy=False)
        rows = logits if self.constraint is None else self.constraint.rows(logits, draft.tokens)
        sp = self.params.sampling
        if sp.greedy:
            n, nxt = accept_greedy(draft.tokens, RowArgmax(rows))
            p = q = None
        else:
            p = CandidateRows(rows, sp)
            q = draft.probs
            n, nxt = accept_sampled(draft.tokens, p, q, rng)
        kept = [
            TokenSource.FORCED if f else TokenSource.ACCEPTED for f in draft.forced or [forced] * k
        ]
        emitted = [
            TokenEvent.emitted(
                d, kept[i], _prob(p, i, d), _prob(q, i, d), *self._logprobs(logits, i, d)
            )
            for i, d in enumerate(draft.tokens[:n])
        ]
        source = (
            TokenSource.TARGET
            if k == 0
            else (TokenSource.BONUS if n == k else TokenSource.CORRECTION)
        )
        p_draft = _prob(q, n, nxt) if n < k else None
        emitted.append(
            TokenEvent.emitted(
                nxt, source, _prob(p, n, nxt), p_draft, *self._logprobs(logits, n, nxt)
            )
        )
        if self.constraint is not None:
            self.constraint.settle(rows, draft.tokens[:n] + [nxt])
        return n, emitted

    def _logprobs(self, logits: np.ndarray, row: int, token: int) -> tuple:
        """(logprob of ``token``, its top alternatives) from the target's own row, or
        (None, None) when not asked for."""
        if self.params.logprobs is None:
            return None, None
        return token_logprobs(logits[row], token, self.params.logprobs)


def _prob(probs: Sequence[Candidates] | None, row: int, token: int) -> float | None:
    return None if probs is None else probs[row].prob(token)
