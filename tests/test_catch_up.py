"""A draft model's catch-up (its read of a long prompt, or of the rounds it sat out) is paid back
only over the tokens the answer is expected still to run, learnt per kind of request and kept
between processes; one expected to pay reads the prompt during prompt eval, not mid-answer."""

from __future__ import annotations

import pytest
from support.fakes import FakeDrafter

from localspec.api import SpeculativeModel
from localspec.decoding.drafters import Draft
from localspec.decoding.policy import AdaptivePolicy, CostAverage, CostModel
from localspec.decoding.policy.estimates import (
    ANSWER_PRIOR_TOKENS,
    AnswerLength,
)
from localspec.decoding.policy.learned import LearnedState
from localspec.decoding.rounds import RoundOutcome
from localspec.llama.machine_store import MachineStore

AGENT_PROMPT, AGENT_MAX_TOKENS = 8588, 32000  # Codex CLI's first request (issue 50)


def _xeon_costs(drafter_name: str) -> CostModel:
    """The 2-core Xeon of issue 50: a target step of 68 ms, a 17-token verify 4.3 steps; the
    draft model 8 ms a token, 1.5 ms a prompt token."""
    step = 0.068
    verify = {b: CostAverage(step * (1 + 3.3 * (b - 1) / 16), weight=1.0) for b in range(1, 18)}
    return CostModel(
        verify=verify,
        draft={drafter_name: CostAverage(0.008, weight=1.0)},
        prefill={drafter_name: 0.0015},
    )


def _agent_policy(lag: int, answer: dict | None = None):
    d = FakeDrafter("draft-model", 0.7, lag=lag)
    policy = AdaptivePolicy([d], caps={d.name: 8}, costs=_xeon_costs(d.name))
    policy.start_from({d.name: {"successes": 85.0, "trials": 100.0}}, answer)
    policy.new_generation()
    return policy, d


def test_an_agents_long_first_prompt_is_not_read_for_a_short_answer():
    """8,588 prompt tokens for the draft model (13 s) are not paid back by a tool call of about
    128 tokens, however many tokens the client allows; a draft model already caught up is
    chosen on the same costs."""
    lagging, _ = _agent_policy(lag=AGENT_PROMPT)
    assert lagging.plan(AGENT_MAX_TOKENS, {}, n_context=AGENT_PROMPT) == (None, 0)
    assert lagging.prefill_drafters(AGENT_PROMPT, AGENT_MAX_TOKENS) == []
    caught_up, d = _agent_policy(lag=2)
    assert caught_up.plan(AGENT_MAX_TOKENS, {}, n_context=AGENT_PROMPT)[0] is d


def test_where_answers_run_long_the_draft_model_reads_the_prompt_during_prompt_eval():
    """Answers of this kind ran 20,000 tokens: the 13 s read pays, so it happens while the
    prompt is read, and the draft model is then chosen."""
    policy, d = _agent_policy(lag=AGENT_PROMPT, answer={"mean_tokens": 20000, "answers": 20})
    assert policy.prefill_drafters(AGENT_PROMPT, AGENT_MAX_TOKENS) == [d]
    assert policy.plan(AGENT_MAX_TOKENS, {}, n_context=AGENT_PROMPT)[0] is d
    assert policy.prefill_drafters(AGENT_PROMPT, 100) == []  # but not for 100 tokens at most


def test_an_answer_that_runs_past_the_mean_is_expected_to_run_as_long_again():
    length = AnswerLength()
    assert length.expected_left() == ANSWER_PRIOR_TOKENS
    length.count(20)
    assert length.expected_left() == ANSWER_PRIOR_TOKENS - 20
    length.count(480)
    assert length.expected_left() == 500
    length.finish()
    assert length.current == 0 and ANSWER_PRIOR_TOKENS < length.mean < 500


def test_the_policy_learns_the_length_of_its_answers_from_its_rounds():
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d])
    for _ in range(30):  # thirty answers of 12 tokens, three rounds of four
        policy.new_generation()
        for _ in range(3):
            policy.observe(RoundOutcome(0.03, 5, d, Draft([0] * 4), 3, 0.004, (1, 2, 3, 4)))
    assert policy.answer.record()["mean_tokens"] == pytest.approx(12, abs=0.5)


