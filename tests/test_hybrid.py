"""Targets and drafts that keep a recurrent state: a hybrid (LFM2: short convolutions beside
attention, rolled back with llama.cpp's recurrent-state snapshots) and a recurrent one (Mamba2:
no snapshots, rolled back from a saved state), written with the ``gguf`` package from the
loader's own tensor list.  Greedy speculative output is the target's own with every drafter, and
after every round the target's state gives a fresh prefill's logits."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.api import SpeculativeModel
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.synthetic_hybrid import write_hybrid_model

PROMPT = "hello world the code def return print hello world the code"
WAY_BACK = {"lfm2": "snapshot", "mamba2": "checkpoint", "nemotron_h": "snapshot"}  # going back


@pytest.fixture(scope="module")
def recurrent_models(tmp_path_factory):
    """{architecture: (target, a draft of other weights)}."""
    folder = tmp_path_factory.mktemp("recurrent")
    return {
        arch: tuple(write_hybrid_model(folder / f"{arch}-{s}.gguf", s, arch) for s in (1, 2))
        for arch in WAY_BACK
    }


@pytest.mark.parametrize("arch", list(WAY_BACK))
@pytest.mark.parametrize(
    ("draft", "strategy"),
    [("target", "draft-model"), ("other", "draft-model"), (None, "prompt-lookup"), (None, "auto")],
)
def test_greedy_speculation_is_the_targets_own_output(recurrent_models, arch, draft, strategy):
    target, other = recurrent_models[arch]
    draft_path = {"target": target, "other": other, None: None}[draft]
    with SpeculativeModel(target, draft_path, n_ctx=512) as model:
        assert model.target.recurrent
        plain = model.generate(PROMPT, max_tokens=48, temperature=0.0, draft_max=0)
        spec = model.generate(
            PROMPT, max_tokens=48, temperature=0.0, strategy=strategy, draft_max=4
        )
        assert spec.tokens == plain.tokens
        if draft == "other":  # drafts mostly rejected: each rejection went back its way
            assert spec.stats.accepted_tokens < spec.stats.drafted_tokens
            assert model.target.rollbacks[WAY_BACK[arch]] > 0
        if draft == "target":
            assert spec.stats.accepted_tokens == spec.stats.drafted_tokens > 0


def test_only_the_architectures_with_snapshots_get_them(recurrent_models):
    hybrid = Engine(recurrent_models["lfm2"][0], EngineConfig(n_ctx=256))
    recurrent = Engine(recurrent_models["mamba2"][0], EngineConfig(n_ctx=256))
    try:
        assert hybrid.recurrent and hybrid.n_rs_seq == 16
        assert recurrent.recurrent and recurrent.n_rs_seq == 0  # llama.cpp clamps it
    finally:
        hybrid.close()
        recurrent.close()


@pytest.mark.parametrize("arch", list(WAY_BACK))
def test_the_state_after_every_round_equals_a_fresh_prefill(recurrent_models, arch):
    """At the first event of each round, a probe token's logits are a fresh prefill's: the
    rejected positions left no trace in the recurrent state.  Within 0.02, or twice the
    model's own path noise where that is larger (the same prefill read in two pieces:
    Nemotron-H's Mamba2 mixers part by 0.03 there)."""
    target, other = recurrent_models[arch]
    ref = Engine(target, EngineConfig(n_ctx=512))
    with SpeculativeModel(target, other, n_ctx=512, p_min=0.0, draft_max=3) as model:
        gen = model.generate(PROMPT, max_tokens=30, temperature=0.0, stream=True)
        prompt, emitted, seen_round, checks = list(gen.prompt_tokens), [], -1, 0
        for event in gen:
            if event.round != seen_round and event.round > 0:
                seen_round = event.round
                cache = list(model.target.cache_tokens)
                assert cache == prompt + emitted
                got = model.target.decode([7], [0])[0].copy()
                model.target.trim(len(cache))
                want = _fresh(ref, cache + [7])
                noise = np.abs(_fresh(ref, cache + [7], pieces=2) - want).max()
                np.testing.assert_allclose(got, want, atol=max(2e-2, 2 * noise), rtol=0)
                checks += 1
            emitted.append(event.token)
        assert checks >= 5 and model.target.rollbacks[WAY_BACK[arch]] > 0
    ref.close()


def _fresh(engine, tokens, pieces: int = 1):
    """The last token's logits after a fresh prefill of ``tokens``, read in ``pieces``."""
    engine.trim(0)
    cut = len(tokens) // 2 if pieces == 2 else 0
    if cut:
        engine.decode(tokens[:cut], [cut - 1])
    return engine.decode(tokens[cut:], [len(tokens) - cut - 1])[0].copy()


def test_two_sequences_of_a_hybrid_target_each_keep_their_own_state(recurrent_models):
    target, other = recurrent_models["lfm2"]
    prompts = [PROMPT, "the code is not true and false or none"]
    with SpeculativeModel(target, None, n_ctx=512) as plain:
        want = [plain.generate(p, max_tokens=24, temperature=0.0).tokens for p in prompts]
    with SpeculativeModel(target, other, n_ctx=1024, parallel=2) as model:
        gens = [
            model.generate(p, max_tokens=24, temperature=0.0, strategy="draft-model", draft_max=3)
            for p in prompts
        ]
        assert [g.tokens for g in gens] == want


def test_run_speculates_on_a_hybrid_gguf(recurrent_models, capsys):
    from localspec.cli import commands

    target, other = recurrent_models["lfm2"]
    argv = ["run", PROMPT, "-m", str(target), "-md", str(other), "-c", "512", "-n", "16"]
    assert commands.main(argv + ["--temp", "0", "--no-color"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and "16 tokens" in err and "Traceback" not in err
