"""The suffix index and drafter, confidence calibration, and the policy's per-draft lengths."""

import pytest
from support.fakes import FakeDrafter

from localspec.decoding.drafters import Draft, SuffixDrafter
from localspec.decoding.drafters.suffix_index import KEYS, SuffixIndex
from localspec.decoding.policy import AdaptivePolicy, CostAverage, CostModel
from localspec.decoding.policy.estimates import Calibration
from localspec.decoding.rounds import RoundOutcome
from localspec.decoding.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def test_lookup_takes_the_longest_match_and_the_most_frequent_continuation():
    ix = SuffixIndex()
    for seq in ([1, 2, 3, 4, 5, 6, 7, 8], [9, 2, 3, 4, 5, 6, 0], [7, 3, 4, 5, 6, 7, 9]):
        ix.append(seq)
        ix.end_sequence()
    d = ix.lookup([11, 12, 2, 3], 10)
    assert d.match_length == 2 and d.tokens == [4, 5, 6, 7, 8]
    assert d.estimates == pytest.approx([2 / 3, 2 / 3, 2 / 3, 1 / 3, 1 / 2])  # count / (parent + 1)
    d = ix.lookup([3, 4, 5, 6], 10)  # three occurrences of the 4-gram: 7, 0, 7
    assert d.match_length == 4 and d.tokens[0] == 7 and d.estimates[0] == pytest.approx(2 / 4)
    assert d.expected_accepted == pytest.approx(
        sum(__import__("math").prod(d.estimates[: i + 1]) for i in range(len(d.estimates)))
    )
    assert ix.lookup([40, 41], 5).tokens == []
    low = ix.lookup([3, 4, 5, 6], 10, min_estimate=0.6)
    assert low.tokens == []  # 2/4 < 0.6: nothing worth drafting


def test_the_open_sequence_is_searched_but_its_own_end_is_not_a_continuation():
    ix = SuffixIndex()
    ix.append([5, 6, 7, 5, 6])
    assert ix.lookup([5, 6, 7, 5, 6], 4).tokens == [7, 5, 6]  # stops where the context ends
    ix.append([7])
    assert ix.lookup([5, 6, 7, 5, 6, 7], 4).tokens == [5, 6, 7]


def test_lookup_follows_the_32_latest_occurrences_besides_the_contexts_own():
    from localspec.decoding.drafters.suffix_index import MAX_OCCURRENCES

    ix = SuffixIndex()
    ix.append(
        [5, 6, 1] * MAX_OCCURRENCES + [5, 6]
    )  # 32 earlier "5 6", each followed by 1, and the context's own
    draft = ix.lookup([5, 6], 1)
    assert draft.tokens == [1] and draft.estimates == pytest.approx(
        [MAX_OCCURRENCES / (MAX_OCCURRENCES + 1)]
    )


def test_index_takes_any_iterable_and_counts_its_tokens():
    ix = SuffixIndex()
    ix.append(t for t in [1, 2, 3, 1, 2])
    ix.append(())
    assert len(ix) == 5 and ix.lookup([1, 2], 2).tokens == [3, 1]


def test_suffix_drafter_takes_numpy_and_deque_contexts_as_it_takes_lists():
    from collections import deque

    import numpy as np

    prompt = [7, 0, 7, 3, 0, 7]
    drafts = []
    for kind in (list, np.array, deque):
        d = SuffixDrafter()
        d.begin(kind(prompt))
        drafts.append(d.propose(kind(prompt + [0]), 4, GREEDY, 0.0, None).tokens)
        d.end(kind(prompt + [0, 7, 3]), len(prompt))
        assert len(d.store) == 3 and d._indexed == prompt + [0, 7, 3]
    assert drafts[0] == drafts[1] == drafts[2] and drafts[0]


def test_store_is_bounded_first_in_first_out_and_forgets_evicted_text():
    ix = SuffixIndex(max_tokens=12)
    for i in range(5):
        ix.append(list(range(100 * i, 100 * i + 6)))
        ix.end_sequence()
    assert len(ix) == 12
    assert ix.lookup([400, 401], 3).tokens == [402, 403, 404]
    assert ix.lookup([300, 301], 3).tokens == [302, 303, 304]
    assert ix.lookup([0, 1], 3).tokens == []  # evicted
    entries = sum(len(positions) for table in ix._tables.values() for positions in table.values())
    assert entries == 2 * sum(
        max(0, 6 - k + 1) for k in KEYS
    )  # nothing of the evicted text is left


