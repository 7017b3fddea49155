"""The target's own MTP (NextN) block as a drafter, on a tiny random-weight Qwen3.5 GGUF with one
MTP block written from the loader's tensor list: loaded and kept in step with the target,
greedy output the target's own, its drafts after every round those of a fresh MTP context fed
the same accepted text, and the sampling rule exact with the block's own q."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.mtp import assert_drafts_are_the_traces, greedy_pick
from support.sampling import assert_mtp_sampling_keeps_the_targets_distribution

from localspec.api import SpeculativeModel
from localspec.errors import InvalidOptionError
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.synthetic_hybrid import write_hybrid_model

PROMPT = "hello world the code def return print hello world the code"


@pytest.fixture(scope="module")
def mtp_target(tmp_path_factory):
    return write_hybrid_model(tmp_path_factory.mktemp("mtp") / "qwen35-mtp.gguf", 1, "qwen35")


def test_the_block_is_loaded_only_where_a_drafter_may_use_it(mtp_target):
    with SpeculativeModel(mtp_target, None, n_ctx=512) as model:
        assert model.target.mtp is not None and model.slots.slots[0].mtp is not None
        assert model.target.mtp.n_layer_nextn == 1
    with SpeculativeModel(mtp_target, None, n_ctx=512, strategy="prompt-lookup") as model:
        assert model.target.mtp is None
    with SpeculativeModel(mtp_target, None, n_ctx=512, parallel=2) as model:
        assert model.target.mtp is None  # one sequence only


@pytest.mark.parametrize("strategy", ["mtp", "auto"])
def test_greedy_output_is_the_targets_own(mtp_target, strategy):
    with SpeculativeModel(mtp_target, None, n_ctx=512) as model:
        plain = model.generate(PROMPT, max_tokens=40, temperature=0.0, draft_max=0)
        spec = model.generate(PROMPT, max_tokens=40, temperature=0.0, strategy=strategy)
        assert spec.tokens == plain.tokens
        forced = model.generate(
            PROMPT, max_tokens=40, temperature=0.0, strategy="mtp", draft_max=3, p_min=0.0
        )
        assert forced.tokens == plain.tokens
        assert forced.stats.drafted_by_drafter["mtp"] > 0


def test_after_every_round_its_drafts_are_a_fresh_mtp_contexts(mtp_target):
    """The block's KV cache and the hidden state it starts from follow the target through
    rejections: at each round, its draft is what a fresh target and MTP context, fed the
    accepted text in one prefill, propose."""
    fresh = Engine(mtp_target, EngineConfig(n_ctx=512, load_mtp=True))
    with SpeculativeModel(mtp_target, None, n_ctx=512, p_min=0.0) as model:
        gen = model.generate(
            PROMPT, max_tokens=24, temperature=0.0, strategy="mtp", draft_max=3, stream=True
        )
        context, seen_round, checks = list(gen.prompt_tokens), -1, 0
        for event in gen:
            context.append(event.token)
            if event.round != seen_round and event.round > 0:
                seen_round = event.round
                live = model.target.mtp.draft(context[-1], 3, greedy_pick)[0]
                fresh.trim(0)
                fresh.decode(context[:-1], [len(context) - 2])
                assert live == fresh.mtp.draft(context[-1], 3, greedy_pick)[0]
                checks += 1
        assert checks >= 5 and model.target.rollbacks["snapshot"] > 0
    fresh.close()


def test_mtp_needs_a_block(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=256) as model:
        assert model.target.mtp is None
        with pytest.raises(InvalidOptionError, match="MTP"):
            model.generate("hello", max_tokens=4, strategy="mtp")


@pytest.mark.statistical
def test_sampling_with_the_block_keeps_the_targets_distribution(mtp_target):
    """The first sampled tokens after the prompt, drawn 200 times each way, plain and with the
    block's drafts (its own q in the acceptance rule): one distribution by a chi-squared test."""
    with SpeculativeModel(mtp_target, None, n_ctx=256, p_min=0.0) as model:
        assert_mtp_sampling_keeps_the_targets_distribution(model, PROMPT)


def test_lists_say_the_model_drafts_for_itself(mtp_target, target_gguf):
    from starlette.testclient import TestClient

    from localspec.models.discovery import model_ref
    from localspec.models.gguf_info import check_gguf_file
    from localspec.server.app import create_app
    from localspec.server.state import ServerConfig

    assert check_gguf_file(mtp_target).builtin_drafter == "built-in drafter (MTP, 1 head)"
    assert check_gguf_file(target_gguf).builtin_drafter == ""
    assert "built-in drafter (MTP, 1 head)" in model_ref(mtp_target).label
    with SpeculativeModel(mtp_target, None, n_ctx=256) as model:
        assert model.builtin_drafter == "built-in drafter (MTP, 1 head)"
        assert "mtp" in [d.name for d in model.drafters]
        with TestClient(create_app(model, ServerConfig(model_name="m"))) as client:
            listed = client.get("/v1/models", headers={"host": "localhost"}).json()["data"][0]
        assert listed["builtin_drafter"] == "built-in drafter (MTP, 1 head)"


def test_its_drafts_are_llama_cpps_draft_mtp_on_the_same_gguf(mtp_target):
    """llama.cpp's own draft-mtp (llama-speculative-simple, recorded in
    tests/data/mtp/draft-mtp-trace.json with the command and the GGUF's sha256) on this GGUF:
    the same target tokens, and at every round the same drafted tokens from our MTP head."""
    trace = json.loads((Path(__file__).parent / "data/mtp/draft-mtp-trace.json").read_text())
    assert hashlib.sha256(mtp_target.read_bytes()).hexdigest() == trace["gguf_sha256"]
    assert_drafts_are_the_traces(mtp_target, trace, EngineConfig(n_ctx=512, load_mtp=True), k=3)
