"""The pair memory estimate from GGUF metadata: hand-computed sums on synthetic GGUFs,
the verdict thresholds, and the badge in the window."""

import pytest

from localspec.errors import ModelFileError
from localspec.memory import PairMemory, ModelMemory, model_memory, pair_memory
from localspec.gguf_info import check_gguf_file
from localspec.synthetic import N_EMBD, N_HEAD, N_LAYER, vocabulary


def test_the_estimate_is_the_hand_computed_sum(target_gguf, other_gguf):
    n_ctx = 1024
    head = N_EMBD // N_HEAD
    kv = N_LAYER * n_ctx * N_HEAD * (head + head) * 2  # f16 keys and values
    compute = len(vocabulary()[0]) * 512 * 4 + 512 * N_EMBD * 4 * 8
    m = model_memory(check_gguf_file(target_gguf), n_ctx)
    assert (m.weights, m.kv_cache, m.compute) == (target_gguf.stat().st_size, kv, compute)
    assert model_memory(check_gguf_file(target_gguf), n_ctx, "q8_0").kv_cache == int(kv / 2 * 34 / 32)
    pair = pair_memory(target_gguf, other_gguf, n_ctx, offload=False)
    assert pair.total == m.total + model_memory(check_gguf_file(other_gguf), n_ctx).total
    assert pair.where == "RAM" and pair.available > 0 and pair.verdict == "fits"
    assert "KV cache" in pair.describe() and "fits" in pair.describe()
    with pytest.raises(ValueError):
        model_memory(check_gguf_file(target_gguf), n_ctx, "q3")
    with pytest.raises(ModelFileError):
        pair_memory(target_gguf.with_name("missing.gguf"), None, n_ctx)


@pytest.mark.parametrize("available, verdict", [(1000, "fits"), (700, "tight"), (600, "won't fit"), (None, "unknown")])
def test_verdicts(available, verdict):
    est = PairMemory((ModelMemory("t", 500, 100, 50),), 4096, available, "RAM")
    assert est.total == 650 and est.verdict == verdict


def test_per_layer_head_counts_and_bad_sizes(tmp_path):
    from localspec.gguf_info import GGUFInfo

    info = GGUFInfo(tmp_path / "m.gguf", 3, metadata={"general.architecture": "llama", "llama.block_count": 2,
                                                          "llama.embedding_length": 64, "llama.attention.head_count": 4,
                                                          "llama.attention.head_count_kv": [1, 2]},
                    tokens=["a"] * 10)
    assert model_memory(info, 100, weights=0).kv_cache == 100 * (1 + 2) * (16 + 16) * 2
    for n_ctx in (0, -5, "1024", None, True):
        with pytest.raises(ValueError):
            model_memory(info, n_ctx, weights=0)
    broken = GGUFInfo(tmp_path / "m.gguf", 3, metadata={"general.architecture": "llama", "llama.block_count": 2})
    with pytest.raises(ValueError):
        model_memory(broken, 100, weights=0)
    info.metadata["llama.block_count"] = "2"
    with pytest.raises(ValueError, match="block_count"):
        model_memory(info, 100, weights=0)
