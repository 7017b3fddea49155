"""What the adaptive policy measures and learns: costs as moving averages
(:class:`CostAverage`, measured up front by :func:`measure_costs`), each drafter's acceptance
(:class:`DrafterAcceptance`), the calibration of free drafters' confidence
(:class:`Calibration`) and how far it holds on the current text (:class:`TextTrust`).
The policy that uses them is :mod:`localspec.decoding.policy`."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DECAY = 0.8  # weight of the past in every moving average, per observation
STALL_CLIP = 3.0  # one verify counts at most this many times the current estimate (a stall is not a cost)
STORED_C1_DRIFT = 2.0  # stored costs are this machine's unless c(1) now is this many times faster
COST_SLACK_S = 0.001  # differences this small are a clock's noise, not a machine's costs
WARM_UP_S, WARM_UP_DECODES = 0.1, 64  # decoding before costs are read (:func:`warm_up`)
MEASURE_RETRIES = 2  # verify costs measured again when a stall made them implausible
TRUST_PRIOR = 2.0  # tokens' worth of belief in the calibration at the start of a text


@dataclass
class CostAverage:
    """A measured cost in seconds, as a decayed moving average.  Once measured, one
    observation counts at most ``STALL_CLIP`` times the estimate: a stall (the machine
    busy elsewhere) is not a cost, and a drafter made to look hopeless by one would never
    run again to correct it.  A negative or non-finite reading (a broken clock) is
    ignored."""

    value: float
    weight: float = 0.0  # 0 = still the prior; a calibration counts as one observation

    def add(self, x: float) -> None:
        if not 0.0 <= x < math.inf:
            return
        if self.weight > 0:
            x = min(x, STALL_CLIP * self.value)
        self.weight = DECAY * self.weight + 1.0
        self.value = x if self.weight == 1.0 else self.value + (x - self.value) / self.weight  # a prior may be NaN


def fastest_of_two(engine, tokens: list[int], rows) -> float | None:
    """Seconds of the faster of two decodes of ``tokens`` at the end of ``engine``'s
    cache (trimmed back after each), or None when neither reading is a valid time."""
    n, runs = len(engine.cache_tokens), []
    for _ in range(2):
        before = engine.decode_s
        engine.decode(tokens, rows)
        runs.append(engine.decode_s - before)
        engine.trim(n)
    valid = [r for r in runs if 0.0 <= r < math.inf]
    return min(valid) if valid else None


def measure_costs(
    target, draft_engines: dict, costs: tuple[dict, dict, dict], token: int, sizes: Sequence[int]
) -> None:
    """Measure the target's cost for batches of ``sizes`` tokens and each draft model's
    cost per token, by decoding ``token`` at the end of the caches and trimming it again
    (the cached prefix is kept).  ``costs`` = (verify_costs, draft_costs, prefill_costs):
    seconds per batch (batch size -> :class:`CostAverage`), per draft token and per
    prompt token read (id(drafter) -> :class:`CostAverage`, float); ``draft_engines``
    maps id(drafter) -> its Engine.

    Each batch is decoded twice and the faster run kept (:func:`fastest_of_two`): a stall
    (the machine busy elsewhere) is not a cost, and a batch size measured too dear is never
    verified again to correct it (a stalled run once gave c(17) = 957 ms against 420-519 ms
    in other runs, and a benchmark's revisions, all accepted, went from 15.75 tokens a
    round to 5.25).  Readings that no machine could have together (:func:`implausible_costs`:
    a stall over both runs of one size) are taken again, up to ``MEASURE_RETRIES`` times,
    each size keeping its fastest reading, so a stall is never written into the learned
    store.  A reading that is negative or not finite (a broken clock) is dropped;
    with none left the prior stays.  Batch sizes that do not fit the context are skipped;
    an :class:`~localspec.errors.EngineError` from a decode comes through unchanged."""
    verify_costs, draft_costs, prefill_costs = costs
    fitting = [b for b in sizes if len(target.cache_tokens) + b <= target.n_ctx]
    warm_up(target, token)
    readings = _verify_readings(target, token, fitting)
    for _ in range(MEASURE_RETRIES):
        if implausible_costs(verify_costs_record({**verify_costs, **readings}), None) is None:
            break
        again = _verify_readings(target, token, fitting)  # a stall over both runs of a size
        readings = {b: min(s, again.get(b, s)) for b, s in readings.items()}
    verify_costs.update(readings)
    for key, engine in draft_engines.items():
        if len(engine.cache_tokens) + 17 > engine.n_ctx:
            continue
        warm_up(engine, token)
        step = fastest_of_two(engine, [token], [0])
        prefill = fastest_of_two(engine, [token] * 17, [16])
        if step is not None:
            draft_costs[key] = CostAverage(step, weight=1.0)
        if prefill is not None:
            prefill_costs[key] = prefill / 17


def warm_up(engine, token: int) -> None:
    """Decode one token at the end of ``engine``'s cache (trimmed back) until ``WARM_UP_S``
    have passed, at most ``WARM_UP_DECODES`` times: a context's first few dozen milliseconds
    of decoding run slower (a tiny model's step took 1.0-1.6 ms for its first 20-25 decodes,
    then 0.1-0.2 ms, on a 2-core Xeon), and a cost read in them would be written down as the
    machine's.  One or two decodes for a real model."""
    n, started = len(engine.cache_tokens), engine.decode_s
    for _ in range(WARM_UP_DECODES):
        engine.decode([token], [0])
        engine.trim(n)
        if engine.decode_s - started >= WARM_UP_S:
            break


