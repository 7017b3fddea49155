"""Prompt lookup and the adaptive policy's cost model, on hand-made numbers."""

import numpy as np
import pytest
from support.fakes import FakeDrafter

from localspec.decoding.drafters import Draft, PromptLookupDrafter
from localspec.decoding.policy import (
    BATCH_SIZES,
    AdaptivePolicy,
    FixedPolicy,
    Policy,
    expected_tokens,
)
from localspec.decoding.policy.costs import warm_up
from localspec.decoding.rounds import RoundOutcome
from localspec.decoding.sampling import SamplingParams

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


def test_prompt_lookup_says_how_long_a_match_its_copy_rests_on():
    """Depth = the whole match of the copied occurrence with the context's end (not just
    the 2-3-token key), then one more per drafted token; confidence 1/2 (one sighting)."""
    lookup = PromptLookupDrafter()
    draft = lookup.propose([9, 1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4], 3, GREEDY, 0.0, None)
    assert draft.tokens == [5, 6, 7] and draft.depth == [3, 4, 5] and draft.confidence == [0.5] * 3
    long = lookup.propose([9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4], 2, GREEDY, 0.0, None)
    assert long.tokens == [5, 6] and long.depth == [
        4,
        5,
    ]  # 1 2 3 4 matched, the 3-gram key extended
    everything = lookup.propose([1, 2, 3, 1, 2, 3], 2, GREEDY, 0.0, None)
    assert everything.tokens == [1, 2] and everything.depth == [3, 4]  # the whole context before it
    capped = lookup.propose(list(range(40)) + list(range(40)), 1, GREEDY, 0.0, None)
    assert capped.depth == [PromptLookupDrafter.MAX_DEPTH]


def brute_force_lookup(context, k, max_ngram=3, min_ngram=2, max_depth=32):
    """Prompt lookup by its definition: the latest earlier end e of the longest n-gram
    key (n from max_ngram down) equal to the context's end; depth = the whole match."""
    last = len(context)
    for n in range(min(max_ngram, last - 1), min_ngram - 1, -1):
        for e in range(last - 1, n - 1, -1):
            if context[e - n : e] == context[last - n :]:
                depth = 0
                while (
                    depth < min(max_depth, e)
                    and context[e - 1 - depth] == context[last - 1 - depth]
                ):
                    depth += 1
                follow = context[e : e + k]
                return follow, [depth + i for i in range(len(follow))]
    return [], []


def test_prompt_lookup_index_equals_the_definition_as_the_context_grows_and_changes():
    """The index is built token by token as the loop's context grows, and anew when a
    context does not continue the last one; either way it proposes what the definition
    does, on random token streams with many repeats."""
    rng = np.random.default_rng(5)
    lookup = PromptLookupDrafter()
    for trial in range(40):
        vocab = int(rng.integers(2, 12))
        context = [int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, 30)))]
        lookup.begin(list(context))
        for _ in range(int(rng.integers(1, 120))):  # the same list, growing, as in the loop
            k = int(rng.integers(1, 20))
            draft = lookup.propose(context, k, GREEDY, 0.0, None)
            assert (draft.tokens, draft.depth or []) == brute_force_lookup(context, k), (
                trial,
                context,
            )
            context.append(int(rng.integers(0, vocab)))
        other = context[: int(rng.integers(0, len(context)))] + [
            int(t) for t in rng.integers(0, vocab, size=5)
        ]
        draft = lookup.propose(
            other, 8, GREEDY, 0.0, None
        )  # another list: checked, re-indexed if it differs
        assert (draft.tokens, draft.depth or []) == brute_force_lookup(other, 8)
    lookup.min_ngram = 1  # changed on a live drafter (the synthetic tests do): the index follows
    draft = lookup.propose(context, 5, GREEDY, 0.0, None)
    assert (draft.tokens, draft.depth or []) == brute_force_lookup(context, 5, 3, 1)
    for ngrams in ((1, 1), (2, 4), (1, 3)):
        lookup = PromptLookupDrafter(*reversed(ngrams))
        for _ in range(200):
            context = [int(t) for t in rng.integers(0, 4, size=int(rng.integers(0, 40)))]
            draft = lookup.propose(context, 6, GREEDY, 0.0, None)
            assert (draft.tokens, draft.depth or []) == brute_force_lookup(
                context, 6, ngrams[1], ngrams[0]
            )


