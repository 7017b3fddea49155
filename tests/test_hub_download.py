"""Downloads through huggingface_hub against a stand-in Hub on 127.0.0.1."""

import hashlib
import threading
from pathlib import Path

import pytest
from huggingface_hub import constants
from support.hub_server import FILE, PAYLOAD, REPO, entry_for

from localspec.errors import DownloadCancelled, DownloadError, InvalidOptionError
from localspec.models import cache, hub
from localspec.models.catalog import ModelEntry
from localspec.models.discovery import model_ref


def cache_files() -> list[Path]:
    """Model files visible in the HF cache: snapshot links and finished blobs."""
    root = Path(constants.HF_HUB_CACHE)
    return [
        p
        for p in root.glob("models--*/*/**/*")
        if p.parent.name != "refs" and p.is_file() and not p.name.endswith((".incomplete", ".lock"))
    ]


def test_download_lands_in_the_hf_cache_with_progress(fake_hub):
    entry = entry_for(fake_hub)
    seen = []
    path = hub.ensure_model(entry, progress=lambda done, total: seen.append((done, total)))
    assert path.read_bytes() == PAYLOAD
    assert path.is_relative_to(constants.HF_HUB_CACHE) and "models--acme--Tiny-GGUF" in str(path)
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) > 10
    # A second call is answered from the cache without a GET.
    gets = sum(1 for m, *_ in fake_hub.requests if m == "GET")
    assert hub.ensure_model(entry) == path
    assert sum(1 for m, *_ in fake_hub.requests if m == "GET") == gets


def test_cancel_stops_within_a_chunk_and_leaves_nothing(fake_hub):
    entry = entry_for(fake_hub)
    cancel = threading.Event()
    seen = []

    def progress(done, total):
        seen.append(done)
        if done >= 300_000:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        hub.ensure_model(entry, progress=progress, cancel=cancel)
    assert seen[-1] < 300_000 + (64 << 10)
    # huggingface_hub 2.x drops the partial file of a stopped call (its PR 4228).
    assert [
        p for p in Path(constants.HF_HUB_CACHE).rglob("*") if p.suffix in (".incomplete", ".gguf")
    ] == []
    assert hub.ensure_model(entry, progress=lambda d, t: None).read_bytes() == PAYLOAD


def test_dropped_connection_is_resumed_with_a_range_request(fake_hub):
    entry = entry_for(fake_hub)
    fake_hub.drop_after[(REPO, FILE)] = 200_000
    path = hub.ensure_model(entry, progress=lambda d, t: None)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == entry.sha256
    (resumed_at,) = fake_hub.ranges_asked(FILE)  # whole chunks received before the drop are kept
    assert 200_000 - (64 << 10) < resumed_at <= 200_000


def test_corrupt_body_is_rejected_and_nothing_is_kept(fake_hub):
    entry = entry_for(fake_hub)
    fake_hub.corrupt.add((REPO, FILE))
    with pytest.raises(
        DownloadError, match="sha256 does not match the catalogue; the file was removed"
    ):
        hub.ensure_model(entry, progress=lambda d, t: None)
    assert cache_files() == []
    assert cache.find_local(entry) is None


def test_uncatalogued_file_is_checked_against_the_hub_etag(fake_hub):
    sha = fake_hub.add(REPO, "other.gguf", PAYLOAD)
    fake_hub.corrupt.add((REPO, "other.gguf"))
    with pytest.raises(DownloadError, match="does not match the Hub"):
        hub.ensure_model(
            ModelEntry(name="other.gguf", repo=REPO, file="other.gguf"), progress=lambda d, t: None
        )
    fake_hub.corrupt.clear()
    path = hub.ensure_model(
        ModelEntry(name="other.gguf", repo=REPO, file="other.gguf"), progress=lambda d, t: None
    )
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


def test_offline_mode_answers_from_the_cache(fake_hub, monkeypatch):
    entry = entry_for(fake_hub)
    path = hub.ensure_model(entry, progress=lambda d, t: None)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    fake_hub.requests.clear()
    assert hub.ensure_model(entry) == path
    assert fake_hub.requests == []
    missing = entry_for(fake_hub, file="missing.gguf")
    with pytest.raises(DownloadError, match="offline"):
        hub.ensure_model(missing)
    assert fake_hub.requests == []


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda f: None, "not-there.gguf not found in acme/Tiny-GGUF"),
        (lambda f: f.gated.add(REPO), "acme/Tiny-GGUF is gated: accept its terms"),
        (lambda f: f.private.add(REPO), "repository acme/Tiny-GGUF not found, or it is private"),
    ],
)
def test_hub_errors_are_one_clear_line(fake_hub, setup, message):
    fake_hub.add(REPO, FILE, PAYLOAD)
    setup(fake_hub)
    entry = ModelEntry(
        name="x", repo=REPO, file="not-there.gguf" if "not-there" in message else FILE
    )
    with pytest.raises(DownloadError, match=message) as err:
        hub.ensure_model(entry, progress=lambda d, t: None)
    assert "\n" not in str(err.value)


def test_unreachable_hub_fails_fast(monkeypatch):
    monkeypatch.setattr(
        constants, "ENDPOINT", "http://127.0.0.1:9"
    )  # discard port: refused at once
    with pytest.raises(DownloadError, match="cannot reach"):
        hub.ensure_model(ModelEntry(name="x", repo=REPO, file=FILE), progress=lambda d, t: None)


def test_repo_quant_and_repo_file_specs(fake_hub):
    fake_hub.add(REPO, "tiny-q8_0.gguf", b"q8")
    sha = fake_hub.add(REPO, "tiny-Q4_K_M.gguf", PAYLOAD)
    ref = model_ref(f"{REPO}:q4_k_m")
    assert (ref.entry.file, ref.entry.size, ref.entry.sha256, ref.downloaded) == (
        "tiny-Q4_K_M.gguf",
        len(PAYLOAD),
        sha,
        False,
    )
    with pytest.raises(
        InvalidOptionError, match="no file with quantization 'iq2_xs'.*q4_k_m, q8_0"
    ):
        model_ref(f"{REPO}:IQ2_XS")
    ref = model_ref(f"{REPO}:tiny-q8_0.gguf")
    assert (ref.entry.repo, ref.entry.file, ref.entry.size) == (REPO, "tiny-q8_0.gguf", 0)
    assert hub.ensure_model(ref.entry, progress=lambda d, t: None).read_bytes() == b"q8"
    # Once downloaded, the same spec resolves to the file on disk.
    assert model_ref(f"{REPO}:tiny-q8_0.gguf").downloaded


def test_split_quantization_is_refused_with_advice(fake_hub):
    fake_hub.add(REPO, "big-q4_k_m-00001-of-00002.gguf", b"1")
    fake_hub.add(REPO, "big-q4_k_m-00002-of-00002.gguf", b"2")
    with pytest.raises(InvalidOptionError, match="split into parts"):
        model_ref(f"{REPO}:q4_k_m")
