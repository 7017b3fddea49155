"""Choosing each round's drafter and draft length.

:class:`FixedPolicy` drafts ``draft_max`` tokens every round with one drafter (what
llama.cpp does).  :class:`AdaptivePolicy` (``draft_max="auto"``) picks, every round,
the drafter and length k (0 = plain decoding) that maximise expected tokens per second:

    expected tokens of a round   E(k) = (1 - a^(k+1)) / (1 - a)
    cost of a round              C(k) = k * c_draft + c_verify(k + 1)

where a is the drafter's per-token acceptance probability (Leviathan et al. 2022,
arXiv:2211.17192, section 3.1 and eq. 1, with i.i.d. acceptance), c_draft its cost per
drafted token and c_verify(b) the target's cost for a batch of b tokens.  All three are
measured on the running machine, as exponential moving averages over the rounds seen so
far, starting from a calibration when the policy is created; a plain round is
E(0) / C(0) = 1 / c_verify(1).

Drafters that cost next to nothing (``free``: suffix, prediction, prompt lookup) are
asked every round, and their actual drafts are judged by their own per-token
confidence c_i, calibrated against what the target accepted at that confidence
(:class:`Calibration`).  A free draft not verified is still compared with what the
target emitted, so these drafters keep learning while they are not picked.
With a_i = calibrated(c_i),

    E(k) = 1 + sum_{j<=k} prod_{i<=j} a_i

and the length kept is the k maximising E(k) / C(k): each token is drafted while the
chance that it and all before it are accepted still pays for its share of the verify
cost on this machine (the stopping rule of SpecDec++, Huang et al. 2024,
arXiv:2405.19715, with measured instead of assumed costs).  A draft model's own draft
is cut the same way once its q values are known.  A drafter that reports how much
context each token rests on (``Draft.depth``: a suffix or prompt-lookup match's length)
is calibrated per depth as well, since a continuation seen once after a 16-token match
is worth more than one after 2 tokens.

The calibration is shared by all texts and follows the recent ones (each observation
keeps 0.93 of a cell's past: about 14 tokens' memory, tuned in the offline replay
against 0.98); each text also keeps its own trust in each drafter, per depth group
(:class:`TextTrust`): the chances predicted for the tokens judged so far against how
many were accepted.  A text where the calibration is wrong (prose after code: a
4-token match that code would copy on and prose leaves) is noticed within a few
tokens, and the drafter's chances at that depth are scaled down for the rest of that
text only.

Starting a draft model that has not read the context costs its prefill; that lag is
charged over the tokens the generation may still produce.

Probes of a drafter that sits out (a short draft every so many rounds, so a change of
text is noticed), their start after the first tokens of a text and a shorter horizon for
the lag were tried and removed: switched off one at a time in the offline replay
(``benchmarks/policy_ablation.py``, docs/drafting.md) none changed a result by 1 %.
A draft model that sits out a text gets its chance again on the next one, whose
estimate starts back near the prior (:meth:`AdaptivePolicy.new_generation`).

Plain decoding is probed too: after ``_PLAIN_PROBE_EVERY`` rounds without a one-token
verify, one round is plain, so c_verify(1) is measured again.  Otherwise a c(1)
measured during a stall (the machine busy elsewhere) makes every draft look cheap, the
policy drafts every round, and nothing ever measures c(1) again to correct it.  Only
where the best draft promises less than ``STALL_CLIP`` times plain's rate: a c(1) off
by up to that factor could then change the choice; above it (copying on a GPU, 13
tokens a round) the probe would cost a round's gain and change nothing.  While the
readings come in more than 10 % under the estimate, the next marginal round is plain
again, so a stalled c(1) is corrected within a few rounds, not a few hundred.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.decoding.calibration import (
    STALL_CLIP,
    Calibration,
    CostAverage,
    DrafterAcceptance,
    TextTrust,
    cost_changes,
    fastest_of_two,
    padded_depths,
)
from localspec.decoding.drafters import Drafter

_NEW_TEXT_KEEP = 0.25  # share of acceptance evidence a new generation keeps; the rest is the prior
_BATCH_MARGIN = 1.25  # c(b) is taken as at most this times b * c(1)
_PLAIN_PROBE_EVERY = 128  # rounds without a one-token verify after which one plain round re-measures c(1)
_FALLING = 0.9  # a plain probe reading under this share of the c(1) estimate calls for another


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
        return [d] if d is not None and not getattr(d, "free", False) and self.draft_max > 0 else []

    def new_generation(self) -> None:
        pass

    def cap(self, drafter) -> int:
        return self.draft_max

    def plan(
        self, k_cap: int, proposals: dict | None = None, n_context: int = 0, others: tuple[int, int] = (0, 0)
    ) -> tuple[Drafter | None, int]:
        k = min(self.draft_max, k_cap)
        return (self.drafter, k) if self.drafter is not None and k > 0 else (None, 0)

    def length(self, drafter, draft, k: int) -> int:
        factor = getattr(drafter, "max_spec_factor", None)
        if draft.depth and factor is not None:
            return min(k, max(1, int(factor * draft.depth[0])))
        return k

    def observe(
        self,
        drafter,
        n_drafted,
        n_accepted,
        draft_s,
        verify_s,
        batch,
        confidence=None,
        emitted=None,
        depth=None,
        forced=None,
    ) -> None:
        pass


@dataclass
class AdaptivePolicy:
    """Cost-model choice of drafter and length per round; see the module docstring.

    ``drafters`` are the candidates; ``max_k`` caps each one's draft length.  Costs
    start from a prior (a draft token costs half a target step; a batch of b costs
    1 + 0.1 (b - 1) target steps) and are replaced by measurements as they come.
    ``verify_costs`` (batch size -> seconds) and ``draft_costs`` (id(drafter) -> seconds
    per token) may be shared between policies of one model: costs belong to the machine,
    acceptance to the text and sampling settings.
    """

    drafters: Sequence[Drafter]
    max_k: dict = field(default_factory=dict)
    verify_costs: dict = field(default_factory=dict)  # batch size -> CostAverage of seconds
    draft_costs: dict = field(default_factory=dict)  # id(drafter) -> CostAverage of seconds per token
    prefill_costs: dict = field(default_factory=dict)  # id(drafter) -> seconds per prompt token read
    _models: dict = field(default_factory=dict)  # id(drafter) -> DrafterAcceptance
    _calibrations: dict = field(default_factory=dict)  # id(drafter) -> Calibration
    _trust: dict = field(default_factory=dict)  # id(drafter) -> TextTrust of the current text
    _step_s: float = 0.03  # prior for c_verify(1) until measured
    _since_plain: int = 0  # rounds since the last one-token verify (a measurement of c(1))
    _proposals: dict = field(default_factory=dict)  # the free drafts of the round being planned
    _sorted: list = field(default_factory=list)  # measured verify costs, as of cost_changes[0] == _sorted_of
    _sorted_of: int = -1
    _others: tuple = (0, 0)  # (tokens, sequences) the round's verify shares with other sequences
    _forcer: object = None  # the grammar drafter, whose calibration prices forced tokens in any draft

    def __post_init__(self) -> None:
        self._forcer = next((d for d in self.drafters if getattr(d, "forces", False)), None)
        for d in self.drafters:
            alpha = getattr(d, "prior_acceptance", 0.5)
            self.draft_costs.setdefault(id(d), CostAverage(getattr(d, "prior_cost_s", 0.5 * self._step_s)))
            self._models[id(d)] = DrafterAcceptance(successes=2.0 * alpha, trials=2.0)
            self._calibrations[id(d)] = Calibration()

    @property
    def prefill_drafters(self) -> tuple:
        """None: the draft model may never start on a text, so its prefill is charged when
        it is first chosen (see :meth:`_best_blind`), not paid up front."""
        return ()

    @property
    def free_drafters(self) -> list:
        """Drafters cheap enough to ask every round; :meth:`plan` judges their drafts."""
        return [d for d in self.drafters if getattr(d, "free", False)]

    def cap(self, drafter) -> int:
        return self.max_k.get(id(drafter), 8)

    @property
    def calibrated(self) -> bool:
        return bool(self.verify_costs)

    def new_generation(self) -> None:
        """A new text starts: pull each acceptance estimate back toward its prior, so a
        drafter that did well on the last text starts with short, cheap drafts here."""
        self._trust = {}
        for d in self.drafters:
            model = self._models[id(d)]
            model.successes = _NEW_TEXT_KEEP * model.successes + getattr(d, "prior_acceptance", 0.5)
            model.trials = _NEW_TEXT_KEEP * model.trials + 1.0

    def verify_cost(self, batch: int) -> float:
        """Seconds for a target decode of ``batch`` tokens: measured, else interpolated
        linearly between measured sizes, else the prior shape scaled to c_verify(1)."""
        known = self._measured_verify_costs()
        if not known:
            return self._step_s * (1 + 0.1 * (batch - 1))
        return max(1e-9, min(self._interpolated(known, batch), self._batch_bound(known, batch)))

    def _measured_verify_costs(self) -> list[tuple[int, float]]:
        """(batch, seconds) measured so far, ascending; sorted again only after a cost
        changed, since a plan asks for c(b) once per candidate length."""
        if self._sorted_of != cost_changes[0]:
            self._sorted = sorted((b, a.value) for b, a in self.verify_costs.items() if a.weight > 0)
            self._sorted_of = cost_changes[0]
        return self._sorted

    @staticmethod
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

    @staticmethod
    def _batch_bound(known: list, batch: int) -> float:
        """A batch of b never costs more than b single steps (plus a margin): a stalled
        measurement (the machine busy elsewhere) must not make drafting look hopeless,
        since a drafter never run again would never correct it."""
        b1, c1 = known[0]
        return _BATCH_MARGIN * batch * c1 / b1 if b1 == 1 else float("inf")

    def calibrate(
        self, target, draft_engines: dict, token: int = 100, sizes: Sequence[int] = (1, 2, 3, 5, 9, 17)
    ) -> None:
        """Measure the target's cost for batches of ``sizes`` tokens and each draft model's
        cost per token, by decoding a dummy token at the end of the caches and trimming
        it again (the cached prefix is kept).  About 3 s for the default pair on 2 CPU
        cores.

        Each batch is decoded twice and the faster run kept: a stall (the machine busy
        elsewhere) is not a cost, and a batch size calibrated too dear is never verified
        again to correct it (a stalled run once gave c(17) = 957 ms against 420-519 ms
        in other runs, and a benchmark's revisions, all accepted, went from 15.75 tokens
        a round to 5.25).  A reading that is negative or not finite (a broken clock) is
        dropped; with none left the prior stays and :attr:`calibrated` stays False.

        ``draft_engines`` maps id(drafter) -> its Engine.  Costs are stored in seconds
        (per batch in ``verify_costs``, per token in ``draft_costs`` and
        ``prefill_costs``).  Batch sizes that do not fit the context are skipped; an
        :class:`~localspec.errors.EngineError` from a decode comes through unchanged.
        """
        n = len(target.cache_tokens)
        for batch in sizes:
            if n + batch > target.n_ctx:
                break
            seconds = fastest_of_two(target, [token] * batch, range(batch))
            if seconds is not None:
                self.verify_costs[batch] = CostAverage(seconds, weight=1.0)
        for key, engine in draft_engines.items():
            if len(engine.cache_tokens) + 17 > engine.n_ctx:
                continue
            step = fastest_of_two(engine, [token], [0])
            prefill = fastest_of_two(engine, [token] * 17, [16])
            if step is not None:
                self.draft_costs[key] = CostAverage(step, weight=1.0)
            if prefill is not None:
                self.prefill_costs[key] = prefill / 17

    def plan(
        self, k_cap: int, proposals: dict | None = None, n_context: int = 0, others: tuple[int, int] = (0, 0)
    ) -> tuple[Drafter | None, int]:
        """(drafter, k) for the next round, k <= ``k_cap`` tokens; (None, 0) = plain.

        ``proposals`` maps id(drafter) -> :class:`~localspec.decoding.drafters.Draft` already made
        by the free drafters; those are judged by their calibrated confidences (k is then
        a length of that draft), the others by their acceptance estimate.
        ``n_context``: tokens in the context, for a draft model's catch-up cost.
        ``others``: (tokens, sequences) of the other sequences sharing the verify decode
        (continuous batching); a draft is then priced by the whole batch's rate (see
        :meth:`_round_rate`)."""
        proposals = proposals or {}
        self._proposals = proposals
        self._others = others
        plain_rate = self._round_rate(1.0, 0.0, 0)
        best, best_rate = (None, 0), plain_rate
        for d in self.drafters:
            limit = min(k_cap, self.cap(d))
            if id(d) in proposals:
                k, rate = self._best_length(d, proposals[id(d)], limit, self.draft_costs[id(d)].value)
            else:
                k, rate = self._best_blind(d, limit, n_context, k_cap)
            if k and rate > best_rate:
                best, best_rate = (d, k), rate
        if best[0] is not None and self._since_plain >= _PLAIN_PROBE_EVERY and best_rate < STALL_CLIP * plain_rate:
            return None, 0  # observe() counts again from this one-token verify
        return best

    def _lag_s(self, d, n_context: int) -> float:
        """Seconds ``d`` needs to read the context it has not seen (0 for free drafters)."""
        if not hasattr(d, "lag"):
            return 0.0
        return d.lag(n_context) * self.prefill_costs.get(id(d), 0.2 * self.draft_costs[id(d)].value)

    def _accept_chances(self, d, draft, k: int) -> list[float]:
        """Per token of ``draft`` (at most ``k``), the chance it is accepted given the
        ones before it were: its calibrated confidence scaled by this text's trust in the
        drafter, or the drafter's acceptance estimate when it gives no confidences."""
        if draft.confidence:
            confidence = draft.confidence[:k]
            depths = padded_depths(draft.depth, len(confidence))
            owners = self._owners(d, draft.forced, len(confidence))
            return [self._chance(o, c, x) for o, c, x in zip(owners, confidence, depths)]
        return [self._models[id(d)].alpha] * min(k, len(draft.tokens))

    def _owners(self, d, forced: Sequence[bool] | None, n: int) -> list:
        """Whose calibration judges each of ``n`` draft tokens: the grammar drafter's for
        the tokens a grammar forced (:attr:`Draft.forced`), ``d``'s for the rest."""
        forced = forced or ()
        grammar = self._forcer if self._forcer is not None else d
        return [grammar if i < len(forced) and forced[i] else d for i in range(n)]

    def _chance(self, d, confidence: float, depth: int) -> float:
        chance = self._calibrations[id(d)](confidence, depth)
        trust = self._trust.get(id(d))
        return chance if trust is None else trust.scale(chance, Calibration.group(depth))

    def _calibrated(self, d, confidence: Sequence[float], depths: Sequence[int]) -> list[float]:
        """Calibrated chances of tokens with these confidences and depths (one each)."""
        return list(map(self._calibrations[id(d)], confidence, depths))

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
                self._calibrated(owner, mine, at), accepted, [Calibration.group(x) for x in at]
            )
            self._calibrations[id(owner)].observe(mine, accepted, at)

    def _round_rate(self, expected: float, extra_s: float, k: int) -> float:
        """Tokens per second of the batch this round's verify joins, drafting k tokens that
        yield ``expected`` at ``extra_s`` seconds of drafting: the other sequences (one token
        each at least) share the decode, so a draft must pay for its rows in all of them."""
        tokens, sequences = self._others
        return (sequences + expected) / (extra_s + self.verify_cost(tokens + k + 1))

    def _best_length(self, d, draft, limit: int, cost_per_token: float) -> tuple[int, float]:
        """The length of ``draft`` (at most ``limit``) with the most expected tokens per
        second, and that rate; (0, 0.0) for an empty draft."""
        best_k, best_rate = 0, 0.0
        expected, run = 1.0, 1.0
        for k, a in enumerate(self._accept_chances(d, draft, limit), start=1):
            run *= a
            expected += run
            rate = self._round_rate(expected, k * cost_per_token, k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def _best_blind(self, d, limit: int, n_context: int, k_cap: int) -> tuple[int, float]:
        """Length and rate for a drafter not yet asked, from its acceptance estimate; a
        draft model's catch-up (its prefill of the context) is charged over the tokens it
        could still serve (see the module docstring)."""
        alpha, cost = self._models[id(d)].alpha, self.draft_costs[id(d)].value
        lag_s = self._lag_s(d, n_context)
        best_k, best_rate = 0, 0.0
        for k in range(1, limit + 1):
            expected = expected_tokens(alpha, k)
            rate = self._round_rate(expected, k * cost + lag_s * expected / max(1, k_cap), k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def length(self, drafter, draft, k: int) -> int:
        """How much of a draft just made by a non-free drafter to verify, now that its
        confidences are known (its drafting cost is spent): 0 when none of it pays."""
        self._proposals[id(drafter)] = draft  # judged in observe() if none of it is verified
        if not draft.tokens:
            return 0
        kept, rate = self._best_length(drafter, draft, min(k, len(draft.tokens)), 0.0)
        return kept if rate > self._round_rate(1.0, 0.0, 0) else 0

    def observe(
        self,
        drafter,
        n_drafted: int,
        n_accepted: int,
        draft_s: float,
        verify_s: float,
        batch: int,
        confidence: Sequence[float] | None = None,
        emitted: Sequence[int] | None = None,
        depth: Sequence[int] | None = None,
        forced: Sequence[bool] | None = None,
    ) -> None:
        """Learn from a finished round: ``draft_s`` seconds spent drafting (catch-up
        excluded), ``verify_s`` seconds for the target's decode of ``batch`` tokens,
        ``confidence`` the verified draft's per-token confidences (if it had them),
        ``emitted`` the tokens the round produced (accepted draft tokens, then the
        target's own), ``depth`` the verified draft's depths (if it had them), ``forced``
        which of its tokens a grammar forced (:attr:`Draft.forced`).  The
        drafts not verified this round (the free drafts not picked, a draft model's
        draft cut to nothing) are judged against ``emitted`` too, as far as it goes, so
        a drafter keeps learning what its confidence is worth (else one undervalued at
        the start would never be picked to show otherwise, and a draft model whose
        drafts are always cut would be chosen again and again)."""
        self._count_plain_rounds(batch, verify_s)
        self.verify_costs.setdefault(batch, CostAverage(verify_s)).add(verify_s)
        made = self._proposals.get(id(drafter)) if drafter is not None else None
        if made is not None and not getattr(drafter, "free", False):
            self._observe_model_draft(drafter, made, n_drafted, draft_s)
        elif n_drafted > 0:
            self.draft_costs[id(drafter)].add(draft_s / n_drafted)
        if drafter is not None and n_drafted > 0:
            self._models[id(drafter)].observe(n_drafted, n_accepted)
            if confidence:
                self._learn_confidences(drafter, confidence[:n_drafted], depth, n_accepted, forced)
        if emitted:
            self._judge_unverified(self._judged_in_round(drafter, n_drafted, forced), list(emitted))
        self._proposals = {}

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
            self._models[id(drafter)].observe_judged(1, 0)

    def _judge_unverified(self, verified: tuple, emitted: list[int]) -> None:
        for d in self.drafters:
            draft = self._proposals.get(id(d))
            if any(d is v for v in verified) or draft is None or not draft.tokens:
                continue
            judged = min(len(draft.tokens), len(emitted))
            matched = next((i for i in range(judged) if draft.tokens[i] != emitted[i]), judged)
            self._models[id(d)].observe_judged(judged, matched)
            if draft.confidence:
                self._learn_confidences(d, draft.confidence[:judged], draft.depth, matched, draft.forced, False)