def test_suffix_drafter_remembers_earlier_answers_across_requests():
    d = SuffixDrafter(store_tokens=1000)
    prompt = [1, 2, 3]
    answer = [10, 11, 12, 13, 14, 15, 16, 17]
    d.begin(prompt)
    d.end(prompt + answer, len(prompt))
    d.begin([4, 5, 6])  # another conversation: the request index starts afresh
    draft = d.propose([4, 5, 6, 10, 11], 5, GREEDY, 0.0, None)
    assert draft.tokens == [12, 13, 14, 15, 16] and draft.confidence == [0.5] * 5  # seen once
    assert draft.depth == [2, 3, 4, 5, 6]  # a 2-token match, then each drafted token extends it
    d.end([4, 5, 6, 10, 11, 12], 3)
    assert len(d.store) == len(answer) + 3


def test_a_continued_conversation_keeps_its_request_index():
    d = SuffixDrafter()
    d.begin([1, 2, 3, 4])
    d.end([1, 2, 3, 4, 20, 21, 22], 4)
    index = d.request
    d.begin([1, 2, 3, 4, 20, 21, 22, 30])  # turn 2 extends turn 1
    assert d.request is index
    d.begin([9, 9])
    assert d.request is not index


def test_calibration_learns_what_a_confidence_is_worth():
    cal = Calibration()
    assert cal(0.95) == pytest.approx(0.95)
    for _ in range(200):
        cal.observe([0.95, 0.95, 0.95], 1)  # claims 95 %, one in two accepted at the 2nd token
    assert cal(0.95) == pytest.approx(0.5, abs=0.05)
    assert cal(0.15) == pytest.approx(0.15)  # other bins keep their prior
    cal.observe([float("nan"), float("inf"), -3.0], 3)
    assert cal(float("nan")) == cal(float("inf")) == cal(0.0)  # a broken estimate claims nothing


def test_calibration_tells_a_long_match_from_a_short_one_at_the_same_confidence():
    """A continuation seen once gets the estimate 1/2 however long the match behind it:
    after 2 tokens of prose it is mostly wrong, after 16 tokens of code mostly right.
    Calibrated per depth, the two stop looking alike."""
    d = free_drafter()
    policy = policy_for([d], lambda b: 0.030 + 0.010 * (b - 1))
    cal = policy.confidence_calibration(d)
    assert vars(cal) == vars(Calibration())  # verify costs alone teach it nothing
    for _ in range(200):
        cal.observe([0.5, 0.5], 0, depth=[2, 3])  # short match: rejected at once
        cal.observe([0.5] * 4, 4, depth=[16, 17, 18, 19])  # long match: all kept
    assert cal(0.5, 2) < 0.1 and cal(0.5, 3) < 0.1
    assert cal(0.5, 16) > 0.9 and cal(0.5, 40) > 0.9
    assert cal(0.5, 5) == pytest.approx(0.55)  # depths 4..7 were never seen: the bin's prior
    assert cal(0.5) == cal(0.5, 2)  # no depth: the first group
    short = Draft([1, 2, 3, 4], confidence=[0.5] * 4, depth=[2, 3, 4, 5])
    long = Draft([1, 2, 3, 4], confidence=[0.5] * 4, depth=[16, 17, 18, 19])
    assert policy.plan(8, {d.name: short}) == (None, 0)
    assert policy.plan(8, {d.name: long}) == (d, 4)


def free_drafter():
    return FakeDrafter("suffix", 0.5, free=True, prior_cost_s=3e-5)


def model_drafter(lag=0):
    return FakeDrafter("draft-model", 0.7, lag=lag)


def policy_for(drafters, verify):
    policy = AdaptivePolicy(drafters, caps={d.name: 16 for d in drafters})
    for b in range(1, 18):
        for _ in range(3):
            policy.observe(RoundOutcome(verify_s=verify(b), verify_batch=b))
    return policy


def flat(b):  # memory-bound: 17 tokens cost 1.5 steps
    return 0.030 * (1 + 0.03 * (b - 1))


def steep(b):  # compute-bound: a batch costs its length
    return 0.030 * b


