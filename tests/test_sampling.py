"""The acceptance rules on hand-made distributions: exact where exact, seeded statistics
where random."""

import numpy as np
import pytest
from scipy import stats

from localspec.decoding.sampling import (
    Candidates,
    SamplingParams,
    accept_greedy,
    accept_sampled,
    candidates,
    processed_probs,
    residual,
)
from localspec.errors import InvalidOptionError

P = np.array([0.05, 0.40, 0.30, 0.00, 0.25])
Q = np.array([0.30, 0.10, 0.30, 0.20, 0.10])


def sparse(*dense):
    """Dense probability vectors as the Candidates the loop works on."""
    return [Candidates.from_dense(np.asarray(x, dtype=float)) for x in dense]


def sample(p, rng):
    return Candidates.from_dense(p).sample(rng)


def residual_distribution(p, q):
    return residual(*sparse(p, q)).dense(p.size)


def emitted_distribution(p, q):
    """Exact law of the first emitted token when one token is drafted from q:
    sum_d q(d) [min(1, p/q)(d) * 1{x=d} + (1 - min(1, p/q)(d)) * residual(x)]."""
    accept = np.where(
        q > 0, np.minimum(1.0, np.divide(p, q, out=np.ones_like(p), where=q > 0)), 1.0
    )
    return q * accept + (q * (1 - accept)).sum() * residual_distribution(p, q)


def test_residual_is_normalised_positive_part():
    r = residual_distribution(P, Q)
    expected = np.array([0.0, 0.30, 0.0, 0.0, 0.15]) / 0.45
    np.testing.assert_allclose(r, expected, atol=1e-15)


def test_rejection_rule_reproduces_target_exactly():
    np.testing.assert_allclose(emitted_distribution(P, Q), P, atol=1e-15)
    rng = np.random.default_rng(0)
    for _ in range(50):
        p, q = rng.dirichlet(np.ones(7) * 0.5), rng.dirichlet(np.ones(7) * 0.5)
        np.testing.assert_allclose(emitted_distribution(p, q), p, atol=1e-12)


def test_monte_carlo_first_token_matches_target():
    rng = np.random.default_rng(1234)
    n = 40_000
    p = np.stack([P, P])
    counts = np.zeros(P.size)
    for _ in range(n):
        d = sample(Q, rng)
        n_acc, nxt = accept_sampled([d], sparse(*p), sparse(Q), rng)
        counts[d if n_acc == 1 else nxt] += 1
    keep = P > 0
    assert counts[~keep].sum() == 0  # p = 0 is never emitted
    chi2, pvalue = stats.chisquare(counts[keep], P[keep] * n)
    assert pvalue > 1e-3, (counts, chi2)


def test_monte_carlo_two_positions_joint_distribution():
    """Two drafted tokens with a position-dependent target: the joint law of the first
    two emitted tokens equals p1 x p2 (the second comes from a bonus or a residual)."""
    rng = np.random.default_rng(99)
    p1, p2 = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.2, 0.6])
    q1, q2 = np.array([0.2, 0.5, 0.3]), np.array([0.7, 0.2, 0.1])
    n = 30_000
    counts = np.zeros((3, 3))
    for _ in range(n):
        d = [sample(q1, rng), sample(q2, rng)]
        n_acc, nxt = accept_sampled(d, sparse(p1, p2, p2), sparse(q1, q2), rng)
        first = d[0] if n_acc >= 1 else nxt
        if n_acc >= 1:
            second = d[1] if n_acc == 2 else nxt
        else:  # the round ended after one token: the next position is sampled from p2
            second = sample(p2, rng)
        counts[first, second] += 1
    expected = np.outer(p1, p2) * n
    _, pvalue = stats.chisquare(counts.ravel(), expected.ravel())
    assert pvalue > 1e-3


def test_zero_draft_probability_is_accepted_without_division():
    p = sparse([0.5, 0.5], [1.0, 0.0])
    q = sparse([1.0, 0.0])
    rng = np.random.default_rng(0)
    with np.errstate(all="raise"):
        assert accept_sampled([1], p, q, rng) == (1, 0)


def test_zero_target_probability_is_always_rejected():
    p = sparse([0.0, 1.0], [0.5, 0.5])
    q = sparse([1.0, 0.0])
    rng = np.random.default_rng(0)
    for _ in range(100):
        assert accept_sampled([0], p, q, rng) == (0, 1)


def test_one_hot_draft_accepts_with_target_probability():
    rng = np.random.default_rng(7)
    p = sparse([0.25, 0.75], [1.0, 0.0])
    n = 20_000
    accepted = sum(accept_sampled([0], p, None, rng)[0] for _ in range(n))
    assert stats.binomtest(accepted, n, 0.25).pvalue > 1e-3


def test_greedy_acceptance_on_hand_made_logits():
    logits = np.array(
        [
            [0.1, 3.0, 0.2],  # argmax 1
            [2.0, 0.0, 1.0],  # argmax 0
            [0.0, 0.0, 5.0],  # argmax 2
        ]
    )
    argmax = logits.argmax(axis=1)
    assert accept_greedy([1, 0], argmax) == (2, 2)  # all accepted, bonus = 2
    assert accept_greedy([1, 2], argmax) == (1, 0)  # rejected at 1, correction = 0
    assert accept_greedy([0, 0], argmax) == (0, 1)
    assert accept_greedy([], argmax) == (0, 1)  # no draft: plain decoding


