"""MTP blocks that chain, on a tiny random-weight Step-3.5 GGUF with three of them written from
the loader's tensor list: each draft token from the next block, as llama.cpp's own draft-mtp
drafts on the same file; a draft never longer than the blocks; greedy output the target's own;
the sampling rule exact with the blocks' own q."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.mtp import assert_drafts_are_the_traces
from support.sampling import assert_mtp_sampling_keeps_the_targets_distribution

from localspec.api import SpeculativeModel
from localspec.decoding.policy import AdaptivePolicy
from localspec.llama.engine import EngineConfig
from localspec.llama.synthetic_step35 import N_NEXTN, write_step35_model

TRACE = Path(__file__).parent / "data/mtp/chained-draft-mtp-trace.json"


@pytest.fixture(scope="module")
def step35(tmp_path_factory):
    return write_step35_model(tmp_path_factory.mktemp("step35") / "step35-mtp.gguf", 1)


def test_its_drafts_are_llama_cpps_chained_draft_mtp_on_the_same_gguf(step35):
    """llama.cpp's draft-mtp (llama-speculative-simple, recorded with its command and the
    GGUF's sha256): the same target tokens, and at every round the same three drafted tokens,
    block 0, 1 and 2 in turn."""
    trace = json.loads(TRACE.read_text())
    assert hashlib.sha256(step35.read_bytes()).hexdigest() == trace["gguf_sha256"]
    config = EngineConfig(n_ctx=512, load_mtp=True)
    assert_drafts_are_the_traces(step35, trace, config, k=N_NEXTN, ask=8)  # 8: one a block


@pytest.mark.parametrize("strategy", ["mtp", "auto"])
def test_greedy_output_is_the_targets_own_and_no_draft_outgrows_the_blocks(step35, strategy):
    with SpeculativeModel(step35, None, n_ctx=512) as model:
        assert model.builtin_drafter == f"built-in drafter (MTP, {N_NEXTN} heads)"
        assert model.target.mtp.chained and model.target.mtp.max_draft == N_NEXTN
        plain = model.generate(PROMPT, max_tokens=40, temperature=0.0, draft_max=0)
        spec = model.generate(PROMPT, max_tokens=40, temperature=0.0, strategy=strategy)
        assert spec.tokens == plain.tokens
        forced = model.generate(
            PROMPT, max_tokens=40, temperature=0.0, strategy="mtp", draft_max=8, p_min=0.0
        )
        assert forced.tokens == plain.tokens
        assert forced.stats.drafted_by_drafter["mtp"] > 0
        assert len(forced.stats.drafted_per_position) == N_NEXTN  # asked for 8: one a block
        assert AdaptivePolicy([model.slots.slots[0].mtp]).records["mtp"].cap == N_NEXTN


@pytest.mark.statistical
def test_sampling_with_chained_blocks_keeps_the_targets_distribution(step35):
    with SpeculativeModel(step35, None, n_ctx=256, p_min=0.0) as model:
        assert_mtp_sampling_keeps_the_targets_distribution(model, PROMPT)


PROMPT = "hello world the code def return print hello world the code"