def test_a_confident_free_draft_is_kept_long_where_verifying_is_cheap():
    d = free_drafter()
    policy = policy_for([d], flat)
    sure = Draft(list(range(16)), confidence=[0.99] * 16)
    assert policy.plan(16, {d.name: sure}) == (d, 16)
    assert policy.plan(5, {d.name: sure}) == (d, 5)  # the loop's cap wins
    unsure = Draft(list(range(16)), confidence=[0.99, 0.99, 0.05] + [0.99] * 13)
    drafter, k = policy.plan(16, {d.name: unsure})
    assert drafter is d and k == 2  # stops before the token that will probably fail


def test_a_stalled_verify_does_not_lock_drafting_out():
    """One verify that took 100 times its cost (the machine busy elsewhere) must neither
    make batches look dearer than single steps nor stop a sure draft from being verified;
    before, such a stall stuck in the average, drafting stopped, and nothing corrected it."""
    d = free_drafter()
    policy = policy_for([d], flat)
    for b in (2, 3, 5, 9, 17):
        policy.observe(RoundOutcome(verify_s=100 * flat(b), verify_batch=b))
    assert all(
        policy.costs.verify_s(b) <= 1.25 * b * policy.costs.verify_s(1) for b in range(2, 18)
    )
    assert policy.costs.verify_s(17) < 4 * flat(17)
    sure = Draft(list(range(16)), confidence=[0.99] * 16)
    drafter, k = policy.plan(16, {d.name: sure})
    assert drafter is d and k >= 8
    model = model_drafter()
    slow_start = policy_for([model], flat)
    cost = slow_start.costs.draft[model.name] = CostAverage(0.003, weight=1.0)
    stalled_step = RoundOutcome(flat(5), 5, model, Draft([0] * 4), n_accepted=4, draft_s=4 * 0.3)
    slow_start.observe(stalled_step)  # a draft step stalled 100 times over
    assert cost.value <= 3 * 0.003  # the draft model's cost is no more locked out than the target's
    stalled = AdaptivePolicy(
        [d], costs=CostModel(verify={1: CostAverage(0.03, 1.0), 5: CostAverage(3.0, 1.0)})
    )
    assert stalled.costs.verify_s(5) == pytest.approx(
        1.25 * 5 * 0.03
    )  # the bound, however it got there


def test_where_verifying_costs_its_length_only_near_certain_drafts_pay():
    d = free_drafter()
    policy = policy_for([d], steep)
    assert policy.plan(16, {d.name: Draft(list(range(8)), confidence=[0.6] * 8)}) == (None, 0)
    assert policy.plan(16, {d.name: Draft([], confidence=[])}) == (None, 0)


def test_a_draft_models_prefill_is_charged_before_it_is_chosen():
    cheap = lambda b: 0.030 * (1 + 0.02 * (b - 1))  # noqa: E731
    fresh, lagging = model_drafter(lag=0), model_drafter(lag=3000)
    for m in (fresh, lagging):
        policy = policy_for([m], cheap)
        policy.costs.draft[m.name].value = 0.003
        policy.costs.prefill[m.name] = 0.002
        acceptance = policy.acceptance(m)
        acceptance.successes, acceptance.trials = 8.0, 10.0
        chosen = policy.plan(12, {}, n_context=3100)
        assert (chosen[0] is m) == (m is fresh), chosen  # 3000 tokens of prefill do not pay for 12


def test_a_draft_models_catch_up_is_charged_over_the_tokens_left():
    """200 tokens of prefill (0.4 s) pay back over an answer expected to run 128 tokens, not
    over the 10 tokens the generation may still write (longer answers: tests/test_catch_up.py)."""
    cheap = lambda b: 0.030 * (1 + 0.02 * (b - 1))  # noqa: E731
    m = model_drafter(lag=200)
    policy = policy_for([m], cheap)
    policy.costs.draft[m.name].value = 0.003
    policy.costs.prefill[m.name] = 0.002
    policy.new_generation()
    acceptance = policy.acceptance(m)
    acceptance.successes, acceptance.trials = 8.0, 10.0
    assert policy.plan(400, {}, n_context=364)[0] is m
    assert policy.plan(10, {}, n_context=364) == (None, 0)


def test_a_draft_models_own_draft_is_cut_at_its_first_doubtful_token():
    m = model_drafter()
    policy = policy_for([m], flat)
    draft = Draft([1, 2, 3, 4, 5, 6], confidence=[0.99, 0.98, 0.97, 0.02, 0.99, 0.99])
    assert policy.length(m, draft, 6) == 3
    assert policy.length(m, Draft([1], confidence=[0.01]), 1) == 1  # nearly free to check here
    assert (
        policy_for([m], steep).length(m, Draft([1], confidence=[0.01]), 1) == 0
    )  # not where it costs a step


