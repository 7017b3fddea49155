"""The adaptive policy's estimates kept per channel of a reasoning model's output
(localspec.decoding.policy.channels): each channel learns its own drafters' acceptance and
the choice follows it, the measured costs are shared, every round is judged by the channel
it starts in, and the stored priors come back per channel in a new process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.fakes import FakeDrafter
from support.thinking import QUESTION, R1_DISTILL

from localspec.api import SpeculativeModel
from localspec.decoding.drafters import Draft
from localspec.decoding.params import DraftParams
from localspec.decoding.policy import (
    BATCH_SIZES,
    AdaptivePolicy,
    ChannelPolicy,
    CostAverage,
    CostModel,
    FixedPolicy,
    Policy,
    adaptive_parts,
)
from localspec.decoding.policy.learned import LearnedState, kind_name
from localspec.decoding.reasoning import CONTENT, REASONING
from localspec.decoding.rounds import RoundOutcome
from localspec.llama.machine_store import MachineStore


def _pair_policy(left, right, shared: dict) -> ChannelPolicy:
    """A ChannelPolicy over two drafters, on a machine where a draft of 8 costs little more
    than one token (either drafter pays from a modest acceptance on)."""
    costs = shared.setdefault(
        "costs",
        CostModel(verify={b: CostAverage(0.030 + 0.0002 * (b - 1), 1.0) for b in BATCH_SIZES}),
    )
    for d in (left, right):
        costs.draft.setdefault(d.name, CostAverage(0.001, 1.0))
    caps = {left.name: 8, right.name: 8}
    make = lambda: AdaptivePolicy([left, right], caps=caps, costs=costs)  # noqa: E731
    return ChannelPolicy({CONTENT: make(), REASONING: make()})


def _teach(policy: ChannelPolicy, right_in: dict, rounds: int = 30) -> None:
    """``rounds`` rounds per channel and drafter: ``right_in[channel]`` accepts all 4 of its
    drafted tokens, the other drafter none."""
    for _ in range(rounds):
        for channel, right in right_in.items():
            policy.enter_channel(channel)
            for d in policy.current.drafters:
                n = 4 if d is right else 0
                policy.observe(
                    RoundOutcome(0.031, 5, d, Draft([0] * 4), n_accepted=n, draft_s=0.004)
                )


def _choice(policy: ChannelPolicy, channel: str):
    policy.enter_channel(channel)
    drafter, k = policy.plan(8, n_context=50)
    return drafter if k > 0 else None


def test_each_channel_keeps_its_own_estimates_and_the_choice_follows():
    left, right = FakeDrafter("left"), FakeDrafter("right")
    shared: dict = {}
    policy = _pair_policy(left, right, shared)
    assert isinstance(policy, Policy)
    _teach(policy, {REASONING: left, CONTENT: right})
    thinking, answer = policy.policies[REASONING], policy.policies[CONTENT]
    assert thinking.acceptance(left).alpha > 0.9 > 0.1 > thinking.acceptance(right).alpha
    assert answer.acceptance(right).alpha > 0.9 > 0.1 > answer.acceptance(left).alpha
    assert _choice(policy, REASONING) is left and _choice(policy, CONTENT) is right
    policy.new_generation()  # a new text: pulled back toward the priors, the answer's current
    assert policy.current is answer
    assert _choice(policy, REASONING) is left and _choice(policy, CONTENT) is right
    assert thinking.costs is answer.costs is shared["costs"]  # the machine's, shared


def test_a_channel_without_a_policy_of_its_own_uses_the_answers():
    d = FakeDrafter("left")
    answer = AdaptivePolicy([d])
    policy = ChannelPolicy({CONTENT: answer})
    policy.enter_channel("marker")
    assert policy.current is answer
    with pytest.raises(ValueError):
        ChannelPolicy({REASONING: answer})
    assert adaptive_parts(FixedPolicy(d, 4)) == [] and adaptive_parts(answer) == [(CONTENT, answer)]
    fixed = FixedPolicy(d, 4)
    fixed.enter_channel(REASONING)
    assert fixed.plan(8) == (d, 4)
    before = answer.acceptance(d).alpha
    answer.enter_channel(REASONING)  # one set of estimates for every channel
    answer.observe(RoundOutcome(0.031, 5, d, Draft([0] * 4), n_accepted=0, draft_s=0.004))
    assert answer.acceptance(d).alpha < before and policy.current is answer


def test_the_stored_priors_come_back_per_channel_in_a_new_process(thinking_pair):
    target, draft = thinking_pair
    left, right = FakeDrafter("left"), FakeDrafter("right")
    taught = _pair_policy(left, right, {})
    _teach(taught, {REASONING: left, CONTENT: right})
    key = ("auto", True, False, False)
    slot = SimpleNamespace(
        adaptive={key: taught.policies[CONTENT], (*key, REASONING): taught.policies[REASONING]},
        costs=taught.current.costs,
        drafter=None,
    )
    assert LearnedState(target, draft, threads=2, offload=False).save_slots([slot], force=True)
    (entry,) = MachineStore().entries()
    assert {"auto|greedy", "auto|greedy|reasoning"} <= set(entry["record"]["priors"])
    assert (
        kind_name(*key, REASONING) == "auto|greedy|reasoning"
        and kind_name(*key, CONTENT) == "auto|greedy"
    )

    fresh_left, fresh_right = (
        FakeDrafter("left"),
        FakeDrafter("right"),
    )  # a new process: new drafters
    fresh = _pair_policy(fresh_left, fresh_right, {})
    assert _choice(fresh, REASONING) is _choice(
        fresh, CONTENT
    )  # the fixed priors: one choice for both
    later = LearnedState(target, draft, threads=2, offload=False)
    for channel, policy in adaptive_parts(fresh):
        later.seed(policy, kind_name(*key, channel))
    fresh.new_generation()
    assert _choice(fresh, REASONING) is fresh_left and _choice(fresh, CONTENT) is fresh_right


@pytest.fixture
def r1_adaptive(thinking_pair):
    """DeepSeek-R1-Distill's template (the prompt opens ``<think>``), the adaptive policy."""
    with SpeculativeModel(*thinking_pair, n_ctx=512, chat_template=R1_DISTILL, p_min=0.0) as model:
        yield model


