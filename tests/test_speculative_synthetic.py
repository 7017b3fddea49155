"""The speculative loop on tiny random-weight GGUF pairs (real llama.cpp, no mocks)."""

import numpy as np
import pytest
from scipy import stats

from localspec.api import SpeculativeModel
from localspec.decoding.stats import TokenSource
from localspec.errors import ContextOverflowError
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.synthetic import vocabulary

PROMPT = "hello world the code"


def test_same_weights_accept_every_draft_token(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512, p_min=0.0, draft_max=4) as m:
        r = m.generate(PROMPT, max_tokens=60)
    s = r.stats
    assert r.finish_reason == "length" and s.generated_tokens == 60
    assert s.drafted_tokens > 0 and s.accepted_tokens == s.drafted_tokens
    assert s.acceptance_rate == 1.0
    assert s.mean_accepted_length > 4.0  # 5 tokens per round but for the clamped last ones
    assert set(r.sources[1:]) <= {TokenSource.ACCEPTED, TokenSource.BONUS}


def test_different_weights_reject_often_and_keep_target_output(target_gguf, other_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=512, strategy="none") as plain:
        reference = plain.generate(PROMPT, max_tokens=60)
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=512, p_min=0.0, draft_max=4) as m:
        r = m.generate(PROMPT, max_tokens=60)
    assert r.stats.acceptance_rate < 0.5
    assert TokenSource.CORRECTION in r.sources
    assert r.tokens == reference.tokens  # greedy output is the target's own


@pytest.mark.parametrize("draft_max", [1, 3, 7])
def test_kv_cache_after_every_round_equals_fresh_prefill(target_gguf, other_gguf, draft_max):
    """At the first event of each round the rejected positions are gone: appending a
    probe token gives the same logits as a fresh prefill of the same tokens."""
    ref = Engine(target_gguf, EngineConfig(n_ctx=512))
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=512, p_min=0.0, draft_max=draft_max) as m:
        gen = m.generate(PROMPT, max_tokens=40, stream=True)
        prompt = list(gen.prompt_tokens)
        emitted, seen_round, checks = [], -1, 0
        for event in gen:
            if event.round != seen_round and event.round > 0:
                seen_round = event.round
                cache = list(m.target.cache_tokens)
                assert cache[: len(prompt) + len(emitted)] == prompt + emitted
                assert len(cache) <= len(prompt) + len(emitted) + draft_max
                probe = 7
                got = m.target.decode([probe], [0])[0]
                m.target.trim(len(cache))
                ref.trim(0)
                want = ref.decode(cache + [probe], [len(cache)])[0]
                # KV cells are f16 and batch shapes differ: noise is ~3e-3 on logits of ~20;
                # a stale rejected position shifts them by whole units.
                np.testing.assert_allclose(got, want, atol=2e-2, rtol=0)
                draft_cache = m.drafter.engine.cache_tokens
                assert draft_cache == cache[: len(draft_cache)]
                checks += 1
            emitted.append(event.token)
        assert checks >= 5
    ref.close()


