"""Choosing each round's drafter and draft length.

:class:`FixedPolicy` drafts ``draft_max`` tokens every round with one drafter (what
llama.cpp does).  :class:`AdaptivePolicy` (``draft_max="auto"``) picks, every round, the
drafter and length k (0 = plain decoding) with the most expected tokens per second,
E(k) / C(k) with C(k) = k * c_draft + c_verify(k + 1), from costs measured on the running
machine (Leviathan et al. 2022, arXiv:2211.17192, section 3.1, eq. 1) and, for the free
drafters, their calibrated per-token confidences (the stopping rule of SpecDec++, Huang
et al. 2024, arXiv:2405.19715).  What it measures and learns is in
:mod:`localspec.decoding.calibration`; each mechanism, and the replay figure that earns it
its place, in docs/drafting.md.  Both implement :class:`Policy`, what the loop asks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Protocol, runtime_checkable

from localspec.decoding.calibration import (
    STALL_CLIP,
    Calibration,
    CostAverage,
    DrafterAcceptance,
    LearntAcceptance,
    TextTrust,
    measure_costs,
    padded_depths,
)
from localspec.decoding.drafters import Draft, Drafter
from localspec.decoding.rounds import RoundOutcome

_NEW_TEXT_KEEP = 0.25  # share of acceptance evidence a new generation keeps; the rest is the prior
_BATCH_MARGIN = 1.25  # c(b) is taken as at most this times b * c(1)
_PLAIN_PROBE_EVERY = 128  # rounds without a one-token verify after which one plain round re-measures c(1)
_FALLING = 0.9  # a plain probe reading under this share of the c(1) estimate calls for another


@runtime_checkable
class Policy(Protocol):
    """What the loop (:class:`~localspec.decoding.loop.Generation`) asks of a policy.

    Per generation: :meth:`new_generation`, then :attr:`prefill_drafters` read the prompt
    during prompt eval.  Per round: each of :attr:`free_drafters` drafts up to
    ``min(k_cap, cap(d))`` tokens, :meth:`plan` picks (drafter, k) given those drafts,
    a drafter not yet asked drafts k and :meth:`length` says how much of it to verify,
    and :meth:`observe` learns from the round's :class:`RoundOutcome`."""

    @property
    def free_drafters(self) -> Sequence[Drafter]: ...

    @property
    def prefill_drafters(self) -> Sequence[Drafter]: ...

    def new_generation(self) -> None: ...

    def cap(self, drafter: Drafter) -> int: ...

    def plan(
        self,
        k_cap: int,
        proposals: Mapping[int, Draft] | None = None,
        n_context: int = 0,
        others: tuple[int, int] = (0, 0),
    ) -> tuple[Drafter | None, int]:
        """(drafter, k <= ``k_cap``) for the next round, (None, 0) for a plain one.
        ``proposals``: id(drafter) -> the free drafters' drafts of this round;
        ``n_context``: tokens in the context; ``others``: (tokens, sequences) of the other
        sequences sharing the verify decode."""
        ...

    def length(self, drafter: Drafter, draft: Draft, k: int) -> int:
        """How many tokens of ``draft`` (just made by ``drafter``, asked for ``k``) to verify."""
        ...

    def observe(self, outcome: RoundOutcome) -> None: ...

    def enter_channel(self, channel: str) -> None:
        """The next round starts in ``channel``: ``reasoning``, or ``content`` (always, without thinking)."""


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens emitted by a round drafting k tokens with acceptance ``alpha``
    (accepted draft tokens plus the target's correction or bonus token)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


class FixedPolicy:
    """One drafter, ``draft_max`` tokens every round (clamped by the loop).  A draft model
    reads the prompt during prompt eval (:attr:`prefill_drafters`), as llama.cpp's server
    does, since it drafts from the first round on.

    A drafter with a ``max_spec_factor`` (the suffix drafter) has each draft cut to that
    many times the match it rests on (``Draft.depth[0]``; at least one token), as
    ArcticInference and vLLM's ``suffix`` method do with the same name and default
    (1.0): a 2-token match drafts 2 tokens, a 16-token match 16."""

    free_drafters: tuple = ()

    def __init__(self, drafter: Drafter | None, draft_max: int):
        self.drafter = drafter
        self.draft_max = draft_max

    @property
    def prefill_drafters(self) -> list:
        d = self.drafter
        return [d] if d is not None and not d.free and self.draft_max > 0 else []

    def new_generation(self) -> None:
        pass

    def cap(self, drafter) -> int:
        return self.draft_max

    def plan(
        self, k_cap: int, proposals: Mapping | None = None, n_context: int = 0, others: tuple[int, int] = (0, 0)
    ) -> tuple[Drafter | None, int]:
        k = min(self.draft_max, k_cap)
        return (self.drafter, k) if self.drafter is not None and k > 0 else (None, 0)

    def length(self, drafter, draft, k: int) -> int:
        factor = drafter.max_spec_factor
        if draft.depth and factor is not None:
            return min(k, max(1, int(factor * draft.depth[0])))
        return k

    def observe(self, outcome: RoundOutcome) -> None:
        pass

    def enter_channel(self, channel: str) -> None:
        pass


class RoundPricing:
    """Tokens per second of the round being planned, from the target's verify costs as
    measured when pricing starts (``verify_costs``: batch size -> :class:`CostAverage` of
    seconds; the prior shape scaled to ``step_s`` until one is measured) and the batch the
    round's verify joins: ``others`` = (tokens, sequences) of the other sequences sharing
    that decode ((0, 0) alone)."""

    def __init__(self, verify_costs: Mapping[int, CostAverage], step_s: float, others: tuple[int, int] = (0, 0)):
        known = sorted((b, a.value) for b, a in verify_costs.items() if a.weight > 0)
        # a bigger batch never costs less: measured so (noise), a useless draft would look free
        self.measured = [(b, c) for (b, _), c in zip(known, accumulate((c for _, c in known), max))]
        self.step_s = step_s
        self.tokens, self.sequences = others

    def rate(self, expected: float, extra_s: float, k: int) -> float:
        """Tokens per second of the batch this round's verify joins, drafting k tokens that
        yield ``expected`` at ``extra_s`` seconds of drafting: the other sequences (one token
        each) share the decode, so a draft must pay for its rows in all of them.  The time
        is what the batch takes with every sequence plain, c(S + 1), plus this draft's own
        rows at the batch's size, c(T + k + 1) - c(T + 1): the others' rows beyond one each
        (drafts, a prompt being read) are theirs to pay for, and must not make this draft
        look cheap beside them.  With T = S (the others plain) that is c(S + k + 1)."""
        if self.tokens <= self.sequences:
            return (self.sequences + expected) / (extra_s + self.verify_s(self.tokens + k + 1))
        own = max(0.0, self.verify_s(self.tokens + k + 1) - self.verify_s(self.tokens + 1))
        return (self.sequences + expected) / (extra_s + self.verify_s(self.sequences + 1) + own)

    def verify_s(self, batch: int) -> float:
        """Seconds for a target decode of ``batch`` tokens: measured, else interpolated
        linearly between measured sizes, else the prior shape scaled to c_verify(1)."""
        known = self.measured
        if not known:
            return self.step_s * (1 + 0.1 * (batch - 1))
        return max(1e-9, min(_interpolated(known, batch), _batch_bound(known, batch)))


def _interpolated(known: list, batch: int) -> float:
    for (b0, c0), (b1, c1) in zip(known, known[1:]):
        if b0 <= batch <= b1:
            return c0 + (c1 - c0) * (batch - b0) / (b1 - b0)
    if batch > known[-1][0] and len(known) >= 2:  # past the largest measured batch: its slope goes on
        (b0, c0), (b1, c1) = known[-2], known[-1]
        return max(c1 + (c1 - c0) / (b1 - b0) * (batch - b1), c1)
    b_edge, c_edge = known[0] if batch < known[0][0] else known[-1]
    base = known[0][1] / (1 + 0.1 * (known[0][0] - 1))
    return max(c_edge + base * 0.1 * (batch - b_edge), 1e-6)


def _batch_bound(known: list, batch: int) -> float:
    """A batch of b never costs more than b single steps (plus a margin): a stalled
    measurement (the machine busy elsewhere) must not make drafting look hopeless,
    since a drafter never run again would never correct it."""
    b1, c1 = known[0]
    return _BATCH_MARGIN * batch * c1 / b1 if b1 == 1 else float("inf")


@dataclass
class AdaptivePolicy:
    """Cost-model choice of drafter and length per round; see the module docstring.

    ``drafters`` are the candidates; ``max_k`` caps each one's draft length.  Costs
    start from a prior (a draft token costs the drafter's ``prior_cost_s``, else half a
    target step; a batch of b costs 1 + 0.1 (b - 1) target steps) and are replaced by
    measurements as they come.  ``verify_costs`` (batch size -> seconds),
    ``draft_costs`` (id(drafter) -> seconds per token) and ``prefill_costs``
    (id(drafter) -> seconds per prompt token read) may be shared between policies of one
    model: costs belong to the machine, acceptance to the text and sampling settings.
    """

    drafters: Sequence[Drafter]
    max_k: dict = field(default_factory=dict)
    verify_costs: dict = field(default_factory=dict)  # batch size -> CostAverage of seconds
    draft_costs: dict = field(default_factory=dict)  # id(drafter) -> CostAverage of seconds per token
    prefill_costs: dict = field(default_factory=dict)  # id(drafter) -> seconds per prompt token read
    _acceptance: dict = field(default_factory=dict)  # id(drafter) -> DrafterAcceptance
    _learnt: dict = field(default_factory=dict)  # id(drafter) -> LearntAcceptance over all texts
    _prior: dict = field(default_factory=dict)  # id(drafter) -> the acceptance each new text starts from
    _confidences: dict = field(default_factory=dict)  # id(drafter) -> Calibration of its confidences
    _trust: dict = field(default_factory=dict)  # id(drafter) -> TextTrust of the current text
    _step_s: float = 0.03  # prior for c_verify(1) until measured
    _since_plain: int = 0  # rounds since the last one-token verify (a measurement of c(1))
    _proposals: dict = field(default_factory=dict)  # the free drafts of the round being planned
    _others: tuple = (0, 0)  # (tokens, sequences) the round's verify shares with other sequences
    _forcer: object = None  # the grammar drafter, whose calibration prices forced tokens in any draft

    def __post_init__(self) -> None:
        self._forcer = next((d for d in self.drafters if d.forces), None)
        for d in self.drafters:
            prior_cost_s = d.prior_cost_s if d.prior_cost_s is not None else 0.5 * self._step_s
            self.draft_costs.setdefault(id(d), CostAverage(prior_cost_s))
            self._prior[id(d)] = d.prior_acceptance
            self._acceptance[id(d)] = DrafterAcceptance(successes=2.0 * d.prior_acceptance, trials=2.0)
            self._learnt[id(d)] = LearntAcceptance()
            self._confidences[id(d)] = Calibration()

    @property
    def prefill_drafters(self) -> tuple:
        """None: a draft model may never start on a text; its prefill is charged when first chosen (:meth:`_best_blind`)."""
        return ()

    @property
    def free_drafters(self) -> list:
        """Drafters cheap enough to ask every round; :meth:`plan` judges their drafts."""
        return [d for d in self.drafters if d.free]

    def cap(self, drafter) -> int:
        return self.max_k.get(id(drafter), 8)

    def acceptance(self, drafter) -> DrafterAcceptance:
        """``drafter``'s per-token acceptance estimate, as learnt so far (this model's texts)."""
        return self._acceptance[id(drafter)]

    def confidence_calibration(self, drafter) -> Calibration:
        """What ``drafter``'s confidences are worth, as learnt so far (all texts)."""
        return self._confidences[id(drafter)]

    @property
    def costs_measured(self) -> bool:
        """Whether the target's verify costs were measured (:meth:`measure_costs`, or rounds)."""
        return bool(self.verify_costs)

    def enter_channel(self, channel: str) -> None:
        """Nothing: one set of estimates for every channel (per channel: :mod:`~localspec.decoding.channel_policy`)."""

    def new_generation(self) -> None:
        """A new text starts: pull each acceptance estimate back toward its prior, so a
        drafter that did well on the last text starts with short, cheap drafts here."""
        self._trust = {}
        for d in self.drafters:
            model = self._acceptance[id(d)]
            model.successes = _NEW_TEXT_KEEP * model.successes + self._prior[id(d)]
            model.trials = _NEW_TEXT_KEEP * model.trials + 1.0

    def learnt_priors(self) -> dict:
        """``{drafter name: {"successes", "trials"}}``: each judged drafter's acceptance over all
        texts so far (:class:`~localspec.decoding.calibration.LearntAcceptance`), for :meth:`start_from`."""
        return {
            d.name: {"successes": a.successes, "trials": a.trials}
            for d in self.drafters
            if (a := self._learnt[id(d)]).trials > 0
        }

    def start_from(self, priors: Mapping) -> None:
        """Start from what an earlier process learnt (:meth:`learnt_priors`; unknown names and
        malformed entries skipped): each drafter's acceptance, and the prior each new text
        is pulled back to, become the learnt one (its fixed prior worth two trials)."""
        for d in self.drafters:
            learnt = LearntAcceptance.from_record(priors.get(d.name))
            if learnt is None:
                continue
            self._learnt[id(d)] = learnt
            prior = self._prior[id(d)] = learnt.prior(d.prior_acceptance)
            self._acceptance[id(d)] = DrafterAcceptance(successes=2.0 * prior, trials=2.0)

    def pricing(self) -> RoundPricing:
        """The round being planned priced as the costs stand now (a policy sharing them
        may have measured since), in the batch of the latest :meth:`plan`."""
        return RoundPricing(self.verify_costs, self._step_s, self._others)

    def verify_cost(self, batch: int) -> float:
        """Seconds for a target decode of ``batch`` tokens (:meth:`RoundPricing.verify_s`)."""
        return RoundPricing(self.verify_costs, self._step_s).verify_s(batch)

    def measure_costs(
        self, target, draft_engines: dict, token: int = 100, sizes: Sequence[int] = (1, 2, 3, 5, 9, 17)
    ) -> None:
        """:func:`~localspec.decoding.calibration.measure_costs` into this policy's (shared) costs
        (``draft_engines``: id(drafter) -> its Engine); about 3 s for the default pair on 2 CPU cores."""
        measure_costs(target, draft_engines, (self.verify_costs, self.draft_costs, self.prefill_costs), token, sizes)

    def plan(
        self, k_cap: int, proposals: Mapping | None = None, n_context: int = 0, others: tuple[int, int] = (0, 0)
    ) -> tuple[Drafter | None, int]:
        """(drafter, k) for the next round, k <= ``k_cap`` tokens; (None, 0) = plain.

        ``proposals`` maps id(drafter) -> :class:`~localspec.decoding.drafters.Draft` already made
        by the free drafters; those are judged by their calibrated confidences (k is then
        a length of that draft), the others by their acceptance estimate.
        ``n_context``: tokens in the context, for a draft model's catch-up cost.
        ``others``: (tokens, sequences) of the other sequences sharing the verify decode
        (continuous batching); a draft is then priced by the whole batch's rate
        (:meth:`RoundPricing.rate`)."""
        proposals = proposals or {}
        self._proposals = proposals
        self._others = others
        price = self.pricing()
        plain_rate = price.rate(1.0, 0.0, 0)
        best, best_rate = (None, 0), plain_rate
        for d in self.drafters:
            limit = min(k_cap, self.cap(d))
            if id(d) in proposals:
                k, rate = self._best_length(price, d, proposals[id(d)], limit, self.draft_costs[id(d)].value)
            else:
                k, rate = self._best_blind(price, d, limit, n_context, k_cap)
            if k and rate > best_rate:
                best, best_rate = (d, k), rate
        if best[0] is not None and self._since_plain >= _PLAIN_PROBE_EVERY and best_rate < STALL_CLIP * plain_rate:
            return None, 0  # observe() counts again from this one-token verify
        return best

    def _lag_s(self, d, n_context: int) -> float:
        """Seconds ``d`` needs to read the context it has not seen (0 for free drafters)."""
        return d.lag(n_context) * self.prefill_costs.get(id(d), 0.2 * self.draft_costs[id(d)].value)

    def accept_chances(self, d, draft, k: int) -> list[float]:
        """Per token of ``draft`` (at most ``k``), the chance it is accepted given the
        ones before it were: its calibrated confidence scaled by this text's trust in the
        drafter, or the drafter's acceptance estimate when it gives no confidences."""
        if draft.confidence:
            confidence = draft.confidence[:k]
            depths = padded_depths(draft.depth, len(confidence))
            owners = self._owners(d, draft.forced, len(confidence))
            return [self._chance(o, c, x) for o, c, x in zip(owners, confidence, depths)]
        return [self._acceptance[id(d)].alpha] * min(k, len(draft.tokens))

    def _owners(self, d, forced: Sequence[bool] | None, n: int) -> list:
        """Whose calibration judges each of ``n`` draft tokens: the grammar drafter's for
        the tokens a grammar forced (:attr:`Draft.forced`), ``d``'s for the rest."""
        forced = forced or ()
        grammar = self._forcer if self._forcer is not None else d
        return [grammar if i < len(forced) and forced[i] else d for i in range(n)]

    def _chance(self, d, confidence: float, depth: int) -> float:
        chance = self._confidences[id(d)](confidence, depth)
        trust = self._trust.get(id(d))
        return chance if trust is None else trust.scale(chance, Calibration.group(depth))

    def _calibrated_chances(self, d, confidence: Sequence[float], depths: Sequence[int]) -> list[float]:
        """Calibrated chances of tokens with these confidences and depths (one each)."""
        return list(map(self._confidences[id(d)], confidence, depths))

    def _learn_confidences(
        self, d, confidence: Sequence[float], depth: Sequence[int] | None, n_accepted: int, forced=None, verified=True
    ) -> None:
        """Draft tokens with these confidences (and depths) were judged: the first
        ``n_accepted`` accepted, then one rejected unless all were accepted.  The tokens a
        grammar forced (``forced``) teach the grammar drafter's calibration, the rest d's;
        in a draft not ``verified``, only d's (the grammar's own draft is judged too)."""
        depths = padded_depths(depth, len(confidence))
        owners = self._owners(d, forced, len(confidence))
        for owner in dict.fromkeys(owners):
            if owner is not d and not verified:
                continue
            judged = [i for i, o in enumerate(owners[: n_accepted + 1]) if o is owner]
            mine, at = [confidence[i] for i in judged], [depths[i] for i in judged]
            accepted = sum(i < n_accepted for i in judged)
            self._trust.setdefault(id(owner), TextTrust()).observe(
                self._calibrated_chances(owner, mine, at), accepted, [Calibration.group(x) for x in at]
            )
            self._confidences[id(owner)].observe(mine, accepted, at)

    def _best_length(self, price: RoundPricing, d, draft, limit: int, cost_per_token: float) -> tuple[int, float]:
        """The length of ``draft`` (at most ``limit``) with the most expected tokens per
        second, and that rate; (0, 0.0) for an empty draft."""
        best_k, best_rate = 0, 0.0
        expected, run = 1.0, 1.0
        for k, a in enumerate(self.accept_chances(d, draft, limit), start=1):
            run *= a
            expected += run
            rate = price.rate(expected, k * cost_per_token, k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def _best_blind(self, price: RoundPricing, d, limit: int, n_context: int, k_cap: int) -> tuple[int, float]:
        """Length and rate for a drafter not yet asked, from its acceptance estimate; a
        draft model's catch-up (its prefill of the context) is charged over the tokens it
        could still serve (``k_cap``, the tokens the generation may still produce)."""
        alpha, cost = self._acceptance[id(d)].alpha, self.draft_costs[id(d)].value
        lag_s = self._lag_s(d, n_context)
        best_k, best_rate = 0, 0.0
        for k in range(1, limit + 1):
            expected = expected_tokens(alpha, k)
            rate = price.rate(expected, k * cost + lag_s * expected / max(1, k_cap), k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def length(self, drafter, draft, k: int) -> int:
        """How much of a draft just made by a non-free drafter to verify, now that its
        confidences are known (its drafting cost is spent): 0 when none of it pays."""
        self._proposals[id(drafter)] = draft  # judged in observe() if none of it is verified
        if not draft.tokens:
            return 0
        price = self.pricing()
        kept, rate = self._best_length(price, drafter, draft, min(k, len(draft.tokens)), 0.0)
        return kept if rate > price.rate(1.0, 0.0, 0) else 0

    def observe(self, outcome: RoundOutcome) -> None:
        """Learn from a finished round (:class:`~localspec.decoding.rounds.RoundOutcome`):
        the verify's cost, the drafting cost, the drafter's acceptance and what its
        confidences were worth.  The drafts not verified this round (the free drafts not
        picked, a draft model's draft cut to nothing) are judged against
        ``outcome.emitted`` too, as far as it goes, so a drafter keeps learning what its
        confidence is worth (else one undervalued at the start would never be picked to
        show otherwise, and a draft model whose drafts are always cut would be chosen
        again and again)."""
        drafter, draft, n_drafted = outcome.drafter, outcome.draft, outcome.n_drafted
        self._learn_verify_cost(outcome.verify_batch, outcome.verify_s)
        made = self._proposals.get(id(drafter)) if drafter is not None else None
        if made is not None and not drafter.free:
            self._observe_model_draft(drafter, made, n_drafted, outcome.draft_s)
        elif n_drafted > 0:
            self.draft_costs[id(drafter)].add(outcome.draft_s / n_drafted)
        if drafter is not None and n_drafted > 0:
            self._acceptance[id(drafter)].observe(n_drafted, outcome.n_accepted)
            self._learnt[id(drafter)].observe(n_drafted, outcome.n_accepted)
            if draft.confidence:
                confidence = draft.confidence[:n_drafted]
                self._learn_confidences(drafter, confidence, draft.depth, outcome.n_accepted, draft.forced)
        if outcome.emitted:
            self._judge_unverified(self._judged_in_round(drafter, n_drafted, draft.forced), list(outcome.emitted))
        self._proposals = {}

    def _learn_verify_cost(self, batch: int, verify_s: float) -> None:
        self._count_plain_rounds(batch, verify_s)
        if batch not in self.verify_costs and self.verify_costs and 0.0 <= verify_s < math.inf:
            first = min(verify_s, STALL_CLIP * self.verify_cost(batch))  # a first reading is clipped too
            self.verify_costs[batch] = CostAverage(first, weight=1.0)
            return
        self.verify_costs.setdefault(batch, CostAverage(verify_s)).add(verify_s)

    def _judged_in_round(self, drafter, n_drafted: int, forced: Sequence[bool] | None) -> tuple:
        """The drafters whose tokens the verified draft judged: its own, and the grammar's
        when it carried forced tokens (a chained draft), so those are not learnt twice."""
        if n_drafted == 0:
            return ()
        if self._forcer is not None and any((forced or ())[:n_drafted]):
            return (drafter, self._forcer)
        return (drafter,)

    def _count_plain_rounds(self, batch: int, verify_s: float) -> None:
        """Rounds since c(1) was last measured; a one-token verify well below the
        estimate (the estimate was taken in a stall) leaves plain probes due until
        readings stop falling."""
        if batch != 1:
            self._since_plain += 1
            return
        known = self.verify_costs.get(1)
        falling = known is not None and known.weight > 0 and verify_s < _FALLING * known.value
        self._since_plain = _PLAIN_PROBE_EVERY if falling else 0

    def _observe_model_draft(self, drafter, made, n_verified: int, draft_s: float) -> None:
        """A draft model ran this round: its cost per token made (the draft may have
        been cut before verification), and a miss when it declined to draft at all
        (``p_min``), so a model that keeps declining stops being chosen."""
        if made.tokens:
            self.draft_costs[id(drafter)].add(draft_s / len(made.tokens))
        elif n_verified == 0:
            self._acceptance[id(drafter)].observe_judged(1, 0)
            self._learnt[id(drafter)].observe(1, 0)

    def _judge_unverified(self, verified: tuple, emitted: list[int]) -> None:
        for d in self.drafters:
            draft = self._proposals.get(id(d))
            if any(d is v for v in verified) or draft is None or not draft.tokens:
                continue
            judged = min(len(draft.tokens), len(emitted))
            matched = next((i for i in range(judged) if draft.tokens[i] != emitted[i]), judged)
            self._acceptance[id(d)].observe_judged(judged, matched)
            self._learnt[id(d)].observe(judged, matched)
            if draft.confidence:
                self._learn_confidences(d, draft.confidence[:judged], draft.depth, matched, draft.forced, False)
