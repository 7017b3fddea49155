"""Decoding: tokens of one or several sequences appended to the KV cache in ``llama_decode``
calls, and the logits rows asked for (:class:`Decoding`, a mixin of
:class:`~localspec.llama.engine.Engine`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import llama_cpp
import numpy as np

from localspec.errors import ContextOverflowError, EngineError
from localspec.llama.owner import owned
from localspec.llama.sequence import output_rows, pack_batch


class Decoding:
    """Decode one sequence's or several sequences' tokens, with the logits of chosen rows;
    free idle sequences' cells when the unified cache is full."""

    @owned
    def decode(
        self,
        tokens: Sequence[int],
        logits_rows: Sequence[int] = (),
        copy: bool = True,
        seq: int = 0,
    ) -> np.ndarray:
        """Append ``tokens`` to sequence ``seq``'s KV cache and return the logits of the chosen
        rows.

        Args:
            tokens: ids placed at positions ``len(seq_tokens(seq)) ...``.
            logits_rows: indices into ``tokens`` whose next-token logits are wanted,
                ascending.
            copy: False returns, where the tokens fit one batch, a read-only view of
                llama.cpp's own output buffer instead of a copy (a verify batch of 9
                rows of a 152k vocabulary is 5 MB): valid only until the next decode.

        Returns:
            float32 array ``(len(logits_rows), n_vocab)``, row j for ``logits_rows[j]``.

        Raises:
            ContextOverflowError: the tokens do not fit into ``n_ctx``.
            EngineError: llama_decode failed (the cache is left as it was before the call
                for the failing chunk).
        """
        if not copy and len(tokens) <= self.n_batch:
            return self.decode_batch([(seq, tokens, logits_rows)], copy=False)[0]
        wanted = list(logits_rows)
        out = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            rows = [r - start for r in wanted if start <= r < start + len(chunk)]
            first = next((j for j, r in enumerate(wanted) if r >= start), len(wanted))
            out[first : first + len(rows)] = self.decode_batch([(seq, chunk, rows)], copy=False)[0]
        return out

    @owned
    def decode_batch(
        self, parts: Sequence[tuple[int, Sequence[int], Sequence[int]]], copy: bool = True
    ) -> list:
        """Decode several sequences' tokens together: ``parts`` is ``[(seq, tokens,
        logits_rows)]``, at most ``n_batch`` tokens in all per llama_decode call (more are
        split between calls).  Returns one float32 array ``(len(logits_rows), n_vocab)``
        per part.  ``copy=False`` gives read-only views of llama.cpp's output buffer when
        everything fits one call (valid until the next decode).  Raises as :meth:`decode`;
        on an error every sequence keeps only what it held before the failing call."""
        self._check_open()
        parts = [(seq, list(tokens), list(rows)) for seq, tokens, rows in parts]
        self._make_room(sum(len(t) for _, t, _ in parts), {seq for seq, _, _ in parts})
        for seq, tokens, _ in parts:
            if len(self._caches[seq]) + len(tokens) > self.n_ctx:
                raise ContextOverflowError(
                    f"{len(self._caches[seq]) + len(tokens)} tokens do not fit into the context "
                    f"of {self.n_ctx} tokens"
                )
        calls = pack_batch(parts, self.n_batch)
        if len(calls) == 1 and not copy:
            return self._decode_call(calls[0], views=True)
        out = [np.empty((len(rows), self.n_vocab), dtype=np.float32) for _, _, rows in parts]
        for call in calls:
            for (part, offset, _, _), rows in zip(call, self._decode_call(call, views=False)):
                out[part][offset : offset + len(rows)] = rows
        return out

    def _make_room(self, n_new: int, busy: set[int]) -> None:
        """Free idle sequences' cells (oldest first) until ``n_new`` more fit the unified cache."""
        for seq in self.idle_sequences():
            if self.cells_used + n_new <= self.n_ctx:
                return
            if seq not in busy:
                self.trim(0, seq)

    def _decode_call(self, call: list, views: bool) -> list:
        """One llama_decode of ``call`` = [(part, row offset, seq, (tokens, rows in tokens))];
        the logits rows of each entry, as views or copies."""
        batch, i, firsts = self._batch, 0, []
        for _, _, seq, (tokens, rows) in call:
            firsts.append(i)
            pos0, wanted = len(self._caches[seq]), set(rows)
            for j, tok in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos0 + j, 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = j in wanted
                i += 1
        batch.n_tokens = i
        try:
            t0 = time.perf_counter()
            rc = llama_cpp.llama_decode(self._ctx, batch)
            self.decode_s += time.perf_counter() - t0
            self.last_batch_tokens, self.last_batch_sequences = i, len(call)
            if rc != 0:
                raise EngineError(f"llama_decode failed with code {rc} ({i} tokens)")
            rows = self._output_rows([len(rows) for *_, (_, rows) in call], views)
            for first, (_, _, seq, (tokens, _)) in zip(firsts, call):
                pos0 = len(self._caches[seq])
                self._note_held(seq, tokens)
                self._note_decoded(seq, len(tokens))
                self._follow_decode(tokens, pos0, first)
        except BaseException:
            # An error or Ctrl-C may land after llama_decode stored the tokens but before
            # the lists know of them: drop whatever a list does not account for.
            for _, _, seq, _ in call:
                llama_cpp.llama_memory_seq_rm(self._memory, seq, len(self._caches[seq]), -1)
            raise
        return rows

    def _follow_decode(self, tokens, pos0: int, first_row: int) -> None:
        """The MTP block (if loaded) decodes what the target did; its time is the decode's."""
        if self.mtp is not None and self.mtp.active:
            before = self.mtp.follow_s
            self.mtp.follow(tokens, pos0, first_row)
            self.decode_s += self.mtp.follow_s - before

    def _output_rows(self, counts: list[int], views: bool) -> list[np.ndarray]:
        return output_rows(self._ctx, self.n_vocab, counts, views)
