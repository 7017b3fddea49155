"""Choosing each round's drafter and draft length.

:class:`FixedPolicy` drafts ``draft_max`` tokens every round with one drafter (what
llama.cpp does).  :class:`AdaptivePolicy` (``draft_max="auto"``) picks, every round, the
drafter and length k (0 = plain decoding) with the most expected tokens per second,
E(k) / C(k) with C(k) = k * c_draft + c_verify(k + 1), from costs measured on the running
machine (Leviathan et al. 2022, arXiv:2211.17192, section 3.1, eq. 1) and, for the free
drafters, their calibrated per-token confidences (the stopping rule of SpecDec++, Huang
et al. 2024, arXiv:2405.19715).  What it measures and learns is in
:mod:`~localspec.decoding.policy.costs` and
:mod:`~localspec.decoding.policy.estimates`; each mechanism, and the replay figure that earns it
its place, in docs/drafting.md.  It implements :class:`~localspec.decoding.policy.protocol.Policy`,
what the loop asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from localspec.decoding.drafters import Draft, Drafter
from localspec.decoding.policy.costs import STALL_CLIP, CostModel
from localspec.decoding.policy.estimates import (
    AnswerLength,
    Calibration,
    DrafterAcceptance,
    DrafterRecord,
    LearntAcceptance,
    padded_depths,
)
from localspec.decoding.policy.pricing import RoundPricing
from localspec.decoding.policy.protocol import expected_tokens
from localspec.decoding.rounds import RoundOutcome

_NEW_TEXT_KEEP = 0.25  # share of acceptance evidence a new generation keeps; the rest is the prior
DRAFT_CAPS = {"draft-model": 8}  # most tokens a round, by drafter name
DEFAULT_CAP = 16  # for the drafters not in DRAFT_CAPS


def draft_cap(name: str) -> int:
    return DRAFT_CAPS.get(name, DEFAULT_CAP)


class AdaptivePolicy:
    """Cost-model choice of drafter and length per round; see the module docstring.

    ``drafters`` are the candidates (one of each name); ``caps`` (drafter name -> most
    tokens a round) overrides :func:`draft_cap`.  ``costs`` is the pair's
    :class:`~localspec.decoding.policy.costs.CostModel`, shared by all its policies (costs
    belong to the machine, acceptance to the text and sampling settings); each drafter's
    estimates are one :class:`~localspec.decoding.policy.estimates.DrafterRecord`."""

    def __init__(
        self,
        drafters: Sequence[Drafter],
        caps: Mapping[str, int] | None = None,
        costs: CostModel | None = None,
    ):
        caps = caps or {}
        self.drafters = list(drafters)
        self.costs = costs if costs is not None else CostModel()
        self.records = {
            d.name: DrafterRecord.new(d, caps.get(d.name, draft_cap(d.name))) for d in drafters
        }
        self._forcer = next((r for r in self.records.values() if r.drafter.forces), None)
        self._others = (0, 0)  # (tokens, sequences) the round's verify shares with others
        self.answer = AnswerLength()
        for d in drafters:
            self.costs.draft_cost(d)  # its prior, until measured

    def prefill_drafters(self, n_prompt: int, k_cap: int) -> list:
        """The drafters not free to ask (a draft model) expected to pay on this text even
        after reading its ``n_prompt`` tokens (``k_cap``: the most tokens it may write): they
        read the prompt during prompt eval, not in a stall mid-answer.  The others read what
        they lack when first chosen, if ever (:meth:`_best_blind` charges it)."""
        price = self.pricing()
        plain_rate = price.rate(1.0, 0.0, 0)
        return [
            r.drafter
            for r in self.records.values()
            if not r.drafter.free
            and self._best_blind(price, r, min(k_cap, r.cap), n_prompt, k_cap)[1] > plain_rate
        ]

    @property
    def free_drafters(self) -> list:
        """Drafters cheap enough to ask every round; :meth:`plan` judges their drafts."""
        return [d for d in self.drafters if d.free]

    def cap(self, drafter) -> int:
        return self.records[drafter.name].cap

    def acceptance(self, drafter) -> DrafterAcceptance:
        """``drafter``'s per-token acceptance estimate, as learnt so far (this model's texts)."""
        return self.records[drafter.name].acceptance

    def confidence_calibration(self, drafter) -> Calibration:
        """What ``drafter``'s confidences are worth, as learnt so far (all texts)."""
        return self.records[drafter.name].confidences

    def enter_channel(self, channel: str) -> None:
        """Nothing: one set of estimates for every channel (per channel:
        :class:`~localspec.decoding.policy.channels.ChannelPolicy`)."""

    def new_generation(self) -> None:
        """A new text starts: pull each acceptance estimate back toward its prior, so a
        drafter that did well on the last text starts with short, cheap drafts here."""
        for record in self.records.values():
            record.start_text(_NEW_TEXT_KEEP)
        self.answer.finish()

    def learnt_priors(self) -> dict:
        """``{drafter name: {"successes", "trials"}}``: each judged drafter's acceptance over
        all texts so far (:class:`~localspec.decoding.policy.estimates.LearntAcceptance`), for
        :meth:`start_from`."""
        return {
            name: {"successes": r.learnt.successes, "trials": r.learnt.trials}
            for name, r in self.records.items()
            if r.learnt.trials > 0
        }

    def start_from(self, priors: Mapping, answer: Mapping | None = None) -> None:
        """Start from what an earlier process learnt (:meth:`learnt_priors`; unknown names and
        malformed entries skipped): each drafter's acceptance, and the prior each new text
        is pulled back to, become the learnt one (its fixed prior worth two trials); and the
        answers' length (``answer``: :meth:`AnswerLength.record`), when given and well formed."""
        for name, record in self.records.items():
            learnt = LearntAcceptance.from_record(priors.get(name))
            if learnt is not None:
                record.start_from(learnt)
        length = AnswerLength.from_record(answer)
        if length is not None:
            self.answer = length

    def pricing(self) -> RoundPricing:
        """The round being planned priced as the costs stand now (a policy sharing them
        may have measured since), in the batch of the latest :meth:`plan`."""
        return self.costs.pricing(self._others)

    def plan(
        self,
        k_cap: int,
        proposals: Mapping[str, Draft] | None = None,
        n_context: int = 0,
        others: tuple[int, int] = (0, 0),
    ) -> tuple[Drafter | None, int]:
        """(drafter, k) for the next round, k <= ``k_cap`` tokens; (None, 0) = plain.

        ``proposals`` maps drafter name -> :class:`~localspec.decoding.drafters.Draft`
        already made by the free drafters; those are judged by their calibrated confidences
        (k is then a length of that draft), the others by their acceptance estimate.
        ``n_context``: tokens in the context, for a draft model's catch-up cost.
        ``others``: (tokens, sequences) of the other sequences sharing the verify decode
        (continuous batching); a draft is then priced by the whole batch's rate
        (:meth:`RoundPricing.rate`)."""
        proposals = proposals or {}
        for name, record in self.records.items():
            record.proposal = proposals.get(name)
        self._others = others
        price = self.pricing()
        plain_rate = price.rate(1.0, 0.0, 0)
        best, best_rate = (None, 0), plain_rate
        for record in self.records.values():
            k, rate = self._best_of(price, record, min(k_cap, record.cap), n_context, k_cap)
            if k and rate > best_rate:
                best, best_rate = (record.drafter, k), rate
        if (
            best[0] is not None
            and self.costs.plain_probe_due
            and best_rate < STALL_CLIP * plain_rate
        ):
            return None, 0  # observe() counts again from this one-token verify
        return best

    def may_pay(self, k_cap: int, others: tuple[int, int] = (0, 0)) -> bool:
        """Whether any draft could pay this round beside ``others`` (as :meth:`plan`), even one
        sure to be accepted whole.  Where none can (a CPU's decode of full slots: four plain
        rows cost less than three, any row more makes it dearer for all), the drafters are not
        asked: their work, under Python's lock, would hold the shared decode back."""
        price = self.costs.pricing(others)
        plain_rate = price.rate(1.0, 0.0, 0)
        longest = min(k_cap, max((r.cap for r in self.records.values()), default=0))
        return any(price.rate(k + 1.0, 0.0, k) > plain_rate for k in range(1, longest + 1))

    def _best_of(
        self, price: RoundPricing, record: DrafterRecord, limit: int, n_context: int, k_cap: int
    ):
        if record.proposal is not None:
            per_token = self.costs.draft_cost(record.drafter).value
            return self._best_length(price, record, record.proposal, limit, per_token)
        return self._best_blind(price, record, limit, n_context, k_cap)

    def accept_chances(self, d, draft, k: int) -> list[float]:
        """Per token of ``draft`` (at most ``k``), the chance it is accepted given the
        ones before it were: its calibrated confidence scaled by this text's trust in the
        drafter, or the drafter's acceptance estimate when it gives no confidences."""
        record = self.records[d.name]
        if draft.confidence:
            confidence = draft.confidence[:k]
            depths = padded_depths(draft.depth, len(confidence))
            owners = self._owners(record, draft.forced, len(confidence))
            return [self._chance(o, c, x) for o, c, x in zip(owners, confidence, depths)]
        return [record.acceptance.alpha] * min(k, len(draft.tokens))

    def chances(self, drafter, draft) -> list[float]:
        """:meth:`accept_chances` of the whole draft: what a shared decode keeps of it."""
        return self.accept_chances(drafter, draft, len(draft.tokens))

    def _owners(self, record: DrafterRecord, forced: Sequence[bool] | None, n: int) -> list:
        """Whose calibration judges each of ``n`` draft tokens: the grammar drafter's for
        the tokens a grammar forced (:attr:`Draft.forced`), ``record``'s for the rest."""
        forced = forced or ()
        grammar = self._forcer if self._forcer is not None else record
        return [grammar if i < len(forced) and forced[i] else record for i in range(n)]

    @staticmethod
    def _chance(record: DrafterRecord, confidence: float, depth: int) -> float:
        return record.trust.scale(record.confidences(confidence, depth), Calibration.group(depth))

    def _learn_confidences(
        self,
        record,
        confidence: Sequence[float],
        depth,
        n_accepted: int,
        forced=None,
        verified=True,
    ) -> None:
        """Draft tokens with these confidences (and depths) were judged: the first
        ``n_accepted`` accepted, then one rejected unless all were accepted.  The tokens a
        grammar forced (``forced``) teach the grammar drafter's calibration, the rest the
        drafter's; in a draft not ``verified``, only the drafter's (the grammar's own draft
        is judged too)."""
        depths = padded_depths(depth, len(confidence))
        owners = self._owners(record, forced, len(confidence))
        for owner in dict.fromkeys(owners):
            if owner is not record and not verified:
                continue
            judged = [i for i, o in enumerate(owners[: n_accepted + 1]) if o is owner]
            mine, at = [confidence[i] for i in judged], [depths[i] for i in judged]
            accepted = sum(i < n_accepted for i in judged)
            chances = list(map(owner.confidences, mine, at))
            owner.trust.observe(chances, accepted, [Calibration.group(x) for x in at])
            owner.confidences.observe(mine, accepted, at)

    def _best_length(
        self, price, record, draft, limit: int, cost_per_token: float
    ) -> tuple[int, float]:
        """The length of ``draft`` (at most ``limit``) with the most expected tokens per
        second, and that rate; (0, 0.0) for an empty draft."""
        best_k, best_rate = 0, 0.0
        expected, run = 1.0, 1.0
        for k, a in enumerate(self.accept_chances(record.drafter, draft, limit), start=1):
            run *= a
            expected += run
            rate = price.rate(expected, k * cost_per_token, k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def _best_blind(
        self, price, record, limit: int, n_context: int, k_cap: int
    ) -> tuple[int, float]:
        """Length and rate for a drafter not yet asked, from its acceptance estimate; a
        draft model's catch-up (its read of the context it lacks) is charged over the tokens
        it could still serve: those the answer is expected still to run
        (:meth:`AnswerLength.expected_left`), at most ``k_cap`` (what the generation may still
        produce)."""
        d = record.drafter
        alpha, cost = record.acceptance.alpha, self.costs.draft_cost(d).value
        lag_s = self.costs.lag_s(d, n_context)
        horizon = max(1.0, min(k_cap, self.answer.expected_left()))
        best_k, best_rate = 0, 0.0
        for k in range(1, limit + 1):
            expected = expected_tokens(alpha, k)
            rate = price.rate(expected, k * cost + lag_s * expected / horizon, k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def verify_s(self, batch: int = 1) -> float | None:
        return self.costs.verify_s(max(1, batch)) if self.costs.measured else None

    def length(self, drafter, draft, k: int) -> int:
        """How much of a draft just made by a non-free drafter to verify, now that its
        confidences are known (its drafting cost is spent): 0 when none of it pays."""
        record = self.records[drafter.name]
        record.proposal = draft  # judged in observe() if none of it is verified
        if not draft.tokens:
            return 0
        price = self.pricing()
        kept, rate = self._best_length(price, record, draft, min(k, len(draft.tokens)), 0.0)
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
        self.answer.count(len(outcome.emitted))
        self.costs.learn_verify(outcome.verify_batch, outcome.verify_s)
        record = self.records[drafter.name] if drafter is not None else None
        if record is not None and record.proposal is not None and not drafter.free:
            self._observe_model_draft(record, record.proposal, n_drafted, outcome.draft_s)
        elif n_drafted > 0:
            self.costs.learn_draft(drafter, outcome.draft_s / n_drafted)
        if record is not None and n_drafted > 0:
            record.observe(n_drafted, outcome.n_accepted, verified=True)
            if draft.confidence:
                confidence = draft.confidence[:n_drafted]
                self._learn_confidences(
                    record, confidence, draft.depth, outcome.n_accepted, draft.forced
                )
        if outcome.emitted:
            self._judge_unverified(
                self._judged_in_round(record, n_drafted, draft.forced), list(outcome.emitted)
            )
        for r in self.records.values():
            r.proposal = None

    def _judged_in_round(self, record, n_drafted: int, forced: Sequence[bool] | None) -> tuple:
        """The records whose tokens the verified draft judged: its drafter's, and the
        grammar's when it carried forced tokens (a chained draft), so those are not learnt
        twice."""
        if n_drafted == 0:
            return ()
        if self._forcer is not None and any((forced or ())[:n_drafted]):
            return (record, self._forcer)
        return (record,)

    def _observe_model_draft(self, record, made, n_verified: int, draft_s: float) -> None:
        """A draft model ran this round: its cost per token made (the draft may have
        been cut before verification), and a miss when it declined to draft at all
        (``p_min``), so a model that keeps declining stops being chosen."""
        if made.tokens:
            self.costs.learn_draft(record.drafter, draft_s / len(made.tokens))
        elif n_verified == 0:
            record.observe(1, 0, verified=False)

    def _judge_unverified(self, verified: tuple, emitted: list[int]) -> None:
        for record in self.records.values():
            draft = record.proposal
            if any(record is v for v in verified) or draft is None or not draft.tokens:
                continue
            judged = min(len(draft.tokens), len(emitted))
            matched = next((i for i in range(judged) if draft.tokens[i] != emitted[i]), judged)
            record.observe(judged, matched, verified=False)
            if draft.confidence:
                confidence = draft.confidence[:judged]
                self._learn_confidences(
                    record, confidence, draft.depth, matched, draft.forced, False
                )
