"""Compatibility from GGUF headers, model specs, and draft picking over the caches."""

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants

from localspec import cli
from localspec.api import load
from localspec.errors import DownloadError, ModelFileError
from localspec.llama.synthetic import vocabulary, write_model
from localspec.models.compat import check_compatibility
from localspec.models.discovery import drafts_for, list_models, local_ggufs, model_ref, pick_draft
from localspec.models.gguf_info import check_gguf_file

# --- real files -------------------------------------------------------------------------


def test_real_qwen_pair_is_compatible(real_pair_paths):
    verdict = check_compatibility(
        check_gguf_file(real_pair_paths.target), check_gguf_file(real_pair_paths.draft)
    )
    assert verdict.compatible and verdict.reasons == [] and verdict.notes == []


def test_smollm2_cannot_draft_for_qwen(real_pair_paths, smollm2_gguf):
    verdict = check_compatibility(
        check_gguf_file(real_pair_paths.target), check_gguf_file(smollm2_gguf)
    )
    assert not verdict.compatible
    assert "draft vocabulary has 49152 tokens, target 151936" in " ".join(verdict.reasons)
    assert "draft architecture is 'llama', target 'qwen2'" in " ".join(verdict.reasons)


def test_gemma3_cannot_draft_for_qwen(real_pair_paths, gemma3_270m_gguf):
    gemma = check_gguf_file(gemma3_270m_gguf)
    verdict = check_compatibility(check_gguf_file(real_pair_paths.target), gemma)
    assert not verdict.compatible
    assert f"draft vocabulary has {gemma.n_vocab} tokens, target 151936" in " ".join(
        verdict.reasons
    )
    assert "draft architecture is 'gemma3', target 'qwen2'" in " ".join(verdict.reasons)


# --- one synthetic file per rule --------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("rules") / "target.gguf", seed=1, size_label="7B")


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(tokenizer_model="gpt2"), "draft tokenizer type is 'gpt2', target 'llama'"),
        (dict(extra_words=129), "a difference of 129; at most 128 is allowed"),
        (dict(bos_id=0), "draft BOS id is 0, target 1"),
        (dict(architecture="qwen2"), "draft architecture is 'qwen2', target 'llama'"),
        (dict(size_label="8B"), "the draft (8B parameters) is larger than the target (7B)"),
    ],
)
def test_each_rule_names_its_reason(tmp_path, base, kwargs, reason):
    draft = write_model(tmp_path / "draft.gguf", seed=2, **{"size_label": "1B", **kwargs})
    verdict = check_compatibility(check_gguf_file(base), check_gguf_file(draft))
    assert [r for r in verdict.reasons if reason in r], verdict.reasons
    assert len(verdict.reasons) == 1


def test_limits_that_still_pass(tmp_path, base):
    ok = write_model(
        tmp_path / "ok.gguf", seed=2, size_label="1B", extra_words=128, basename="other"
    )
    verdict = check_compatibility(check_gguf_file(base), check_gguf_file(ok))
    assert verdict.compatible
    assert verdict.notes == ["family names differ: draft 'other', target 'synthetic'"]


def test_one_changed_token_text(tmp_path, base):
    tokens = vocabulary()[0]
    tokens[5] = "<changed>"  # id 5 is the first id checked
    draft = write_model(tmp_path / "d.gguf", seed=2, size_label="1B", vocab_override=tokens)
    verdict = check_compatibility(check_gguf_file(base), check_gguf_file(draft))
    assert verdict.reasons == [
        "1 token text(s) differ (draft vs target, first ones: 5: '<changed>' vs '<0x02>')"
    ]


# --- draft picking over the caches -------------------------------------------------------


@pytest.fixture
def model_folder(tmp_path, monkeypatch):
    """A localspec cache and a Hugging Face cache holding several GGUFs."""
    own = tmp_path / "localspec-cache"
    monkeypatch.setenv("LOCALSPEC_CACHE", str(own))
    hf_repo = Path(constants.HF_HUB_CACHE) / "models--acme--Mini-GGUF"
    hf_snapshot = hf_repo / "snapshots" / ("0" * 40)
    _mk(hf_repo / "refs").joinpath("main").write_text("0" * 40)  # as huggingface_hub leaves it
    files = {
        "target": write_model(_mk(own / "acme--Big-GGUF") / "big-7b.gguf", seed=1, size_label="7B"),
        "half": write_model(_mk(own / "acme--Half-GGUF") / "half-3b.gguf", seed=2, size_label="3B"),
        "small": write_model(
            _mk(own / "acme--Small-GGUF") / "small-1b.gguf", seed=3, size_label="1B"
        ),
        "mini": write_model(_mk(hf_snapshot) / "mini-0.5b.gguf", seed=4, size_label="0.5B"),
        "alien": write_model(
            _mk(own / "acme--Alien-GGUF") / "alien-0.1b.gguf",
            seed=5,
            size_label="100M",
            tokenizer_model="gpt2",
        ),
        "split2": write_model(_mk(own / "acme--Split-GGUF") / "s-00002-of-00002.gguf", seed=6),
    }
    (own / ".assembling-1-x").mkdir()
    write_model(own / ".assembling-1-x" / "partial.gguf", seed=7)
    return files