@pytest.mark.statistical
@pytest.mark.parametrize(
    "strategy, draft_max",
    [("draft-model", 3), ("prompt-lookup", 3), ("suffix", 3), ("auto", "auto")],
)
def test_sampling_end_to_end_matches_plain_target(
    target_gguf, other_gguf, strategy, draft_max, drafting_always_pays
):
    """Two-sample chi-square test on the 2nd and 3rd generated tokens (the ones that go
    through a speculative round), speculative vs plain sampling, fixed seeds, for every
    drafter and for the adaptive policy.  Prompt lookup's 1-in-6 guesses never pay on
    this CPU, so the adaptive policy is priced as on a machine where they would
    (``drafting_always_pays``), to put its rounds through the acceptance rule."""
    opts = dict(max_tokens=4, temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    n_vocab = len(vocabulary()[0])
    prompt = [1] + list(range(3, n_vocab)) * 2  # every token repeats: prompt lookup always matches
    n = 1200

    def collect(model):
        rows, drafted = [], 0
        for seed in range(n):
            r = model.generate(prompt, seed=seed, **opts)
            rows.append(r.tokens[1:3])
            drafted += r.stats.drafted_tokens
        return np.array(rows), drafted

    with SpeculativeModel(
        target_gguf, other_gguf, n_ctx=1024, p_min=0.0, draft_max=draft_max, strategy=strategy
    ) as spec:
        spec.lookup.min_ngram = 1  # every single token repeats in this prompt: always a match
        if strategy == "suffix":  # earlier answers in the store: the suffix drafter's material
            for seed in range(10_000, 10_300):
                spec.generate(prompt, seed=seed, strategy="none", **opts)
        spec_tokens, drafted = collect(spec)
        assert drafted >= n // 2  # most answers went through a speculative round
    with SpeculativeModel(target_gguf, None, n_ctx=1024, strategy="none") as plain:
        plain_tokens, _ = collect(plain)
    for pos in range(2):
        cats = np.union1d(spec_tokens[:, pos], plain_tokens[:, pos])
        table = np.array(
            [[np.sum(x[:, pos] == c) for c in cats] for x in (spec_tokens, plain_tokens)]
        )
        table = table[:, table.sum(axis=0) >= 10]
        _, pvalue, _, _ = stats.chi2_contingency(table)
        assert pvalue > 1e-3, (pos, table)


def test_max_tokens_mid_draft_and_exact_count(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512, p_min=0.0, draft_max=8) as m:
        for max_tokens in (1, 2, 5, 9, 10):
            r = m.generate(PROMPT, max_tokens=max_tokens)
            assert len(r.tokens) == max_tokens and r.finish_reason == "length"


def test_prompt_longer_than_context_is_refused(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=32) as m:
        with pytest.raises(ContextOverflowError):
            m.generate(" ".join(["hello"] * 60))


def test_generation_stops_when_the_context_is_full(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=256, p_min=0.0, draft_max=4) as m:
        r = m.generate(PROMPT, max_tokens=1000)
        assert m.target.n_ctx == 256
    assert r.finish_reason == "context"
    assert 250 <= r.stats.prompt_tokens + len(r.tokens) <= 256


def test_streamed_text_equals_result_text(target_gguf, other_gguf):
    """Random weights emit raw byte tokens (broken UTF-8): deltas still add up."""
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=512, p_min=0.0) as m:
        gen = m.generate(PROMPT, max_tokens=80, temperature=1.0, seed=3, stream=True)
        text = "".join(e.text for e in gen)
    assert text == gen.result.text


def test_cancel_ends_within_one_round(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512, p_min=0.0, draft_max=4) as m:
        gen = m.generate(PROMPT, max_tokens=200, stream=True)
        first = next(iter(gen))
        gen.cancel()
        rest = list(gen)
    assert gen.result.finish_reason == "cancelled"
    assert all(e.round <= first.round + 1 for e in rest)


@pytest.mark.parametrize(
    "strategy, draft_max", [("prompt-lookup", 5), ("suffix", 5), ("auto", "auto")]
)
def test_greedy_output_is_the_targets_with_every_drafter(
    target_gguf, other_gguf, strategy, draft_max
):
    prompt = PROMPT + " hello world the code hello world"
    with SpeculativeModel(target_gguf, None, n_ctx=512, strategy="none") as plain:
        reference = plain.generate(prompt, max_tokens=80)
    with SpeculativeModel(
        target_gguf, other_gguf, n_ctx=512, p_min=0.0, draft_max=draft_max, strategy=strategy
    ) as m:
        r = m.generate(prompt, max_tokens=80)
    assert r.tokens == reference.tokens


def test_a_verify_view_of_the_logits_equals_the_copy(target_gguf):
    """decode(copy=False) reads llama.cpp's output buffer in batch order: the same rows as
    the copy, read-only."""
    e = Engine(target_gguf, EngineConfig(n_ctx=256))
    try:
        e.decode([1, 5, 9, 11])
        copied = e.decode([20, 21, 22, 23], [0, 2, 3])
        e.trim(4)
        view = e.decode([20, 21, 22, 23], [0, 2, 3], copy=False)
        assert view.shape == copied.shape and not view.flags.writeable
        np.testing.assert_array_equal(view, copied)
        assert e.cache_tokens == [1, 5, 9, 11, 20, 21, 22, 23]
    finally:
        e.close()


