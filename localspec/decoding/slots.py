"""Slots: the sequences of a loaded pair that generations run in, one generation each.

A pair loaded with ``parallel`` = N holds N sequences in one target context (and N in the
draft model's).  Each :class:`Slot` has its own drafters and adaptive policies (they keep
per-text state) over the pair's shared measured costs; the suffix drafters share one
store of earlier outputs.  :class:`SlotPool` hands a new generation the free slot whose
reuse loses least of what the slots hold (a conversation goes on where it was cached; a
side request takes an empty slot, not the main thread's), and with one slot supersedes the
generation in it, as a single-sequence model always has.  :class:`PrefixSharing` lets a
sequence take over the prefix another holds (the cells are shared, not read again) and wait
for one that another is still reading, so two requests with one long prefix read it once.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence

from localspec.decoding.drafters import (
    DraftModelDrafter,
    GrammarDrafter,
    MtpDrafter,
    PredictionDrafter,
    PromptLookupDrafter,
    SuffixDrafter,
)
from localspec.decoding.params import DraftParams
from localspec.decoding.policy import AdaptivePolicy, ChannelPolicy, CostModel, FixedPolicy
from localspec.decoding.reasoning import CONTENT, REASONING
from localspec.decoding.scheduler import Batcher
from localspec.errors import InvalidOptionError
from localspec.llama.engine import common_prefix
from localspec.llama.sequence import EngineSequence
from localspec.llama.state_cache import MIN_TOKENS, PromptCache

SHARE_MIN = (
    16  # a shared prefix shorter than this is read again rather than waited for or taken over
)
WAIT_POLL_S = 0.02  # how often a sequence waiting for another's prompt read looks at its progress


class Slot:
    """One sequence: ``target`` (the engine itself with one slot, else an
    :class:`~localspec.llama.sequence.EngineSequence`), its drafters and policies.
    ``costs``: the pair's shared :class:`~localspec.decoding.policy.CostModel`."""

    def __init__(
        self,
        index: int,
        target,
        draft_engine,
        batchers: tuple,
        costs: CostModel,
        suffix: dict,
        sharing=None,
    ):
        self.index = index
        batcher, draft_batcher = batchers
        many = batcher is not None
        self.target = EngineSequence(target, index, batcher, sharing) if many else target
        self.batcher = batcher
        self.drafter = None
        if draft_engine is not None:
            engine = (
                EngineSequence(draft_engine, index, draft_batcher, sharing)
                if many
                else draft_engine
            )
            self.drafter = DraftModelDrafter(engine, target.n_vocab, target.is_eog)
        mtp = getattr(target, "mtp", None) if not many else None
        self.mtp = MtpDrafter(mtp, target.is_eog) if mtp is not None else None
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
        self.cache_key = None  # the prompt_cache_key of the last generation here
        self.reading: list[int] | None = None  # the prompt its generation reads (PrefixSharing)

    @property
    def drafters(self) -> list:
        return [
            d
            for d in (
                self.drafter,
                self.mtp,
                self.lookup,
                self.suffix,
                self.prediction,
                self.grammar,
            )
            if d is not None
        ]

    def policy(
        self,
        dp: DraftParams,
        greedy: bool,
        predicted: bool,
        constrained: bool = False,
        channels: bool = False,
    ):
        """The policy for these options: fixed, or this slot's adaptive one for the same
        kind of text (created on first use; calibrated by the caller when new).  With
        ``channels`` (a generation split into thinking and answer) an adaptive choice is a
        :class:`~localspec.decoding.policy.channels.ChannelPolicy`: the answer judged by the
        same policy as a generation without thinking, the thinking by its own (its key ends
        with ``"reasoning"``)."""
        if dp.strategy == "draft-model" and self.drafter is None:
            raise InvalidOptionError(
                "strategy 'draft-model' needs a draft model; none is loaded", param="strategy"
            )
        if dp.strategy == "mtp" and self.mtp is None:
            raise InvalidOptionError(
                "strategy 'mtp' needs a target with an MTP (NextN) block or Gemma 4's assistant, "
                "loaded with parallel 1 and a strategy that may use it ('auto' or 'mtp')",
                param="strategy",
            )
        if dp.strategy == "prediction" and not predicted:
            raise InvalidOptionError(
                "strategy 'prediction' needs a prediction (the expected output text)",
                param="strategy",
            )
        if dp.strategy == "none" or dp.draft_max == 0:
            return FixedPolicy(None, 0)
        every = (
            ([self.grammar] if constrained else [])
            + ([self.prediction] if predicted else [])
            + [d for d in (self.drafter, self.mtp, self.suffix, self.lookup) if d is not None]
        )
        chosen = {
            "draft-model": [self.drafter],
            "mtp": [self.mtp],
            "prompt-lookup": [self.lookup],
            "suffix": [self.suffix],
            "prediction": [self.prediction],
        }.get(dp.strategy, every)
        if not dp.adaptive:
            return FixedPolicy(chosen[0], dp.draft_max, self.costs)
        key = (dp.strategy, greedy, predicted, constrained)
        if not channels:
            return self._adaptive(key, chosen)
        return ChannelPolicy(
            {
                CONTENT: self._adaptive(key, chosen),
                REASONING: self._adaptive((*key, REASONING), chosen),
            }
        )

    def _adaptive(self, key: tuple, chosen: list) -> AdaptivePolicy:
        """This slot's adaptive policy of ``key`` over the ``chosen`` drafters (made on first
        use)."""
        if key not in self.adaptive:
            self.adaptive[key] = AdaptivePolicy(chosen, costs=self.costs)
        return self.adaptive[key]

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
        costs: CostModel | None = None,
    ):
        costs = CostModel() if costs is None else costs
        self.batcher = Batcher(target, pricing=costs.pricing) if parallel > 1 else None
        self.draft_batcher = (
            Batcher(draft_engine, grace_s=0.0)
            if parallel > 1 and draft_engine is not None
            else None
        )
        batchers = (self.batcher, self.draft_batcher)
        self.prompt_cache = (
            PromptCache(target, draft_engine, cache_ram_bytes) if cache_ram_bytes > 0 else None
        )
        self.slots: list[Slot] = []
        sharing = PrefixSharing(self.slots) if parallel > 1 else None
        first = Slot(
            0, target, draft_engine, batchers, costs, {"store_tokens": suffix_store_tokens}, sharing
        )
        self.slots += [first] + [
            Slot(i, target, draft_engine, batchers, costs, {"shared_with": first.suffix}, sharing)
            for i in range(1, parallel)
        ]
        self._cond = threading.Condition()
        target.idle_sequences = self.idle_sequences
        if draft_engine is not None:
            draft_engine.idle_sequences = self.idle_sequences

    def idle_sequences(self) -> list[int]:
        """Seq ids without a running generation, least recently used first."""
        return [s.index for s in sorted(self.slots, key=lambda s: s.last_used) if s.free()]

    def acquire(self, prompt: Sequence[int], cache_key: str | None = None) -> Slot:
        """Reserve the slot for a generation of ``prompt``: the free one whose last
        generation had the same ``cache_key`` (the client's conversation key, e.g. Responses'
        ``prompt_cache_key``: a compacted conversation goes back where it was, not over another
        conversation's slot), else the one whose reuse loses least of what the slots hold
        (:meth:`unique_tail`; then the one sharing most of the prompt, then the least recently
        used); with one slot, that slot even when busy (the caller supersedes its
        generation); else waits for a slot to free.  Follow with :meth:`occupy` or
        :meth:`unreserve`."""
        with self._cond:
            while True:
                free = [s for s in self.slots if s.free()]
                if free:
                    slot = min(free, key=lambda s: self._pick_key(s, prompt, cache_key))
                    self._swap(slot, prompt)
                    break
                if len(self.slots) == 1:
                    slot = self.slots[0]
                    break
                self._cond.wait()
            slot.reserved = True
            slot.cache_key = cache_key
            return slot

    def _pick_key(self, slot: Slot, prompt: Sequence[int], cache_key: str | None) -> tuple:
        other_conversation = cache_key is None or slot.cache_key != cache_key
        held = common_prefix(slot.target.cache_tokens, prompt)
        return other_conversation, self.unique_tail(slot, prompt), -held, slot.last_used

    def unique_tail(self, slot: Slot, prompt: Sequence[int]) -> int:
        """Tokens of what ``slot`` holds that giving it ``prompt`` would lose: past both its
        common prefix with the prompt and the longest one it shares with another slot (that
        one can be shared back, :class:`PrefixSharing`)."""
        held = slot.target.cache_tokens
        others = (
            common_prefix(held, other.target.cache_tokens)
            for other in self.slots
            if other is not slot
        )
        return len(held) - max(common_prefix(held, prompt), *others, 0)

    def _swap(self, slot: Slot, prompt: Sequence[int]) -> None:
        """Before a free slot takes ``prompt``: keep what it holds in the prompt cache when
        the prompt would lose at least ``MIN_TOKENS`` of it that no other slot holds, and load
        the cached text that shares more of the prompt than any slot does, if any."""
        if self.prompt_cache is None:
            return
        if self.unique_tail(slot, prompt) >= MIN_TOKENS:
            self.prompt_cache.save(slot.index)
        shared = max(common_prefix(s.target.cache_tokens, prompt) for s in self.slots)
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
            slot.reading = None
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