def test_expected_tokens_formula():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(0.9, 3) == pytest.approx(1 + 0.9 + 0.81 + 0.729)


def teach(policy, drafter, *, alpha, k, draft_s_per_token, verify_s, rounds=60):
    """Feed rounds with the given acceptance pattern and costs (verify_s: batch -> s)."""
    for i in range(rounds):
        n_acc = k if (i % 10) < alpha * 10 else 0
        draft = Draft([0] * k)
        policy.observe(
            RoundOutcome(
                verify_s(k + 1),
                k + 1,
                drafter,
                draft,
                n_accepted=n_acc,
                draft_s=draft_s_per_token * k,
            )
        )
        policy.observe(RoundOutcome(verify_s=verify_s(1), verify_batch=1))


def cpu_like(batch):  # a batch of b costs 30 ms + 10 ms per extra token
    return 0.030 + 0.010 * (batch - 1)


def test_costly_draft_model_gives_way_to_plain_decoding():
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], caps={d.name: 8})
    teach(policy, d, alpha=1.0, k=4, draft_s_per_token=0.025, verify_s=cpu_like)
    assert policy.plan(8) == (None, 0)


def test_cheap_accurate_draft_is_used_with_a_long_draft():
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], caps={d.name: 8})
    teach(
        policy,
        d,
        alpha=0.9,
        k=4,
        draft_s_per_token=0.002,
        verify_s=lambda b: 0.030 + 0.001 * (b - 1),
    )
    drafter, k = policy.plan(8)
    assert drafter is d and k >= 4
    assert policy.plan(2) == (d, 2)  # the loop's cap wins


def test_prompt_lookup_is_chosen_when_it_is_accepted():
    model, lookup = FakeDrafter("draft-model", 0.7), FakeDrafter("prompt-lookup", 0.3)
    policy = AdaptivePolicy([model, lookup], caps={model.name: 8, lookup.name: 16})
    teach(policy, model, alpha=0.6, k=4, draft_s_per_token=0.012, verify_s=cpu_like)
    teach(policy, lookup, alpha=0.9, k=4, draft_s_per_token=0.0001, verify_s=cpu_like)
    assert all(policy.plan(16)[0] is lookup for _ in range(10))


def test_a_draft_model_that_sat_out_a_text_gets_its_chance_on_the_next():
    """No probes within a text: a draft model that failed there sits it out, and the next
    text starts its estimate back near the prior (a quarter of the evidence kept)."""
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], caps={d.name: 8})
    teach(
        policy,
        d,
        alpha=0.0,
        k=4,
        draft_s_per_token=0.001,
        verify_s=lambda b: 0.030 + 0.001 * (b - 1),
    )
    assert all(policy.plan(8) == (None, 0) for _ in range(50))
    policy.new_generation()
    assert policy.plan(8)[0] is d


def test_a_stalled_plain_step_is_measured_again_and_plain_decoding_comes_back():
    """c(1) calibrated in a stall (3x its true 30 ms) makes a 40 %-accepted draft model
    look better than plain; drafting every round would never measure c(1) again."""
    from localspec.decoding.policy import CostAverage, CostModel
    from localspec.decoding.policy.costs import PLAIN_PROBE_EVERY as _PLAIN_PROBE_EVERY

    d = FakeDrafter("draft-model", 0.4)
    verify = {b: CostAverage(cpu_like(b), weight=1.0) for b in BATCH_SIZES}
    verify[1] = CostAverage(0.090, weight=1.0)
    policy = AdaptivePolicy([d], caps={d.name: 8}, costs=CostModel(verify=verify))
    policy.costs.draft[d.name] = CostAverage(0.010, weight=1.0)
    plans = []
    for i in range(_PLAIN_PROBE_EVERY + 40):
        drafter, k = policy.plan(8)
        plans.append(drafter)
        if drafter is None:
            policy.observe(RoundOutcome(verify_s=cpu_like(1), verify_batch=1))
        else:
            n_accepted = 1 if i % 5 < 2 else 0
            policy.observe(
                RoundOutcome(
                    cpu_like(k + 1), k + 1, d, Draft([0] * k), n_accepted, draft_s=0.010 * k
                )
            )
    assert plans[0] is d  # the stalled c(1) has it drafting
    assert None not in plans[:_PLAIN_PROBE_EVERY]
    assert plans[-10:] == [None] * 10  # measured again, plain wins and stays
    assert policy.costs.verify_s(1) < 0.036


