"""The drafter interface: a :class:`Draft` and the two verbs every drafter has.

A drafter has two verbs (as transformers' ``CandidateGenerator``): :meth:`Drafter.propose`
returns up to k tokens with the distributions they were drawn from, and
:meth:`Drafter.feedback` learns how the round ended, so it can trim its own state.  What
it can do beyond that (``free``, ``forces``, ``looks_ahead``, ...) it declares as class
attributes of :class:`Drafter`, whose defaults its subclasses inherit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol

import numpy as np

from localspec.decoding.sampling import Candidates, SamplingParams


@dataclass(frozen=True)
class DrafterInputs:
    """What one request gives its drafters when its generation starts: ``constraint``, the
    grammar every token must satisfy (a :class:`~localspec.decoding.grammar.Constraint`;
    None: free text), and ``prediction``, the predicted output's tokens (Predicted Outputs;
    empty: none)."""

    constraint: Any = None
    prediction: tuple[int, ...] = ()


NO_INPUTS = DrafterInputs()


@dataclass
class Draft:
    """Proposed tokens d_1..d_k.

    ``probs`` is k :class:`~localspec.decoding.sampling.Candidates`, the i-th the distribution d_i
    was sampled from (ids in the target's vocabulary), or ``None`` when the drafter has no
    distribution (greedy, or prompt lookup): verification then treats each token as drawn from a
    one-hot q.  ``confidence`` is the drafter's own estimate, per token, that d_i is accepted given
    d_1..d_{i-1} were (the draft model's q(d_i), a suffix count ratio, 1/2 for a prompt-lookup copy,
    a prediction's match record), or None when it has none; the adaptive policy calibrates it
    against what the target accepts.  ``depth``: per token, how many context tokens the drafter
    matched to propose it (a suffix or prompt-lookup match's length plus the draft tokens before
    it), or None; the policy calibrates confidences per depth group.
    ``forced``: per token, whether a grammar forced it (a draft that joins a grammar's
    forced tokens to another drafter's guess, :func:`~localspec.decoding.drafters.grammar.chained`);
    the policy prices and calibrates those as the grammar's, and kept ones count as FORCED.
    """

    tokens: list[int]
    probs: list[Candidates] | None = None
    confidence: list[float] | None = None
    depth: list[int] | None = None
    forced: list[bool] | None = None

    @classmethod
    def empty(cls) -> Draft:
        return cls(tokens=[])

    def through_first(self, is_end) -> Draft:
        """The draft up to and including its first token for which ``is_end(token)`` is
        true (an end-of-generation token: the target stops there, so nothing drafted
        after it can ever be emitted); the whole draft when there is none."""
        for i, token in enumerate(self.tokens):
            if is_end(token):
                return self.truncated(i + 1)
        return self

    def truncated(self, k: int) -> Draft:
        """The first ``k`` tokens (with their rows and confidences)."""
        if k >= len(self.tokens):
            return self
        return Draft(
            self.tokens[:k],
            None if self.probs is None else self.probs[:k],
            None if self.confidence is None else self.confidence[:k],
            None if self.depth is None else self.depth[:k],
            None if self.forced is None else self.forced[:k],
        )

    def then(self, other: Draft, forced: bool = False) -> Draft:
        """This draft followed by ``other`` (marked forced by a grammar when ``forced``), for
        free drafts without rows (``probs``); a token without a confidence gets 1.0 (a
        grammar's), without a depth 0."""
        n, m = len(self.tokens), len(other.tokens)
        return Draft(
            self.tokens + other.tokens,
            confidence=(self.confidence or [1.0] * n) + (other.confidence or [1.0] * m),
            depth=(self.depth or [0] * n) + (other.depth or [0] * m),
            forced=(self.forced or [False] * n) + (other.forced or [forced] * m),
        )


class Drafter(Protocol):
    """What the loop and the policies ask of a drafter.  Drafters subclass it to inherit
    the capability defaults below (a drafter with a model of its own, that proposes only
    after the context, judged by the policy from a neutral prior) and the empty verbs."""

    name: str  # "draft-model", "prompt-lookup", "suffix", "prediction", "grammar"
    decode_s: float = 0.0  # seconds spent in the drafter's own model since it was created
    catch_up_s: float = 0.0  # part of decode_s spent catching up on tokens it had not seen
    free: bool = (
        False  # proposing costs next to nothing (no model): the adaptive policy asks it every round
    )
    forces: bool = False  # a grammar's forced tokens: kept ones are TokenSource.FORCED
    looks_ahead: bool = (
        False  # propose(..., ahead=tokens) drafts after tokens not yet in the context
    )
    max_spec_factor: float | None = (
        None  # a fixed-length draft is cut to this many times its match (Draft.depth[0])
    )
    prior_acceptance: float = 0.5  # a first guess of its per-token acceptance
    most_tokens: int | None = None  # the longest draft it can make (None: no limit of its own)
    prior_cost_s: float | None = (
        None  # a first guess of its seconds per draft token (None: half a target step)
    )

    def begin(self, prompt: Sequence[int], inputs: DrafterInputs = NO_INPUTS) -> None:
        """A generation starts from ``prompt`` (token ids), with what its request gives the
        drafters (``inputs``: its grammar, its predicted output)."""

    def end(self, context: Sequence[int], n_prompt: int) -> None:
        """The generation finished: ``context`` is its prompt (``n_prompt`` tokens) and output."""

    def lag(self, n_context: int) -> int:
        """Context tokens it must still read before it can draft (a draft model's catch-up)."""
        return 0

    def prefill(self, prompt: Sequence[int]) -> None:
        """Read ``prompt`` during prompt eval, so the first draft does not pay for it."""

    def propose(
        self,
        context: Sequence[int],
        max_tokens: int,
        params: SamplingParams,
        p_min: float,
        rng: np.random.Generator,
    ) -> Draft:
        """Propose up to ``max_tokens`` tokens to follow ``context`` (all ids so far,
        the last one not yet verified by the target)."""
        return Draft.empty()

    def feedback(self, context: Sequence[int], n_drafted: int, n_accepted: int) -> None:
        """``context`` now holds everything emitted; ``n_accepted`` of ``n_drafted`` kept."""

    def close(self) -> None:
        """Free what the drafter holds (a model)."""


class ModelFreeDrafter(Drafter):
    """A drafter without a model of its own: free to ask, nothing to read, trim or free."""

    free = True


def round_label(drafter, draft: Draft) -> str:
    """Whose round it was, for the stats: the drafter's when it drafted, or when it ran a
    model of its own even if nothing of that draft was verified (its time was spent);
    else "plain"."""
    if drafter is not None and (draft.tokens or not drafter.free):
        return drafter.name
    return "plain"


def context_slice(context, start: int, stop: int | None = None) -> list:
    """``context[start:stop]`` as a list, for any sequence (a deque cannot be sliced)."""
    try:
        return list(context[start:stop])
    except TypeError:
        return list(islice(context, start, stop))


def match_length(tokens: list[int], end: int, limit: int, recent: list[int] | None = None) -> int:
    """How many tokens before ``end`` equal the last ones of ``recent`` (default ``tokens``
    itself), at most ``limit``."""
    recent = tokens if recent is None else recent
    n, last = 0, len(recent) - 1
    while n < limit and n < end and n <= last and tokens[end - 1 - n] == recent[last - n]:
        n += 1
    return n
