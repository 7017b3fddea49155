"""Prompt reuse across requests (issue 37): a prompt cancelled while read is resumed by its
retry, two requests with one long prefix read it once, a side request does not evict the
main thread's prefix, several prefixes stay cached; ``prompt_cached_tokens`` counts each."""

import random
import threading

import llama_cpp
import pytest

from localspec.api import SpeculativeModel
from localspec.llama.engine import Engine

N_BATCH = 512  # EngineConfig's default: the chunk a prompt read alone is decoded in


def long_prompt(seed: int, words: int = 1500) -> str:
    rng = random.Random(seed)
    vocab = "hello world the a code def return print if else for in is not and or x y z".split()
    return " ".join(rng.choice(vocab) for _ in range(words))


class CountingDecodes:
    """Counts the tokens ``engine`` decodes (every sequence); ``on_call(n)`` after the n-th call."""

    def __init__(self, monkeypatch, engine: Engine, on_call=None):
        self.tokens = 0
        self.calls = 0
        original = engine.decode_batch

        def counted(parts, copy=True):
            out = original(parts, copy)
            self.tokens += sum(len(tokens) for _, tokens, _ in parts)
            self.calls += 1
            if on_call is not None:
                on_call(self.calls)
            return out

        monkeypatch.setattr(engine, "decode_batch", counted)


def kv_matches_bookkeeping(engine: Engine) -> None:
    memory = llama_cpp.llama_get_memory(engine._ctx)
    for seq in range(engine.config.n_seq_max):
        assert llama_cpp.llama_memory_seq_pos_max(memory, seq) + 1 == len(engine.seq_tokens(seq)), (
            seq
        )
    assert engine.cells_used <= engine.n_ctx


@pytest.fixture
def model(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=8192, parallel=4, strategy="none") as m:
        yield m


def test_a_prompt_cancelled_while_read_is_resumed_where_it_stopped(model, target_gguf, monkeypatch):
    prompt = long_prompt(1)
    n_prompt = len(model.target.tokenize(prompt))
    assert n_prompt > 3 * N_BATCH
    with SpeculativeModel(target_gguf, None, n_ctx=8192, parallel=4, strategy="none") as fresh:
        reference = fresh.generate(prompt, max_tokens=8).tokens
    holder = {}
    CountingDecodes(monkeypatch, model.target, on_call=lambda n: n == 2 and holder["g"].cancel())
    holder["g"] = model.generate(prompt, max_tokens=8, stream=True)
    for _ in holder["g"]:
        pass
    assert holder["g"].result.finish_reason == "cancelled"
    retry = model.generate(prompt, max_tokens=8)
    assert retry.stats.prompt_cached_tokens == 2 * N_BATCH  # the two chunks read before the cancel
    assert retry.stats.prompt_eval_tokens == n_prompt - 2 * N_BATCH
    assert retry.tokens == reference
    again = model.generate(prompt, max_tokens=8)  # a byte-identical third request reads one token
    assert again.stats.prompt_cached_tokens == n_prompt - 1
    kv_matches_bookkeeping(model.target)


def test_two_identical_long_prompts_at_once_read_it_once(model, monkeypatch):
    prompt = long_prompt(2)
    n_prompt = len(model.target.tokenize(prompt))
    reference = model.generate(prompt, max_tokens=8).tokens
    model.reset_cache()
    counted = CountingDecodes(monkeypatch, model.target)
    results = [None, None]

    def one(i):
        results[i] = model.generate(prompt, max_tokens=8)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    cached = sorted(r.stats.prompt_cached_tokens for r in results)
    assert cached[0] == 0 and cached[1] == n_prompt - 1  # the second took the first's cells
    assert counted.tokens <= n_prompt + 1 + 2 * 8  # the prompt read once, plus the answers
    assert [r.tokens for r in results] == [reference, reference]
    assert model.target.cells_used < n_prompt + 40  # the prefix's cells are shared, not copied
    kv_matches_bookkeeping(model.target)