@pytest.mark.parametrize(
    "entry",
    [
        None,
        {},
        {"mean_tokens": "long", "answers": 3},
        {"mean_tokens": 0.0, "answers": 3},
        {"mean_tokens": 50.0, "answers": 0},
        {"mean_tokens": float("nan"), "answers": 3},
        {"mean_tokens": 50.0, "answers": float("inf")},
    ],
)
def test_a_malformed_stored_answer_length_leaves_the_prior(entry):
    assert AnswerLength.from_record(entry) is None
    policy, _ = _agent_policy(lag=0, answer=entry)
    assert policy.answer.mean == ANSWER_PRIOR_TOKENS


def test_the_answer_length_is_kept_per_kind_between_processes(target_gguf, other_gguf):
    first = AdaptivePolicy([FakeDrafter("draft-model", 0.7)])
    for n in (300, 500, 400):
        first.new_generation()
        first.answer.count(n)
    state = LearnedState(target_gguf, other_gguf, threads=2, offload=False)
    assert state.save(first.costs, [("auto|sampled", first)], force=True)
    (entry,) = MachineStore().entries()
    stored = entry["record"]["answers"]["auto|sampled"]
    assert stored == pytest.approx(first.answer.record())
    later = LearnedState(target_gguf, other_gguf, threads=2, offload=False)
    sampled, greedy = (AdaptivePolicy([FakeDrafter("draft-model", 0.7)]) for _ in range(2))
    later.seed(sampled, "auto|sampled")
    later.seed(greedy, "auto|greedy")
    assert sampled.answer.mean == pytest.approx(stored["mean_tokens"])
    assert greedy.answer.mean == ANSWER_PRIOR_TOKENS  # another kind: the prior


PROMPT = " ".join(f"w{i % 97}" for i in range(100))  # 390 tokens of the synthetic vocabulary


def _priced(model, answer: dict | None = None):
    """The default drafters' policy on a machine where the draft model is right 9 times in 10
    and 10 times cheaper than a 30 ms verify, but reads a prompt token in 20 ms (8 s here)."""
    policy = model._policy(model.default_draft, greedy=True, predicted=False)
    policy.start_from({"draft-model": {"successes": 90.0, "trials": 100.0}}, answer)
    name = model.drafter.name
    policy.costs.verify.update({b: CostAverage(0.03, weight=1.0) for b in range(1, 18)})
    policy.costs.draft[name] = CostAverage(0.003, weight=1.0)
    policy.costs.prefill[name] = 0.02


def test_a_long_prompt_and_a_short_answer_leave_the_draft_model_idle(target_gguf, other_gguf):
    """The loop: an answer stopped at 20 tokens of the 900 allowed, a draft model whose
    catch-up only a long answer would pay: it reads nothing, drafts nothing, and the answer is
    the target's own."""
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=2048) as model:
        plain = model.generate(PROMPT, max_tokens=20, temperature=0.0, draft_max=0)
        assert plain.stats.prompt_tokens >= 300
        _priced(model)
        before = model.draft_engine.decode_s
        result = model.generate(PROMPT, max_tokens=900, temperature=0.0, stop=[plain.text])
        assert model.draft_engine.decode_s == before
        assert result.stats.drafted_by_drafter.get("draft-model", 0) == 0
        assert result.stats.generated_tokens == 20 and result.text == ""


def test_where_answers_run_long_the_prompt_is_read_before_the_first_token(target_gguf, other_gguf):
    """The same request where this kind's answers ran 100,000 tokens: the draft model reads the
    prompt during prompt eval (none of it later, as catch-up), then drafts."""
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=2048) as model:
        plain = model.generate(PROMPT, max_tokens=20, temperature=0.0, draft_max=0)
        _priced(model, answer={"mean_tokens": 100000, "answers": 10})
        result = model.generate(PROMPT, max_tokens=900, temperature=0.0, stop=[plain.text])
        assert len(model.draft_engine.cache_tokens) >= plain.stats.prompt_tokens
        assert model.drafter.catch_up_s == 0.0
        assert result.stats.drafted_by_drafter.get("draft-model", 0) > 0
        assert result.stats.generated_tokens == 20 and result.text == ""
