"""The pair's costs on this machine, as the adaptive policy prices rounds with them.

:class:`CostModel` owns what a round costs: the target's verify per batch size, each
drafter's seconds per draft token and per prompt token read (its catch-up), measured up front
(:meth:`CostModel.measure`), learnt from every round (:meth:`CostModel.learn_verify`) and
kept between processes (:meth:`CostModel.record`, :meth:`CostModel.load_stored`).  One model
is shared by every policy of a loaded pair: costs belong to the machine, acceptance to the
text.  The stall defences live here too: readings clipped (``STALL_CLIP``), the fastest of
two decodes (:func:`fastest_of_two`), implausible readings measured again, a batch never
priced above b single steps (:mod:`~localspec.decoding.policy.pricing`), plain probes that
read c(1) again (``PLAIN_PROBE_EVERY``), and stored costs checked before use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from localspec.decoding.drafters import Drafter, DraftModelDrafter
from localspec.decoding.policy.pricing import RoundPricing

DECAY = 0.8  # weight of the past in every moving average, per observation
STALL_CLIP = 3.0  # one verify counts at most this many times the estimate (a stall is no cost)
STORED_C1_DRIFT = 2.0  # stored costs hold unless c(1) now is this many times faster
# differences this small are a busy process's noise, not a machine's costs: a tiny model's
# one-token step read 0.1 to 3.3 ms inside a full test run on a 2-core Xeon (2026-12-07),
# not even rising with the batch; a real model's step is 26 to 102 ms
COST_SLACK_S = 0.005
WARM_UP_S, WARM_UP_DECODES = 0.1, 64  # decoding before costs are read (:func:`warm_up`)
MEASURE_RETRIES = 2  # verify costs measured again when a stall made them implausible
PLAIN_PROBE_EVERY = 128  # rounds without a one-token verify after which a plain round reads c(1)
FALLING = 0.9  # a plain probe reading under this share of the c(1) estimate calls for another
STEP_PRIOR_S = 0.03  # c(1) until one is measured
BATCH_SIZES = (1, 2, 3, 5, 9, 17)  # the verify batches measured at load
PARALLEL_BATCH_SIZES = (33, 65)  # and with several sequences, whose verifies share a decode
DRAFT_MODEL = DraftModelDrafter.name


def batch_sizes(parallel: int) -> tuple[int, ...]:
    """The verify batch sizes to measure for a pair serving ``parallel`` sequences."""
    return BATCH_SIZES + (PARALLEL_BATCH_SIZES if parallel > 1 else ())


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
        self.value = (
            x if self.weight == 1.0 else self.value + (x - self.value) / self.weight
        )  # a prior may be NaN


@dataclass
class CostModel:
    """The pair's costs in seconds: ``verify`` (batch size -> :class:`CostAverage`), ``draft``
    (drafter name -> :class:`CostAverage` per draft token) and ``prefill`` (drafter name ->
    seconds per prompt token read).  Until measured, a batch of b costs 1 + 0.1 (b - 1)
    steps of ``STEP_PRIOR_S`` and a draft token the drafter's ``prior_cost_s`` (else half a
    step).  ``since_plain``: rounds since a one-token verify last read c(1)."""

    verify: dict[int, CostAverage] = field(default_factory=dict)
    draft: dict[str, CostAverage] = field(default_factory=dict)
    prefill: dict[str, float] = field(default_factory=dict)
    since_plain: int = 0

    @property
    def measured(self) -> bool:
        """Whether the target's verify costs were measured (or learnt from rounds)."""
        return bool(self.verify)

    def unmeasured(self, sizes: Sequence[int]) -> tuple[int, ...]:
        return tuple(b for b in sizes if b not in self.verify)

    def draft_cost(self, drafter: Drafter) -> CostAverage:
        """Seconds per draft token of ``drafter`` (its prior until measured)."""
        if drafter.name not in self.draft:
            prior = drafter.prior_cost_s
            self.draft[drafter.name] = CostAverage(
                prior if prior is not None else 0.5 * STEP_PRIOR_S
            )
        return self.draft[drafter.name]

    def draft_known(self) -> bool:
        """Whether the draft model's step and prompt reading were measured."""
        step = self.draft.get(DRAFT_MODEL)
        return step is not None and step.weight > 0 and DRAFT_MODEL in self.prefill

    def lag_s(self, drafter: Drafter, n_context: int) -> float:
        """Seconds ``drafter`` needs to read the context it has not seen (0 for free drafters)."""
        per_token = self.prefill.get(drafter.name, 0.2 * self.draft_cost(drafter).value)
        return drafter.lag(n_context) * per_token

    def pricing(self, others: tuple[int, int] = (0, 0)) -> RoundPricing:
        """A round priced as the costs stand now, in a batch with ``others`` =
        (tokens, sequences) of the other sequences sharing the verify decode."""
        measured = {b: a.value for b, a in self.verify.items() if a.weight > 0}
        return RoundPricing(measured, STEP_PRIOR_S, others)

    def verify_s(self, batch: int) -> float:
        """Seconds for a target decode of ``batch`` tokens (:meth:`RoundPricing.verify_s`)."""
        return self.pricing().verify_s(batch)

    @property
    def plain_probe_due(self) -> bool:
        """Whether c(1) was read too long ago (or fell at its last reading)."""
        return self.since_plain >= PLAIN_PROBE_EVERY

    def learn_verify(self, batch: int, seconds: float) -> None:
        """A verify of ``batch`` tokens took ``seconds``.  A first reading of a new batch size
        is clipped against the estimate: else a stall would make it look dear for good, and
        it would never be verified again to correct it."""
        self._count_plain_rounds(batch, seconds)
        if batch not in self.verify and self.verify and 0.0 <= seconds < math.inf:
            first = min(seconds, STALL_CLIP * self.verify_s(batch))
            self.verify[batch] = CostAverage(first, weight=1.0)
            return
        self.verify.setdefault(batch, CostAverage(seconds)).add(seconds)

    def learn_draft(self, drafter: Drafter, seconds_per_token: float) -> None:
        self.draft_cost(drafter).add(seconds_per_token)

    def _count_plain_rounds(self, batch: int, seconds: float) -> None:
        """Rounds since c(1) was last read; a one-token verify well below the estimate (the
        estimate was taken in a stall) leaves plain probes due until readings stop falling."""
        if batch != 1:
            self.since_plain += 1
            return
        known = self.verify.get(1)
        falling = known is not None and known.weight > 0 and seconds < FALLING * known.value
        self.since_plain = PLAIN_PROBE_EVERY if falling else 0

    def measure(
        self,
        target,
        draft_engines: Mapping[str, object],
        token: int = 100,
        sizes: Sequence[int] = BATCH_SIZES,
    ) -> None:
        """Measure the target's cost for batches of ``sizes`` tokens and each draft model's
        cost per token and per prompt token (``draft_engines``: drafter name -> its Engine), by
        decoding ``token`` at the end of the caches and trimming it again (the cached prefix is
        kept); about 3 s for the default pair on 2 CPU cores.

        Each batch is decoded twice and the faster run kept (:func:`fastest_of_two`): a stall
        (the machine busy elsewhere) is not a cost, and a batch size measured too dear is never
        verified again to correct it (a stalled run once gave c(17) = 957 ms against 420-519 ms
        in other runs, and a benchmark's revisions, all accepted, went from 15.75 tokens a round
        to 5.25).  Readings that no machine could have together (:func:`implausible_costs`: a
        stall over both runs of one size) are taken again, up to ``MEASURE_RETRIES`` times, each
        size keeping its fastest reading, so a stall is never written into the learned store.
        A reading that is negative or not finite (a broken clock) is dropped; with none left
        the prior stays.  Batch sizes that do not fit the context are skipped; an
        :class:`~localspec.errors.EngineError` from a decode comes through unchanged."""
        fitting = [b for b in sizes if len(target.cache_tokens) + b <= target.n_ctx]
        warm_up(target, token)
        readings = _verify_readings(target, token, fitting)
        for _ in range(MEASURE_RETRIES):
            known = {str(b): a.value for b, a in self.verify.items() if a.weight > 0}
            if (
                implausible_costs({**known, **{str(b): s for b, s in readings.items()}}, None)
                is None
            ):
                break
            again = _verify_readings(target, token, fitting)  # a stall over both runs of a size
            readings = {b: min(s, again.get(b, s)) for b, s in readings.items()}
        self.verify.update({b: CostAverage(s, weight=1.0) for b, s in readings.items()})
        for name, engine in draft_engines.items():
            self._measure_draft(name, engine, token)

    def _measure_draft(self, name: str, engine, token: int) -> None:
        if len(engine.cache_tokens) + 17 > engine.n_ctx:
            return
        warm_up(engine, token)
        step = fastest_of_two(engine, [token], [0])
        c1 = self.verify[1].value if 1 in self.verify and self.verify[1].weight > 0 else None
        for _ in range(MEASURE_RETRIES):  # a draft token dearer than a target one is a stall
            if step is None or c1 is None or implausible_costs({"1": c1}, step) is None:
                break
            again = fastest_of_two(engine, [token], [0])
            step = step if again is None else min(step, again)
        prefill = fastest_of_two(engine, [token] * 17, [16])
        if step is not None:
            self.draft[name] = CostAverage(step, weight=1.0)
        if prefill is not None:
            self.prefill[name] = prefill / 17

    def record(self) -> dict:
        """What to store: ``{"verify": {"<b>": s}, "draft": {"per_token", "prefill"}}`` (the
        draft model's, what is known of it)."""
        return {
            "verify": verify_costs_record(dict(self.verify)),
            "draft": draft_cost_record(self.draft.get(DRAFT_MODEL), self.prefill.get(DRAFT_MODEL)),
        }

    def load_stored(self, record, c1_now: Callable[[], float | None]) -> str | None:
        """Take a stored :meth:`record` unless its costs do not hold: none a machine could have
        (:func:`implausible_costs`), or a c(1) that ``c1_now()`` (the fastest of a few readings
        now, seconds) finds this machine clearly faster than (:func:`stored_c1_holds`).  Returns
        why they were left out, or None."""
        record = record if isinstance(record, dict) else {}
        verify = record.get("verify") if isinstance(record.get("verify"), dict) else {}
        draft = record.get("draft") if isinstance(record.get("draft"), dict) else {}
        why = _why_stored_costs_fail(verify, draft, c1_now) if verify else None
        if why is None:
            load_verify_costs(verify, self.verify)
            load_draft_cost(draft, DRAFT_MODEL, self.draft, self.prefill)
        return why


