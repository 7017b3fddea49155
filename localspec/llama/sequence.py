"""One sequence of a multi-sequence :class:`~localspec.llama.engine.Engine`, seen as an engine of
its own.

The decoding loop and the draft model drafter use an engine's cache API (``decode``,
``trim``, ``reuse_prefix``, ``cache_tokens``, ``n_ctx``, ``decode_s``); an
:class:`EngineSequence` gives them that API for one seq id, so each concurrent generation
decodes into its own sequence of a shared context.  With a ``batcher`` (the target's
:class:`~localspec.decoding.scheduler.Batcher`) its decodes wait to be verified together with
the other sequences'; without one (a draft model's sequence) they run at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp
import numpy as np

from localspec.errors import EngineError


class EngineSequence:
    """Sequence ``seq`` of ``engine``.  Everything not about the cache (tokenize,
    token_bytes, is_eog, n_vocab, info, owner, ...) is the engine's own.

    ``n_ctx`` is what this sequence may still grow to: the unified cache's cells less
    those only the other busy sequences hold (idle ones are freed on demand; a cell shared
    with this one counts as its own).  ``decode_s``
    counts the seconds of every decode this sequence took part in (a shared batch
    counts whole), ``wait_s`` the seconds its decodes waited for the other sequences';
    ``last_batch_tokens`` is the size of the latest such batch, ``last_batch_sequences`` how
    many sequences it served."""

    def __init__(self, engine, seq: int, batcher=None, sharing=None):
        self.engine = engine
        self.seq = seq
        self.batcher = batcher
        # shares other sequences' cells of the same prefix (decoding.slots.PrefixSharing)
        self.sharing = sharing
        self.decode_s = 0.0
        self.wait_s = 0.0
        self.last_batch_tokens = 0
        self.last_batch_sequences = 1

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    @property
    def cache_tokens(self) -> list[int]:
        return self.engine.seq_tokens(self.seq)

    @property
    def n_ctx(self) -> int:
        idle = set(self.engine.idle_sequences())
        busy = [s for s in range(self.engine.config.n_seq_max) if s == self.seq or s not in idle]
        return self.engine.n_ctx - self.engine.cells_held(busy) + len(self.cache_tokens)

    @property
    def n_batch(self) -> int:
        """Prompt tokens read per decode: fewer while other sequences wait on the batch."""
        return self.batcher.prefill_chunk if self.batcher is not None else self.engine.n_batch

    def decode(
        self, tokens: Sequence[int], logits_rows: Sequence[int] = (), copy: bool = True
    ) -> np.ndarray:
        if self.batcher is not None:
            return self.batcher.decode(self, tokens, logits_rows)
        before = self.engine.decode_s
        try:
            return self.engine.decode(tokens, logits_rows, copy, seq=self.seq)
        finally:
            self.decode_s += self.engine.decode_s - before
            self.last_batch_tokens = self.engine.last_batch_tokens
            self.last_batch_sequences = self.engine.last_batch_sequences

    def trim(self, n_keep: int) -> None:
        self.engine.trim(n_keep, self.seq)

    def prepare_rollback(self, depth: int, decodes: int = 1) -> None:
        # a shared decode may split this sequence's tokens over two llama_decode calls, and
        # the snapshots reach into the last one only: keep a saved state
        self.engine.prepare_rollback(depth, self.seq, decodes if self.batcher is None else 2)

    def rollback_time(self) -> float:
        return self.engine.rollback_time(self.seq)

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest prefix of ``tokens`` this sequence holds, first taking over (sharing)
        a longer one another sequence holds or is reading, when ``sharing`` is set."""
        if self.sharing is not None:
            self.sharing.before_read(self, tokens)
        return self.engine.reuse_prefix(tokens, self.seq)

    def close(self) -> None:
        """The engine is shared: its owner closes it."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    limit = min(len(a), len(b))
    if list(a[:limit]) == list(b[:limit]):  # the usual case, at C speed
        return limit
    return int(np.flatnonzero(np.asarray(a[:limit]) != np.asarray(b[:limit]))[0])


def pack_batch(parts: list, n_batch: int) -> list[list]:
    """Split decode parts [(seq, tokens, rows)] into llama_decode calls of at most
    ``n_batch`` tokens: [(part index, row offset, seq, (tokens, rows within them))]."""
    calls, current, room = [], [], n_batch
    for index, (seq, tokens, rows) in enumerate(parts):
        start = 0
        while start < len(tokens) or (not tokens and start == 0):
            take = min(room, len(tokens) - start)
            if take == 0 and tokens:
                calls.append(current)
                current, room = [], n_batch
                continue
            piece = [r - start for r in rows if start <= r < start + take]
            offset = sum(1 for r in rows if r < start)
            current.append((index, offset, seq, (tokens[start : start + take], piece)))
            room -= take
            start += max(take, 1)
    if current:
        calls.append(current)
    return calls


class CellLedger:
    """Which KV cells each sequence of a unified cache holds, as ids (position i of a
    sequence = its i-th id), so that cells shared by several sequences (copied with
    ``llama_memory_seq_cp``) count once."""

    def __init__(self, n_seq: int):
        self._ids: list[list[int]] = [[] for _ in range(n_seq)]
        self._refs: dict[int, int] = {}
        self._next = 0
        self._shared = 0  # cells held by more than one sequence

    @property
    def used(self) -> int:
        """Distinct cells held by all sequences together."""
        return len(self._refs)

    def held(self, seqs) -> int:
        """Distinct cells held by the sequences ``seqs`` together."""
        if not self._shared:
            return sum(len(self._ids[s]) for s in seqs)
        return len(set().union(*(self._ids[s] for s in seqs)))

    def extend(self, seq: int, n: int) -> None:
        """``n`` new cells appended to ``seq``."""
        new = range(self._next, self._next + n)
        self._next += n
        self._ids[seq].extend(new)
        self._refs.update(dict.fromkeys(new, 1))

    def trim(self, seq: int, n_keep: int) -> None:
        ids = self._ids[seq]
        for cell in ids[n_keep:]:
            left = self._refs[cell] - 1
            self._shared -= left == 1
            if left:
                self._refs[cell] = left
            else:
                del self._refs[cell]
        del ids[n_keep:]

    def copy(self, src: int, dst: int, start: int, end: int) -> None:
        """``dst`` (holding ``start`` cells) gets ``src``'s cells ``start`` to ``end`` too."""
        shared = self._ids[src][start:end]
        self._ids[dst].extend(shared)
        for cell in shared:
            self._shared += self._refs[cell] == 1
            self._refs[cell] += 1


def output_rows(ctx, n_vocab: int, counts: list[int], views: bool) -> list[np.ndarray]:
    """The logits rows of the latest llama_decode on ``ctx``, split into ``counts`` rows per
    part, each float32 ``(count, n_vocab)``: read-only views of llama.cpp's buffer, or copies."""
    total = sum(counts)
    if total == 0:
        return [np.empty((0, n_vocab), dtype=np.float32) for _ in counts]
    ptr = llama_cpp.llama_get_logits(ctx)  # the output rows, in batch order
    if not ptr:
        raise EngineError("llama.cpp returned no logits for the batch")
    buffer = np.ctypeslib.as_array(ptr, shape=(total, n_vocab))
    if views:
        buffer.flags.writeable = False
    else:
        buffer = buffer.copy()
    bounds = np.cumsum([0] + counts)
    return [buffer[a:b] for a, b in zip(bounds, bounds[1:])]
