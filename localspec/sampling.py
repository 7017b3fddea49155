"""Token distributions and the speculative acceptance rules, in numpy.

Pure functions of logits and probabilities; nothing here touches a model.

Sources:
- Leviathan, Kalman, Matias (2022), "Fast Inference from Transformers via Speculative
  Decoding", arXiv:2211.17192, Algorithm 1.
- Chen et al. (2023), "Accelerating Large Language Model Decoding with Speculative
  Sampling", arXiv:2302.01318, Algorithm 2 (modified rejection sampling).

Shapes: a *logits* row is ``(n_vocab,)`` float32 as read from llama.cpp; a *probs* row
is ``(n_vocab,)`` float64, non-negative, summing to 1.  Verify batches are ``(k + 1, n_vocab)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import InvalidOptionError

# top-p only needs the head of the distribution; sorting this many candidates first
# avoids a full sort of a 152k vocabulary in the common case.
_TOP_P_HEAD = 1024


@dataclass(frozen=True)
class SamplingParams:
    """How a token is chosen from a logits row; applied identically to target and draft.

    ``temperature == 0`` is greedy (argmax); the other filters then do nothing.
    Otherwise the order is temperature, top-k, top-p, min-p (the filters of llama.cpp's
    default sampler chain), then the kept probabilities are renormalised.

    Raises :class:`~localspec.errors.InvalidOptionError` on a negative temperature,
    a negative top-k, or top-p / min-p outside [0, 1].
    """

    temperature: float = 0.0
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1.0 = off
    min_p: float = 0.05  # 0.0 = off

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), (int, float)):
                raise InvalidOptionError(f"{name} must be a number, got {getattr(self, name)!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int):
            raise InvalidOptionError(f"top_k must be an integer, got {self.top_k!r}")
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise InvalidOptionError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidOptionError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidOptionError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InvalidOptionError(f"min_p must be in [0, 1], got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def top_probability(logits: np.ndarray) -> float:
    """Probability of the most likely token under softmax(logits); used for ``p_min``."""
    z = logits.astype(np.float64) - float(logits.max())
    return 1.0 / float(np.exp(z).sum())


def processed_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution a sampler draws from: float64 ``(n_vocab,)`` summing to 1.

    Greedy params give the one-hot vector of the argmax.  Tokens removed by top-k,
    top-p or min-p get probability exactly 0.
    """
    n_vocab = logits.shape[-1]
    out = np.zeros(n_vocab, dtype=np.float64)
    if params.greedy:
        out[int(np.argmax(logits))] = 1.0
        return out

    if params.top_k and params.top_k < n_vocab:
        ids = np.argpartition(logits, n_vocab - params.top_k)[n_vocab - params.top_k:]
    else:
        ids = np.arange(n_vocab)
    z = logits[ids].astype(np.float64)
    z -= z.max()  # before dividing: a tiny temperature then gives 0 and -inf, not inf - inf
    with np.errstate(over="ignore"):
        z /= params.temperature
    p = np.exp(z)
    p /= p.sum()

    if params.top_p < 1.0:
        ids, p = _top_p(ids, p, params.top_p)
    if params.min_p > 0.0:
        keep = p >= params.min_p * p.max()
        ids, p = ids[keep], p[keep]
    out[ids] = p / p.sum()
    return out


def _top_p(ids: np.ndarray, p: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``."""
    if p.size > _TOP_P_HEAD:
        head = np.argpartition(p, p.size - _TOP_P_HEAD)[p.size - _TOP_P_HEAD:]
        if p[head].sum() >= top_p:
            ids, p = ids[head], p[head]
    order = np.argsort(p)[::-1]
    cumulative = np.cumsum(p[order])
    n_keep = int(np.searchsorted(cumulative, top_p)) + 1
    order = order[:n_keep]
    return ids[order], p[order]


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probs row (inverse CDF on the cumulative sum)."""
    cumulative = np.cumsum(probs)
    u = rng.random() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), probs.size - 1))


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``norm(max(0, p - q))``: where to sample after a rejected draft token.

    If p equals q everywhere (the residual is all zeros, which a rejection cannot
    produce in exact arithmetic) the target's own ``p`` is returned.
    """
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    if total <= 0.0:
        return p
    return r / total


def accept_sampled(
    draft_tokens: Sequence[int],
    p: np.ndarray,
    q: np.ndarray | None,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Speculative sampling: how many draft tokens to keep, and the token that follows.

    Args:
        draft_tokens: the k drafted ids d_1..d_k.
        p: target probs, ``(k + 1, n_vocab)``; row i is the distribution of position i
            (row k gives the bonus token when every draft token is accepted).
        q: draft probs, ``(k, n_vocab)``, or ``None`` for a drafter without probabilities
            (prompt lookup), which is treated as one-hot on each drafted token.
        rng: the random source for the acceptance tests and the final sample.

    Returns:
        ``(n_accepted, next_token)``: d_1..d_n are kept and ``next_token`` is either a
        sample from the residual at the first rejection or the bonus from ``p[k]``.

    Token d_i is accepted iff ``u * q_i(d_i) < p_i(d_i)`` with u ~ U[0, 1), which is
    ``u < min(1, p/q)`` without a division (q = 0 and p > 0 always accepts;
    p = 0 always rejects).  The emitted sequence is distributed exactly as the target's.
    """
    for i, token in enumerate(draft_tokens):
        p_i = p[i]
        q_i_token = 1.0 if q is None else float(q[i, token])
        if rng.random() * q_i_token < p_i[token]:
            continue
        if q is None:
            q_i = np.zeros_like(p_i)
            q_i[token] = 1.0
        else:
            q_i = q[i]
        return i, sample(residual_distribution(p_i, q_i), rng)
    k = len(draft_tokens)
    return k, sample(p[k], rng)


def accept_greedy(draft_tokens: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Greedy verification: keep draft tokens while they equal the target's argmax.

    Args:
        draft_tokens: the k drafted ids.
        target_argmax: ``(k + 1,)`` argmax of each verify row.

    Returns:
        ``(n_accepted, next_token)`` where ``next_token`` is the target's argmax at the
        first mismatch (a correction), or at row k (the bonus) when all k match.
    """
    for i, token in enumerate(draft_tokens):
        if int(target_argmax[i]) != int(token):
            return i, int(target_argmax[i])
    k = len(draft_tokens)
    return k, int(target_argmax[k])


def token_logprobs(logits: np.ndarray, token: int, top: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """Natural-log probability of ``token`` under softmax(``logits``) (float32
    ``(n_vocab,)``, no temperature or filters), and the ``top`` most likely
    ``(id, logprob)`` pairs, best first (as OpenAI's ``logprobs`` / ``top_logprobs``)."""
    row = logits.astype(np.float64)
    peak = row.max()
    lse = peak + np.log(np.exp(row - peak).sum())
    best = ()
    if top > 0:
        head = np.argpartition(-row, top - 1)[:top]
        head = head[np.argsort(-row[head], kind="stable")]
        best = tuple((int(i), float(row[i] - lse)) for i in head)
    return float(row[token] - lse), best