def perfect_trace(n=9):
    from localspec.bench.policy_replay import Trace

    answer = list(range(100, 100 + n))
    free = {
        "suffix": [([], [])]
        + [(answer[j : j + 16], [1.0] * len(answer[j : j + 16])) for j in range(1, n)],
        "prompt-lookup": [([], [])] * n,
    }
    return Trace("w", "t", 10, answer, free, draft_next=[0] * n, draft_conf=[0.5] * n)


def test_replay_of_a_fixed_drafter_adds_up_exactly():
    from localspec.bench.policy_replay import PROFILES, replay_fixed

    profile = PROFILES["machine-B"]
    trace = perfect_trace()
    # rounds at j=1 (4 drafted, all kept, +1) and j=6 (3 left: all kept): c(5) + c(4)
    expected = 8 * profile.verify(1) / (profile.verify(5) + profile.verify(4))
    assert replay_fixed(trace, profile, "suffix", 4) == pytest.approx(expected)
    assert replay_fixed(trace, profile, "prompt-lookup", 4) == pytest.approx(1.0)  # never proposes


def test_fixed_acceptance_counts_drafted_and_accepted_tokens_and_cuts_to_the_match():
    from localspec.bench.policy_replay import Trace, fixed_acceptance

    answer = [10, 11, 12, 13, 14, 15, 16]
    wrong_third = [([], [], [])] + [
        (answer[j : j + 2] + [99, 98], [0.5] * 4, [1, 2, 3, 4]) for j in range(1, 7)
    ]
    trace = Trace("w", "t", 5, answer, {"suffix": wrong_third})
    # j=1: 4 drafted, 2 kept (+ the correction) -> j=4: 3 drafted (3 left), 2 kept -> j=7
    assert fixed_acceptance(trace, "suffix", 8) == (7, 4, 2)
    # cut to 1 x a 1-token match: 1 drafted, 1 kept each round, two tokens a step
    assert fixed_acceptance(trace, "suffix", 8, max_spec_factor=1.0) == (3, 3, 3)
    # 99 is an end-of-generation token: drafts end at it, as live (3 drafted, then 3 left)
    trace.eog = [99]
    assert fixed_acceptance(trace, "suffix", 8) == (6, 4, 2)


def test_replayed_policy_copies_a_certain_draft_and_ignores_a_wrong_draft_model():
    from localspec.bench.policy_replay import PROFILES, best_fixed, replay

    trace = perfect_trace(40)
    for name in ("machine-A", "machine-B", "gpu-like"):
        profile = PROFILES[name]
        result = replay(trace, profile)
        fixed = best_fixed([trace], profile)
        assert fixed[0] == "suffix" and result["speedup"] >= 0.9 * fixed[2], (name, result, fixed)
        assert "draft-model" not in result["rounds"]
    assert PROFILES["machine-B"].ceiling()[0] == pytest.approx(17 * 0.102 / 0.372)


def test_a_replayed_session_carries_what_the_policy_learnt_to_the_next_answer():
    """Half-confident suffix drafts that are always right: a fresh policy has to learn
    that in each answer, a session's policy (one per loaded model, as live) already knows."""
    from localspec.bench.policy_replay import PROFILES, replay

    trace = perfect_trace(40)
    trace.free["suffix"] = [(tokens, [0.5] * len(tokens)) for tokens, _ in trace.free["suffix"]]
    for name in ("machine-A", "machine-B"):  # where a long draft costs: trusting it must be learnt
        profile = PROFILES[name]
        fresh = [replay(trace, profile)["speedup"] for _ in range(3)]
        session = {}
        carried = [replay(trace, profile, session=session)["speedup"] for _ in range(3)]
        assert fresh[0] == fresh[1] == fresh[2] == carried[0]  # nothing carried without a session
        assert carried[2] > 1.15 * fresh[2]
        assert len(session) == 1


