"""A prompt cache across conversations: sequences' KV kept in host memory and restored.

When a slot is about to be reused for a prompt that does not continue what it holds (Open
WebUI's title request between two turns of a chat; an agent switching between
conversations), what it holds is copied out of the KV cache (``llama_state_seq_get_data``,
target and draft model) into host memory; a later prompt that starts with a saved text
gets it copied back (``llama_state_seq_set_data``) instead of evaluating it again, and the
usage's ``cached_tokens`` counts it.  Kept within ``budget_bytes``, least recently used
dropped first, as llama-server's ``--cache-ram``.  Size: the KV of one token of
Qwen2.5-1.5B (28 layers, 2 KV heads of 128, f16) is 28 KiB, so 1,000 tokens take 28 MiB.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp

from localspec.llama.sequence import common_prefix

MIN_TOKENS = 32  # shorter texts are cheaper to evaluate again than to keep


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    target: bytes
    draft: bytes | None  # the draft model's KV of the same tokens (None: it held less)

    @property
    def size(self) -> int:
        return len(self.target) + (len(self.draft) if self.draft else 0)


class PromptCache:
    """Saved sequences of one pair (target engine, optional draft engine), by their tokens.

    :meth:`save` copies sequence ``seq`` out (when it holds at least ``MIN_TOKENS``),
    :meth:`best` finds the entry sharing the longest prefix with a prompt, :meth:`restore`
    copies an entry into a sequence.  All llama.cpp work runs on the engines' owner thread."""

    def __init__(self, target, draft, budget_bytes: int):
        self.target, self.draft = target, draft
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.restored_tokens = 0  # tokens given back since load

    @property
    def used_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def save(self, seq: int) -> None:
        tokens = tuple(self.target.seq_tokens(seq))
        if len(tokens) < MIN_TOKENS or self.budget_bytes <= 0 or tokens in self._entries:
            return
        target = self.target.owner.run(_read, self.target, seq)
        draft = None
        if self.draft is not None and tuple(self.draft.seq_tokens(seq)) == tokens:
            draft = self.draft.owner.run(_read, self.draft, seq)
        entry = _Entry(tokens, target, draft)
        with self._lock:
            for old in [
                t for t in self._entries if tokens[: len(t)] == t
            ]:  # a shorter version of the same text
                del self._entries[old]
            self._entries[tokens] = entry
            while self._entries and self.used_bytes > self.budget_bytes:
                self._entries.popitem(last=False)

    def best(self, prompt: Sequence[int]) -> tuple[_Entry | None, int]:
        """The entry sharing the longest prefix with ``prompt``, and that length."""
        with self._lock:
            scored = [(common_prefix(e.tokens, prompt), e) for e in self._entries.values()]
        n, entry = max(scored, key=lambda x: x[0], default=(0, None))
        return (entry, n) if n > 0 else (None, 0)

    def restore(self, entry: _Entry, seq: int) -> None:
        """Put ``entry`` into sequence ``seq`` (what it held is dropped)."""
        with self._lock:
            if entry.tokens in self._entries:
                self._entries.move_to_end(entry.tokens)
        self.target.owner.run(_write, self.target, seq, entry.target, entry.tokens)
        if self.draft is not None:
            if entry.draft is not None:
                self.draft.owner.run(_write, self.draft, seq, entry.draft, entry.tokens)
            else:
                self.draft.trim(0, seq)
        self.restored_tokens += len(entry.tokens)


def _read(engine, seq: int) -> bytes:
    size = llama_cpp.llama_state_seq_get_size(engine._ctx, seq)
    buffer = (ctypes.c_ubyte * size)()
    written = llama_cpp.llama_state_seq_get_data(engine._ctx, buffer, size, seq)
    return bytes(buffer[:written])


def _write(engine, seq: int, data: bytes, tokens: Sequence[int]) -> None:
    engine.trim(0, seq)
    engine._make_room(len(tokens), {seq})
    buffer = (ctypes.c_ubyte * len(data)).from_buffer_copy(data)
    if llama_cpp.llama_state_seq_set_data(engine._ctx, buffer, len(data), seq) == 0:
        engine.trim(0, seq)  # llama.cpp refused (no room): the prompt is evaluated instead
        return
    engine._note_held(seq, tokens)
