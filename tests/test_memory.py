"""The pair memory estimate from GGUF metadata: hand-computed sums on synthetic GGUFs,
the verdict thresholds, and the badge in the window."""

from dataclasses import replace

import pytest

from localspec.errors import ModelFileError
from localspec.llama.synthetic import N_EMBD, N_HEAD, N_LAYER, vocabulary
from localspec.models.gguf_info import check_gguf_file
from localspec.models.memory import ModelMemory, PairMemory, model_memory, pair_memory


def test_the_estimate_is_the_hand_computed_sum(target_gguf, other_gguf):
    n_ctx = 1024
    head = N_EMBD // N_HEAD
    kv = N_LAYER * n_ctx * N_HEAD * (head + head) * 2  # f16 keys and values
    compute = len(vocabulary()[0]) * 512 * 4 + 512 * N_EMBD * 4 * 8
    m = model_memory(check_gguf_file(target_gguf), n_ctx)
    assert (m.weights, m.kv_cache, m.compute) == (target_gguf.stat().st_size, kv, compute)
    assert model_memory(check_gguf_file(target_gguf), n_ctx, "q8_0").kv_cache == int(
        kv / 2 * 34 / 32
    )
    pair = pair_memory(target_gguf, other_gguf, n_ctx)
    assert pair.total == m.total + model_memory(check_gguf_file(other_gguf), n_ctx).total
    assert pair.where == "RAM" and pair.available > 0 and pair.verdict == "fits"
    assert "KV cache" in pair.describe() and "fits" in pair.describe()
    with pytest.raises(ValueError):
        model_memory(check_gguf_file(target_gguf), n_ctx, "q3")
    with pytest.raises(ModelFileError):
        pair_memory(target_gguf.with_name("missing.gguf"), None, n_ctx)


@pytest.mark.parametrize(
    "available, verdict", [(1000, "fits"), (700, "tight"), (600, "won't fit"), (None, "unknown")]
)
def test_verdicts(available, verdict):
    est = PairMemory((ModelMemory("t", 500, 100, 50),), 4096, available, "RAM")
    assert est.total == 650 and est.verdict == verdict


def test_per_layer_head_counts_and_bad_sizes(tmp_path):
    from localspec.models.gguf_info import GGUFInfo

    info = GGUFInfo(
        tmp_path / "m.gguf",
        3,
        metadata={
            "general.architecture": "llama",
            "llama.block_count": 2,
            "llama.embedding_length": 64,
            "llama.attention.head_count": 4,
            "llama.attention.head_count_kv": [1, 2],
        },
        tokens=["a"] * 10,
    )
    assert model_memory(info, 100, weights=0).kv_cache == 100 * (1 + 2) * (16 + 16) * 2
    for n_ctx in (0, -5, "1024", None, True):
        with pytest.raises(ValueError):
            model_memory(info, n_ctx, weights=0)
    broken = GGUFInfo(
        tmp_path / "m.gguf", 3, metadata={"general.architecture": "llama", "llama.block_count": 2}
    )
    with pytest.raises(ValueError):
        model_memory(broken, 100, weights=0)
    info.metadata["llama.block_count"] = "2"
    with pytest.raises(ValueError, match="block_count"):
        model_memory(info, 100, weights=0)


# --- before download: the header read from the Hub with range requests ------------------------

from support.hub_server import entry_for, hub_ref  # noqa: E402

from localspec.models import remote_header  # noqa: E402
from localspec.models.discovery import ModelRef  # noqa: E402
from localspec.models.memory import pair_memory_of_refs  # noqa: E402


def header_length(path) -> int:
    from localspec.models.gguf_info import _Bounded, _read

    with open(path, "rb") as f:
        _read(_Bounded(f, path.stat().st_size), path)
        return f.tell()


def test_before_download_the_estimate_reads_only_the_header_from_the_hub(
    fake_hub, small_blocks, target_gguf, other_gguf
):
    content = target_gguf.read_bytes()
    target = hub_ref(fake_hub, content)
    est = pair_memory_of_refs(target, ModelRef(name=other_gguf.name, path=other_gguf), 2048)
    assert not est.partial and "header read from the Hub before download" in est.describe()
    on_disk = pair_memory(target_gguf, other_gguf, 2048)
    assert [m.total for m in est.models] == [
        m.total for m in on_disk.models
    ]  # weights = the Hub's size
    served = fake_hub.bytes_served(target.entry.file)
    assert header_length(target_gguf) <= served <= header_length(target_gguf) + 2 * 4096
    assert served < len(content) / 20
    before = len(fake_hub.requests)
    pair_memory_of_refs(target, None, 4096)  # another context: the header is kept
    assert len(fake_hub.requests) == before


