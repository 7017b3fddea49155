"""Token distributions and the speculative acceptance rules, in numpy.

Pure functions of logits and probabilities; nothing here touches a model.

Sources:
- Leviathan, Kalman, Matias (2022), "Fast Inference from Transformers via Speculative
  Decoding", arXiv:2211.17192, Algorithm 1.
- Chen et al. (2023), "Accelerating Large Language Model Decoding with Speculative
  Sampling", arXiv:2302.01318, Algorithm 2 (modified rejection sampling).

Shapes: a *logits* row is ``(n_vocab,)`` float32 as read from llama.cpp; verify batches
are ``(k + 1, n_vocab)``.  A distribution is kept sparse, as :class:`Candidates` (the
few ids that top-k / top-p / min-p keep, as llama.cpp's ``llama_token_data_array``),
and a verify batch's rows are processed only as far as the acceptance rule reads them:
a sampled round then costs a fraction of a millisecond on a 152k vocabulary instead of
several for float64 arrays over the whole vocabulary (``benchmarks/loop_cost.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.errors import EngineError, InvalidOptionError

# top-p only needs the head of the distribution; sorting this many candidates first
# avoids a full sort when top-k is off.
_TOP_P_HEAD = 1024
# top-k views the vocabulary as this many strided slices (see _top_k_ids).
_GROUPS = 32
# up to this many candidates, the filters run in plain Python (see _few_candidates).
_FEW = 64


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
        for name, value in (
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidOptionError(f"{name} must be a number, got {value!r}")
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


@dataclass(frozen=True)
class Candidates:
    """A distribution over a few token ids; every other id has probability exactly 0.

    ``ids``: int64 ``(m,)``, ascending, unique.  ``probs``: float64 ``(m,)``, positive,
    summing to 1.  Ascending ids make :meth:`sample` draw the same token as an inverse
    CDF over the dense vector would for the same uniform number.
    """

    ids: np.ndarray
    probs: np.ndarray

    @classmethod
    def one_hot(cls, token: int) -> Candidates:
        return cls(np.array([token], dtype=np.int64), np.ones(1))

    @classmethod
    def from_dense(cls, probs: np.ndarray) -> Candidates:
        """From a dense ``(n_vocab,)`` vector of probabilities summing to 1."""
        ids = np.flatnonzero(probs > 0)
        return cls(ids.astype(np.int64), np.asarray(probs, dtype=np.float64)[ids])

    def prob(self, token: int) -> float:
        j = int(np.searchsorted(self.ids, token))
        return float(self.probs[j]) if j < self.ids.size and self.ids[j] == token else 0.0

    @property
    def top(self) -> float:
        """The largest probability."""
        return float(self.probs.max())

    def sample(self, rng: np.random.Generator) -> int:
        """Draw one id (inverse CDF; one ``rng.random()``)."""
        cumulative = np.cumsum(self.probs)
        u = rng.random() * cumulative[-1]
        return int(
            self.ids[min(int(np.searchsorted(cumulative, u, side="right")), self.ids.size - 1)]
        )

    def dense(self, n_vocab: int) -> np.ndarray:
        """The float64 ``(n_vocab,)`` vector."""
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out


def top_probability(logits: np.ndarray) -> float:
    """Probability of the most likely token under softmax(logits); used for ``p_min``.
    The exponentials are float32 (summed in float64): a threshold needs no more, and a
    draft step pays a quarter of the float64 cost (0.5 ms instead of 1.9 here)."""
    return 1.0 / float(np.exp(logits - logits.max()).sum(dtype=np.float64))


def candidates(logits: np.ndarray, params: SamplingParams) -> list[Candidates]:
    """The distribution a sampler draws from, for each row of ``logits``.

    Args:
        logits: float32 ``(n_rows, n_vocab)`` (or one ``(n_vocab,)`` row).
        params: temperature and filters; greedy params give the argmax, one-hot.

    Returns:
        one :class:`Candidates` per row.  With top-k on (the default) or with min-p
        alone, only the tokens the filters can keep are ever put through the softmax;
        with top-k off and top-p on, the whole vocabulary is (slower, same result).

    Raises:
        EngineError: a row whose candidates hold NaN or +inf, or nothing finite.
    """
    return [row_candidates(row, params) for row in np.atleast_2d(logits)]


class CandidateRows(Sequence):
    """:func:`candidates` of a verify batch, each row computed when first read.

    Verification reads rows only up to the first rejection, so rows past it cost nothing.
    ``logits``: float32 ``(k + 1, n_vocab)``, which must not change while this is used.
    """

    def __init__(self, logits: np.ndarray, params: SamplingParams):
        self.logits, self.params = logits, params
        self._rows: dict[int, Candidates] = {}

    def __len__(self) -> int:
        return len(self.logits)

    def __getitem__(self, i: int) -> Candidates:
        if i not in self._rows:
            self._rows[i] = row_candidates(self.logits[i], self.params)
        return self._rows[i]


def row_candidates(row: np.ndarray, params: SamplingParams) -> Candidates:
    """:func:`candidates` of one float32 ``(n_vocab,)`` logits row (same errors)."""
    if params.greedy:
        return Candidates.one_hot(int(np.argmax(row)))
    if params.top_k and params.top_k < row.size:
        ids = _top_k_ids(row, params.top_k)
        if 0 < ids.size <= _FEW:  # none: NaN made the floor NaN; the checks below say so
            return _few_candidates(row[ids].tolist(), ids.tolist(), params)
    elif params.top_p == 1.0 and params.min_p > 0.0:  # min-p alone: its cut needs no normaliser
        # A float32 comparison with a slightly lower cut: a superset of what the exact
        # float64 min-p rule below keeps.
        cut = float(row.max()) + params.temperature * math.log(params.min_p)
        ids = np.flatnonzero(row >= cut - 1e-3 * max(1.0, abs(cut)))
    else:
        ids = np.arange(row.size)
    z = row[ids].astype(np.float64)
    if not np.isfinite(z.max(initial=-np.inf)):
        raise EngineError(
            "the model's logits hold NaN or infinity (or nothing finite): no distribution to "
            "sample from"
        )
    with np.errstate(over="ignore"):  # a tiny temperature: 0 and -inf, never inf - inf
        p = np.exp((z - z.max()) / params.temperature)
    p /= p.sum()
    if params.top_p < 1.0 and p.size > _TOP_P_HEAD:  # the head holds the nucleus, mostly
        head = np.argpartition(p, p.size - _TOP_P_HEAD)[p.size - _TOP_P_HEAD :]
        if p[head].sum() >= params.top_p:
            ids, p = ids[head], p[head]
    order = np.argsort(p)[::-1]  # most likely first: top-p and min-p both keep a prefix
    ids, p = ids[order], p[order]
    n = p.size
    if params.top_p < 1.0:
        n = min(n, int(np.searchsorted(np.cumsum(p), params.top_p)) + 1)
    if params.min_p > 0.0:
        n = min(n, int(np.count_nonzero(p >= params.min_p * p[0])))
    order = np.argsort(ids[:n])
    return Candidates(ids[:n][order].astype(np.int64), p[:n][order] / p[:n].sum())


def _few_candidates(logits: list[float], ids: list[int], params: SamplingParams) -> Candidates:
    """The filters of :func:`row_candidates` on a few candidates (top-k's), in plain
    Python: for 40 values that is about half the time of twenty small numpy calls."""
    ranked = sorted(
        zip(logits, ids), reverse=True
    )  # most likely first: top-p and min-p keep a prefix
    peak = ranked[0][0]
    if not math.isfinite(peak) or any(z != z for z, _ in ranked):
        raise EngineError(
            "the model's logits hold NaN or infinity (or nothing finite): no distribution to "
            "sample from"
        )
    t = params.temperature
    weights = [math.exp((z - peak) / t) for z, _ in ranked]  # the top one is 1
    n = len(weights)
    if params.top_p < 1.0:
        cut, total = params.top_p * math.fsum(weights), 0.0
        for i, w in enumerate(weights):
            total += w
            if total >= cut:
                n = i + 1
                break
    if params.min_p > 0.0:
        n = min(n, sum(1 for w in weights if w >= params.min_p))
    kept = sorted((token, w) for (_, token), w in zip(ranked[:n], weights[:n]))
    norm = math.fsum(w for _, w in kept)
    return Candidates(
        np.array([token for token, _ in kept], dtype=np.int64),
        np.array([w / norm for _, w in kept], dtype=np.float64),
    )


def _top_k_ids(row: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` largest values of ``row`` (ties broken arbitrarily), exactly.

    Viewed as ``(_GROUPS, width)``, the row has ``width`` column maxima; the k-th largest
    of them, f, is a lower bound of the k-th largest value (k columns each hold a value
    >= f), so the top k lie among the values >= f, all in the columns whose maximum is
    >= f.  One pass of vectorised maxima plus a partition of a few thousand values,
    about a fifth of the cost of partitioning a 152k vocabulary.
    """
    n = row.size
    width = n // _GROUPS
    if k >= width:
        return np.argpartition(row, n - k)[n - k :]
    main = width * _GROUPS
    maxima = row[:main].reshape(_GROUPS, width).max(axis=0)
    floor = np.partition(maxima, width - k)[width - k]
    columns = np.flatnonzero(maxima >= floor)
    ids = (columns[None, :] + width * np.arange(_GROUPS)[:, None]).ravel()
    if main < n:
        ids = np.concatenate([ids, np.arange(main, n)])
    ids = ids[row[ids] >= floor]
    if ids.size > k:
        ids = ids[np.argpartition(row[ids], ids.size - k)[ids.size - k :]]
    return ids


def processed_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Dense view of :func:`candidates` for one ``(n_vocab,)`` row: float64 ``(n_vocab,)``
    summing to 1, exactly 0 where a filter removed the token (for tests and inspection;
    the loop itself stays sparse)."""
    return candidates(logits, params)[0].dense(logits.shape[-1])


def residual(p: Candidates, q: Candidates) -> Candidates:
    """``norm(max(0, p - q))``: where to sample after a rejected draft token.

    If p equals q everywhere (the residual is all zeros, which a rejection cannot
    produce in exact arithmetic) the target's own ``p`` is returned.
    """
    ids = np.union1d(p.ids, q.ids)
    diff = np.zeros(ids.size)
    diff[np.searchsorted(ids, p.ids)] = p.probs
    diff[np.searchsorted(ids, q.ids)] -= q.probs
    keep = diff > 0
    total = diff[keep].sum()
    if total <= 0.0:
        return p
    return Candidates(ids[keep], diff[keep] / total)


def accept_sampled(
    draft_tokens: Sequence[int],
    p: Sequence[Candidates],
    q: Sequence[Candidates] | None,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Speculative sampling: how many draft tokens to keep, and the token that follows.

    Args:
        draft_tokens: the k drafted ids d_1..d_k.
        p: the target's k + 1 distributions; p[i] is that of position i (p[k] gives the
            bonus token when every draft token is accepted).
        q: the draft's k distributions, or ``None`` for a drafter without probabilities
            (prompt lookup, suffix, a prediction), treated as one-hot on each drafted token.
        rng: the random source for the acceptance tests and the final sample.

    Returns:
        ``(n_accepted, next_token)``: d_1..d_n are kept and ``next_token`` is either a
        sample from the residual at the first rejection or the bonus from ``p[k]``.

    Token d_i is accepted iff ``u * q_i(d_i) < p_i(d_i)`` with u ~ U[0, 1), which is
    ``u < min(1, p/q)`` without a division (q = 0 and p > 0 always accepts;
    p = 0 always rejects).  The emitted sequence is distributed exactly as the target's.
    """
    for i, token in enumerate(draft_tokens):
        q_i = Candidates.one_hot(token) if q is None else q[i]
        if rng.random() * q_i.prob(token) < p[i].prob(token):
            continue
        return i, residual(p[i], q_i).sample(rng)
    return len(draft_tokens), p[len(draft_tokens)].sample(rng)


class RowArgmax(Sequence):
    """The argmax of each row of a verify batch (float32 ``(k + 1, n_vocab)``), computed
    when first read: greedy verification stops at the first mismatch, and a freshly
    written 152k row costs about 0.2 ms to read the first time (0.02 ms the second)."""

    def __init__(self, logits: np.ndarray):
        self.logits = logits

    def __len__(self) -> int:
        return len(self.logits)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return int(np.argmax(self.logits[i]))


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


def token_logprobs(
    logits: np.ndarray, token: int, top: int
) -> tuple[float, tuple[tuple[int, float], ...]]:
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
