"""The prompt phase: the cached prefix reused, the rest decoded batch by batch (cancellable),
the prefill drafters told, the first token chosen (:class:`PromptPhase`, a mixin of
:class:`~localspec.decoding.loop.Generation`)."""

from __future__ import annotations

import time

import numpy as np

from localspec.decoding.loop.run import _Run
from localspec.decoding.sampling import row_candidates
from localspec.decoding.stats import TokenEvent, TokenSource


class PromptPhase:
    """Prompt eval and the first token."""

    def _read_prompt(self, run: _Run) -> TokenEvent | None:
        """Prompt eval: reuse the cached prefix, decode the rest (and let the policy's
        prefill drafters read it: a draft model drafting from round 1), sample the first
        token; None when cancelled while reading."""
        target, context, stats = self.target, run.context, run.stats
        reused = min(target.reuse_prefix(context), len(context) - 1)
        target.trim(reused)
        stats.prompt_cached_tokens = reused
        t0 = target.decode_s
        logits = self._prefill(context[reused:])
        stats.prompt_eval_s = target.decode_s - t0
        if logits is None:
            return None
        if not self._cancelled:
            k_cap = min(self.params.max_tokens - 1, self._room() - 1)
            for d in self.policy.prefill_drafters(len(context), k_cap):
                before = d.decode_s
                d.prefill(context)
                stats.prompt_eval_s += d.decode_s - before
                stats.against_plain.draft_prompt_s += d.decode_s - before
        token, p_token = self._choose(logits[0], run.rng)
        if self.constraint is not None:
            self.constraint.settle(None, [token])
        stats.ttft_s = time.perf_counter() - self._started_at
        run.verify_start_s = target.decode_s
        run.draft_start_s = sum(d.decode_s for d in self.drafters)
        run.catch_up_start_s = sum(d.catch_up_s for d in self.drafters)
        run.wait_start_s = target.wait_s
        return TokenEvent.emitted(
            token, TokenSource.TARGET, p_token, None, *self._logprobs(logits, 0, token)
        )

    def _prefill(self, pending: list[int]) -> np.ndarray | None:
        """Decode the prompt batch by batch, so ``cancel()`` takes effect within one batch
        (``n_batch`` tokens); the logits after the last token, or None when cancelled."""
        step = self.target.n_batch
        while len(pending) > step:
            self.target.decode(pending[:step])
            pending = pending[step:]
            if self._cancelled:
                return None
        return self.target.decode(pending, [len(pending) - 1])

    def _choose(self, logits: np.ndarray, rng: np.random.Generator) -> tuple[int, float | None]:
        sp = self.params.sampling
        if self.constraint is not None:
            logits = self.constraint.masked(logits)
        if sp.greedy:
            return int(np.argmax(logits)), None
        probs = row_candidates(logits, sp)
        token = probs.sample(rng)
        return token, probs.prob(token)
