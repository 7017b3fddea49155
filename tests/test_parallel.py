"""Many sequences in one context: concurrent generations batched, slots, the prompt cache, /metrics."""

import random
import threading
import time

import llama_cpp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.greedy import messages_for, top2_gap_of_plain_step
from support.served import RunningServer

from localspec.api import SpeculativeModel
from localspec.errors import InvalidOptionError
from localspec.llama.engine import Engine

KEY = "test-key"


@pytest.fixture(scope="module")
def parallel_model(real_pair_paths):
    with SpeculativeModel(
        real_pair_paths.target, real_pair_paths.draft, n_ctx=4096, parallel=4
    ) as model:
        yield model


def same_greedy(model, messages, reference, other, tie_tolerance):
    """Equal tokens, or a first difference where the reference's top-2 logits were a near
    tie (design.md section 5: batches of other shapes move llama.cpp's logits a little)."""
    diverge = next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if diverge is None:
        assert reference[: len(other)] == other[: len(reference)]
        return
    gap = top2_gap_of_plain_step(model, model.target.chat_tokens(messages), reference, diverge)
    assert gap < tie_tolerance, (diverge, gap, tie_tolerance)


def run_in_threads(fn, n):
    out = [None] * n
    errors = []

    def one(i):
        try:
            out[i] = fn(i)
        except Exception as exc:  # reported below, with the thread's index
            errors.append((i, exc))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    return out


def kv_matches_bookkeeping(engine: Engine) -> None:
    """Every sequence's cells in llama.cpp's KV cache are exactly the tokens its list holds."""
    memory = llama_cpp.llama_get_memory(engine._ctx)
    for seq in range(engine.config.n_seq_max):
        assert llama_cpp.llama_memory_seq_pos_max(memory, seq) + 1 == len(engine.seq_tokens(seq)), (
            seq
        )
    assert engine.cells_used <= engine.n_ctx


@pytest.mark.real_pair
def test_four_threads_chat_at_once_each_as_alone(parallel_model, tie_tolerance):
    """Four concurrent chat() calls from Python threads are batched (decodes shared) and
    each answer is its sequential one (near-tie rule)."""
    m = parallel_model
    prompts = [messages_for(i) for i in range(4)]
    alone = [m.chat(p, max_tokens=40, strategy="none").tokens for p in prompts]
    shared_before = m.slots.batcher.shared_decodes
    together = run_in_threads(lambda i: m.chat(prompts[i], max_tokens=40), 4)
    assert (
        m.slots.batcher.shared_decodes - shared_before >= 3
    )  # few rounds: the answers are in the suffix store
    for p, a, t in zip(prompts, alone, together):
        assert t.finish_reason in ("length", "stop")
        same_greedy(m, p, a, t.tokens, tie_tolerance)
    assert m.slots.busy == 0
    kv_matches_bookkeeping(m.target)


@pytest.mark.real_pair
def test_a_request_joining_midway_and_one_cancelled_leave_the_others_unchanged(
    parallel_model, tie_tolerance
):
    m = parallel_model
    a_msgs, b_msgs = messages_for(5), messages_for(6)
    a_alone = m.chat(a_msgs, max_tokens=48).tokens
    b_alone = m.chat(b_msgs, max_tokens=32).tokens
    a = m.chat(a_msgs, max_tokens=48, stream=True)
    b = c = None
    for n, _ in enumerate(a):
        if n == 6:
            b = m.chat(b_msgs, max_tokens=32, stream=True)  # joins mid-way
            c = m.chat("Write a long story about a lighthouse.", max_tokens=200, stream=True)
        if b is not None:
            next(b, None)
            if not c.finished:
                next(c, None)
                if c.result is None and n == 12:
                    c.cancel()
    for _ in c:
        pass
    for _ in b:
        pass
    assert c.result.finish_reason == "cancelled" and c.result.stats.generated_tokens < 30
    same_greedy(m, a_msgs, a_alone, a.result.tokens, tie_tolerance)
    same_greedy(m, b_msgs, b_alone, b.result.tokens, tie_tolerance)
    assert m.slots.busy == 0
    kv_matches_bookkeeping(m.target)


@pytest.mark.real_pair
def test_a_conversation_switched_away_and_back_is_restored_from_the_prompt_cache(
    real_pair_paths, tie_tolerance
):
    """One slot: a chat, a title request in between (it takes the slot), then the chat's
    next turn: its first turn's KV comes back from host memory (cached_tokens > 0) and the
    answer is the one a fresh model gives."""
    chat = messages_for(2)
    with SpeculativeModel(
        real_pair_paths.target, real_pair_paths.draft, n_ctx=4096, parallel=1, cache_ram_mib=256
    ) as m:
        first = m.chat(chat, max_tokens=24)
        m.chat(
            [{"role": "user", "content": "Give a 3-word title for a chat about sorting."}],
            max_tokens=8,
        )
        follow = chat + [
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "Now add a docstring."},
        ]
        again = m.chat(follow, max_tokens=24)
        assert again.stats.prompt_cached_tokens > 100
        assert m.slots.prompt_cache.restored_tokens > 100
        m.reset_cache()
        fresh = m.chat(follow, max_tokens=24)
        assert fresh.stats.prompt_cached_tokens == 0
        same_greedy(m, follow, fresh.tokens, again.tokens, tie_tolerance)