@pytest.mark.parametrize(
    "setup, problem",
    [
        (lambda fake, c, mp: fake.gated.add("acme/Tiny-GGUF"), "gated"),
        (
            lambda fake, c, mp: mp.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True),
            "offline",
        ),
        (lambda fake, c, mp: fake.no_ranges.add("acme/Tiny-GGUF"), "ignores byte ranges"),
        (
            lambda fake, c, mp: fake.add("acme/Tiny-GGUF", "t-q4_k_m.gguf", b"NOTGGUF" + c[7:]),
            "not a GGUF file",
        ),
        (
            lambda fake, c, mp: fake.add("acme/Tiny-GGUF", "t-q4_k_m.gguf", c[: len(c) // 2]),
            "truncated",
        ),
    ],
)
def test_a_header_that_cannot_be_read_leaves_the_file_size_and_says_why(
    fake_hub, small_blocks, target_gguf, monkeypatch, setup, problem
):
    content = target_gguf.read_bytes()
    ref = hub_ref(fake_hub, content)
    setup(fake_hub, content, monkeypatch)
    est = pair_memory_of_refs(ref, None, 2048)
    assert est.partial and est.models[0].total == len(content)
    assert problem in est.describe() and "file size only" in est.describe()
    assert (
        fake_hub.bytes_served(ref.entry.file) <= header_length(target_gguf) + 2 * 4096
    )  # never the weights


def test_hostile_headers_and_servers_end_fast_without_the_weights(
    fake_hub, small_blocks, target_gguf, monkeypatch
):
    import struct

    from localspec.errors import DownloadError

    huge_string = (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", 12)
        + b"general.name"
        + struct.pack("<IQ", 8, 200 << 20)
    )  # a string claiming 200 MiB
    ref = hub_ref(fake_hub, huge_string + bytes(300 << 10), file="huge.gguf")
    est = pair_memory_of_refs(ref, None, 2048)
    assert est.partial and "claims 209715200 bytes" in est.describe()
    assert fake_hub.bytes_served("huge.gguf") <= 2 * 4096
    other = ModelRef(
        name="t", entry=entry_for(fake_hub, file="t.gguf", content=target_gguf.read_bytes())
    )
    wrong_size = ModelRef(name="t", entry=replace(other.entry, size=other.entry.size + 1))
    with pytest.raises(DownloadError, match="the catalogue says"):
        remote_header.remote_gguf_header(wrong_size.entry)
    monkeypatch.setattr(remote_header, "HEADER_DEADLINE_S", 1.0)
    fake_hub.trickle_s = 0.2  # a KiB each 0.2 s: the 9 KB header would take 2 s
    remote_header._remote_header.cache_clear()
    with pytest.raises(DownloadError, match="took more than 1 s"):
        remote_header.remote_gguf_header(other.entry)


def test_a_header_value_of_the_wrong_type_is_a_model_file_error(tmp_path):
    import gguf

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("general.alignment", [32, 32])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with pytest.raises(ModelFileError, match="alignment"):
        check_gguf_file(path)


@pytest.mark.parametrize("arch", ["lfm2", "mamba2", "qwen35", "nemotron_h"])
def test_a_recurrent_state_is_counted_with_its_snapshots(tmp_path, arch):
    """The estimate of a hybrid or recurrent model's state, per copy, is what llama.cpp saves
    of one sequence's state (llama_state_seq_get_size_ext, a few bytes of framing besides);
    snapshots multiply it where the architecture keeps them, and its layers hold no KV."""
    from localspec.llama.engine import Engine, EngineConfig
    from localspec.llama.synthetic_hybrid import write_hybrid_model

    path = write_hybrid_model(tmp_path / f"{arch}.gguf", 1, arch)
    estimate = model_memory(check_gguf_file(path), 256)
    engine = Engine(path, EngineConfig(n_ctx=256))
    try:
        engine.decode([1, 5, 6, 7], [3])
        saved, copies = engine.recurrent_state_bytes(), 1 + engine.n_rs_seq
    finally:
        engine.close()
    assert estimate.recurrent % copies == 0
    assert 0 <= saved - estimate.recurrent // copies <= 256
    assert (estimate.kv_cache == 0) == (arch == "mamba2")
    assert "recurrent state" in PairMemory((estimate,), 256, None, "RAM").describe()
