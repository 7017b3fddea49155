"""What the adaptive policy learns about each drafter: its acceptance on this text
(:class:`DrafterAcceptance`) and over all texts (:class:`LearntAcceptance`), what its
confidences are worth (:class:`Calibration`) and how far that holds on the current text
(:class:`TextTrust`), gathered in one :class:`DrafterRecord` per drafter of a policy; and how
long a kind's answers run (:class:`AnswerLength`), over which a draft model's catch-up is paid."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from localspec.decoding.drafters import Draft, Drafter
from localspec.decoding.policy.costs import DECAY

TRUST_PRIOR = 2.0  # tokens' worth of belief in the calibration at the start of a text
# an answer's length in tokens until some are seen: a tool call or a short reply (an agent's
# first tool call ran 61 tokens, a chat answer a few hundred), worth two answers
ANSWER_PRIOR_TOKENS, ANSWER_PRIOR_WEIGHT = 128.0, 2.0


@dataclass
class DrafterAcceptance:
    """Per-drafter acceptance estimate (decayed successes / trials)."""

    successes: float = 1.0  # prior acceptance = successes / trials, worth two trials
    trials: float = 2.0

    @property
    def alpha(self) -> float:
        return self.successes / self.trials

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        if n_drafted == 0:
            return
        self.successes = DECAY * self.successes + n_accepted
        self.trials = DECAY * self.trials + n_accepted + (1 if n_accepted < n_drafted else 0)

    def observe_judged(self, n_judged: int, n_matched: int) -> None:
        """A draft not verified, compared with the ``n_judged`` tokens the target emitted
        instead: ``n_matched`` equal, then a mismatch unless all judged tokens matched."""
        if n_judged == 0:
            return
        self.successes = DECAY * self.successes + n_matched
        self.trials = DECAY * self.trials + n_matched + (1 if n_matched < n_judged else 0)


@dataclass
class TextTrust:
    """How one drafter's calibrated chances hold up on the current text, per depth group
    (:attr:`Calibration.DEPTHS`): the chances predicted for its draft tokens that were
    judged (verified, or compared with what the target emitted), and how many of them
    were accepted.  The factor f of a group, accepted over predicted with
    ``TRUST_PRIOR`` tokens' worth of belief in the calibration added to both, rescales
    that group's chances for the rest of the text (:meth:`scale`): a text unlike the
    ones the calibration learnt from (prose after code: a 4-token match that a copy in
    code would follow, and prose leaves) is noticed within a few tokens, drafts and
    judged proposals alike.  Per group, since the short matches judged every round are
    calibrated on their own and would otherwise outvote the one long draft that failed."""

    predicted: dict = field(default_factory=dict)  # depth group -> chances predicted
    accepted: dict = field(default_factory=dict)  # depth group -> tokens accepted

    def factor(self, group: int) -> float:
        return (self.accepted.get(group, 0.0) + TRUST_PRIOR) / (
            self.predicted.get(group, 0.0) + TRUST_PRIOR
        )

    def scale(self, chance: float, group: int) -> float:
        """Below par (f < 1) the chance itself is scaled, a f: three misses of drafts
        calibrated at 0.99 leave 0.4, where scaling the odds would leave 0.97.  Above
        par the odds are, a f / (1 - a + a f), which stays below 1."""
        f = self.factor(group)
        return chance * f if f <= 1.0 else chance * f / (1.0 - chance + chance * f)

    def observe(self, chances: Sequence[float], n_accepted: int, groups: Sequence[int]) -> None:
        """The first ``n_accepted`` draft tokens were accepted, the next (if any) was not;
        ``groups``: each token's depth group."""
        for i, (chance, group) in enumerate(zip(chances[: n_accepted + 1], groups)):
            self.predicted[group] = self.predicted.get(group, 0.0) + chance
            self.accepted[group] = self.accepted.get(group, 0.0) + (1.0 if i < n_accepted else 0.0)


def padded_depths(depth: Sequence[int] | None, n: int) -> list[int]:
    """The first ``n`` draft tokens' depths (:attr:`Draft.depth`), 0 where a token has none."""
    depth = list(depth or [])[:n]
    return depth + [0] * (n - len(depth))


