"""The target's own multi-token-prediction (MTP / NextN) block, run as a drafter
(:class:`MtpHead`).

GGUFs of Qwen3.5 / 3.6 (``-MTP`` files), GLM-4.x, DeepSeek-V3 and others carry extra decoder
blocks (``<arch>.nextn_predict_layers``) trained to predict the token after next from the
target's hidden state and the next token.  llama.cpp runs them in a second context on the same
weights (``ctx_type = LLAMA_CONTEXT_TYPE_MTP``, ``ctx_other`` = the target's context), as its
``draft-mtp`` does (common/speculative.cpp, ``common_speculative_impl_draft_mtp``):

- every target decode turns on the target's NextN embeddings (its hidden state per row), and
  the MTP context decodes the same tokens, each paired with the hidden state of the position
  before it (:meth:`MtpHead.follow`), so its own KV cache mirrors the target's;
- to draft after the last token (not yet decoded by the target), the MTP context decodes it
  with the hidden state of the position before, takes its most likely token and the block's
  own hidden state, and goes on from them (one block applied again for every draft token);
  the draft positions are then taken back (:meth:`MtpHead.draft`);
- a trim of the target trims the MTP context too (:meth:`MtpHead.trim`).

A model with several MTP blocks (Step-3.5: ``nextn_predict_layers`` 3) chains them as
llama.cpp's ``draft-mtp`` does: each block follows every target decode over the same rows
(``llama_set_nextn_layer_offset`` selects the block), and draft token ``i`` comes from block
``i``, run over the whole draft so far (the last target state, then each block's own output
state), so a draft holds at most one token per block.  Qwen3.5 ships one block.

One sequence (``n_seq_max`` 1).
"""

from __future__ import annotations

import ctypes
import logging
import time

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.errors import EngineError, UnsupportedModelError

log = logging.getLogger("localspec.engine")


