"""Drafters: whatever proposes the next few tokens for the target to verify.

A drafter has two verbs (as transformers' ``CandidateGenerator``): :meth:`Drafter.propose`
returns up to k tokens with the distributions they were drawn from, and
:meth:`Drafter.feedback` learns how the round ended, so it can trim its own state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import islice
from typing import Protocol, Sequence

import numpy as np

from .engine import Engine
from .errors import InvalidOptionError
from .sampling import Candidates, SamplingParams, row_candidates, top_probability
from .suffix_index import KEYS, SuffixIndex


@dataclass
class Draft:
    """Proposed tokens d_1..d_k.

    ``probs`` is k :class:`~localspec.sampling.Candidates`, the i-th the distribution d_i
    was sampled from (ids in the target's vocabulary), or ``None`` when the drafter has no distribution (greedy, or prompt lookup):
    verification then treats each token as drawn from a one-hot q.  ``confidence`` is
    the drafter's own estimate, per token, that d_i is accepted given d_1..d_{i-1} were
    (the draft model's q(d_i), a suffix count ratio, 1/2 for a prompt-lookup copy, a
    prediction's match record), or None when it has none; the adaptive policy calibrates
    it against what the target accepts.  ``depth``: per token, how many context tokens
    the drafter matched to propose it (a suffix or prompt-lookup match's length plus the
    draft tokens before it), or None; the policy calibrates confidences per depth group.
    """

    tokens: list[int]
    probs: list[Candidates] | None = None
    confidence: list[float] | None = None
    depth: list[int] | None = None

    @classmethod
    def empty(cls) -> "Draft":
        return cls(tokens=[])

    def through_first(self, is_end) -> "Draft":
        """The draft up to and including its first token for which ``is_end(token)`` is
        true (an end-of-generation token: the target stops there, so nothing drafted
        after it can ever be emitted); the whole draft when there is none."""
        for i, token in enumerate(self.tokens):
            if is_end(token):
                return self.truncated(i + 1)
        return self

    def truncated(self, k: int) -> "Draft":
        """The first ``k`` tokens (with their rows and confidences)."""
        if k >= len(self.tokens):
            return self
        return Draft(self.tokens[:k], None if self.probs is None else self.probs[:k],
                     None if self.confidence is None else self.confidence[:k],
                     None if self.depth is None else self.depth[:k])


class Drafter(Protocol):
    name: str  # "draft-model", "prompt-lookup", "suffix", "prediction"
    decode_s: float  # seconds spent in the drafter's own model since it was created
    catch_up_s: float  # part of decode_s spent catching up on tokens it had not seen
    prior_acceptance: float  # a first guess of its per-token acceptance
    free: bool  # proposing costs next to nothing (no model): the policy may ask every round

    def begin(self, prompt: Sequence[int]) -> None:
        """A generation starts from ``prompt`` (token ids)."""

    def end(self, context: Sequence[int], n_prompt: int) -> None:
        """The generation finished: ``context`` is its prompt (``n_prompt`` tokens) and output."""

    def lag(self, n_context: int) -> int:
        """Context tokens it must still read before it can draft (a draft model's catch-up)."""

    def propose(self, context: Sequence[int], max_tokens: int, params: SamplingParams,
                p_min: float, rng: np.random.Generator) -> Draft:
        """Propose up to ``max_tokens`` tokens to follow ``context`` (all ids so far,
        the last one not yet verified by the target)."""

    def feedback(self, context: Sequence[int], n_drafted: int, n_accepted: int) -> None:
        """``context`` now holds everything emitted; ``n_accepted`` of ``n_drafted`` kept."""

    def close(self) -> None: ...


class _ModelFreeDrafter:
    """Defaults for drafters without a model of their own: free to ask, nothing to read
    or trim, nothing to free."""

    decode_s = 0.0
    catch_up_s = 0.0
    free = True

    def feedback(self, context, n_drafted, n_accepted) -> None:
        pass

    def begin(self, prompt) -> None:
        pass

    def end(self, context, n_prompt) -> None:
        pass

    def lag(self, n_context: int) -> int:
        return 0

    def close(self) -> None:
        pass


class DraftModelDrafter:
    """Drafts autoregressively with a small model of the same family.

    Its KV cache always holds a prefix of the context: ``feedback`` trims the rejected
    tokens, and ``propose`` first decodes whatever the cache lacks (the prompt on the
    first round; the last accepted draft token and the target's token after a round
    where every draft token was accepted).
    """

    name = "draft-model"
    prior_acceptance = 0.7
    free = False

    def __init__(self, engine: Engine, n_vocab_target: int, is_eog):
        self.engine = engine
        self.n_vocab_target = n_vocab_target
        self.is_eog = is_eog
        self.catch_up_s = 0.0

    @property
    def decode_s(self) -> float:
        return self.engine.decode_s

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        if max_tokens <= 0:
            return Draft.empty()
        logits = self._catch_up(context)
        if logits is None:
            return Draft.empty()
        tokens: list[int] = []
        rows: list[Candidates] = []
        confidence: list[float] = []
        while True:
            if params.greedy:
                top = top_probability(logits)
                if top < p_min:
                    break
                token = int(np.argmax(logits))
            else:
                q = row_candidates(logits, params)
                if q.top < p_min:
                    break
                token = q.sample(rng)
                rows.append(q)
                top = q.prob(token)
            tokens.append(token)
            confidence.append(top)
            if len(tokens) >= max_tokens or self.is_eog(token):
                break
            logits = self._fit(self.engine.decode([token], [0], copy=False)[0])
        if params.greedy or not tokens:
            return Draft(tokens=tokens, confidence=confidence)
        return Draft(tokens=tokens, probs=rows, confidence=confidence)

    def lag(self, n_context: int) -> int:
        return max(0, n_context - len(self.engine.cache_tokens))

    def prefill(self, prompt: Sequence[int]) -> None:
        """Read ``prompt`` now (during prompt eval), so the first draft does not pay for it."""
        if prompt:
            self._catch_up(prompt)

    def begin(self, prompt) -> None:
        # Keep only what the new prompt shares with the cache (a continued conversation),
        # so lag() counts what must really be read, not a previous request's tokens.
        self.engine.reuse_prefix(prompt)

    def end(self, context, n_prompt) -> None:
        pass

    def _catch_up(self, context: Sequence[int]) -> np.ndarray | None:
        """Decode what the cache lacks; the logits after the last token, or None when a
        lacking token is one only the target has (ids >= this model's vocabulary)."""
        n = self.engine.reuse_prefix(context)
        if n == len(context):  # need the logits after the last token: decode it again
            n -= 1
            self.engine.trim(n)
        pending = list(context[n:])
        if max(pending) >= self.engine.n_vocab:
            return None
        start = self.engine.decode_s
        logits = self.engine.decode(pending, [len(pending) - 1])[0]
        # Drafting every round leaves at most two tokens to decode here (the last draft
        # token and the target's correction or bonus): that is the drafter's own cost.
        # More is lag from rounds it sat out, which the policy must not charge per token.
        if len(pending) > 2:
            self.catch_up_s += (self.engine.decode_s - start) * (len(pending) - 2) / len(pending)
        return self._fit(logits)

    def _fit(self, logits: np.ndarray) -> np.ndarray:
        """Draft logits over the target's vocabulary (ids the target lacks are cut,
        ids the draft lacks get -inf)."""
        n = self.n_vocab_target
        if logits.shape[0] == n:
            return logits
        if logits.shape[0] > n:
            return logits[:n]
        return np.concatenate([logits, np.full(n - logits.shape[0], -np.inf, dtype=logits.dtype)])

    def feedback(self, context, n_drafted, n_accepted) -> None:
        self.engine.reuse_prefix(context)

    def close(self) -> None:
        self.engine.close()


class PromptLookupDrafter(_ModelFreeDrafter):
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

    def begin(self, prompt) -> None:
        self._sync(prompt)

    def _sync(self, context) -> None:
        """Index the tokens ``context`` adds to what is indexed: one dict update per n-gram
        length and new token, so a round costs the same at 100 tokens as at 30,000.  A
        context that does not continue the indexed one (another text) is indexed anew;
        the same list as last time is taken to have only grown, as the loop's does."""
        old = len(self._indexed)
        if (len(context) < old or (self.min_ngram, self.max_ngram) != self._ngrams
                or (context is not self._source and _tail(context, 0, old) != self._indexed)):
            self._forget()
            old = 0
        self._source = context
        if len(context) == old:
            return
        tokens = self._indexed
        tokens.extend(int(t) for t in _tail(context, old))
        for e in range(max(old, 1), len(tokens)):  # every end before the context's last token
            for n, latest in self._latest.items():
                if n <= e:
                    latest[tuple(tokens[e - n:e])] = e

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        if max_tokens <= 0 or len(context) < self.min_ngram + 1:
            return Draft.empty()
        self._sync(context)
        tokens = self._indexed
        last = len(tokens)
        for n in range(min(self.max_ngram, last - 1), self.min_ngram - 1, -1):
            end = self._latest[n].get(tuple(tokens[last - n:]))
            if end is not None:
                matched = _match_length(tokens, end, self.MAX_DEPTH)
                follow = tokens[end: end + max_tokens]
                return Draft(tokens=follow, confidence=[0.5] * len(follow),
                             depth=[matched + i for i in range(len(follow))])
        return Draft.empty()


def round_label(drafter, draft: Draft) -> str:
    """Whose round it was, for the stats: the drafter's when it drafted, or when it ran a
    model of its own even if nothing of that draft was verified (its time was spent);
    else "plain"."""
    if drafter is not None and (draft.tokens or not getattr(drafter, "free", False)):
        return drafter.name
    return "plain"


def _tail(context, start: int, stop: int | None = None) -> list:
    """``context[start:stop]`` as a list, for any sequence (a deque cannot be sliced)."""
    try:
        return list(context[start:stop])
    except TypeError:
        return list(islice(context, start, stop))


def _match_length(tokens: list[int], end: int, limit: int) -> int:
    """How many tokens before ``end`` equal the last ones of ``tokens`` (at most ``limit``)."""
    n, last = 0, len(tokens) - 1
    while n < limit and n < end and tokens[end - 1 - n] == tokens[last - n]:
        n += 1
    return n


class PredictionDrafter(_ModelFreeDrafter):
    """Drafts from the text the caller expects the answer to be (OpenAI's Predicted
    Outputs, ``prediction={"type": "content", "content": ...}``).

    The prediction's tokens are kept aligned with the output: while the output follows
    the prediction, the next prediction tokens are proposed; after a mismatch, the
    output's last ``max_ngram`` .. ``min_ngram`` tokens are looked up in the prediction
    again (the first match at or after the previous position, else the first anywhere),
    as prompt lookup does over the prompt.  How many tokens a round drafts is the
    policy's choice, as for any drafter.  No probabilities (one-hot q when sampling).

    ``set_prediction(tokens, n_prompt)`` starts a generation: ``n_prompt`` context
    tokens precede the output.  Empty tokens turn the drafter off.
    """

    name = "prediction"
    prior_acceptance = 0.8
    prior_cost_s = 2e-5
    RESYNC_WINDOW = 8  # prediction tokens after the last match searched with a one-token key

    def __init__(self, max_ngram: int = 8, min_ngram: int = 2):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.set_prediction([], 0)

    def set_prediction(self, tokens: Sequence[int], n_prompt: int) -> None:
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
            self.pos = self._realign(np.asarray(context[self.n_prompt:], dtype=np.int64))
        if self.pos is None or self.pos >= self.tokens.size:
            return Draft.empty()
        tokens = [int(t) for t in self.tokens[self.pos: self.pos + max_tokens]]
        # Laplace's rule on the run of matches so far: long runs predict more of them.
        confidence = [(self.run + i + 1) / (self.run + i + 2) for i in range(len(tokens))]
        return Draft(tokens=tokens, confidence=confidence)

    def _follow(self, context: Sequence[int]) -> None:
        """Advance ``pos`` over the tokens emitted since the last call."""
        for token in context[self.seen:]:
            if self.pos is not None and self.pos < self.tokens.size and self.tokens[self.pos] == token:
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
            near = self.tokens[self.last_pos: self.last_pos + self.RESYNC_WINDOW]
            hits = np.flatnonzero(near == output[-1])
            if hits.size:
                return self.last_pos + int(hits[0]) + 1
        return None


class SuffixDrafter(_ModelFreeDrafter):
    """Drafts the most frequent continuation of the longest match of the context's end,
    in this request's prompt and output and in earlier outputs of the same loaded model
    (SuffixDecoding, Oliaro et al. 2024, arXiv:2411.04975; see :mod:`localspec.suffix_index`).

    Two indexes: the request's (its prompt, then each accepted token; kept for the next
    request when that one continues the same conversation) and the store of earlier
    outputs (``store_tokens`` tokens at most, oldest evicted first).  Of the two
    candidate drafts, the one with more expected accepted tokens wins.  Confidence per
    token = count(child) / count(parent); drafting stops below ``min_estimate``.
    ``max_spec_factor``: at a fixed draft length (:class:`~localspec.policy.FixedPolicy`)
    a draft is cut to this many times the match it rests on, as ArcticInference and
    vLLM's ``suffix`` method (same name, same default); None = no cut; anything but a
    positive finite number or None raises :class:`~localspec.errors.InvalidOptionError`.
    The adaptive policy chooses lengths itself, from confidences calibrated per match depth.
    """

    name = "suffix"
    prior_acceptance = 0.5
    prior_cost_s = 3e-5

    def __init__(self, store_tokens: int = 100_000, min_estimate: float = 0.1, max_spec_factor: float | None = 1.0):
        if max_spec_factor is not None and not 0.0 < max_spec_factor < math.inf:
            raise InvalidOptionError(f"max_spec_factor must be a positive number or None, got {max_spec_factor!r}")
        self.store_tokens = store_tokens
        self.min_estimate = min_estimate
        self.max_spec_factor = max_spec_factor
        self.reset()

    def reset(self) -> None:
        """Forget every earlier output and the current request."""
        self.store = SuffixIndex(max_tokens=self.store_tokens)
        self.request = SuffixIndex()
        self._indexed: list[int] = []  # what the request index holds, in order

    def begin(self, prompt) -> None:
        prompt = list(prompt)
        n = len(self._indexed)
        if n > len(prompt) or prompt[:n] != self._indexed:  # not a continuation: a new text
            self.request = SuffixIndex()
            self._indexed = []
        self._sync(prompt)

    def _sync(self, context) -> None:
        new = _tail(context, len(self._indexed))
        if new:
            self.request.append(new)
            self._indexed.extend(int(t) for t in new)

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        if max_tokens <= 0:
            return Draft.empty()
        self._sync(context)
        recent = _tail(context, max(0, len(context) - max(KEYS)))  # all a lookup reads
        here = self.request.lookup(recent, max_tokens, self.min_estimate)
        before = self.store.lookup(recent, max_tokens, self.min_estimate)
        best = here if here.expected_accepted >= before.expected_accepted else before
        if not best.tokens:
            return Draft.empty()
        return Draft(tokens=best.tokens, confidence=best.estimates,
                     depth=[best.match_length + i for i in range(len(best.tokens))])

    def end(self, context, n_prompt) -> None:
        self._sync(context)
        output = _tail(context, n_prompt)
        if output:
            self.store.append(output)
            self.store.end_sequence()