def test_free_drafts_not_verified_are_judged_against_what_the_target_emitted():
    """The draft model is picked while the suffix drafter's half-confident drafts are
    right every time: judged against the emitted tokens, the suffix calibration learns it
    and the policy switches to the suffix drafts, without ever having verified one."""
    free, model = free_drafter(), model_drafter()
    policy = policy_for([free, model], flat)
    acceptance = policy.acceptance(model)
    acceptance.successes, acceptance.trials = 9.0, 10.0  # the model looks good
    policy.costs.draft[model.name] = CostAverage(0.001, weight=1.0)  # and is cheap
    answer = list(range(100, 200))
    picks = []
    for j in range(0, 60, 3):
        suffix_draft = Draft(answer[j : j + 8], confidence=[0.3] * 8)
        drafter, k = policy.plan(16, {free.name: suffix_draft}, 50 + j)
        picks.append(drafter.name if drafter else "plain")
        if drafter is model:  # it drafts 4, the target keeps 2 and corrects the 3rd
            drafted = Draft(answer[j : j + 2] + [0, 0])
            policy.observe(
                RoundOutcome(
                    flat(5), 5, model, drafted, 2, draft_s=0.004, emitted=tuple(answer[j : j + 3])
                )
            )
        else:
            emitted = tuple(answer[j : j + k + 1])
            policy.observe(
                RoundOutcome(
                    flat(k + 1), k + 1, free, suffix_draft.truncated(k), k, emitted=emitted
                )
            )
    assert picks[0] == "draft-model" and picks[-1] == "suffix"
    assert policy.confidence_calibration(free)(0.3) > 0.8
    wrong = Draft([1, 2, 3], confidence=[0.3] * 3)
    before = policy.confidence_calibration(free)(0.3)
    policy.plan(16, {free.name: wrong}, 200)
    policy.observe(
        RoundOutcome(flat(5), 5, model, Draft(answer[:4]), 4, emitted=tuple(answer[:5]))
    )  # the unverified draft was wrong at once
    assert policy.confidence_calibration(free)(0.3) < before


@pytest.mark.parametrize("declines", [False, True])
def test_a_draft_model_whose_drafts_are_never_verified_stops_being_chosen(declines):
    """A draft model whose every draft is cut before verification (its q says the tokens
    will fail), or that declines to draft at all (p_min), spent its time for nothing:
    judged against what the target emitted, its estimate falls and plain decoding takes
    over.  Before, such rounds taught the policy nothing and it chose the model every round."""
    m = model_drafter()
    policy = policy_for([m], cpu_like_verify)
    policy.costs.draft[m.name] = CostAverage(0.001, weight=1.0)
    acceptance = policy.acceptance(m)
    acceptance.successes, acceptance.trials = 9.0, 10.0
    picks = []
    for j in range(40):
        drafter, k = policy.plan(8, {}, 100 + j)
        picks.append(drafter)
        if drafter is m:
            made = Draft([]) if declines else Draft([1, 2, 3, 4][:k], confidence=[0.01] * k)
            assert policy.length(m, made, k) == 0
            spent_s = 0.001 * max(1, len(made.tokens))
            policy.observe(
                RoundOutcome(cpu_like_verify(1), 1, m, Draft([]), 0, draft_s=spent_s, emitted=(5,))
            )
        else:
            policy.observe(RoundOutcome(cpu_like_verify(1), 1, emitted=(5,)))
    assert picks[0] is m and m not in picks[-20:]
    assert policy.acceptance(m).alpha < 0.5


def cpu_like_verify(b):  # 30 ms + 10 ms per extra token
    return 0.030 + 0.010 * (b - 1)


def test_a_text_where_the_calibration_is_wrong_is_noticed_within_a_few_tokens():
    """Calibrated on earlier texts where 16-token matches were always right, the policy
    drafts such a match at once; on a text where they keep failing, this text's trust in
    the drafter falls after a few rejected tokens, faster than the calibration (shared
    across texts, it follows them too, by a decay of 0.93 a token), and a new text starts
    from the calibration again, with shorter drafts than before."""
    d = free_drafter()
    verify = lambda b: 0.030 + 0.010 * (b - 1)  # noqa: E731
    policy = policy_for([d], verify)
    for _ in range(200):
        policy.confidence_calibration(d).observe([0.5] * 4, 4, depth=[16, 17, 18, 19])
    deep = Draft([1, 2, 3, 4], confidence=[0.5] * 4, depth=[16, 17, 18, 19])
    policy.new_generation()
    assert policy.plan(8, {d.name: deep}) == (d, 4)
    plans = []
    for _ in range(5):
        plans.append(policy.plan(8, {d.name: deep})[1])
        k = plans[-1]
        policy.observe(
            RoundOutcome(verify(k + 1), k + 1, d, deep.truncated(k), 0, emitted=(7,))
        )  # rejected, or judged
    assert plans[0] == 4 and plans[3] <= 1  # shorter at once: 3 misses leave 0.4 of a 0.99 chance
    assert policy.plan(8, {d.name: deep}) == (None, 0)
    calibrated = policy.confidence_calibration(d)(0.5, 16)
    assert 0.6 < calibrated < 0.8  # five misses: 0.93 ** 5
    assert policy.accept_chances(d, deep, 1)[0] < 0.5 * calibrated  # this text's trust fell faster
    policy.observe(RoundOutcome(0.030, 1, emitted=(7,)))
    policy.new_generation()
    assert policy.plan(8, {d.name: deep}) == (d, 2)