class Calibration:
    """What a drafter's confidence is worth: the observed acceptance of draft tokens by
    confidence bin (10 bins over [0, 1]) and depth group (the context tokens a token
    rests on: < 4, < 8, < 16, 16 or more; one group for drafters without depths), as
    decayed counts.  The prior for a bin is its own centre, worth two observations, so
    an uncalibrated drafter is taken at its word."""

    BINS = 10
    DEPTHS = (4, 8, 16)  # upper bounds of the depth groups but the last
    DECAY = 0.93  # per observation: a cell remembers about 14 tokens (module docstring)

    def __init__(self):
        groups = len(self.DEPTHS) + 1
        self.accepted = [
            [2.0 * (b + 0.5) / self.BINS for b in range(self.BINS)] for _ in range(groups)
        ]
        self.reached = [[2.0] * self.BINS for _ in range(groups)]

    @classmethod
    def group(cls, depth: int) -> int:
        """The depth group of a token resting on ``depth`` context tokens (0 to 3)."""
        return bisect_right(cls.DEPTHS, depth)

    def _cell(self, confidence: float, depth: int) -> tuple[int, int]:
        group = self.group(depth)
        if not 0.0 < confidence < math.inf:  # NaN and inf too: a broken estimate claims nothing
            return group, 0
        return group, min(self.BINS - 1, int(min(confidence, 1.0) * self.BINS))

    def __call__(self, confidence: float, depth: int = 0) -> float:
        g, b = self._cell(confidence, depth)
        return self.accepted[g][b] / self.reached[g][b]

    def observe(
        self, confidence: Sequence[float], n_accepted: int, depth: Sequence[int] | None = None
    ) -> None:
        """Tokens 1..n_accepted were accepted; token n_accepted + 1 (if in ``confidence``)
        was not; the ones after it were never judged.  ``depth``: per token, as
        :attr:`~localspec.decoding.drafters.Draft.depth` (None: all in the first group)."""
        for i, c in enumerate(confidence[: n_accepted + 1]):
            g, b = self._cell(c, depth[i] if depth and i < len(depth) else 0)
            self.accepted[g][b] = self.DECAY * self.accepted[g][b] + (
                1.0 if i < n_accepted else 0.0
            )
            self.reached[g][b] = self.DECAY * self.reached[g][b] + 1.0


LEARNT_DECAY = 0.995  # per trial: what a drafter's lifetime acceptance remembers (about 200 tokens)
LEARNT_PRIOR_TRIALS = 2.0  # trials' worth of the drafter's fixed prior mixed into a learnt one


@dataclass
class LearntAcceptance:
    """A drafter's acceptance over all the texts of one kind, slowly decayed (unlike
    :class:`DrafterAcceptance`, not pulled back at each new text): what a later process
    starts from (:mod:`localspec.decoding.policy.learned`).  Empty until the drafter is judged."""

    successes: float = 0.0
    trials: float = 0.0

    def observe(self, n_judged: int, n_accepted: int) -> None:
        if n_judged == 0:
            return
        self.successes = LEARNT_DECAY * self.successes + n_accepted
        self.trials = LEARNT_DECAY * self.trials + n_accepted + (1 if n_accepted < n_judged else 0)

    def prior(self, fixed: float) -> float:
        """The acceptance a new text starts from: what was learnt, with ``fixed`` (the
        drafter's own prior) worth ``LEARNT_PRIOR_TRIALS`` trials."""
        return (self.successes + LEARNT_PRIOR_TRIALS * fixed) / (self.trials + LEARNT_PRIOR_TRIALS)

    @classmethod
    def from_record(cls, entry) -> LearntAcceptance | None:
        """A stored ``{"successes", "trials"}`` (:meth:`AdaptivePolicy.learnt_priors`); None unless
        0 <= successes <= trials (and 0 < trials <= 1e6)."""
        if not isinstance(entry, Mapping):
            return None
        s, t = entry.get("successes"), entry.get("trials")
        if (
            not all(isinstance(x, (int, float)) and x == x for x in (s, t))
            or not 0 <= s <= t
            or t <= 0
            or t > 1e6
        ):
            return None
        return cls(float(s), float(t))


