"""Drafting: the free drafters' drafts, the policy's choice of drafter and length, each draft
cut at its first end-of-generation token or grammar-forbidden token (:class:`Drafting`, a
mixin of :class:`~localspec.decoding.loop.Generation`)."""

from __future__ import annotations

import time

import numpy as np

from localspec.decoding.attribution import TimeAccount
from localspec.decoding.drafters import Draft, Drafter
from localspec.decoding.drafters.grammar import chained


class Drafting:
    """Ask the drafters for a round's draft."""

    def _propose(
        self, context: list[int], k_cap: int, draft_rng: np.random.Generator, account: TimeAccount
    ) -> tuple:
        """Ask the free drafters for drafts, the policy for (drafter, k), then draft if
        that drafter was not asked yet.  Every draft ends at its first end-of-generation
        token (a copy from the prompt runs into the chat template's ``<|im_end|>``; the
        tokens after it can never be emitted, and verifying them costs).  Returns
        (drafter, draft, cost in seconds of drafting, catching up on skipped tokens
        excluded); drafts shorter than ``draft_min`` are dropped.  Where no draft could pay
        beside the other sequences (:meth:`~localspec.decoding.policy.Policy.may_pay`), no
        drafter is asked.  ``account`` is charged the policy's own time and the free drafts
        not verified."""
        draft_min = max(1, self.params.draft.draft_min)
        others = self._batcher.outlook(self.target.seq) if self._batcher is not None else (0, 0)
        started = time.perf_counter()
        may_pay = self.policy.may_pay(k_cap, others)
        account.policy_s += time.perf_counter() - started
        if not may_pay:
            return None, Draft.empty(), 0.0
        proposals, costs = self._free_drafts(context, k_cap, draft_rng)
        started = time.perf_counter()
        drafter, k = self.policy.plan(k_cap, proposals, len(context), others)
        account.policy_s += time.perf_counter() - started
        chosen = drafter.name if drafter is not None and k >= draft_min else None
        account.policy_s += sum(s for name, s in costs.items() if name != chosen)
        if chosen is None:
            return None, Draft.empty(), 0.0
        if drafter.name in proposals:
            draft, cost_s = proposals[drafter.name], costs[drafter.name]
        else:
            start, lag = time.perf_counter(), drafter.catch_up_s
            draft = self._cut(self._ask(drafter, context, k, draft_rng))
            cost_s = time.perf_counter() - start - (drafter.catch_up_s - lag)
            started = time.perf_counter()
            k = self.policy.length(drafter, draft, k)
            account.policy_s += time.perf_counter() - started
        draft = draft.truncated(k)
        return drafter, (draft if len(draft.tokens) >= draft_min else Draft.empty()), cost_s

    def _free_drafts(
        self, context: list[int], k_cap: int, draft_rng: np.random.Generator
    ) -> tuple[dict, dict]:
        """The policy's free drafters' drafts of this round and what each cost in seconds,
        both by drafter name.  Under a grammar, a drafter that ``looks_ahead`` drafts a
        chained draft: the forced tokens, its guess after them, the forced tokens after
        that (:func:`chained`)."""
        proposals, costs, forced = {}, {}, None
        awake = self.constraint is not None and not self.constraint.dormant
        for d in self.policy.free_drafters:  # the grammar first, when there is one
            cap = min(k_cap, self.policy.cap(d))
            if cap <= 0:
                continue
            start = time.perf_counter()
            if forced is not None and awake and d.looks_ahead:  # grammar, guess, grammar
                # noqa: E731
                guess = lambda ahead, k, d=d: self._ask(d, context, k, draft_rng, ahead=ahead)
                proposals[d.name] = chained(self.constraint, forced, guess, self._cut, cap)
            else:
                proposals[d.name] = self._cut(self._ask(d, context, cap, draft_rng))
            forced = proposals[d.name] if d.forces else forced
            costs[d.name] = time.perf_counter() - start
        return proposals, costs

    def _ask(
        self, drafter: Drafter, context: list[int], k: int, draft_rng: np.random.Generator, **ahead
    ) -> Draft:
        return drafter.propose(
            context, k, self.params.sampling, self.params.draft.p_min, draft_rng, **ahead
        )

    def _cut(self, draft: Draft) -> Draft:
        """``draft`` up to its first end-of-generation token, and under a grammar up to its
        first token the grammar forbids."""
        draft = draft.through_first(self.target.is_eog)
        if self.constraint is not None and draft.tokens:
            draft = draft.truncated(self.constraint.allowed(draft.tokens))
        return draft