def test_processed_probs_filters():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    greedy = processed_probs(logits, SamplingParams(temperature=0.0))
    np.testing.assert_array_equal(greedy, [1, 0, 0, 0, 0])
    full = processed_probs(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(full, [0.5, 0.2, 0.15, 0.1, 0.05], rtol=1e-6)
    top2 = processed_probs(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(top2, [5 / 7, 2 / 7, 0, 0, 0], rtol=1e-6)
    nucleus = processed_probs(
        logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0)
    )
    np.testing.assert_allclose(nucleus, np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85, rtol=1e-6)
    minp = processed_probs(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25))
    np.testing.assert_allclose(minp, np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85, rtol=1e-6)
    hot = processed_probs(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0))
    expected = np.sqrt([0.5, 0.2, 0.15, 0.1, 0.05])
    np.testing.assert_allclose(hot, expected / expected.sum(), rtol=1e-6)


def test_top_p_on_a_large_vocabulary_uses_the_head_correctly():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(152_000).astype(np.float32) * 3
    params = SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0)
    fast = processed_probs(logits, params)
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(p)[::-1]
    n_keep = int(np.searchsorted(np.cumsum(p[order]), 0.9)) + 1
    slow = np.zeros_like(p)
    slow[order[:n_keep]] = p[order[:n_keep]]
    np.testing.assert_allclose(fast, slow / slow.sum(), atol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=-0.1),
        dict(top_k=-1),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(min_p=-0.1),
        dict(temperature=float("nan")),
    ],
)
def test_bad_sampling_params_are_rejected(kwargs):
    with pytest.raises(InvalidOptionError):
        SamplingParams(**kwargs)


def dense_reference(row, params):
    """The filters over the whole vocabulary in float64, in llama.cpp's order."""
    z = row.astype(np.float64) / params.temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    keep = np.zeros(row.size, dtype=bool)
    order = np.argsort(-row, kind="stable")[: params.top_k or row.size]
    head = p[order] / p[order].sum()
    n_keep = (
        int(np.searchsorted(np.cumsum(head), params.top_p)) + 1 if params.top_p < 1 else head.size
    )
    order, head = order[:n_keep], head[:n_keep]
    order = order[head >= params.min_p * head.max()]
    keep[order] = True
    out = np.where(keep, p, 0.0)
    return out / out.sum()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(0.7),
        SamplingParams(1.0, 0, 1.0, 0.0),
        SamplingParams(1.5, 100, 0.9, 0.0),
        SamplingParams(0.3, 0, 0.95, 0.05),
        SamplingParams(2.0, 40, 1.0, 0.1),
    ],
)
def test_sparse_candidates_equal_the_dense_filters_on_a_real_vocabulary(params):
    """Recorded verify rows of the default pair (152k vocabulary): the candidate sets equal
    the dense computation's support and the probabilities agree to rounding."""
    from pathlib import Path

    rows = np.load(Path(__file__).parents[1] / "benchmarks" / "data" / "logits.npz")[
        "logits"
    ].astype(np.float32)
    got = candidates(rows, params)
    for row, c in zip(rows, got):
        ref = dense_reference(row, params)
        assert np.all(np.diff(c.ids) > 0)
        np.testing.assert_array_equal(c.ids, np.flatnonzero(ref))
        np.testing.assert_allclose(c.probs, ref[c.ids], rtol=1e-12)
        assert abs(c.probs.sum() - 1) < 1e-12


def test_sampling_from_candidates_equals_the_dense_inverse_cdf():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(50) * 0.3)
    p[rng.choice(50, 20, replace=False)] = 0
    p /= p.sum()
    c = Candidates.from_dense(p)
    cumulative = np.cumsum(p)
    for seed in range(200):
        u = np.random.default_rng(seed).random() * cumulative[-1]
        assert c.sample(np.random.default_rng(seed)) == int(
            np.searchsorted(cumulative, u, side="right")
        )


@pytest.mark.parametrize(
    "n_vocab, k", [(151_936, 40), (1_007, 5), (49_152, 200), (64, 40), (100_003, 1)]
)
def test_top_k_by_column_maxima_is_exact(n_vocab, k):
    """The strided column-maxima search finds exactly the k largest logits, on vocabularies
    that the slices do and do not divide, with a tail, and with heavy ties below the cut."""
    from localspec.decoding.sampling import _top_k_ids

    rng = np.random.default_rng(n_vocab)
    for trial in range(20):
        row = (rng.standard_normal(n_vocab) * (1 + trial)).astype(np.float32)
        if trial % 3 == 0:
            row = np.round(row)  # ties
        got = np.sort(row[_top_k_ids(row, k)])
        np.testing.assert_array_equal(got, np.sort(row)[-k:])
        assert np.unique(_top_k_ids(row, k)).size == k


def test_min_p_alone_keeps_a_token_exactly_at_the_cut_and_bad_rows_fail_clearly():
    from localspec.decoding.sampling import row_candidates
    from localspec.errors import EngineError

    row = np.array([0.28422242403030396, -0.015350802801549435], np.float32)
    sp = SamplingParams(temperature=0.1, top_k=0, top_p=1.0, min_p=0.05)
    np.testing.assert_array_equal(
        row_candidates(row, sp).ids, np.flatnonzero(dense_reference(row, sp))
    )
    for bad in ([np.nan, 1.0], [np.inf, 1.0], [-np.inf, -np.inf]):
        with pytest.raises(EngineError):
            row_candidates(np.array(bad, np.float32), SamplingParams(0.7))
    vocabulary = np.zeros(151_936, np.float32)
    for nans, top_k in (
        (vocabulary.size, 40),
        (1, 1),
        (64, 40),
    ):  # top-k's floor turns NaN: no candidates
        row = vocabulary.copy()
        row[:nans] = np.nan
        with pytest.raises(EngineError):
            row_candidates(row, SamplingParams(0.7, top_k=top_k))
