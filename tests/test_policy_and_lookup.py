"""Prompt lookup and the adaptive policy's cost model, on hand-made numbers."""

import pytest

from localspec.drafters import PromptLookupDrafter
from localspec.policy import AdaptivePolicy, FixedPolicy, expected_tokens
from localspec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def propose(context, k, **kw):
    return PromptLookupDrafter(**kw).propose(context, k, GREEDY, 0.0, None).tokens


def test_prompt_lookup_copies_what_followed_the_latest_match():
    assert propose([1, 2, 3, 4, 5, 9, 1, 2], 3) == [3, 4, 5]
    assert propose([1, 2, 7, 1, 2, 8, 1, 2], 2) == [8, 1]  # the latest occurrence wins
    assert propose([5, 6, 7, 8, 6, 7], 10) == [8, 6, 7]  # stops at the end of the context
    assert propose([1, 2, 3, 9, 2, 3], 2, max_ngram=2) == [9, 2]  # the 2-gram beats the 1-gram
    assert propose([1, 2, 3, 4], 3) == []  # nothing repeats
    assert propose([1, 2, 3], 0) == []


def test_expected_tokens_formula():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(0.9, 3) == pytest.approx(1 + 0.9 + 0.81 + 0.729)


class FakeDrafter:
    def __init__(self, name, prior):
        self.name, self.prior_acceptance = name, prior


def teach(policy, drafter, *, alpha, k, draft_s_per_token, verify_s, rounds=60):
    """Feed rounds with the given acceptance pattern and costs (verify_s: batch -> s)."""
    for i in range(rounds):
        n_acc = k if (i % 10) < alpha * 10 else 0
        policy.observe(drafter, k, n_acc, draft_s_per_token * k, verify_s(k + 1), k + 1)
        policy.observe(None, 0, 0, 0.0, verify_s(1), 1)


def cpu_like(batch):  # a batch of b costs 30 ms + 10 ms per extra token
    return 0.030 + 0.010 * (batch - 1)


def test_costly_draft_model_gives_way_to_plain_decoding():
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], max_k={id(d): 8}, probe_every=1000)
    teach(policy, d, alpha=1.0, k=4, draft_s_per_token=0.025, verify_s=cpu_like)
    assert policy.plan(8) == (None, 0)


def test_cheap_accurate_draft_is_used_with_a_long_draft():
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], max_k={id(d): 8}, probe_every=1000)
    teach(policy, d, alpha=0.9, k=4, draft_s_per_token=0.002, verify_s=lambda b: 0.030 + 0.001 * (b - 1))
    drafter, k = policy.plan(8)
    assert drafter is d and k >= 4
    assert policy.plan(2) == (d, 2)  # the loop's cap wins


def test_prompt_lookup_is_chosen_when_it_is_accepted_and_probes_come_back():
    model, lookup = FakeDrafter("draft-model", 0.7), FakeDrafter("prompt-lookup", 0.3)
    policy = AdaptivePolicy([model, lookup], max_k={id(model): 8, id(lookup): 16}, probe_every=5)
    teach(policy, model, alpha=0.6, k=4, draft_s_per_token=0.012, verify_s=cpu_like)
    teach(policy, lookup, alpha=0.9, k=4, draft_s_per_token=0.0001, verify_s=cpu_like)
    plans = [policy.plan(16) for _ in range(10)]
    assert sum(1 for d, _ in plans if d is lookup) >= 8
    assert any(d is model for d, _ in plans)  # re-probed after 5 idle rounds


def test_a_drafter_that_cannot_win_is_never_probed():
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], max_k={id(d): 8}, probe_every=2)
    teach(policy, d, alpha=1.0, k=4, draft_s_per_token=0.025, verify_s=cpu_like)
    assert not policy.could_win(d)
    assert all(policy.plan(8) == (None, 0) for _ in range(20))


def test_fixed_policy():
    d = FakeDrafter("draft-model", 0.7)
    assert FixedPolicy(d, 4).plan(10) == (d, 4)
    assert FixedPolicy(d, 4).plan(2) == (d, 2)
    assert FixedPolicy(d, 4).plan(0) == (None, 0)
    assert FixedPolicy(None, 4).plan(10) == (None, 0)
