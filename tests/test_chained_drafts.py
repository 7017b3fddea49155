"""A grammar's forced tokens joined to another drafter's guess in one round: the lookups
drafting after tokens not yet in the context, the chained draft, its pricing and
learning in the policy, its statistics, and a real generation that uses it."""

import json

from localspec.api import SpeculativeModel
from localspec.decoding.drafters import Draft, GrammarDrafter, PromptLookupDrafter, SuffixDrafter
from localspec.decoding.drafters.grammar import chained
from localspec.decoding.policy import AdaptivePolicy
from localspec.decoding.policy.estimates import Calibration
from localspec.decoding.rounds import RoundOutcome
from localspec.decoding.sampling import SamplingParams
from localspec.decoding.stats import GenerationStats, TokenSource

GREEDY = SamplingParams(temperature=0.0)
CONTEXT = [5, 6, 7, 8, 9, 1, 5]


def test_the_lookups_draft_after_tokens_not_yet_in_the_context():
    for drafter in (PromptLookupDrafter(), SuffixDrafter()):
        drafter.begin(CONTEXT)
        draft = drafter.propose(CONTEXT, 3, GREEDY, 0.0, None, ahead=[6])
        assert draft.tokens == [7, 8, 9], drafter.name  # what followed [5, 6]
        assert draft.depth[0] >= 2
        assert drafter.propose(CONTEXT, 3, GREEDY, 0.0, None).tokens != [
            7,
            8,
            9,
        ]  # nothing of [6] was kept
    lookup = PromptLookupDrafter()
    lookup.propose(CONTEXT, 3, GREEDY, 0.0, None, ahead=[6])
    assert lookup._indexed == CONTEXT


class FakeConstraint:
    """Forces [30, 31] after the guess 20; records what it was advanced by."""

    def __init__(self):
        self.state = []

    def advance(self, tokens):
        self.state += list(tokens)
        return len(tokens)

    def back(self, n):
        del self.state[len(self.state) - n :]

    def forced(self, limit):
        return [30, 31][:limit] if self.state[-1:] == [20] else []


def test_a_chained_draft_is_the_forced_tokens_the_guess_after_them_and_the_forced_ones_after_that():
    constraint, seen = FakeConstraint(), []

    def guess(ahead, k):
        seen.append((list(ahead), list(constraint.state), k))
        return Draft([20], confidence=[0.5], depth=[3])

    draft = chained(constraint, Draft([10, 11], confidence=[1.0, 1.0]), guess, lambda d: d, 8)
    assert seen == [
        ([10, 11], [10, 11], 6)
    ]  # the guess comes from the text after the forced tokens
    assert draft.tokens == [10, 11, 20, 30, 31]
    assert draft.forced == [True, True, False, True, True]
    assert draft.confidence == [1.0, 1.0, 0.5, 1.0, 1.0] and draft.depth == [0, 0, 3, 0, 0]
    assert constraint.state == []  # left as it was
    assert draft.truncated(3).forced == [True, True, False]
    assert chained(constraint, Draft([10]), lambda a, k: Draft.empty(), lambda d: d, 8).tokens == [
        10
    ]


def _policy():
    grammar, lookup = GrammarDrafter(), PromptLookupDrafter()
    policy = AdaptivePolicy([grammar, lookup], caps={grammar.name: 16, lookup.name: 16})
    for _ in range(30):  # the lookup's half-sure copies fail; the grammar's tokens hold
        copy, keys = Draft([8, 9], confidence=[0.5, 0.5]), Draft([1, 2], confidence=[1.0, 1.0])
        policy.observe(
            RoundOutcome(0.04, 3, lookup, copy, n_accepted=0, draft_s=1e-5, emitted=(1,))
        )
        policy.observe(
            RoundOutcome(0.04, 3, grammar, keys, n_accepted=2, draft_s=1e-5, emitted=(1, 2, 3))
        )
    return policy, grammar, lookup


def test_forced_tokens_in_another_drafters_draft_are_priced_and_learnt_as_the_grammars():
    policy, grammar, lookup = _policy()
    draft = Draft([1, 2, 3], confidence=[1.0, 0.5, 1.0], forced=[True, False, True])
    sure, doubtful, after = policy.accept_chances(lookup, draft, 3)
    assert sure > 0.9 and doubtful < 0.2 and after > 0.9
    before_grammar = policy.confidence_calibration(grammar)(1.0)
    before_lookup = policy.confidence_calibration(lookup)(0.5)
    for _ in range(5):  # the forced tokens held, the lookup's copy was refused
        policy.observe(
            RoundOutcome(0.05, 4, lookup, draft, n_accepted=1, draft_s=1e-5, emitted=(1, 7))
        )
    assert policy.confidence_calibration(grammar)(1.0) >= before_grammar
    assert policy.confidence_calibration(lookup)(0.5) < before_lookup
    assert (
        policy.confidence_calibration(lookup)(1.0) == 0.95
    )  # the lookup's own cell for 1.0 saw nothing


def test_forced_tokens_verified_in_a_chained_draft_are_learnt_once():
    grammar, lookup = GrammarDrafter(), PromptLookupDrafter()
    policy = AdaptivePolicy([grammar, lookup], caps={grammar.name: 16, lookup.name: 16})
    chain = Draft([1, 2, 3], confidence=[1.0, 0.5, 1.0], forced=[True, False, True])
    policy.plan(
        16, {grammar.name: Draft([1], confidence=[1.0]), lookup.name: chain}
    )  # the round's free drafts
    policy.observe(
        RoundOutcome(0.05, 4, lookup, chain, n_accepted=3, draft_s=1e-5, emitted=(1, 2, 3, 4))
    )
    once = Calibration()
    once.observe(
        [1.0, 1.0], 2
    )  # the chain's two forced tokens; the grammar's own [1] is the same token
    assert policy.confidence_calibration(grammar).reached == once.reached
    assert policy.confidence_calibration(grammar).accepted == once.accepted


def test_the_statistics_count_forced_tokens_as_the_grammars():
    stats = GenerationStats()
    stats.record_round(5, 3, "suffix", [True, True, False, True, True])
    assert stats.drafted_by_drafter == {"suffix": 1, "grammar": 4}
    assert stats.accepted_by_drafter == {"suffix": 1, "grammar": 2}
    assert stats.rounds_by_drafter == {"suffix": 1} and stats.drafted_tokens == 5


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "city": {"type": "string"},
        "age": {"type": "integer"},
    },
    "required": ["name", "city", "age"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
ASK = [{"role": "user", "content": "Alice Martin lives in Paris and is 34. Give her as JSON."}]


def test_a_repeated_schema_answer_verifies_forced_keys_and_copied_values_in_the_same_rounds(
    real_pair_paths, drafting_always_pays
):
    with SpeculativeModel(real_pair_paths.target, None, n_ctx=1024, strategy="auto") as m:
        plain = m.chat(ASK, response_format=FORMAT, max_tokens=60, strategy="none")
        m.chat(
            ASK, response_format=FORMAT, max_tokens=60
        )  # the suffix drafter's store now holds the answer
        again = m.chat(ASK, response_format=FORMAT, max_tokens=60, stream=True)
        rounds = {}
        for event in again:
            rounds.setdefault(event.round, set()).add(event.source)
    assert again.result.text == plain.text and json.loads(plain.text)["city"] == "Paris"
    assert any(
        {TokenSource.FORCED, TokenSource.ACCEPTED} <= sources for sources in rounds.values()
    ), rounds
    drafted = again.result.stats.drafted_by_drafter
    assert drafted.get("grammar", 0) > 0 and drafted.get("suffix", 0) > 0