class MtpHead:
    """The MTP context of ``target`` (an :class:`~localspec.llama.engine.Engine` loaded with
    ``load_mtp``), kept in step with it; :meth:`draft` proposes tokens."""

    shares_memory = False  # True: the drafter reads the target's KV cache (Gemma 4's assistant)

    def __init__(self, target, model=None):
        model = target._model if model is None else model
        self.target = target
        self.n_layer_nextn = int(llama_cpp.llama_model_n_layer_nextn(model))
        if self.n_layer_nextn < 1:
            raise UnsupportedModelError(f"{target.path.name} has no MTP (NextN) block")
        if target.config.n_seq_max != 1:
            raise UnsupportedModelError("the MTP drafter runs one sequence (parallel 1)")
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = target.config.n_ctx
        cparams.n_batch = cparams.n_ubatch = target.n_batch
        cparams.n_threads = cparams.n_threads_batch = llama_cpp.llama_n_threads(target._ctx)
        cparams.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        cparams.ctx_other = target._ctx
        self._ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not self._ctx:
            raise EngineError(f"llama.cpp could not create the MTP context of {target.path.name}")
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(model))
        llama_cpp_ext.llama_set_embeddings_nextn(target._ctx, True, False)
        llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, True)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_ext_init(self._ctx)
        self._held = 0  # positions the MTP context holds (as the target's cache)
        self._rows = np.zeros((0, self.n_embd), dtype=np.float32)  # the last decode's states
        self._rows_at = 0  # the position of its first row
        self._before = np.zeros(self.n_embd, dtype=np.float32)  # the state at _rows_at - 1
        self.decode_s = 0.0  # seconds drafting
        self.follow_s = 0.0  # seconds following the target's decodes (part of the target's)
        self.active = True  # False once a decode here failed: it drafts no more
        self.chained = self.n_layer_nextn > 1 and not self.shares_memory

    @property
    def label(self) -> str:
        """How ``localspec models`` and /v1/models name this drafter."""
        return self.target.info.builtin_drafter

    def follow(self, tokens, pos0: int, first_row: int) -> None:
        """The target decoded ``tokens`` at ``pos0``…, its rows ``first_row``… of the batch:
        decode them here too, each with the hidden state of the position before it."""
        rows = self._target_rows(first_row, len(tokens))
        before = self._state_before(pos0)
        states = np.vstack([before[None, :], rows[:-1]])
        started = time.perf_counter()
        try:
            for head in range(self.n_layer_nextn if self.chained else 1):
                self._trim_to(pos0)
                self._use_head(head)
                self._decode(tokens, pos0, states, output=False)
        except EngineError as exc:  # out of step with the target from here: stop drafting
            self.active = False
            log.warning("localspec: the MTP block stops drafting (%s)", exc)
            return
        finally:
            self._use_head(0)
            self.follow_s += time.perf_counter() - started
        self._rows, self._rows_at, self._held = rows, pos0, pos0 + len(tokens)
        self._before = before

    def _target_rows(self, first_row: int, n: int) -> np.ndarray:
        """The target's hidden states of rows ``first_row``… of its last decode."""
        base = llama_cpp_ext.llama_get_embeddings_nextn(self.target._ctx)
        flat = np.ctypeslib.as_array(base, shape=((first_row + n) * self.n_embd,))
        return flat[first_row * self.n_embd :].reshape(n, self.n_embd).copy()

    def trim(self, n_keep: int) -> None:
        """The target keeps ``n_keep`` positions: so does the MTP context."""
        self._trim_to(min(n_keep, self._held))

    @property
    def max_draft(self) -> int | None:
        """The most tokens one draft holds: one per block where blocks chain (None: any)."""
        return self.n_layer_nextn if self.chained else None

    def draft(self, last: int, k: int, pick) -> tuple[list[int], list]:
        """Up to ``k`` tokens after ``last`` (the context's last token, at the position after
        the target's cache).  ``pick(logits)`` -> (token, confidence, whether it is the last
        one), or None to stop before it.  Returns the tokens and what ``pick`` gave for each."""
        if not self.active:
            return [], []
        if self.chained:
            return self._draft_chained(last, min(k, self.n_layer_nextn), pick)
        pos0 = self._held
        state = self._state_before(pos0)
        tokens, picked = [], []
        token = last
        for i in range(k):
            started = time.perf_counter()
            self._decode([token], self._draft_position(pos0, i), state[None, :], output=True)
            self.decode_s += time.perf_counter() - started
            choice = pick(self._last_logits())
            if choice is None:
                break
            token = choice[0]
            tokens.append(token)
            picked.append(choice)
            if choice[2]:
                break
            state = self._own_state()
        self._trim_to(pos0)
        return tokens, picked

    def _draft_chained(self, last: int, k: int, pick) -> tuple[list[int], list]:
        """:meth:`draft` with one block per token: block ``i`` decodes the whole draft so far
        (``last`` and the tokens drafted), each paired with the state before it."""
        pos0 = self._held
        inputs, states = [last], [self._state_before(pos0)]
        tokens, picked = [], []
        try:
            for i in range(k):
                self._trim_to(pos0)
                self._use_head(i)
                started = time.perf_counter()
                self._decode(inputs, pos0, np.vstack(states), output=True)
                self.decode_s += time.perf_counter() - started
                choice = pick(self._last_logits())
                if choice is None:
                    break
                tokens.append(choice[0])
                picked.append(choice)
                if choice[2]:
                    break
                inputs.append(choice[0])
                states.append(self._own_state())
        finally:
            self._use_head(0)
            self._trim_to(pos0)
        return tokens, picked

    def _use_head(self, i: int) -> None:
        """Run MTP block ``i`` from the next decode on (a model whose blocks chain)."""
        if self.chained:
            llama_cpp_ext.llama_set_nextn_layer_offset(self._ctx, i)

    def _last_logits(self) -> np.ndarray:
        return np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(self._ctx, -1), shape=(self.target.n_vocab,)
        )

    def _draft_position(self, pos0: int, i: int) -> int:
        """Where draft token ``i`` is decoded: each after the one before."""
        return pos0 + i

    def _state_before(self, pos: int) -> np.ndarray:
        """The target's hidden state at ``pos - 1`` where the last decode has it (or the one
        before it began, which a replay after a restored checkpoint starts from), else zeros
        (position 0, or after a trim further back: the first position drafts worse, as
        llama.cpp's does)."""
        i = pos - 1 - self._rows_at
        if 0 <= i < len(self._rows):
            return self._rows[i]
        if i == -1 and pos > 0:
            return self._before
        return np.zeros(self.n_embd, dtype=np.float32)

    def _own_state(self) -> np.ndarray:
        row = llama_cpp_ext.llama_get_embeddings_nextn_ith(self._ctx, -1)
        return np.ctypeslib.as_array(row, shape=(self.n_embd,)).copy()

    def _trim_to(self, n: int) -> None:
        if n < self._held or n == 0:
            llama_cpp.llama_memory_seq_rm(self._memory, 0, n, -1)
        self._held = min(self._held, n)

    def _decode(self, tokens, pos0: int, states: np.ndarray, output: bool) -> None:
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        states = np.ascontiguousarray(states, dtype=np.float32)
        pos = (llama_cpp.llama_pos * 4)()
        for j, token in enumerate(tokens):
            idx = llama_cpp.llama_batch_ext_add_token(batch, 0, int(token))
            if idx < 0:
                raise EngineError(f"the MTP batch refused token {token} ({idx})")
            pos[0] = pos0 + j
            llama_cpp.llama_batch_ext_set_pos(batch, idx, pos)
            embd = llama_cpp.llama_embd(
                states[j].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, self.n_embd
            )
            llama_cpp.llama_batch_ext_set_embd_token(batch, idx, embd)
            if output and j == len(tokens) - 1:
                llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True)
                llama_cpp.llama_batch_ext_set_output_embd(batch, idx, True)
        rc = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        if rc != 0:
            raise EngineError(f"the MTP context's decode failed with code {rc}")
        self._held = max(self._held, pos0 + len(tokens))

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
