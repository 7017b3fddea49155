"""Prompt lookup: copy what followed the latest earlier occurrence of the last n-gram."""

from __future__ import annotations

from localspec.decoding.drafters.base import (
    NO_INPUTS,
    Draft,
    DrafterInputs,
    ModelFreeDrafter,
    context_slice,
    match_length,
)


class PromptLookupDrafter(ModelFreeDrafter):
    """Drafts by copying: finds the latest earlier occurrence of the context's last
    n tokens (n from ``max_ngram`` down to ``min_ngram``) and proposes what followed it.

    No second model and no probabilities (verification treats the draft as one-hot).
    Pays off when the answer repeats its input: edits, refactors, quoting.
    Follows transformers' ``prompt_lookup_num_tokens`` (Saxena 2023, "Prompt Lookup
    Decoding") and llama.cpp's ngram drafting.

    Each token's ``confidence`` is 1/2 (one sighting of what followed, as the suffix
    drafter's count ratio for a continuation seen once) and its ``depth`` the length of
    that occurrence's whole match with the context's end (the key, extended backwards up
    to ``MAX_DEPTH`` tokens), plus the draft tokens before it: the adaptive policy
    calibrates acceptance per depth, and a copy resting on 20 matching tokens (an edit)
    is worth more than one resting on 2 (prose).

    The occurrences are found in an index (each n-gram's latest end position) that
    grows with the context, as the suffix drafter's does, so a proposal costs the same
    at any context length (a search of the whole context took 0.14-0.29 ms a round at
    4,096 tokens).  Raises ValueError unless 1 <= ``min_ngram`` <= ``max_ngram``.
    """

    MAX_DEPTH = 32

    name = "prompt-lookup"
    looks_ahead = True  # propose(..., ahead=) drafts after tokens not yet in the context
    prior_acceptance = 0.3
    prior_cost_s = 2e-5  # two dict lookups and a short backwards comparison

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._forget()

    def _forget(self) -> None:
        self._indexed: list[int] = []  # the context the index describes
        self._source = None  # the list it was last read from (the loop's growing context)
        # n -> {n-gram: latest e with context[e - n:e] == n-gram}, for every e < len(_indexed)
        self._latest = {n: {} for n in range(self.min_ngram, self.max_ngram + 1)}
        self._ngrams = (self.min_ngram, self.max_ngram)  # what the index was built for

    def begin(self, prompt, inputs: DrafterInputs = NO_INPUTS) -> None:
        self._sync(prompt)

    def _sync(self, context) -> None:
        """Index the tokens ``context`` adds to what is indexed: one dict update per n-gram
        length and new token, so a round costs the same at 100 tokens as at 30,000.  A
        context that does not continue the indexed one (another text) is indexed anew;
        the same list as last time is taken to have only grown, as the loop's does."""
        old = len(self._indexed)
        if (
            len(context) < old
            or (self.min_ngram, self.max_ngram) != self._ngrams
            or (context is not self._source and context_slice(context, 0, old) != self._indexed)
        ):
            self._forget()
            old = 0
        self._source = context
        if len(context) == old:
            return
        tokens = self._indexed
        tokens.extend(int(t) for t in context_slice(context, old))
        for e in range(max(old, 1), len(tokens)):  # every end before the context's last token
            for n, latest in self._latest.items():
                if n <= e:
                    latest[tuple(tokens[e - n : e])] = e

    def propose(self, context, max_tokens, params, p_min, rng, ahead=()) -> Draft:
        """``ahead``: tokens to draft after, not yet in ``context`` (a grammar's forced
        tokens); looked up, not indexed."""
        if max_tokens <= 0 or len(context) + len(ahead) < self.min_ngram + 1:
            return Draft.empty()
        self._sync(context)
        tokens = self._indexed
        recent = tokens[-self.MAX_DEPTH :] + list(ahead)
        for n in range(min(self.max_ngram, len(tokens) + len(ahead) - 1), self.min_ngram - 1, -1):
            end = self._latest[n].get(tuple(recent[len(recent) - n :]))
            if end is not None:
                matched = match_length(tokens, end, self.MAX_DEPTH, recent)
                follow = tokens[end : end + max_tokens]
                return Draft(
                    tokens=follow,
                    confidence=[0.5] * len(follow),
                    depth=[matched + i for i in range(len(follow))],
                )
        return Draft.empty()
