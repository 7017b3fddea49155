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

    def _verify(
        self,
        last: int,
        draft: Draft,
        rng: np.random.Generator,
        forced: bool = False,
        chances: Sequence[float] | None = None,
    ):
        """One target decode of [last, d_1..d_k]; returns (the draft verified, n_accepted, the
        emitted :class:`TokenEvent` list, not yet handed out); kept draft tokens are FORCED when
        a grammar drafted them (``forced``: all; ``draft.forced``: per token), else ACCEPTED.
        In a decode shared with other sequences, with ``chances`` (each draft token's
        acceptance chance, as the policy judges it), the decode may verify only a prefix of
        the draft (:meth:`~localspec.decoding.scheduler.Batcher.decode`)."""
        logits = self._decode_verify(last, draft, chances)
        draft = draft.truncated(len(logits) - 1)
        k = len(draft.tokens)
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
        return draft, n, emitted

    def _decode_verify(self, last: int, draft: Draft, chances: Sequence[float] | None):
        tokens, rows = [last] + draft.tokens, range(len(draft.tokens) + 1)
        if self._batcher is not None and chances is not None and draft.tokens:
            return self._batcher.decode(self.target, tokens, rows, chances)
        return self.target.decode(tokens, rows, copy=False)

    def _logprobs(self, logits: np.ndarray, row: int, token: int) -> tuple:
        """(logprob of ``token``, its top alternatives) from the target's own row, or
        (None, None) when not asked for."""
        if self.params.logprobs is None:
            return None, None
        return token_logprobs(logits[row], token, self.params.logprobs)


def _prob(probs: Sequence[Candidates] | None, row: int, token: int) -> float | None:
    return None if probs is None else probs[row].prob(token)