class PrefixSharing:
    """Prompt prefixes read once for all slots (``parallel`` > 1, one unified KV cache).

    :meth:`before_read` runs as a sequence (an :class:`EngineSequence` of the target or
    the draft model) is about to read ``tokens``: when another slot's sequence of the same
    engine holds at least ``SHARE_MIN`` more of them, its cells are shared into this one
    (``Engine.copy_prefix``: no data copied, no tokens read); for the target, when another
    slot is still reading a prompt that shares more, this one first waits for that read
    (outside the batcher's count, so the read goes on) or for its generation to end."""

    def __init__(self, slots: list[Slot]):
        self.slots = slots
        self._lock = threading.Lock()

    def before_read(self, view, tokens: Sequence[int]) -> None:
        slot = self.slots[view.seq]
        reads_target = view is slot.target
        views = {
            s.index: s.target if reads_target else s.drafter.engine
            for s in self.slots
            if s.drafter or reads_target
        }
        if reads_target:
            self._wait_for_readers(slot, tokens, views)
        own = common_prefix(view.cache_tokens, tokens)
        if len(tokens) - own < SHARE_MIN:
            return
        held = {
            seq: common_prefix(v.cache_tokens, tokens)
            for seq, v in views.items()
            if seq != view.seq
        }
        best = max(held, key=held.get, default=None)
        if best is not None and held[best] >= own + SHARE_MIN:
            view.engine.copy_prefix(best, view.seq, held[best])

    def _wait_for_readers(self, slot: Slot, tokens: Sequence[int], views: dict) -> None:
        """Wait while another slot reads a prompt sharing more of ``tokens`` than any
        sequence holds (or until this slot's generation is cancelled); then mark this slot
        as reading ``tokens``."""
        with self._lock:
            if self._reader(slot, tokens, views) is None:
                slot.reading = list(tokens)
                return
        with slot.target.batcher.aside():
            while True:
                time.sleep(WAIT_POLL_S)
                with self._lock:
                    if self._reader(slot, tokens, views) is None or _cancelled(slot):
                        slot.reading = list(tokens)
                        return

    def _reader(self, slot: Slot, tokens: Sequence[int], views: dict) -> Slot | None:
        """A busy slot whose prompt read will give at least ``SHARE_MIN`` more of ``tokens``
        than any sequence holds now; None."""
        have = max(common_prefix(v.cache_tokens, tokens) for v in views.values())
        for other in self.slots:
            if other is slot or other.reading is None or other.free():
                continue
            held, prompt = other.target.cache_tokens, other.reading
            if common_prefix(held, prompt) >= len(prompt):
                continue  # its prompt is read
            if common_prefix(prompt, tokens) >= have + SHARE_MIN:
                return other
        return None


def _cancelled(slot: Slot) -> bool:
    running = slot.generation() if slot.generation is not None else None
    return running is not None and running.cancelled