def _why_stored_costs_fail(verify: dict, draft: dict, c1_now: Callable[[], float | None]):
    readable = {b: s for b, s in verify.items() if isinstance(s, (int, float)) and str(b).isdigit()}
    per_token = draft.get("per_token")
    why = implausible_costs(readable, per_token if isinstance(per_token, (int, float)) else None)
    if why is None and isinstance(readable.get("1"), (int, float)):
        measured = c1_now()
        if not stored_c1_holds(readable["1"], measured):
            why = f"c(1) is {measured * 1000:.1f} ms now, {readable['1'] * 1000:.1f} ms stored"
    return why


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


def _verify_readings(target, token: int, sizes: Sequence[int]) -> dict[int, float]:
    """Seconds of the fastest of two decodes of each batch size (where one was a time)."""
    readings = {}
    for batch in sizes:
        seconds = fastest_of_two(target, [token] * batch, range(batch))
        if seconds is not None:
            readings[batch] = seconds
    return readings


def verify_costs_record(verify_costs: dict) -> dict:
    """The measured verify costs as JSON: ``{"<batch size>": seconds}`` (priors left out)."""
    return {
        str(b): a.value
        for b, a in sorted(verify_costs.items())
        if a.weight > 0 and 0.0 < a.value < math.inf
    }


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
