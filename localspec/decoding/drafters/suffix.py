"""The suffix drafter (SuffixDecoding, arXiv 2411.04975): this request's text and earlier
outputs."""

from __future__ import annotations

import math
import threading

from localspec.decoding.drafters.base import (
    NO_INPUTS,
    Draft,
    DrafterInputs,
    ModelFreeDrafter,
    context_slice,
)
from localspec.decoding.drafters.suffix_index import KEYS, SuffixIndex
from localspec.errors import InvalidOptionError


class SuffixDrafter(ModelFreeDrafter):
    """Drafts the most frequent continuation of the longest match of the context's end,
    in this request's prompt and output and in earlier outputs of the same loaded model
    (SuffixDecoding, Oliaro et al. 2024, arXiv:2411.04975; see
    :mod:`localspec.decoding.drafters.suffix_index`).

    Two indexes: the request's (its prompt, then each accepted token; kept for the next
    request when that one continues the same conversation) and the store of earlier
    outputs (``store_tokens`` tokens at most, oldest evicted first).  Of the two
    candidate drafts, the one with more expected accepted tokens wins.  Confidence per
    token = count(child) / count(parent); drafting stops below ``min_estimate``.
    ``max_spec_factor``: at a fixed draft length (:class:`~localspec.decoding.policy.FixedPolicy`)
    a draft is cut to this many times the match it rests on, as ArcticInference and
    vLLM's ``suffix`` method (same name, same default); None = no cut; anything but a
    positive finite number or None raises :class:`~localspec.errors.InvalidOptionError`.
    The adaptive policy chooses lengths itself, from confidences calibrated per match depth.
    """

    name = "suffix"
    looks_ahead = True  # propose(..., ahead=) drafts after tokens not yet in the context
    prior_acceptance = 0.5
    prior_cost_s = 3e-5

    def __init__(
        self,
        store_tokens: int = 100_000,
        min_estimate: float = 0.1,
        max_spec_factor: float | None = 1.0,
        shared_with: SuffixDrafter | None = None,
    ):
        if max_spec_factor is not None and not 0.0 < max_spec_factor < math.inf:
            raise InvalidOptionError(
                f"max_spec_factor must be a positive number or None, got {max_spec_factor!r}"
            )
        self.store_tokens = store_tokens
        self.min_estimate = min_estimate
        self.max_spec_factor = max_spec_factor
        self._shared_with = shared_with
        self.reset()

    def reset(self) -> None:
        """Forget every earlier output and the current request (a drafter made
        ``shared_with`` another reads and feeds that one's store of earlier outputs, under
        its lock: concurrent generations learn from each other's answers)."""
        if self._shared_with is None:
            self.store = SuffixIndex(max_tokens=self.store_tokens)
            self.store_lock = threading.Lock()
        else:
            self.store, self.store_lock = self._shared_with.store, self._shared_with.store_lock
        self.request = SuffixIndex()
        self._indexed: list[int] = []  # what the request index holds, in order

    def begin(self, prompt, inputs: DrafterInputs = NO_INPUTS) -> None:
        prompt = list(prompt)
        n = len(self._indexed)
        if n > len(prompt) or prompt[:n] != self._indexed:  # not a continuation: a new text
            self.request = SuffixIndex()
            self._indexed = []
        self._sync(prompt)

    def _sync(self, context) -> None:
        new = context_slice(context, len(self._indexed))
        if new:
            self.request.append(new)
            self._indexed.extend(int(t) for t in new)

    def propose(self, context, max_tokens, params, p_min, rng, ahead=()) -> Draft:
        """``ahead``: tokens to draft after, not yet in ``context`` (a grammar's forced
        tokens); looked up, not indexed."""
        if max_tokens <= 0:
            return Draft.empty()
        self._sync(context)
        recent = context_slice(context, max(0, len(context) - max(KEYS))) + list(ahead)
        recent = (
            recent[len(recent) - max(KEYS) :] if len(recent) > max(KEYS) else recent
        )  # all a lookup reads
        here = self.request.lookup(recent, max_tokens, self.min_estimate)
        with self.store_lock:
            before = self.store.lookup(recent, max_tokens, self.min_estimate)
        best = here if here.expected_accepted >= before.expected_accepted else before
        if not best.tokens:
            return Draft.empty()
        return Draft(
            tokens=best.tokens,
            confidence=best.estimates,
            depth=[best.match_length + i for i in range(len(best.tokens))],
        )

    def end(self, context, n_prompt) -> None:
        self._sync(context)
        output = context_slice(context, n_prompt)
        if output:
            with self.store_lock:
                self.store.append(output)
                self.store.end_sequence()