def test_every_round_is_judged_by_the_channel_it_starts_in(r1_adaptive, monkeypatch):
    model = r1_adaptive
    observed: dict[int, int] = {}
    original = AdaptivePolicy.observe

    def counting(self, outcome):
        observed[id(self)] = observed.get(id(self), 0) + 1
        return original(self, outcome)

    monkeypatch.setattr(AdaptivePolicy, "observe", counting)
    result = model.chat(QUESTION, max_tokens=40, reasoning_budget=12)
    adaptive = model.slots.slots[0].adaptive
    key = ("auto", True, False, False)
    thinking, answer = adaptive[(*key, REASONING)], adaptive[key]
    channels = result.stats.channels
    assert channels[REASONING].rounds and channels[CONTENT].rounds
    assert observed.get(id(thinking), 0) == channels[REASONING].rounds
    assert observed.get(id(answer), 0) == channels[CONTENT].rounds
    assert thinking.costs is answer.costs  # the pair's measured costs, shared

    observed.clear()
    plain = model.generate(
        QUESTION, max_tokens=12, temperature=0.0
    )  # no reasoning format: as before
    assert observed == {id(answer): plain.stats.rounds} and plain.stats.channels == {}


def test_a_reasoning_model_starts_its_thinking_from_what_thinking_taught(thinking_pair):
    """Through the API: the thinking's prior stored under its own kind comes back in a new
    load, the answer's stays the drafter's own."""
    dp = DraftParams()
    with SpeculativeModel(*thinking_pair, n_ctx=512, chat_template=R1_DISTILL) as first:
        policy = first._policy(dp, greedy=True, predicted=False, channels=True)
        drafter = first.slots.slots[0].drafter
        for _ in range(40):
            policy.enter_channel(REASONING)
            policy.observe(
                RoundOutcome(0.031, 5, drafter, Draft([0] * 4), n_accepted=0, draft_s=0.004)
            )
    with SpeculativeModel(*thinking_pair, n_ctx=512, chat_template=R1_DISTILL) as second:
        policy = second._policy(dp, greedy=True, predicted=False, channels=True)
        drafter = second.slots.slots[0].drafter
        thinking, answer = policy.policies[REASONING], policy.policies[CONTENT]
        assert thinking.acceptance(drafter).alpha < 0.2 < drafter.prior_acceptance
        assert answer.acceptance(drafter).alpha == pytest.approx(drafter.prior_acceptance)
