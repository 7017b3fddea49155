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
far; a plain round is E(0) / C(0) = 1 / c_verify(1).  A drafter left unused for
``probe_every`` rounds is tried once with a short draft, so a change in the text (prose
to code, a quoted passage) is noticed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .drafters import Drafter

_DECAY = 0.9  # weight of the past in every moving average, per observation


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens emitted by a round drafting k tokens with acceptance ``alpha``
    (accepted draft tokens plus the target's correction or bonus token)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass
class _Average:
    value: float
    weight: float = 0.0  # 0 = still the prior

    def add(self, x: float) -> None:
        self.weight = _DECAY * self.weight + 1.0
        self.value += (x - self.value) / self.weight


@dataclass
class _DrafterModel:
    """Per-drafter estimates: acceptance (decayed successes / trials) and cost per token."""

    cost_s: _Average
    successes: float = 1.0  # prior acceptance = successes / trials, worth two trials
    trials: float = 2.0
    idle_rounds: int = 0

    @property
    def alpha(self) -> float:
        return self.successes / self.trials

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        if n_drafted == 0:
            return
        self.successes = _DECAY * self.successes + n_accepted
        self.trials = _DECAY * self.trials + n_accepted + (1 if n_accepted < n_drafted else 0)


class FixedPolicy:
    """One drafter, ``draft_max`` tokens every round (clamped by the loop)."""

    def __init__(self, drafter: Drafter | None, draft_max: int):
        self.drafter = drafter
        self.draft_max = draft_max

    def plan(self, k_cap: int) -> tuple[Drafter | None, int]:
        k = min(self.draft_max, k_cap)
        return (self.drafter, k) if self.drafter is not None and k > 0 else (None, 0)

    def observe(self, drafter, n_drafted, n_accepted, draft_s, verify_s, batch) -> None:
        pass


@dataclass
class AdaptivePolicy:
    """Cost-model choice of drafter and length per round; see the module docstring.

    ``drafters`` are the candidates; ``max_k`` caps each one's draft length.  Costs
    start from a prior (a draft token costs half a target step; a batch of b costs
    1 + 0.1 (b - 1) target steps) and are replaced by measurements as they come.
    """

    drafters: Sequence[Drafter]
    max_k: dict = field(default_factory=dict)
    probe_every: int = 32
    probe_k: int = 2
    _verify: dict = field(default_factory=dict)  # batch size -> _Average of seconds
    _models: dict = field(default_factory=dict)  # id(drafter) -> _DrafterModel
    _step_s: float = 0.03  # prior for c_verify(1) until measured

    def __post_init__(self) -> None:
        for d in self.drafters:
            alpha = getattr(d, "prior_acceptance", 0.5)
            self._models[id(d)] = _DrafterModel(cost_s=_Average(0.5 * self._step_s),
                                                successes=2.0 * alpha, trials=2.0)

    def verify_cost(self, batch: int) -> float:
        """Seconds for a target decode of ``batch`` tokens: measured, else interpolated
        linearly between measured sizes, else the prior shape scaled to c_verify(1)."""
        known = sorted((b, a.value) for b, a in self._verify.items() if a.weight > 0)
        if not known:
            return self._step_s * (1 + 0.1 * (batch - 1))
        for (b0, c0), (b1, c1) in zip(known, known[1:]):
            if b0 <= batch <= b1:
                return c0 + (c1 - c0) * (batch - b0) / (b1 - b0)
        b_edge, c_edge = known[0] if batch < known[0][0] else known[-1]
        base = known[0][1] / (1 + 0.1 * (known[0][0] - 1))
        return max(c_edge + base * 0.1 * (batch - b_edge), 1e-6)

    def plan(self, k_cap: int) -> tuple[Drafter | None, int]:
        best, best_rate = (None, 0), 1.0 / self.verify_cost(1)
        for d in self.drafters:
            model = self._models[id(d)]
            limit = min(k_cap, self.max_k.get(id(d), 8))
            for k in range(1, limit + 1):
                rate = expected_tokens(model.alpha, k) / (k * model.cost_s.value + self.verify_cost(k + 1))
                if rate > best_rate:
                    best, best_rate = (d, k), rate
        for d in self.drafters:
            model = self._models[id(d)]
            if d is best[0]:
                model.idle_rounds = 0
                continue
            model.idle_rounds += 1
            if model.idle_rounds >= self.probe_every and k_cap >= 1:
                model.idle_rounds = 0
                return d, min(self.probe_k, k_cap)
        return best

    def observe(self, drafter, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float,
                batch: int) -> None:
        self._verify.setdefault(batch, _Average(verify_s)).add(verify_s)
        if drafter is not None and n_drafted > 0:
            model = self._models[id(drafter)]
            model.observe(n_drafted, n_accepted)
            model.cost_s.add(draft_s / n_drafted)
