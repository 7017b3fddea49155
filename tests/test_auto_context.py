"""``n_ctx="auto"`` (``localspec serve``'s default): the pair's trained context, capped by memory."""

from __future__ import annotations

import pytest

from localspec.llama.synthetic import N_CTX_TRAIN
from localspec.models.gguf_info import cached_header
from localspec.models.memory import AUTO_CTX_FLOOR, auto_context, model_memory


def test_auto_is_the_trained_context_when_memory_allows(target_gguf, other_gguf):
    auto = auto_context(target_gguf, other_gguf, budget=(64 * 2**30, "RAM"))
    assert (auto.n_ctx, auto.trained, auto.reason) == (N_CTX_TRAIN, N_CTX_TRAIN, "trained context")
    per_token = sum(model_memory(cached_header(p), 1).kv_cache for p in (target_gguf, other_gguf))
    assert auto.kv_bytes == N_CTX_TRAIN * per_token


def test_auto_is_capped_by_memory_on_the_real_pair(real_pair_paths):
    target, draft = real_pair_paths.target, real_pair_paths.draft
    roomy = auto_context(target, draft, budget=(64 * 2**30, "RAM"))
    assert roomy.n_ctx == roomy.trained == 32768
    tight = auto_context(target, draft, budget=(3 * 2**30, "RAM"))
    assert (
        tight.reason == "memory"
        and AUTO_CTX_FLOOR <= tight.n_ctx < 32768
        and tight.n_ctx % 256 == 0
    )
    weights = sum(
        m.weights + m.compute for m in (model_memory(cached_header(p), 1) for p in (target, draft))
    )
    assert (
        weights + tight.kv_bytes
        <= 0.8 * 3 * 2**30
        < weights + tight.kv_bytes + 256 * (tight.kv_bytes / tight.n_ctx) * 2
    )
    starved = auto_context(target, draft, budget=(2 * 2**30, "RAM"))
    assert starved.n_ctx == AUTO_CTX_FLOOR


def test_a_model_loads_with_auto(target_gguf):
    from localspec.api import SpeculativeModel

    with SpeculativeModel(target_gguf, n_ctx="auto", strategy="none") as model:
        assert model.target.n_ctx == N_CTX_TRAIN == model.load_options.n_ctx
        assert "trained context" in model.auto_context.describe()


@pytest.mark.parametrize("value", ["big", 8.5, True])
def test_n_ctx_must_be_a_number_or_auto(target_gguf, value):
    from localspec import InvalidOptionError
    from localspec.api import SpeculativeModel

    with pytest.raises(InvalidOptionError, match="n_ctx"):
        SpeculativeModel(target_gguf, n_ctx=value)


def test_serve_defaults_to_auto_and_run_to_4096():
    from localspec.cli.commands import _parser

    parser = _parser()
    assert parser.parse_args(["serve"]).n_ctx == "auto"
    assert parser.parse_args(["serve", "-c", "8192"]).n_ctx == 8192
    assert parser.parse_args(["run", "hi"]).n_ctx == 4096
    assert parser.parse_args(["run", "hi", "-c", "AUTO"]).n_ctx == "auto"