def test_a_second_prompt_waits_for_the_shared_prefix_then_reads_only_its_own_rest(
    model, monkeypatch
):
    head = long_prompt(3)
    first, second = head + " print x", head + " return y and z"
    n_head = len(model.target.tokenize(head))
    started = threading.Event()
    CountingDecodes(monkeypatch, model.target, on_call=lambda n: started.set())
    out = {}
    reader = threading.Thread(
        target=lambda: out.setdefault("a", model.generate(first, max_tokens=4))
    )
    reader.start()
    started.wait(30)  # the first is reading its prompt
    out["b"] = model.generate(second, max_tokens=4)
    reader.join(120)
    assert out["a"].stats.prompt_cached_tokens == 0
    assert out["b"].stats.prompt_cached_tokens >= n_head - 1
    kv_matches_bookkeeping(model.target)


@pytest.mark.parametrize("cache_ram_mib", [0, 64])
def test_a_side_request_does_not_evict_the_main_threads_prefix(target_gguf, cache_ram_mib):
    """Serve's defaults (-np 4, a RAM cache or none): turn 2 of the main thread after a side
    request (its prompt sharing only a short header) still finds turn 1's prefix cached."""
    header = "x y z hello world "
    main, side = header + long_prompt(4), header + long_prompt(5, words=200)
    with SpeculativeModel(
        target_gguf, None, n_ctx=8192, parallel=4, strategy="none", cache_ram_mib=cache_ram_mib
    ) as m:
        turn1 = m.generate(main, max_tokens=8)
        m.generate(side, max_tokens=8)
        n_main = len(m.target.tokenize(main))
        turn2 = m.generate(main + turn1.text + " print the code", max_tokens=8)
        assert turn2.stats.prompt_cached_tokens >= n_main
        again = m.generate(side + " and x", max_tokens=8)  # the side thread kept its own slot too
        assert again.stats.prompt_cached_tokens >= len(m.target.tokenize(side)) - 1
        kv_matches_bookkeeping(m.target)


def test_one_slot_with_a_ram_cache_keeps_several_prefixes(target_gguf):
    """With one slot, a main thread and two side requests in turn: each comes back from host memory."""
    prompts = [long_prompt(6, words=600), long_prompt(7, words=300), long_prompt(8, words=300)]
    with SpeculativeModel(
        target_gguf, None, n_ctx=4096, parallel=1, strategy="none", cache_ram_mib=64
    ) as m:
        for p in prompts:
            m.generate(p, max_tokens=4)
        for p in prompts:
            n = len(m.target.tokenize(p))
            assert m.generate(p + " and x", max_tokens=4).stats.prompt_cached_tokens >= n - 1, p[
                :20
            ]
        assert m.slots.prompt_cache.restored_tokens > 0


def test_a_slot_is_picked_so_as_to_lose_least(model):
    """The free slot a prompt gets: an empty one rather than one whose text it would overwrite;
    the one it continues when it continues one."""
    pool = model.slots
    a, b = long_prompt(9, words=300), long_prompt(10, words=300)
    model.generate(a, max_tokens=4)
    slot_a = next(s for s in pool.slots if s.target.cache_tokens)
    tokens_b = model.target.tokenize(b)
    assert pool.unique_tail(slot_a, tokens_b) > 250
    model.generate(b, max_tokens=4)
    assert len(slot_a.target.cache_tokens) > 250  # b went elsewhere
    tokens_a2 = list(slot_a.target.cache_tokens) + model.target.tokenize(
        " print", add_special=False
    )
    picked = pool.acquire(tokens_a2)
    pool.unreserve(picked)
    assert picked is slot_a


def test_with_a_draft_model_both_models_read_a_shared_prompt_once(target_gguf):
    prompt = long_prompt(11, words=800)
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=8192, parallel=4, p_min=0.0) as m:
        n_prompt = len(m.target.tokenize(prompt))
        results = [None, None]
        threads = [
            threading.Thread(
                target=lambda i=i: results.__setitem__(i, m.generate(prompt, max_tokens=8))
            )
            for i in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(r.stats.prompt_cached_tokens for r in results) == [0, n_prompt - 1]
        assert results[0].tokens == results[1].tokens
        assert m.target.cells_used < n_prompt + 40
        assert m.draft_engine.cells_used < n_prompt + 40  # the draft model's prefix shared as well
        kv_matches_bookkeeping(m.target)
        kv_matches_bookkeeping(m.draft_engine)
