"""One thread owns llama.cpp: every llama.cpp call of a loaded pair (load, decode, trim,
tokenize, free) runs on the pair's own thread, whichever thread the caller is on.

llama.cpp's OpenMP keeps one worker team per calling thread; a pair loaded in one thread
and decoded in another ran plain decoding 30 % slower on a 2-core CPU (issue 23).  The
speed itself is measured by ``benchmarks/thread_bench.py``; here we assert the mechanism."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import llama_cpp
import pytest

from localspec.api import SpeculativeModel
from localspec.errors import EngineError
from localspec.llama import engine as engine_module
from localspec.llama.engine import chat, decode, kv_cache, model, vocabulary
from localspec.llama.owner import LlamaThread

# the engine package's modules, each of which looks ``llama_cpp`` up itself
ENGINE_MODULES = (model, vocabulary, chat, decode, kv_cache)


class _RecordingLlama:
    """Stands in for the ``llama_cpp`` module inside the engine: forwards every call and
    records (function name, calling thread)."""

    def __init__(self, calls: list):
        self._calls = calls

    def __getattr__(self, name):
        real = getattr(llama_cpp, name)
        if not callable(real) or isinstance(real, type) or not name.startswith("llama_"):
            return real

        def call(*args, **kwargs):
            self._calls.append((name, threading.get_ident()))
            return real(*args, **kwargs)

        return call


@pytest.fixture
def llama_calls(monkeypatch):
    calls: list[tuple[str, int]] = []
    for module in ENGINE_MODULES:
        monkeypatch.setattr(module, "llama_cpp", _RecordingLlama(calls))
    return calls


def test_every_llama_call_of_a_pair_runs_on_its_owner_thread(target_gguf, other_gguf, llama_calls):
    main = threading.get_ident()
    model = SpeculativeModel(
        target_gguf, other_gguf, n_ctx=256, n_threads=2, strategy="draft-model", draft_max=3
    )
    owner = model.owner.ident
    assert owner != main
    with ThreadPoolExecutor(2) as pool:  # a user's thread pool, one call after the other
        first = pool.submit(model.chat, "Hello", max_tokens=8).result()
        streamed = pool.submit(
            lambda: [e.text for e in model.chat("Hello", stream=True, max_tokens=8)]
        ).result()
    model.reset_cache()
    model.close()
    names = {name for name, _ in llama_calls}
    assert {
        "llama_model_load_from_file",
        "llama_decode",
        "llama_memory_seq_rm",
        "llama_tokenize",
        "llama_free",
        "llama_model_free",
    } <= names
    assert {thread for _, thread in llama_calls} == {owner}
    assert first.stats.drafted_tokens > 0 and "".join(streamed) == first.text
    assert not any(
        t.ident == owner for t in threading.enumerate()
    )  # the owner thread ended with close()


def test_a_standalone_engine_has_its_own_thread_and_stops_it(target_gguf, llama_calls):
    engine = engine_module.Engine(target_gguf, engine_module.EngineConfig(n_ctx=64, n_threads=1))
    logits = engine.decode([1, 2, 3], [2])
    assert logits.shape == (1, engine.n_vocab)
    engine.close()
    assert {thread for _, thread in llama_calls} == {engine.owner.ident}
    assert not engine.owner.alive
    with pytest.raises(EngineError, match="closed"):
        engine.tokenize("hi")


def test_the_owner_thread_hands_back_results_and_exceptions_in_order():
    owner = LlamaThread()
    order = []
    assert owner.run(lambda a, b: a + b, 2, 3) == 5
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: owner.run(order.append, i), range(50)))
    assert sorted(order) == list(range(50))
    with pytest.raises(ZeroDivisionError):
        owner.run(lambda: 1 / 0)
    assert owner.run(threading.get_ident) == owner.ident  # still serving after an error
    assert (
        owner.run(lambda: owner.run(lambda: 7)) == 7
    )  # a call from the thread itself runs directly
    owner.stop()
    with pytest.raises(EngineError):
        owner.run(lambda: None)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({}, {"GOMP_SPINCOUNT": "1000"}),
        ({"GOMP_SPINCOUNT": "300000"}, {"GOMP_SPINCOUNT": "300000"}),
        ({"OMP_WAIT_POLICY": "active"}, {"OMP_WAIT_POLICY": "active"}),
    ],
    ids=["unset", "user-spincount-kept", "user-wait-policy-kept"],
)
def test_idle_openmp_threads_spin_briefly_unless_the_user_chose(before, after):
    from localspec.llama import spin_briefly_between_ops

    environ = dict(before)
    spin_briefly_between_ops(environ)
    assert environ == after


def test_spin_count_is_set_before_llama_cpp_loads_libgomp():
    """libgomp reads the variable when it loads: it must be in the environment by then."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    probe = (
        "import os, sys; import localspec.llama.engine; "
        "print('llama_cpp' in sys.modules, os.environ.get('GOMP_SPINCOUNT'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "1000"]