def test_a_fixed_policy_plans_the_same_whatever_the_rounds_showed():
    d = FakeDrafter("draft-model", 0.7)
    fixed = FixedPolicy(d, 4)
    assert isinstance(fixed, Policy) and isinstance(AdaptivePolicy([d]), Policy)
    assert fixed.prefill_drafters(100, 64) == [d] and fixed.free_drafters == ()  # reads the prompt
    for accepted in (0, 4, 0):
        fixed.observe(RoundOutcome(0.03, 5, d, Draft([0] * 4), n_accepted=accepted, draft_s=0.01))
    assert fixed.plan(8) == (d, 4) and fixed.plan(2) == (d, 2)


def test_a_round_outcome_counts_what_a_grammar_forced():
    d, grammar = FakeDrafter("suffix", 0.5), FakeDrafter("grammar", 0.95)
    grammar.forces = True
    chained = Draft([1, 2, 3], forced=[True, False, True])
    assert RoundOutcome(0.05, 4, d, chained, n_accepted=1).n_forced == 2
    assert RoundOutcome(0.05, 3, grammar, Draft([1, 2]), n_accepted=2).n_forced == 2
    assert RoundOutcome(0.05, 3, d, Draft([1, 2]), n_accepted=2).n_forced == 0
    assert RoundOutcome(verify_s=0.03, verify_batch=1).n_drafted == 0


def test_fixed_policy():
    d = FakeDrafter("draft-model", 0.7)
    assert FixedPolicy(d, 4).plan(10) == (d, 4)
    assert FixedPolicy(d, 4).plan(2) == (d, 2)
    assert FixedPolicy(d, 4).plan(0) == (None, 0)
    assert FixedPolicy(None, 4).plan(10) == (None, 0)


def test_fixed_policy_cuts_a_suffix_draft_to_max_spec_factor_times_its_match():
    """As ArcticInference / vLLM's suffix method: a 2-token match drafts at most 2 tokens,
    a 4-token match 4; drafts without a match length (a draft model's) are not cut."""
    from localspec.decoding.drafters import SuffixDrafter

    suffix = SuffixDrafter()
    suffix.begin([1, 2, 3])
    suffix.end([1, 2, 3] + list(range(100, 140)), 3)
    suffix.begin([4, 5])
    short = suffix.propose([4, 5, 100, 101], 8, GREEDY, 0.0, None)
    longer = suffix.propose([100, 101, 102, 103], 8, GREEDY, 0.0, None)
    assert (
        len(short.tokens) == len(longer.tokens) == 8
        and short.depth[0] == 2
        and longer.depth[0] == 4
    )
    policy = FixedPolicy(suffix, 8)
    assert policy.length(suffix, short, 8) == 2
    assert policy.length(suffix, longer, 8) == 4
    assert policy.length(suffix, longer, 3) == 3
    for factor, kept in ((2.5, 5), (0.1, 1), (None, 8)):
        suffix.max_spec_factor = factor
        assert policy.length(suffix, short, 8) == kept
    model_draft = Draft([1, 2, 3, 4, 5], confidence=[0.9] * 5)
    assert policy.length(FakeDrafter("draft-model", 0.7), model_draft, 5) == 5
    lookup = PromptLookupDrafter()  # a copy is proposed whole, as transformers and llama.cpp do
    copy = lookup.propose([1, 2, 3, 4, 5, 6, 9, 2, 3], 5, GREEDY, 0.0, None)
    assert copy.depth[0] == 2 and FixedPolicy(lookup, 8).length(lookup, copy, 5) == 5


class ClockedEngine:
    """A target whose decode of b tokens takes ``cost(b)`` seconds of its clock, with
    a stall of ``stall_s`` on the ``stall_at``-th decode (1-based; or each of a set)."""

    def __init__(self, cost, stall_at=None, stall_s=0.0, n_ctx=4096):
        self.cost, self.stall_at, self.stall_s, self.n_ctx = cost, stall_at, stall_s, n_ctx
        self.cache_tokens, self.decode_s, self.calls = [1, 2, 3], 0.0, 0

    def decode(self, tokens, rows=()):
        self.calls += 1
        stalled = (
            self.calls in self.stall_at
            if isinstance(self.stall_at, (set, range))
            else self.calls == self.stall_at
        )
        self.decode_s += self.cost(len(tokens)) + (self.stall_s if stalled else 0.0)
        self.cache_tokens += list(tokens)

    def trim(self, n):
        del self.cache_tokens[n:]