@dataclass(eq=False)
class DrafterRecord:
    """Everything one policy knows of one of its drafters: ``cap`` (most tokens a round),
    ``prior`` (the acceptance each new text starts from), ``acceptance`` (on this text,
    pulled back toward ``prior`` at each new one), ``learnt`` (over all texts, stored between
    processes), ``confidences`` (what its confidences are worth), ``trust`` (how that holds on
    this text) and ``proposal`` (its draft of the round being planned, if it made one)."""

    drafter: Drafter
    cap: int
    prior: float
    acceptance: DrafterAcceptance
    learnt: LearntAcceptance = field(default_factory=LearntAcceptance)
    confidences: Calibration = field(default_factory=Calibration)
    trust: TextTrust = field(default_factory=TextTrust)
    proposal: Draft | None = None

    @classmethod
    def new(cls, drafter: Drafter, cap: int) -> DrafterRecord:
        prior = drafter.prior_acceptance
        cap = min(cap, drafter.most_tokens or cap)
        return cls(drafter, cap, prior, DrafterAcceptance(successes=2.0 * prior, trials=2.0))

    def start_text(self, keep: float) -> None:
        """A new text: ``keep`` of the acceptance evidence stays, the prior fills the rest;
        the trust in the calibration starts again."""
        self.acceptance.successes = keep * self.acceptance.successes + self.prior
        self.acceptance.trials = keep * self.acceptance.trials + 1.0
        self.trust = TextTrust()

    def start_from(self, learnt: LearntAcceptance) -> None:
        """Start from what an earlier process learnt (its fixed prior worth two trials)."""
        self.learnt = learnt
        self.prior = learnt.prior(self.drafter.prior_acceptance)
        self.acceptance = DrafterAcceptance(successes=2.0 * self.prior, trials=2.0)

    def observe(self, n_judged: int, n_accepted: int, verified: bool) -> None:
        """Its tokens were judged: verified, or compared with what the target emitted."""
        if verified:
            self.acceptance.observe(n_judged, n_accepted)
        else:
            self.acceptance.observe_judged(n_judged, n_accepted)
        self.learnt.observe(n_judged, n_accepted)


@dataclass
class AnswerLength:
    """How many tokens one kind's answers run: a decayed mean over the finished ones (the prior
    ``ANSWER_PRIOR_TOKENS`` worth ``ANSWER_PRIOR_WEIGHT`` answers) and the current answer's count
    so far.  A draft model that must first read what it has not seen (a long prompt, rounds it
    sat out) is paid back only over the tokens still to come (:meth:`expected_left`), not over
    the ``max_tokens`` a client allows (an agent allows 32,000 and writes 61)."""

    total: float = ANSWER_PRIOR_TOKENS * ANSWER_PRIOR_WEIGHT
    answers: float = ANSWER_PRIOR_WEIGHT
    current: int = 0

    @property
    def mean(self) -> float:
        return self.total / self.answers

    def count(self, n_tokens: int) -> None:
        self.current += n_tokens

    def expected_left(self) -> float:
        """Tokens the current answer is expected still to run: the mean less what ran, but at
        least what ran (an answer past the mean is a long one; expect about as much again)."""
        return max(self.mean - self.current, float(self.current), 1.0)

    def finish(self) -> None:
        """The current answer ended: it joins the mean (an empty one, a channel the answer
        never entered, does not)."""
        self.total, self.answers = self.finished()
        self.current = 0

    def finished(self) -> tuple[float, float]:
        """(total, answers) with the current answer counted as finished."""
        if self.current == 0:
            return self.total, self.answers
        return DECAY * self.total + self.current, DECAY * self.answers + 1.0

    def record(self) -> dict:
        """``{"mean_tokens", "answers"}``, the current answer counted (for the store)."""
        total, answers = self.finished()
        return {"mean_tokens": total / answers, "answers": answers}

    @classmethod
    def from_record(cls, entry) -> AnswerLength | None:
        """A stored :meth:`record`; None unless 1 <= mean_tokens <= 1e6 and 0 < answers <= 1e6."""
        if not isinstance(entry, Mapping):
            return None
        mean, answers = entry.get("mean_tokens"), entry.get("answers")
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (mean, answers)):
            return None
        if not (1.0 <= mean <= 1e6 and 0.0 < answers <= 1e6):
            return None
        return cls(total=float(mean) * float(answers), answers=float(answers))