@pytest.fixture(scope="module")
def parallel_server(parallel_model):
    running = RunningServer(parallel_model, api_key=KEY)
    yield running
    running.stop()


@pytest.mark.real_pair
def test_metrics_parse_and_count_what_was_served(parallel_server):
    client = parallel_server.client(KEY)
    r = client.chat.completions.create(model="m", messages=messages_for(1), max_tokens=20)
    parallel_server.wait_idle()
    import urllib.request

    request = urllib.request.Request(
        parallel_server.base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}
    )
    with urllib.request.urlopen(request) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("llamacpp:tokens_predicted_total", ())] >= r.usage.completion_tokens
    assert samples[("llamacpp:prompt_tokens_total", ())] > 0
    assert samples[("llamacpp:requests_processing", ())] == 0
    assert samples[("llamacpp:requests_deferred", ())] == 0
    assert 0 < samples[("llamacpp:kv_cache_usage_ratio", ())] <= 1
    assert samples[("localspec:requests_total", (("reason", "length"),))] >= 1
    with pytest.raises(openai.AuthenticationError):
        parallel_server.client("wrong").models.list()


def test_eight_clients_with_max_tokens_16_to_256_all_finish(target_gguf):
    # a fixed draft-model policy: the adaptive one may price this draft (the target itself) out
    with SpeculativeModel(
        target_gguf,
        target_gguf,
        n_ctx=4096,
        parallel=4,
        p_min=0.0,
        strategy="draft-model",
        draft_max=4,
    ) as m:
        server = RunningServer(m, api_key=KEY)
        try:
            budgets = [16 + 240 * i // 7 for i in range(8)]
            answers = run_in_threads(
                lambda i: server.client(KEY).completions.create(
                    model="m", prompt="hello world the code", max_tokens=budgets[i], temperature=0
                ),
                8,
            )
            server.wait_idle()
        finally:
            server.stop()
        assert [a.usage.completion_tokens for a in answers] == budgets
        assert m.slots.batcher.shared_decodes > 0
        assert m.slots.draft_batcher.shared_decodes > 0  # the draft model's steps batched too
        kv_matches_bookkeeping(m.target)
        kv_matches_bookkeeping(m.draft_engine)


def test_200_requests_with_random_cancellations_leave_nothing_behind(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=2048, parallel=4, p_min=0.0) as m:
        threads_before = threading.active_count()
        rng = random.Random(7)
        cuts = [rng.choice([None, 0, 1, 3, 10]) for _ in range(200)]
        budgets = [rng.randint(4, 60) for _ in range(200)]

        def one(i):
            g = m.generate(f"hello world {i % 13} the code", max_tokens=budgets[i], stream=True)
            for n, _ in enumerate(g):
                if cuts[i] is not None and n >= cuts[i]:
                    g.cancel()
            return g.result.finish_reason

        reasons = []
        for start in range(0, 200, 8):
            reasons += run_in_threads(lambda i: one(start + i), 8)
        assert reasons.count("cancelled") > 50 and reasons.count("length") > 20
        deadline = time.time() + 5
        while m.slots.busy and time.time() < deadline:
            time.sleep(0.01)
        assert m.slots.busy == 0
        assert threading.active_count() == threads_before
        kv_matches_bookkeeping(m.target)
        kv_matches_bookkeeping(m.draft_engine)


@pytest.mark.parametrize("hinted", [True, False], ids=["prompt_cache_key", "no-key"])
def test_a_compacted_conversation_goes_back_to_its_own_slot_by_its_key(target_gguf, hinted):
    """Conversation A (long) and B (short) share a system prompt; A comes back compacted
    (sharing only that prompt).  Without a key it takes B's slot (that loses fewer tokens);
    with its ``prompt_cache_key`` it takes its own, and B goes on fully cached."""
    system = "You are a careful assistant. " * 8
    a, b = system + "alpha beta gamma delta " * 12, system + "zeta eta theta iota " * 4
    options = dict(max_tokens=2, strategy="none")
    with SpeculativeModel(target_gguf, n_ctx=2048, parallel=2, cache_ram_mib=0) as model:
        key = {"a": "conversation-a", "b": "conversation-b"} if hinted else {"a": None, "b": None}
        model.generate(a, prompt_cache_key=key["a"], **options)
        first_b = model.generate(b, prompt_cache_key=key["b"], **options)
        model.generate(system + "a summary of alpha", prompt_cache_key=key["a"], **options)
        again_b = model.generate(b + first_b.text + " theta", prompt_cache_key=key["b"], **options)
    held = first_b.stats.prompt_tokens  # B's first prompt, as its slot holds it
    b_cached = again_b.stats.prompt_cached_tokens
    assert b_cached >= held if hinted else b_cached < held - 30


def test_prompt_cache_key_must_be_a_string(target_gguf):
    with SpeculativeModel(target_gguf, n_ctx=512) as model:
        with pytest.raises(InvalidOptionError, match="prompt_cache_key must be a string"):
            model.generate("hello", max_tokens=1, prompt_cache_key=3)
