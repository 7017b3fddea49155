"""Slots: the sequences of a loaded pair that generations run in, one generation each.

A pair loaded with ``parallel`` = N holds N sequences in one target context (and N in the
draft model's).  Each :class:`Slot` has its own drafters and adaptive policies (they keep
per-text state) over the pair's shared measured costs; the suffix drafters share one
store of earlier outputs.  :class:`SlotPool` hands a new generation the free slot whose
cache shares the longest prefix with its prompt (a conversation goes on where it was
cached), and with one slot supersedes the generation in it, as a single-sequence model
always has.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from typing import NamedTuple

from localspec.decoding.drafters import (
    DraftModelDrafter,
    GrammarDrafter,
    PredictionDrafter,
    PromptLookupDrafter,
    SuffixDrafter,
)
from localspec.decoding.params import DraftParams
from localspec.decoding.policy import AdaptivePolicy, FixedPolicy
from localspec.decoding.scheduler import Batcher
from localspec.errors import InvalidOptionError
from localspec.llama.engine import common_prefix
from localspec.llama.sequence import EngineSequence
from localspec.llama.state_cache import MIN_TOKENS, PromptCache

_DRAFT_CAP = {"draft-model": 8}  # most tokens per round by drafter name; the others 16


class MeasuredCosts(NamedTuple):
    """The pair's measured costs, shared by every slot's adaptive policies: target verifies,
    drafts and prompt prefills, each a dict as :class:`AdaptivePolicy` keeps it."""

    verify: dict
    draft: dict
    prefill: dict

    @classmethod
    def empty(cls) -> MeasuredCosts:
        return cls({}, {}, {})


class Slot:
    """One sequence: ``target`` (the engine itself with one slot, else an
    :class:`~localspec.llama.sequence.EngineSequence`), its drafters and policies.
    ``costs``: the pair's shared :class:`MeasuredCosts`."""

    def __init__(self, index: int, target, draft_engine, batchers: tuple, costs: MeasuredCosts, suffix: dict):
        self.index = index
        batcher, draft_batcher = batchers
        many = batcher is not None
        self.target = EngineSequence(target, index, batcher) if many else target
        self.batcher = batcher
        self.drafter = None
        if draft_engine is not None:
            engine = EngineSequence(draft_engine, index, draft_batcher) if many else draft_engine
            self.drafter = DraftModelDrafter(engine, target.n_vocab, target.is_eog)
        self.lookup = PromptLookupDrafter()
        self.suffix = SuffixDrafter(**suffix)
        self.prediction = PredictionDrafter()
        self.grammar = GrammarDrafter()
        self.step_lock = threading.Lock()
        self.costs = costs
        self.adaptive: dict[tuple, AdaptivePolicy] = {}
        self.generation = None  # weak reference to the generation running here
        self.reserved = False  # handed out by SlotPool.acquire, generation not made yet
        self.last_used = 0.0

    @property
    def drafters(self) -> list:
        return [d for d in (self.drafter, self.lookup, self.suffix, self.prediction, self.grammar) if d is not None]

    def policy(self, dp: DraftParams, greedy: bool, predicted: bool, constrained: bool = False):
        """The policy for these options: fixed, or this slot's adaptive one for the same
        kind of text (created on first use; calibrated by the caller when new)."""
        if dp.strategy == "draft-model" and self.drafter is None:
            raise InvalidOptionError("strategy 'draft-model' needs a draft model; none is loaded")
        if dp.strategy == "prediction" and not predicted:
            raise InvalidOptionError("strategy 'prediction' needs a prediction (the expected output text)")
        if dp.strategy == "none" or dp.draft_max == 0:
            return FixedPolicy(None, 0)
        every = (
            ([self.grammar] if constrained else [])
            + ([self.prediction] if predicted else [])
            + [d for d in (self.drafter, self.suffix, self.lookup) if d is not None]
        )
        chosen = {
            "draft-model": [self.drafter],
            "prompt-lookup": [self.lookup],
            "suffix": [self.suffix],
            "prediction": [self.prediction],
        }.get(dp.strategy, every)
        if not dp.adaptive:
            return FixedPolicy(chosen[0], dp.draft_max)
        key = (dp.strategy, greedy, predicted, constrained)
        if key not in self.adaptive:
            verify_costs, draft_costs, prefill_costs = self.costs
            caps = {id(d): _DRAFT_CAP.get(d.name, 16) for d in self.drafters}
            self.adaptive[key] = AdaptivePolicy(
                chosen, max_k=caps, verify_costs=verify_costs, draft_costs=draft_costs, prefill_costs=prefill_costs
            )
        return self.adaptive[key]

    def share_costs_of(self, other: Slot) -> None:
        """Use ``other``'s measured draft-model costs (one machine, one draft model)."""
        if self.drafter is None or other is self:
            return
        _, draft_costs, prefill_costs = self.costs
        for costs in (draft_costs, prefill_costs):
            if id(other.drafter) in costs:
                costs[id(self.drafter)] = costs[id(other.drafter)]

    def free(self) -> bool:
        running = self.generation() if self.generation is not None else None
        return not self.reserved and (running is None or running.finished)