def _mk(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_local_ggufs_finds_both_caches_but_not_work_folders_or_later_parts(model_folder):
    found = {p.name for p in local_ggufs()}
    assert found == {
        "big-7b.gguf",
        "half-3b.gguf",
        "small-1b.gguf",
        "mini-0.5b.gguf",
        "alien-0.1b.gguf",
    }


def test_drafts_for_lists_compatible_first_with_reasons_for_the_rest(model_folder):
    target = model_ref(model_folder["target"])
    assert target.params == 7e9 and target.family == "synthetic"
    candidates = drafts_for(target)
    names = [(c.model.name, c.compatible) for c in candidates]
    assert names[:3] == [("mini-0.5b.gguf", True), ("small-1b.gguf", True), ("half-3b.gguf", True)]
    rejected = {c.model.name: c.reasons for c in candidates if not c.compatible}
    assert "draft tokenizer type is 'gpt2', target 'llama'" in rejected["alien-0.1b.gguf"]
    # The catalogue models on disk (the real Qwen pair, when cached) are rejected with reasons too.
    assert all(reasons for reasons in rejected.values())


def test_pick_draft_takes_the_smallest_at_most_about_a_quarter(model_folder):
    assert pick_draft(model_ref(model_folder["target"])).path == model_folder["mini"]
    # For the 3B model, 1B is a third (too big) and 0.5B a sixth.
    assert pick_draft(model_ref(model_folder["half"])).path == model_folder["mini"]
    # Nothing fits a 1B target: 0.5B is half of it.
    assert pick_draft(model_ref(model_folder["small"])) is None


def test_load_with_draft_auto_picks_and_loads_it(model_folder):
    with load(str(model_folder["target"]), "auto", n_ctx=256) as model:
        assert model.draft_path == model_folder["mini"]
        assert model.chat("hello", max_tokens=4).stats.generated_tokens == 4


def test_catalogue_target_gets_its_catalogue_draft_even_before_download(model_folder):
    target = model_ref("qwen2.5-coder-7b")
    assert target.entry.file == "qwen2.5-coder-7b-instruct-q4_k_m.gguf" and not target.downloaded
    assert pick_draft(target).name == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    (candidate,) = [c for c in drafts_for(target) if c.recommended]
    assert candidate.compatible and "checked once both files are downloaded" in candidate.notes[0]


def test_specs(model_folder):
    assert model_ref(None).name == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert model_ref("qwen2.5-coder-3b").entry.params == "3.09B"
    assert model_ref("gemma-3-270m-it-q8_0").entry.quant == "Q8_0"
    by_file = model_ref("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:qwen2.5-coder-7b-instruct-q4_k_m.gguf")
    assert by_file.name == "qwen2.5-coder-7b-instruct-q4_k_m"
    by_quant = model_ref("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M")
    assert by_quant.entry == by_file.entry
    with pytest.raises(ModelFileError, match="not a file, a catalogue name"):
        model_ref("no-such-model")
    with pytest.raises(ModelFileError, match="directory"):
        model_ref(model_folder["target"].parent)


def test_listing_survives_a_corrupt_file(model_folder):
    bad = model_folder["target"].parent / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 10)
    listed = {m.name: m for m in list_models()}
    assert listed["broken.gguf"].params is None
    rejected = {c.model.name: c for c in drafts_for(model_ref(model_folder["target"]))}
    assert (
        not rejected["broken.gguf"].compatible and "malformed" in rejected["broken.gguf"].reasons[0]
    )


# --- command line -----------------------------------------------------------------------


def test_cli_models_json_and_drafts_for(model_folder, capsys):
    assert cli.main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["default_pair"] == "qwen2.5-coder-1.5b" and len(data["pairs"]) >= 19
    big = next(m for m in data["models"] if m["name"] == "big-7b.gguf")
    assert big["compatible_drafts"] == ["mini-0.5b.gguf", "small-1b.gguf", "half-3b.gguf"]
    assert cli.main(["models", "--drafts-for", str(model_folder["target"])]) == 0
    out = capsys.readouterr().out
    assert "ok  mini-0.5b.gguf" in out and "no  alien-0.1b.gguf" in out and "tokenizer type" in out


def test_cli_models_rm(model_folder, tmp_path, capsys):
    assert cli.main(["models", "rm", str(model_folder["mini"])]) == 0
    assert not model_folder["mini"].exists() and "deleted" in capsys.readouterr().out
    outside = shutil.copy(model_folder["small"], tmp_path / "mine.gguf")
    assert cli.main(["models", "rm", str(outside)]) == 2
    assert Path(outside).exists() and "not in localspec's cache" in capsys.readouterr().err
    assert cli.main(["models", "rm", "qwen2.5-coder-32b-instruct-q4_k_m"]) == 2
    assert "not downloaded" in capsys.readouterr().err