def _shared(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_a_draft_models_lag_counts_what_a_new_prompt_does_not_share_with_its_cache(
    target_gguf, other_gguf
):
    """After one request the draft model's cache holds it; a new, unrelated prompt must
    not look already read (its catch-up would then be charged as free), while a continued
    conversation keeps the shared prefix."""
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=512, p_min=0.0, draft_max=4) as m:
        prompt = m.target.tokenize(PROMPT)
        first = m.generate(prompt, max_tokens=20)
        drafter = m.drafter
        cache = list(drafter.engine.cache_tokens)
        assert len(cache) > len(prompt) + 10
        other = m.target.tokenize("code the world hello again and again")
        shared = _shared(cache, other)
        assert shared < 3
        drafter.begin(other)
        assert drafter.lag(len(other)) == len(other) - shared
        m.generate(prompt, max_tokens=20)
        more = m.target.tokenize(" and then", add_special=False)
        continued = prompt + first.tokens + more
        drafter.begin(continued)
        assert drafter.lag(len(continued)) <= len(more) + 2  # the answer's last tokens at most


def test_a_trace_is_recorded_without_its_own_answer_in_the_suffix_store(target_gguf):
    """The model that produced an answer has it in its suffix store; a trace recorded
    with that store would copy the answer from itself at every position (the replay's
    suffix figures were inflated so until 2026-12-01).  A recorder's own store holds the
    earlier answers only, and takes this one in afterwards."""
    from localspec.bench.policy_replay import record
    from localspec.decoding.drafters import SuffixDrafter

    with SpeculativeModel(target_gguf, None, n_ctx=512, strategy="none") as m:
        prompt = m.target.tokenize(PROMPT)
        answer = m.generate(prompt, max_tokens=40).tokens
        assert len(m.suffix.store) == len(answer)  # the model's store took the answer in
        recorder = SuffixDrafter()
        own = record(m, prompt, answer, "w", "from its own store")
        clean = record(m, prompt, answer, "w", "recorder", suffix=recorder)
    assert len(recorder.store) == len(answer)

    def copied(trace):  # positions whose suffix draft is the next 4+ tokens of the answer itself
        return sum(
            1
            for j, (tokens, *_) in enumerate(trace.free["suffix"])
            if len(tokens) >= 4 and tokens == answer[j : j + len(tokens)]
        )

    assert copied(own) >= len(answer) - 8
    assert copied(clean) < copied(own) - 5


def test_a_draft_ends_at_its_first_end_of_generation_token(target_gguf):
    """Tokens drafted after an end-of-generation token can never be emitted (the target
    stops there), so the loop cuts every draft just after it: a copy from the prompt that
    runs on into the chat template's <|im_end|> is not verified past it."""
    from localspec.decoding.drafters.base import Draft, ModelFreeDrafter
    from localspec.decoding.loop import Generation
    from localspec.decoding.params import DraftParams, GenerationParams
    from localspec.decoding.policy import FixedPolicy

    class Copier(ModelFreeDrafter):
        name, prior_acceptance = "prompt-lookup", 0.5

        def propose(self, context, max_tokens, params, p_min, rng):
            return Draft([5, 2, 6, 7][:max_tokens])  # 2 is the synthetic vocabulary's EOS

    engine = Engine(target_gguf, EngineConfig(n_ctx=256))
    assert engine.is_eog(2) and not engine.is_eog(5) and engine.eog_tokens() == [2]
    batches, decode = [], engine.decode
    engine.decode = lambda tokens, rows=(), copy=True: (
        batches.append(len(tokens)) or decode(tokens, rows, copy)
    )
    copier = Copier()
    params = GenerationParams(
        max_tokens=20, draft=DraftParams(draft_max=4, strategy="prompt-lookup")
    )
    result = Generation(
        engine, [copier], FixedPolicy(copier, 4), engine.tokenize(PROMPT), params
    ).run()
    engine.close()
    assert (
        max(batches[1:]) == 3 and batches.count(3) >= 5
    )  # [t, 5, EOS] (less where max_tokens cuts), never 6, 7
    assert result.stats.drafted_tokens <= 2 * result.stats.rounds