class SlotPool:
    """The slots of one pair.  ``acquire(prompt)`` returns the slot a new generation runs
    in (waiting while every slot is busy, with more than one); ``release(slot, generation)``
    frees it (called when the generation ends, or is garbage collected unfinished).
    Tells the target engine which sequences are idle, so it frees their cells first when
    the unified cache is full."""

    def __init__(
        self,
        target,
        draft_engine,
        parallel: int,
        suffix_store_tokens: int,
        cache_ram_bytes: int = 0,
        costs: MeasuredCosts | None = None,
    ):
        costs = MeasuredCosts.empty() if costs is None else costs
        self.batcher = Batcher(target) if parallel > 1 else None
        self.draft_batcher = Batcher(draft_engine, grace_s=0.0) if parallel > 1 and draft_engine is not None else None
        batchers = (self.batcher, self.draft_batcher)
        self.prompt_cache = PromptCache(target, draft_engine, cache_ram_bytes) if cache_ram_bytes > 0 else None
        first = Slot(0, target, draft_engine, batchers, costs, {"store_tokens": suffix_store_tokens})
        self.slots = [first] + [
            Slot(i, target, draft_engine, batchers, costs, {"shared_with": first.suffix}) for i in range(1, parallel)
        ]
        self._cond = threading.Condition()
        target.idle_sequences = self.idle_sequences
        if draft_engine is not None:
            draft_engine.idle_sequences = self.idle_sequences

    def idle_sequences(self) -> list[int]:
        """Seq ids without a running generation, least recently used first."""
        return [s.index for s in sorted(self.slots, key=lambda s: s.last_used) if s.free()]

    def acquire(self, prompt: Sequence[int]) -> Slot:
        """Reserve the slot for a generation of ``prompt``: the free one whose cache
        shares most of it; with one slot, that slot even when busy (the caller supersedes
        its generation); else waits for a slot to free.  Follow with :meth:`occupy` or
        :meth:`unreserve`."""
        with self._cond:
            while True:
                free = [s for s in self.slots if s.free()]
                if free:
                    slot = max(free, key=lambda s: (common_prefix(s.target.cache_tokens, prompt), -s.last_used))
                    self._swap(slot, prompt)
                    break
                if len(self.slots) == 1:
                    slot = self.slots[0]
                    break
                self._cond.wait()
            slot.reserved = True
            return slot

    def _swap(self, slot: Slot, prompt: Sequence[int]) -> None:
        """Before a free slot takes ``prompt``: keep what it holds in the prompt cache when
        the prompt would overwrite at least ``MIN_TOKENS`` of it, and load the cached text
        that shares more of the prompt than the slot does, if any."""
        if self.prompt_cache is None:
            return
        held = slot.target.cache_tokens
        shared = common_prefix(held, prompt)
        if len(held) - shared >= MIN_TOKENS:
            self.prompt_cache.save(slot.index)
        entry, n = self.prompt_cache.best(prompt)
        if entry is not None and n > shared and n >= MIN_TOKENS:
            self.prompt_cache.restore(entry, slot.index)

    def unreserve(self, slot: Slot) -> None:
        with self._cond:
            slot.reserved = False
            self._cond.notify_all()

    def occupy(self, slot: Slot, generation) -> None:
        with self._cond:
            slot.generation = weakref.ref(generation)
            slot.reserved = False
            slot.last_used = time.monotonic()
        weakref.finalize(generation, self._collected, slot)

    def release(self, generation) -> None:
        with self._cond:
            for slot in self.slots:
                if slot.generation is not None and slot.generation() is generation:
                    slot.generation = None
                    slot.last_used = time.monotonic()
                    if self.batcher is not None:
                        self.batcher.leave(slot.index)
            self._cond.notify_all()

    def _collected(self, slot: Slot) -> None:
        with self._cond:
            if slot.generation is not None and slot.generation() is None:
                slot.generation = None  # (a finalizer: the batcher's lock is not taken here)
            self._cond.notify_all()

    @property
    def busy(self) -> int:
        return sum(not s.free() for s in self.slots)
