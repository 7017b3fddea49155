"""The store of what a machine taught the policy (localspec/llama/machine_store.py):
round trip, corrupt and foreign files ignored, concurrent writers, keys per GGUF."""

from __future__ import annotations

import json
import logging
import multiprocessing
from dataclasses import replace

import pytest

from localspec.llama.machine_store import MachineStore, StoreKey, file_sha256, this_machine_key

KEY = StoreKey(
    hardware="Test CPU",
    threads=2,
    build="0.3.36 | abc | AVX2 = 1 | CPU",
    offload=False,
    target_sha256="a" * 64,
)


def test_a_record_round_trips(tmp_path):
    store = MachineStore(tmp_path)
    assert store.load(KEY) is None
    written = store.update(
        KEY, lambda old: {"costs": {"1": 0.026, "17": 0.208}, "seen": old is None}
    )
    assert written == {"costs": {"1": 0.026, "17": 0.208}, "seen": True}
    assert MachineStore(tmp_path).load(KEY) == written
    assert [e["key"]["threads"] for e in store.entries()] == [2]


@pytest.mark.parametrize(
    "content", ["{not json", "[]", '{"version": 99, "record": {}}', '{"version": 1, "record": 3}']
)
def test_a_corrupt_file_is_ignored_with_one_log_line(tmp_path, caplog, content):
    store = MachineStore(tmp_path)
    store.path(KEY).parent.mkdir(parents=True, exist_ok=True)
    store.path(KEY).write_text(content)
    with caplog.at_level(logging.WARNING, logger="localspec.store"):
        assert store.load(KEY) is None
    assert len(caplog.records) == 1 and "ignoring" in caplog.records[0].getMessage()
    assert store.update(KEY, lambda old: {"fresh": old is None}) == {"fresh": True}
    assert store.load(KEY) == {"fresh": True}


def test_a_file_of_another_key_is_ignored(tmp_path, caplog):
    store = MachineStore(tmp_path)
    other = replace(KEY, threads=8)
    store.update(other, lambda old: {"costs": {"1": 0.01}})
    store.path(KEY).write_text(store.path(other).read_text())  # copied over by hand
    with caplog.at_level(logging.WARNING, logger="localspec.store"):
        assert store.load(KEY) is None
    assert "another machine" in caplog.text


def test_another_gguf_starts_fresh(tmp_path):
    store = MachineStore(tmp_path)
    store.update(KEY, lambda old: {"costs": {"1": 0.03}})
    assert store.load(replace(KEY, target_sha256="b" * 64)) is None
    assert store.load(replace(KEY, draft_sha256="c" * 64)) is None
    assert store.load(KEY) == {"costs": {"1": 0.03}}


def _bump_many(directory: str, n: int) -> None:
    store = MachineStore(directory)
    for _ in range(n):
        store.update(KEY, lambda old: {"count": (old or {}).get("count", 0) + 1})


def test_two_writers_at_once_keep_a_valid_file_and_every_update(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_bump_many, args=(str(tmp_path), 40)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0, 0]
    data = json.loads(MachineStore(tmp_path).path(KEY).read_text())
    assert data["record"] == {"count": 80}
    assert not list(tmp_path.glob("*.tmp"))


def test_forget_deletes_the_records_but_not_the_digests(tmp_path):
    store = MachineStore(tmp_path)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    file_sha256(gguf, tmp_path)
    store.update(KEY, lambda old: {})
    assert store.forget() == 1
    assert store.load(KEY) is None and (tmp_path / "digests.json").exists()


def test_a_digest_is_memoised_until_the_file_changes(tmp_path):
    import hashlib

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"one")
    assert file_sha256(gguf, tmp_path) == hashlib.sha256(b"one").hexdigest()
    memo = json.loads((tmp_path / "digests.json").read_text())
    assert list(memo.values()) == [hashlib.sha256(b"one").hexdigest()]
    gguf.write_bytes(b"two!")  # another size: another entry
    assert file_sha256(gguf, tmp_path) == hashlib.sha256(b"two!").hexdigest()


def test_this_machines_key_names_the_pair_and_build(tmp_path, monkeypatch, target_gguf, other_gguf):
    monkeypatch.setenv("LOCALSPEC_STORE", str(tmp_path))
    key = this_machine_key(target_gguf, other_gguf, threads=2, offload=False)
    assert (
        key.target_sha256 == file_sha256(target_gguf) != key.draft_sha256 == file_sha256(other_gguf)
    )
    assert key.threads == 2 and "0.3.36" in key.build
    assert this_machine_key(target_gguf, None, 2, False).draft_sha256 == ""