def _warm_up_decodes(cost) -> int:
    """How many decodes the warm-up before measuring takes on an engine with these costs."""
    engine = ClockedEngine(cost)
    warm_up(engine, 100)
    return engine.calls


def test_calibration_keeps_the_faster_of_two_runs_so_one_stall_is_not_taken_for_a_cost():
    d = FakeDrafter("prompt-lookup", 0.3)
    for stall_at in range(1, _warm_up_decodes(cpu_like) + 13):  # in the warm-up or a reading
        target = ClockedEngine(cpu_like, stall_at=stall_at, stall_s=0.5)
        policy = AdaptivePolicy([d], caps={d.name: 16})
        policy.costs.measure(target, {})
        assert target.cache_tokens == [1, 2, 3]  # trimmed back each time
        assert {b: policy.costs.verify[b].value for b in BATCH_SIZES} == pytest.approx(
            {b: cpu_like(b) for b in BATCH_SIZES}
        )


def test_a_stall_over_both_runs_of_a_size_is_measured_again():
    """Both decodes of batch 2 stalled: c(2) = 0.54 s beside c(1) = 0.03 s is no machine's
    cost, so every size is read again and each keeps its fastest reading."""
    d = FakeDrafter("prompt-lookup", 0.3)
    warm = _warm_up_decodes(cpu_like)
    target = ClockedEngine(cpu_like, stall_at={warm + 3, warm + 4}, stall_s=0.5)
    policy = AdaptivePolicy([d], caps={d.name: 16})
    policy.costs.measure(target, {})
    assert target.calls == warm + 2 * 2 * len(BATCH_SIZES)  # read twice
    assert {b: policy.costs.verify[b].value for b in BATCH_SIZES} == pytest.approx(
        {b: cpu_like(b) for b in BATCH_SIZES}
    )


def test_calibration_of_a_draft_model_keeps_the_faster_run_too():
    """A draft model calibrated too dear is never chosen again, so one stall must not set
    its cost per token or per prompt token."""
    d = FakeDrafter("draft-model", 0.7)
    warm = _warm_up_decodes(lambda b: 0.003 * b)
    for stall_at in range(
        warm + 1, warm + 5
    ):  # its two 1-token decodes, then its two 17-token ones
        draft = ClockedEngine(lambda b: 0.003 * b, stall_at=stall_at, stall_s=0.5)
        policy = AdaptivePolicy([d], caps={d.name: 8})
        policy.costs.measure(ClockedEngine(cpu_like), {d.name: draft})
        assert policy.costs.draft[d.name].value == pytest.approx(0.003)
        assert policy.costs.prefill[d.name] == pytest.approx(0.003)


def test_a_draft_step_stalled_over_both_runs_is_measured_again():
    """A draft token dearer than a target token is no machine's cost: read again."""
    d = FakeDrafter("draft-model", 0.7)
    warm = _warm_up_decodes(lambda b: 0.003 * b)
    draft = ClockedEngine(lambda b: 0.003 * b, stall_at={warm + 1, warm + 2}, stall_s=0.5)
    policy = AdaptivePolicy([d], caps={d.name: 8})
    policy.costs.measure(ClockedEngine(cpu_like), {d.name: draft})
    assert policy.costs.draft[d.name].value == pytest.approx(0.003)
    assert policy.costs.prefill[d.name] == pytest.approx(0.003)


def test_calibration_drops_readings_that_are_not_times():
    """A clock that jumps back once gives one negative reading: the other run is kept.
    A clock that reads NaN gives nothing: the prior stays, and calibration is retried."""
    d = FakeDrafter("prompt-lookup", 0.3)
    for stall_at in range(1, _warm_up_decodes(cpu_like) + 13):
        policy = AdaptivePolicy([d], caps={d.name: 16})
        policy.costs.measure(ClockedEngine(cpu_like, stall_at=stall_at, stall_s=-1.0), {})
        assert {b: policy.costs.verify[b].value for b in BATCH_SIZES} == pytest.approx(
            {b: cpu_like(b) for b in BATCH_SIZES}
        )
    for broken in (float("nan"), float("inf")):
        policy = AdaptivePolicy([d], caps={d.name: 16})
        policy.costs.measure(ClockedEngine(lambda b: broken), {})
        assert not policy.costs.measured and policy.costs.verify_s(4) == pytest.approx(
            0.03 * 1.3
        )  # the prior
