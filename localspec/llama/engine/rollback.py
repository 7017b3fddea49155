"""Going back to an earlier position in a model that keeps a recurrent state (hybrid
architectures such as Qwen3.5, LFM2, Nemotron-H: recurrent layers beside attention; recurrent
ones such as Mamba2), whose state after a token cannot simply be cut off as attention's KV cells
can (:class:`Rollback`, a mixin of :class:`~localspec.llama.engine.Engine`).

Three ways, cheapest first, as llama-server goes back after a rejected draft:

- **snapshots**: where llama.cpp keeps recurrent-state snapshots per sequence
  (``llama_context_params.n_rs_seq``, the architectures of ``llm_arch_supports_rs_rollback``),
  ``llama_memory_seq_rm`` takes back up to ``n_rs_seq`` positions of the latest decode, once;
- **a checkpoint**: the sequence's recurrent state saved before the decodes that may be taken
  back (:meth:`Rollback.prepare_rollback`: before a verify that the snapshots do not cover, before
  a draft model drafts), restored, and the tokens kept decoded again;
- **reading again**: without either, the sequence is cleared and what it keeps decoded anew.

``rollback_s`` counts, per sequence, the seconds these took (saving, restoring, decoding again):
the loop adds them to the verify they follow, so the policy prices them as it prices the verify.
``rollbacks`` counts each way taken.
"""

from __future__ import annotations

import ctypes
import time
from collections import Counter

import llama_cpp

from localspec.errors import EngineError
from localspec.llama.owner import owned
from localspec.models.architectures import RS_SNAPSHOTS

PARTIAL = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY  # the recurrent part only
SNAPSHOTS = RS_SNAPSHOTS


class Rollback:
    """What a recurrent state needs to go back; a no-op for attention-only models."""

    def _init_rollback(self, recurrent: bool) -> None:
        """After the context exists: ``recurrent`` says whether the model keeps a recurrent
        state (``llama_model_is_recurrent`` or ``_is_hybrid``)."""
        n_seq = self.config.n_seq_max
        self.recurrent = recurrent
        self.n_rs_seq = int(llama_cpp.llama_n_rs_seq(self._ctx)) if recurrent else 0
        self._snapshot_reach = [0] * n_seq  # positions of the latest decode snapshots undo
        self._checkpoints: list[tuple[int, ctypes.Array] | None] = [None] * n_seq
        self.rollback_s = [0.0] * n_seq
        self.rollbacks: Counter = Counter()

    @owned
    def recurrent_state_bytes(self, seq: int = 0) -> int:
        """The size of ``seq``'s recurrent state (what a checkpoint saves, what each snapshot
        holds); 0 for an attention-only model."""
        if not self.recurrent:
            return 0
        return int(llama_cpp.llama_state_seq_get_size_ext(self._ctx, seq, PARTIAL))

    def rollback_time(self, seq: int = 0) -> float:
        """Seconds ``seq`` spent going back so far (saving, restoring, decoding again)."""
        return self.rollback_s[seq]

    def _note_decoded(self, seq: int, n_tokens: int) -> None:
        """``seq`` decoded ``n_tokens`` more: its snapshots can undo all but the first of them."""
        if self.recurrent:
            self._snapshot_reach[seq] = min(n_tokens - 1, self.n_rs_seq)

    @owned
    def prepare_rollback(self, depth: int, seq: int = 0, decodes: int = 1) -> None:
        """The next ``decodes`` decodes of ``seq`` may be taken back, up to ``depth`` positions:
        save its recurrent state now unless the snapshots will reach (one decode, ``depth`` at
        most ``n_rs_seq``)."""
        if not self.recurrent or depth <= 0:
            return
        if decodes == 1 and depth <= self.n_rs_seq:
            self._checkpoints[seq] = None
            return
        started = time.perf_counter()
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, seq, PARTIAL)
        buffer = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data_ext(self._ctx, buffer, size, seq, PARTIAL) != size:
            raise EngineError(f"{self.path.name}: llama.cpp could not save sequence {seq}'s state")
        self._checkpoints[seq] = (len(self._caches[seq]), buffer)
        self.rollback_s[seq] += time.perf_counter() - started

    def _trim_recurrent(self, n_keep: int, seq: int) -> None:
        """:meth:`~localspec.llama.engine.kv_cache.KvCache.trim` for a recurrent state."""
        started, decode_s = time.perf_counter(), self.decode_s
        cache = self._caches[seq]
        checkpoint = self._checkpoints[seq]
        if n_keep == 0 or len(cache) - n_keep <= self._snapshot_reach[seq]:
            self._cut(n_keep, seq, "snapshot" if n_keep else "clear")
        elif checkpoint is not None and checkpoint[0] <= n_keep:
            self._restore(checkpoint, n_keep, seq)
        else:
            self._read_again(n_keep, seq)
        self._snapshot_reach[seq] = 0  # a snapshot serves once
        self.decode_s = decode_s  # a decode again is the rollback's time, not a decode's
        self.rollback_s[seq] += time.perf_counter() - started

    def _cut(self, n_keep: int, seq: int, way: str) -> None:
        if not llama_cpp.llama_memory_seq_rm(self._memory, seq, n_keep, -1):
            raise EngineError(f"{self.path.name}: llama.cpp refused to trim at {n_keep}")
        del self._caches[seq][n_keep:]
        self._cells.trim(seq, n_keep)
        if self.mtp is not None:
            self.mtp.trim(n_keep)
        if n_keep == 0 or (self._checkpoints[seq] and self._checkpoints[seq][0] > n_keep):
            self._checkpoints[seq] = None
        self.rollbacks[way] += 1

    def _restore(self, checkpoint: tuple, n_keep: int, seq: int) -> None:
        """Back to the checkpoint's state, then the kept tokens after it decoded again."""
        at, buffer = checkpoint
        size = len(buffer)
        if llama_cpp.llama_state_seq_set_data_ext(self._ctx, buffer, size, seq, PARTIAL) != size:
            raise EngineError(f"{self.path.name}: llama.cpp could not restore sequence {seq}")
        again = self._caches[seq][at:n_keep]
        self._cut(at, seq, "checkpoint")
        if again:
            self.decode(again, [], seq=seq)

    def _read_again(self, n_keep: int, seq: int) -> None:
        """No way back: clear the sequence and decode what it keeps anew."""
        again = self._caches[seq][:n_keep]
        self._cut(0, seq, "read again")
        self._checkpoints[seq] = None
        if again:
            self.decode(again, [], seq=seq)