def test_a_failed_deep_draft_is_not_outvoted_by_the_short_matches_that_held():
    """This text's trust is kept per depth group: short matches judged every round that
    hold better than calibrated (prose often repeats two or three words) must not cancel
    the evidence of a 16-token match that failed at once (prose leaves a quote where code
    would copy on).  With one trust for all depths, ten short hits outweighed the miss and
    the next deep draft was still taken at a chance of 1."""
    d = free_drafter()
    policy = policy_for([d], cpu_like_verify)
    cal = policy.confidence_calibration(d)
    for i in range(200):
        cal.observe([0.5] * 4, 4, depth=[16, 17, 18, 19])
        cal.observe([0.5], i % 2, depth=[2])
    deep = Draft([1, 2, 3, 4], confidence=[0.5] * 4, depth=[16, 17, 18, 19])
    short = Draft([5], confidence=[0.5], depth=[2])
    policy.new_generation()
    for _ in range(10):  # short proposals, each right
        drafter, k = policy.plan(8, {d.name: short})
        emitted = tuple([5][:k] + [9])
        policy.observe(
            RoundOutcome(
                cpu_like_verify(k + 1), k + 1, drafter, short.truncated(k), k, emitted=emitted
            )
        )
    assert policy.plan(8, {d.name: deep}) == (d, 4)
    policy.observe(RoundOutcome(cpu_like_verify(5), 5, d, deep, 0, emitted=(7,)))
    assert cal(0.5, 16) > 0.9
    assert (
        policy.accept_chances(d, deep, 1)[0] < 0.7
    )  # (0 + 2) / (0.93 + 2) of the calibrated chance
    assert policy.accept_chances(d, short, 1)[0] > cal(
        0.5, 2
    )  # the short matches keep their credit


def test_bad_max_spec_factors_are_refused():
    from localspec.errors import InvalidOptionError

    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidOptionError, match="max_spec_factor"):
            SuffixDrafter(max_spec_factor=bad)
    assert SuffixDrafter(max_spec_factor=None).max_spec_factor is None


def test_costs_shared_by_two_policies_are_read_fresh_and_broken_timings_are_ignored():
    """Policies of one model share the measured costs: what one measures, the other
    sees at once (its remembered c(b) are dropped).  A negative or NaN timing changes
    nothing, and a zero one does not make planning divide by zero."""
    shared = {1: CostAverage(0.030, weight=1.0), 17: CostAverage(0.060, weight=1.0)}
    a, b = free_drafter(), free_drafter()
    first, second = (
        AdaptivePolicy([a], costs=CostModel(verify=shared)),
        AdaptivePolicy([b], costs=CostModel(verify=shared)),
    )
    assert first.costs.verify_s(9) == pytest.approx(0.045)
    second.observe(RoundOutcome(verify_s=0.090, verify_batch=9))
    assert first.costs.verify_s(9) == pytest.approx(0.090)
    for broken in (-1.0, float("nan"), float("inf")):
        second.observe(RoundOutcome(verify_s=broken, verify_batch=1))
        second.observe(RoundOutcome(verify_s=broken, verify_batch=3))
    assert first.costs.verify_s(1) == pytest.approx(0.030) and 3 not in {
        k for k, v in shared.items() if v.weight > 0
    }
    for _ in range(50):
        second.observe(RoundOutcome(verify_s=0.0, verify_batch=1))
    assert first.plan(8, {a.name: Draft([1, 2], confidence=[0.9, 0.9], depth=[8, 9])})[1] <= 2
