"""Continuous batching: the target decodes of concurrent generations go into one ``llama_decode``.

Each generation runs its rounds on its caller's thread (drafting, acceptance, text) and
hands its target decode (a verify batch ``[t, d_1..d_k]``, or a chunk of its prompt) to
the :class:`Batcher`.  The batcher decodes once no generation is still computing its part
of the round: every sequence that has work then rides in the same target pass, whose
cost is close to one sequence's on a memory-bound machine (the weights are read once).
When the decode fires, every draft in it is known: the batcher keeps of each only what pays
in this decode (:meth:`~localspec.decoding.policy.pricing.RoundPricing.kept_drafts`), since
each generation planned its draft knowing only the latest decode.

A generation between rounds (its client taking the last round's tokens) is waited for at
most ``GRACE_S``: it usually comes straight back with its next verify, and a decode without
it would leave it to wait a whole decode alone; a client that reads slowly holds nobody up
longer than that.  One that joins waits at most one decode.

Why not one thread stepping every generation: the drafters and the acceptance math are
per sequence and stay as in the one-sequence loop (:mod:`localspec.decoding.loop`),
unchanged; only the decode is shared.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the annotation only: the batcher needs no policy at run time
    from localspec.decoding.policy.pricing import RoundPricing

# prompt tokens a joining sequence adds to a shared decode (a long prompt must not stall the others)
PREFILL_CHUNK = 128
GRACE_S = 0.005  # how long a decode waits for a sequence that has just ended its round


@dataclass
class _Request:
    view: object  # the EngineSequence asking
    tokens: list[int]
    rows: list[int]
    done: bool = False
    logits: np.ndarray | None = None
    error: BaseException | None = None
    shared_with: int = 0  # sequences in the decode that served it
    chances: Sequence[float] | None = None  # a draft's per-token acceptance chances
    extra: dict = field(default_factory=dict)


class Batcher:
    """Gathers target decodes of concurrent generations on one engine (see the module
    docstring).  ``grace_s``: how long a decode waits for a sequence that has just left its
    round (0 for a draft model, whose sequences leave their drafting for the verify).
    A generation's step runs inside :meth:`round`; its decode calls
    :meth:`decode` (through its :class:`~localspec.llama.sequence.EngineSequence`), which
    returns that sequence's logits rows, shape ``(len(rows), n_vocab)``, once the shared
    decode is done, and re-raises its error (ContextOverflowError, EngineError) in every
    caller of that decode.

    ``last_batch``: (tokens, sequences) of the latest decode, for the policy to price a
    draft against the batch it joins (:meth:`outlook`).  ``pricing``: the target's costs
    as they stand (a :class:`~localspec.decoding.policy.pricing.RoundPricing`), by which a
    decode keeps of each draft what pays; None keeps every draft whole."""

    def __init__(
        self,
        engine,
        prefill_chunk: int = PREFILL_CHUNK,
        grace_s: float = GRACE_S,
        pricing: Callable[[], RoundPricing] | None = None,
    ):
        self.engine = engine
        self.grace_s = grace_s
        self.pricing = pricing
        self._chunk = min(prefill_chunk, engine.n_batch)
        self._running: set[int] = set()  # seqs with a generation that has not ended
        self._cond = threading.Condition()
        self._computing = 0  # rounds in progress that have not handed in their decode
        self._pending: list[_Request] = []
        self._firing = False
        self._between: dict[
            int, float
        ] = {}  # seq -> when it ended its latest round (still running)
        self.last_batch: dict[int, int] = {}  # seq -> tokens it had in the latest decode
        self.decodes = 0
        self.shared_decodes = 0  # decodes that served more than one sequence
        self.sequences_decoded = 0  # sequences served, summed over decodes

    @property
    def prefill_chunk(self) -> int:
        """Prompt tokens per decode: ``PREFILL_CHUNK`` while other sequences run, else a whole
        batch."""
        return self._chunk if len(self._running) > 1 else self.engine.n_batch

    @contextmanager
    def round(self, seq: int) -> Iterator[None]:
        """A step of the generation in ``seq``: the batcher does not decode while it computes."""
        with self._cond:
            self._running.add(seq)
            self._computing += 1
            self._between.pop(seq, None)
        try:
            yield
        finally:
            with self._cond:
                self._computing -= 1
                self._between[seq] = time.perf_counter()
                self._cond.notify_all()

    @contextmanager
    def aside(self) -> Iterator[None]:
        """Inside :meth:`round`: the round waits on something else (another sequence reading
        the prompt it shares), so decodes do not wait for it meanwhile."""
        with self._cond:
            self._computing -= 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._computing += 1

    def leave(self, seq: int) -> None:
        """The generation in ``seq`` has ended: no decode waits for it."""
        with self._cond:
            self._between.pop(seq, None)
            self._running.discard(seq)
            self._cond.notify_all()

    def outlook(self, seq: int) -> tuple[int, int]:
        """(tokens, sequences) the other sequences had in the latest decode: what a draft
        of ``seq`` will probably share its verify with."""
        others = [n for s, n in self.last_batch.items() if s != seq]
        return sum(others), len(others)

    def decode(self, view, tokens, rows, chances: Sequence[float] | None = None) -> np.ndarray:
        """The logits ``rows`` of ``tokens`` decoded in ``view``'s sequence, in the next shared
        decode.  With ``chances`` (a verify: ``tokens`` = [last, d_1..d_k], ``rows`` all of
        them, ``chances`` d_i's acceptance chances) the decode may verify only d_1..d_m: the
        logits then have m + 1 rows."""
        if chances is not None and len(chances) != len(tokens) - 1:
            raise ValueError(f"{len(chances)} chances for a draft of {len(tokens) - 1} tokens")
        request = _Request(view, list(tokens), list(rows), chances=chances)
        queued, before = time.perf_counter(), view.decode_s
        with self._cond:
            self._pending.append(request)
            self._computing -= 1
            while not request.done:
                ready = self._take_if_ready()
                if ready:
                    break
                self._cond.wait(self._grace_left())
        if ready:
            self._fire(ready)
            with self._cond:
                while not request.done:
                    self._cond.wait()
        view.wait_s += max(0.0, time.perf_counter() - queued - (view.decode_s - before))
        if request.error is not None:
            raise request.error
        return request.logits

    def _take_if_ready(self) -> list[_Request] | None:
        """The pending requests, when nobody computes and no decode runs (under the lock);
        they count as computing again from here, so their logits (views into llama.cpp's
        buffer) stay valid until each has handed in its next decode or left its round."""
        if (
            self._computing > 0
            or self._firing
            or not self._pending
            or self._grace_left() is not None
        ):
            return None
        batch, self._pending = self._pending, []
        self._computing += len(batch)
        self._firing = True
        return batch

    def _grace_left(self) -> float | None:
        """Seconds until the last sequence between rounds is no longer waited for (None: none
        is)."""
        if not self._between:
            return None
        now = time.perf_counter()
        for seq, since in list(self._between.items()):
            if now - since >= self.grace_s:
                del self._between[seq]
        return self.grace_s - (now - max(self._between.values())) if self._between else None

    def _keep_what_pays(self, batch: list[_Request]) -> None:
        """Cut each draft in ``batch`` to what pays in this decode (see :meth:`decode`)."""
        drafts = [r for r in batch if r.chances]
        if self.pricing is None or not drafts:
            return
        fixed = sum(len(r.tokens) - len(r.chances or ()) for r in batch)
        kept = self.pricing().kept_drafts(fixed, len(batch), [r.chances for r in drafts])
        for request, m in zip(drafts, kept):
            request.tokens, request.rows = request.tokens[: m + 1], request.rows[: m + 1]

    def _fire(self, batch: list[_Request]) -> None:
        engine = self.engine
        self._keep_what_pays(batch)
        started, before = time.perf_counter(), engine.decode_s
        try:
            results = engine.decode_batch(
                [(r.view.seq, r.tokens, r.rows) for r in batch], copy=False
            )
            error = None
        except BaseException as exc:  # handed to every caller of this decode
            results, error = [None] * len(batch), exc
        spent = engine.decode_s - before if error is None else time.perf_counter() - started
        total = sum(len(r.tokens) for r in batch)
        with self._cond:
            self.decodes += 1
            self.shared_decodes += len(batch) > 1
            self.sequences_decoded += len(batch)
            self.last_batch = {r.view.seq: len(r.tokens) for r in batch}
            for request, logits in zip(batch, results):
                request.view.decode_s += spent
                request.view.last_batch_tokens = total
                request.view.last_batch_sequences = len(batch)
                request.logits, request.error, request.done = logits, error, True
                request.shared_with = len(batch)
            self._firing = False
            self._cond.notify_all()
