"""Gemma 4's assistant drafter, on a tiny random-weight ``gemma4`` target and ``gemma4-assistant``
written from the loaders' tensor lists (:mod:`localspec.llama.synthetic_gemma4`): given as the
draft GGUF it drafts as llama.cpp's draft-mtp runs it (an MTP context reading the target's KV
cache), its drafts are llama.cpp's own on the same files, greedy output is the target's own,
its drafting leaves the target's cache as it was, and sampling keeps the target's distribution.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import llama_cpp
import pytest
from support.mtp import assert_drafts_are_the_traces, greedy_pick
from support.sampling import assert_mtp_sampling_keeps_the_targets_distribution

from localspec.api import SpeculativeModel
from localspec.errors import IncompatibleDraftError, InvalidOptionError, UnsupportedModelError
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.synthetic_gemma4 import write_gemma4_pair

TRACE = Path(__file__).parent / "data/mtp/assistant-draft-mtp-trace.json"
PROMPT = "hello world the code def return print hello world the code"


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gemma4")
    return write_gemma4_pair(folder / "target.gguf", folder / "assistant.gguf", 1)


@pytest.mark.parametrize("strategy", ["mtp", "auto"])
def test_greedy_output_is_the_targets_own(gemma4, strategy):
    target, assistant = gemma4
    with SpeculativeModel(target, assistant, n_ctx=512) as model:
        assert model.draft_engine is None and "mtp" in [d.name for d in model.drafters]
        plain = model.generate(PROMPT, max_tokens=40, draft_max=0)
        spec = model.generate(PROMPT, max_tokens=40, strategy=strategy)
        forced = model.generate(PROMPT, max_tokens=40, strategy="mtp", draft_max=3, p_min=0.0)
    assert spec.tokens == plain.tokens == forced.tokens
    assert forced.stats.drafted_by_drafter["mtp"] >= 30


def test_its_drafts_are_llama_cpps_draft_mtp_on_the_same_files(gemma4):
    """llama.cpp's own draft-mtp with this assistant (llama-speculative-simple, recorded in
    tests/data/mtp/assistant-draft-mtp-trace.json with the command and both files' sha256):
    the same target tokens, and at every round the same drafted tokens from our head."""
    target, assistant = gemma4
    trace = json.loads(TRACE.read_text())
    assert hashlib.sha256(target.read_bytes()).hexdigest() == trace["target_sha256"]
    assert hashlib.sha256(assistant.read_bytes()).hexdigest() == trace["assistant_sha256"]
    assert all(r["accepted"] == 0 for r in trace["rounds"])  # round i: after i tokens
    config = EngineConfig(n_ctx=512, load_mtp=True, assistant=assistant)
    assert_drafts_are_the_traces(target, trace, config)


def test_drafting_adds_nothing_to_the_targets_cache(gemma4):
    target, assistant = gemma4
    engine = Engine(target, EngineConfig(n_ctx=512, load_mtp=True, assistant=assistant))
    try:
        tokens = engine.tokenize(PROMPT)
        engine.decode(tokens, [len(tokens) - 1])
        memory = llama_cpp.llama_get_memory(engine._ctx)
        before = llama_cpp.llama_memory_seq_pos_max(memory, 0)
        first = engine.mtp.draft(tokens[-1], 3, greedy_pick)[0]
        assert len(first) == 3
        assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == before == len(tokens) - 1
        assert engine.mtp.draft(tokens[-1], 3, greedy_pick)[0] == first  # nothing moved
    finally:
        engine.close()


@pytest.mark.statistical
def test_sampling_with_the_assistant_keeps_the_targets_distribution(gemma4):
    """The first sampled tokens after the prompt, drawn 200 times each way, plain and with the
    assistant's drafts (its own q in the acceptance rule): one distribution by a chi-squared
    test."""
    target, assistant = gemma4
    with SpeculativeModel(target, assistant, n_ctx=256, p_min=0.0) as model:
        assert_mtp_sampling_keeps_the_targets_distribution(model, PROMPT)


def test_it_is_named_and_refused_where_it_cannot_draft(gemma4, target_gguf):
    target, assistant = gemma4
    with SpeculativeModel(target, assistant, n_ctx=256) as model:
        assert model.builtin_drafter == "assistant drafter (assistant.gguf)"
    with pytest.raises(IncompatibleDraftError, match="drafts for 'gemma4' targets, not 'llama'"):
        SpeculativeModel(target_gguf, assistant, n_ctx=256)
    with pytest.raises(UnsupportedModelError, match="one sequence: load it with parallel 1"):
        SpeculativeModel(target, assistant, n_ctx=256, parallel=2)
    with pytest.raises(InvalidOptionError, match="not as a draft model"):
        SpeculativeModel(target, assistant, n_ctx=256, strategy="draft-model")


def test_serve_takes_one_slot_for_it_unless_told(gemma4, target_gguf, capsys):
    from localspec.cli.loading import DEFAULT_PARALLEL, _default_parallel

    target, assistant = gemma4
    assert _default_parallel(str(target), str(assistant)) == 1
    assert "serving one request at a time (-np 1)" in capsys.readouterr().err
    assert _default_parallel(str(target_gguf), None) == DEFAULT_PARALLEL


def test_the_memory_estimate_counts_only_the_kv_layers_keep(gemma4):
    from localspec.llama.synthetic_gemma4 import HEAD_FULL, N_HEAD_KV, SHARED_KV, TARGET_SWA
    from localspec.models.gguf_info import check_gguf_file
    from localspec.models.memory import model_memory

    target, assistant = gemma4
    assert model_memory(check_gguf_file(assistant), 4096).kv_cache == 0  # it reads the target's
    own_kv = len(TARGET_SWA) - SHARED_KV  # 3 of 6 layers; each at the full head length, f16
    expected = 4096 * own_kv * N_HEAD_KV * (HEAD_FULL + HEAD_FULL) * 2
    assert model_memory(check_gguf_file(target), 4096).kv_cache == expected


def test_localspec_run_drafts_with_it(gemma4):
    import subprocess
    import sys

    target, assistant = gemma4
    args = ["-m", str(target), "-md", str(assistant), "--draft", "mtp", "--draft-max", "3"]
    args += ["--draft-p-min", "0", "-n", "12", "--no-color", "hello world"]
    done = subprocess.run(
        [sys.executable, "-m", "localspec.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "[mtp 0/" in done.stderr and "no compatible draft model" not in done.stderr


def test_a_strategy_the_served_pair_cannot_run_names_the_servers_field(gemma4):
    from starlette.testclient import TestClient

    from localspec.server.app import create_app
    from localspec.server.state import ServerConfig

    target, _ = gemma4
    body = {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 4,
        "speculative": {"strategy": "draft-model"},
    }
    with SpeculativeModel(target, None, n_ctx=256) as model:
        with TestClient(create_app(model, ServerConfig(model_name="m"))) as client:
            got = client.post("/v1/chat/completions", json=body, headers={"host": "localhost"})
    assert got.status_code == 400
    error = got.json()["error"]
    assert error["param"] == "speculative.strategy"
    assert error["message"].startswith("speculative.strategy 'draft-model' needs a draft model")
