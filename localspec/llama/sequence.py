"""One sequence of a multi-sequence :class:`~localspec.llama.engine.Engine`, seen as an engine of its own.

The decoding loop and the draft model drafter use an engine's cache API (``decode``,
``trim``, ``reuse_prefix``, ``cache_tokens``, ``n_ctx``, ``decode_s``); an
:class:`EngineSequence` gives them that API for one seq id, so each concurrent generation
decodes into its own sequence of a shared context.  With a ``batcher`` (the target's
:class:`~localspec.decoding.scheduler.Batcher`) its decodes wait to be verified together with
the other sequences'; without one (a draft model's sequence) they run at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class EngineSequence:
    """Sequence ``seq`` of ``engine``.  Everything not about the cache (tokenize,
    token_bytes, is_eog, n_vocab, info, owner, ...) is the engine's own.

    ``n_ctx`` is what this sequence may still grow to: the unified cache's cells less
    those the other busy sequences hold (idle ones are freed on demand).  ``decode_s``
    counts the seconds of every decode this sequence took part in (a shared batch
    counts whole); ``last_batch_tokens`` is the size of the latest such batch."""

    def __init__(self, engine, seq: int, batcher=None):
        self.engine = engine
        self.seq = seq
        self.batcher = batcher
        self.decode_s = 0.0
        self.last_batch_tokens = 0

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    @property
    def cache_tokens(self) -> list[int]:
        return self.engine.seq_tokens(self.seq)

    @property
    def n_ctx(self) -> int:
        idle = set(self.engine.idle_sequences())
        others = sum(
            len(self.engine.seq_tokens(s))
            for s in range(self.engine.config.n_seq_max)
            if s != self.seq and s not in idle
        )
        return self.engine.n_ctx - others

    @property
    def n_batch(self) -> int:
        """Prompt tokens read per decode: fewer while other sequences wait on the batch."""
        return self.batcher.prefill_chunk if self.batcher is not None else self.engine.n_batch

    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = (), copy: bool = True) -> np.ndarray:
        if self.batcher is not None:
            return self.batcher.decode(self, tokens, logits_rows)
        before = self.engine.decode_s
        try:
            return self.engine.decode(tokens, logits_rows, copy, seq=self.seq)
        finally:
            self.decode_s += self.engine.decode_s - before
            self.last_batch_tokens = self.engine.last_batch_tokens

    def trim(self, n_keep: int) -> None:
        self.engine.trim(n_keep, self.seq)

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
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