def test_cli_pull_errors_are_one_line(model_folder, monkeypatch, capsys):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert cli.main(["pull", "qwen2.5-coder-32b"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("localspec: error: could not fetch Qwen/Qwen2.5-Coder-32B-Instruct-GGUF")
        and "offline" in err
    )
    assert err.count("\n") == 1


def test_cli_pull_default_pair_is_answered_from_disk(real_pair_paths, capsys):
    assert cli.main(["pull", "qwen2.5-coder-1.5b"]) == 0
    out = capsys.readouterr().out
    assert out.count("already on disk") == 2 and str(real_pair_paths.target) in out


def test_quant_spec_needs_the_hub_and_says_so_at_once(monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(DownloadError, match="cannot reach http://127.0.0.1:9"):
        model_ref("someone/Unknown-GGUF:q4_k_m")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        DownloadError, match="offline .* cannot be listed; name the file as REPO:FILE"
    ):
        model_ref("someone/Unknown-GGUF:q4_k_m")


# --- bad input (regressions from an attempt to break these commands) ---------------------


def test_rm_never_deletes_outside_the_caches(model_folder, tmp_path, capsys):
    own = model_folder["target"].parent.parent
    precious = tmp_path / "user" / "precious.gguf"
    precious.parent.mkdir()
    shutil.copy(model_folder["small"], precious)
    (own / "link").symlink_to(precious.parent, target_is_directory=True)
    (own / "acme--Small-GGUF" / "file-link.gguf").symlink_to(precious)
    for spec in (
        own / ".." / "user" / "precious.gguf",
        own / "link" / "precious.gguf",
        own / "acme--Small-GGUF" / "file-link.gguf",
    ):
        assert cli.main(["models", "rm", str(spec)]) == 2, spec
        assert precious.exists()
        assert "not in localspec's cache" in capsys.readouterr().err


def test_rm_keeps_a_blob_another_snapshot_still_uses(tmp_path):
    repo = Path(constants.HF_HUB_CACHE) / "models--acme--Shared-GGUF"
    blob = _mk(repo / "blobs") / ("a" * 64)
    blob.write_bytes(b"GGUF data")
    links = [_mk(repo / "snapshots" / (c * 40)) / "m.gguf" for c in "12"]
    for link in links:
        link.symlink_to(blob)
    assert cli.main(["models", "rm", str(links[0])]) == 0
    assert blob.exists() and links[1].read_bytes() == b"GGUF data" and not links[0].exists()
    assert cli.main(["models", "rm", str(links[1])]) == 0
    assert not blob.exists()


def test_headers_with_odd_types_are_listed_not_fatal(model_folder):
    import struct

    folder = model_folder["target"].parent
    # general.size_label stored as a uint32, then an array nested 20 deep.
    kv = lambda key, vtype, payload: (
        struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", vtype) + payload
    )
    odd_label = (
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv("general.size_label", 4, struct.pack("<I", 7))
    )
    nested = (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", 4)
        + b"deep"
        + struct.pack("<I", 9)
    )
    nested += (struct.pack("<IQ", 9, 1)) * 20 + struct.pack("<IQ", 4, 0)
    (folder / "odd-label.gguf").write_bytes(odd_label)
    (folder / "nested.gguf").write_bytes(nested)
    listed = {m.name: m for m in list_models()}
    assert listed["odd-label.gguf"].params is None and listed["nested.gguf"].params is None
    rejected = {c.model.name: c for c in drafts_for(model_ref(model_folder["target"]))}
    assert "nested more than 8 deep" in rejected["nested.gguf"].reasons[0]
    assert not rejected["odd-label.gguf"].compatible
    assert pick_draft(model_ref(model_folder["target"])).path == model_folder["mini"]


def test_repo_quant_is_answered_from_the_hf_cache_without_the_hub(model_folder, monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    snapshot = model_folder["mini"].parent
    shutil.copy(model_folder["mini"], snapshot / "mini-0.5b-Q4_K_M.gguf")
    ref = model_ref("acme/Mini-GGUF:q4_k_m")
    assert ref.path == snapshot / "mini-0.5b-Q4_K_M.gguf"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("../evil:x.gguf", "not a valid Hugging Face repository id"),
        ("owner/..:x.gguf", "not a valid Hugging Face repository id"),
        ("own er/re po:x.gguf", "not a valid Hugging Face repository id"),
        ("o/r:../../etc/passwd.gguf", "file must be a relative .gguf path"),
        ("", "no model given"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, message, capsys):
    assert cli.main(["pull", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_rm_of_a_pair_name_asks_for_a_model(capsys):
    assert cli.main(["models", "rm", "qwen2.5-coder-1.5b"]) == 2
    assert "is a pair; name one of its models" in capsys.readouterr().err
