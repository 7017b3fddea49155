"""The caller's prediction (OpenAI's Predicted Outputs) as a drafter."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.decoding.drafters.base import NO_INPUTS, Draft, DrafterInputs, ModelFreeDrafter


class PredictionDrafter(ModelFreeDrafter):
    """Drafts from the text the caller expects the answer to be (OpenAI's Predicted
    Outputs, ``prediction={"type": "content", "content": ...}``).

    The prediction's tokens are kept aligned with the output: while the output follows
    the prediction, the next prediction tokens are proposed; after a mismatch, the
    output's last ``max_ngram`` .. ``min_ngram`` tokens are looked up in the prediction
    again (the first match at or after the previous position, else the first anywhere),
    as prompt lookup does over the prompt.  How many tokens a round drafts is the
    policy's choice, as for any drafter.  No probabilities (one-hot q when sampling).

    :meth:`begin` starts a generation with the request's predicted tokens after its prompt;
    no prediction turns the drafter off.
    """

    name = "prediction"
    prior_acceptance = 0.8
    prior_cost_s = 2e-5
    RESYNC_WINDOW = 8  # prediction tokens after the last match searched with a one-token key

    def __init__(self, max_ngram: int = 8, min_ngram: int = 2):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.begin([])

    def begin(self, prompt, inputs: DrafterInputs = NO_INPUTS) -> None:
        self._predict(inputs.prediction, len(prompt))

    def _predict(self, tokens: Sequence[int], n_prompt: int) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.n_prompt = n_prompt
        self.pos: int | None = 0  # index of the prediction token expected next
        self.seen = n_prompt  # context length that ``pos`` accounts for
        self.last_pos = 0
        self.run = 0  # output tokens in a row that followed the prediction

    @property
    def active(self) -> bool:
        return self.tokens.size > 0

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        if not self.active or max_tokens <= 0:
            return Draft.empty()
        self._follow(context)
        if self.pos is None:
            self.pos = self._realign(np.asarray(context[self.n_prompt :], dtype=np.int64))
        if self.pos is None or self.pos >= self.tokens.size:
            return Draft.empty()
        tokens = [int(t) for t in self.tokens[self.pos : self.pos + max_tokens]]
        # Laplace's rule on the run of matches so far: long runs predict more of them.
        confidence = [(self.run + i + 1) / (self.run + i + 2) for i in range(len(tokens))]
        return Draft(tokens=tokens, confidence=confidence)

    def _follow(self, context: Sequence[int]) -> None:
        """Advance ``pos`` over the tokens emitted since the last call."""
        for token in context[self.seen :]:
            if (
                self.pos is not None
                and self.pos < self.tokens.size
                and self.tokens[self.pos] == token
            ):
                self.pos += 1
                self.last_pos = self.pos
                self.run += 1
            else:
                self.pos = None
                self.run = 0
        self.seen = len(context)

    def _realign(self, output: np.ndarray) -> int | None:
        for n in range(min(self.max_ngram, output.size, self.tokens.size), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(self.tokens, n)
            hits = np.flatnonzero((windows == output[-n:]).all(axis=1))
            if hits.size:
                after = hits[hits + n >= self.last_pos]
                start = int(after[0] if after.size else hits[0])
                return start + n
        # One token is too weak a key anywhere, but right after where the output left
        # the prediction (an edit replaced a few tokens) it is usually the way back.
        if output.size:
            near = self.tokens[self.last_pos : self.last_pos + self.RESYNC_WINDOW]
            hits = np.flatnonzero(near == output[-1])
            if hits.size:
                return self.last_pos + int(hits[0]) + 1
        return None