def _verify_readings(target, token: int, sizes: Sequence[int]) -> dict[int, CostAverage]:
    readings = {}
    for batch in sizes:
        seconds = fastest_of_two(target, [token] * batch, range(batch))
        if seconds is not None:
            readings[batch] = CostAverage(seconds, weight=1.0)
    return readings


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
        return (self.accepted.get(group, 0.0) + TRUST_PRIOR) / (self.predicted.get(group, 0.0) + TRUST_PRIOR)

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
        self.accepted = [[2.0 * (b + 0.5) / self.BINS for b in range(self.BINS)] for _ in range(groups)]
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

    def observe(self, confidence: Sequence[float], n_accepted: int, depth: Sequence[int] | None = None) -> None:
        """Tokens 1..n_accepted were accepted; token n_accepted + 1 (if in ``confidence``)
        was not; the ones after it were never judged.  ``depth``: per token, as
        :attr:`~localspec.decoding.drafters.Draft.depth` (None: all in the first group)."""
        for i, c in enumerate(confidence[: n_accepted + 1]):
            g, b = self._cell(c, depth[i] if depth and i < len(depth) else 0)
            self.accepted[g][b] = self.DECAY * self.accepted[g][b] + (1.0 if i < n_accepted else 0.0)
            self.reached[g][b] = self.DECAY * self.reached[g][b] + 1.0


LEARNT_DECAY = 0.995  # per trial: what a drafter's lifetime acceptance remembers (about 200 tokens)
LEARNT_PRIOR_TRIALS = 2.0  # trials' worth of the drafter's fixed prior mixed into a learnt one


@dataclass
class LearntAcceptance:
    """A drafter's acceptance over all the texts of one kind, slowly decayed (unlike
    :class:`DrafterAcceptance`, not pulled back at each new text): what a later process
    starts from (:mod:`localspec.decoding.learned`).  Empty until the drafter is judged."""

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
        if not all(isinstance(x, (int, float)) and x == x for x in (s, t)) or not 0 <= s <= t or t <= 0 or t > 1e6:
            return None
        return cls(float(s), float(t))


def verify_costs_record(verify_costs: dict) -> dict:
    """The measured verify costs as JSON: ``{"<batch size>": seconds}`` (priors left out)."""
    return {str(b): a.value for b, a in sorted(verify_costs.items()) if a.weight > 0 and 0.0 < a.value < math.inf}


def load_verify_costs(record: dict, verify_costs: dict) -> None:
    """Put a :func:`verify_costs_record` into ``verify_costs`` (batch size -> :class:`CostAverage`),
    each as one measurement; entries that are not a positive batch size and a finite
    positive time are skipped."""
    for batch, seconds in record.items():
        value = _positive(seconds)
        if str(batch).isdigit() and int(batch) > 0 and value is not None:
            verify_costs[int(batch)] = CostAverage(value, weight=1.0)


def implausible_costs(verify: dict, draft_per_token: float | None) -> str | None:
    """Why a :func:`verify_costs_record` (and a draft model's seconds per token) cannot be
    a machine's own costs, or None.  A batch of b tokens is read with the weights once, so
    it costs at least about one single-token decode and at most b of them; a draft model's
    token costs no more than a target's.  A stall written down breaks that (one store held
    c(17) = 4.3 s beside c(1) = 29 ms, and its pair then never drafted)."""
    c1 = verify.get("1")
    if c1 is None:
        return None
    for batch, seconds in verify.items():
        if not 0.5 * c1 - COST_SLACK_S <= seconds <= 1.5 * int(batch) * c1 + COST_SLACK_S:
            return f"c({batch}) = {seconds * 1000:.1f} ms beside c(1) = {c1 * 1000:.1f} ms"
    if draft_per_token is not None and draft_per_token > 1.5 * c1 + COST_SLACK_S:
        return f"a draft token at {draft_per_token * 1000:.1f} ms beside c(1) = {c1 * 1000:.1f} ms"
    return None


def stored_c1_holds(stored_s: float, measured_s: float | None) -> bool:
    """Whether a stored one-token verify cost still describes the machine, by the fastest of
    a few readings now (:func:`fastest_of_two`).  Only a machine now faster than the store by
    more than ``STORED_C1_DRIFT`` calls for measuring again: the store was written while the
    machine was busy (or in another state).  Readings slower than the store say the machine
    is busy now; measuring then would write a busy machine's costs over good ones (and the
    next quiet load would measure again), while the running averages follow a slower machine
    within a few rounds anyway."""
    if measured_s is None or stored_s - measured_s <= COST_SLACK_S:
        return True
    return stored_s / measured_s <= STORED_C1_DRIFT


def _positive(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and 0.0 < x < math.inf else None


def draft_cost_record(cost: CostAverage | None, prefill_s: float | None) -> dict:
    """A draft model's ``{"per_token": s, "prefill": s per prompt token}``, what is known of it."""
    out = {}
    if cost is not None and cost.weight > 0 and _positive(cost.value) is not None:
        out["per_token"] = cost.value
    if _positive(prefill_s) is not None:
        out["prefill"] = prefill_s
    return out


def load_draft_cost(record: dict, key, draft_costs: dict, prefill_costs: dict) -> bool:
    """Put a :func:`draft_cost_record` under ``key``; True when both parts were there."""
    per_token, prefill = _positive(record.get("per_token")), _positive(record.get("prefill"))
    if per_token is not None:
        draft_costs[key] = CostAverage(per_token, weight=1.0)
    if prefill is not None:
        prefill_costs[key] = prefill
    return per_token is not None and prefill is not None
