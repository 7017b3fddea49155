"""What a machine taught the adaptive policy, kept between processes.

The policy measures the target's cost per batch size c(b), each draft model's cost per
token and how often each drafter's guesses are kept.  Measuring costs again at every load
costs a calibration pause, and starting the acceptance estimates from optimism costs the
first answer of every process its first bets.  This store keeps both, one JSON file per
:class:`StoreKey` under the user cache directory (platformdirs), so a process that loads
the same pair on the same machine and build starts where the last one stopped.

A record is a plain JSON object (its parts are the policy's to define: ``costs``,
``priors``); the store only keys, reads, merges and writes it:

- written atomically (a temporary file in the same folder, then ``os.replace``) under a
  file lock (``filelock``, as huggingface_hub uses), so two processes updating at once
  lose neither update and never leave a half-written file;
- a file that is not valid JSON, has another version or holds another key is ignored
  with one log line (``localspec.store`` logger), and the next update replaces it.

The GGUFs are identified by their sha256; hashing a 1 GiB file takes seconds, so each
digest is memoised per (path, size, mtime) in ``digests.json`` beside the records.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs
from filelock import FileLock

from localspec import machine
from localspec.llama import backend

VERSION = 1
ENV_DIR = "LOCALSPEC_STORE"
log = logging.getLogger("localspec.store")
_CHUNK = 8 << 20


def store_dir() -> Path:
    """``$LOCALSPEC_STORE`` or ``<user cache dir>/localspec/learned``."""
    override = os.environ.get(ENV_DIR)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("localspec")) / "learned"


@dataclass(frozen=True)
class StoreKey:
    """What a record holds for: the hardware (CPU model, GPU seen), the threads used, the
    llama.cpp build (bindings version, commit, system info line, whether layers are
    offloaded) and the two GGUFs' sha256 (``draft_sha256`` "" without a draft model)."""

    hardware: str
    threads: int
    build: str
    offload: bool
    target_sha256: str
    draft_sha256: str = ""

    @property
    def file_name(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24] + ".json"


def this_machine_key(target: Path, draft: Path | None, threads: int, offload: bool) -> StoreKey:
    """The key of a pair loaded here with ``threads`` threads; hashes each GGUF the
    first time it is seen (memoised; OSError when a file cannot be read)."""
    gpu = machine.gpu_hardware()
    hardware = machine.cpu_model() + (f" + {gpu.vendor} {gpu.detail}" if gpu else "")
    build = " | ".join(
        (
            backend.llama_cpp_python_version(),
            backend.llama_cpp_commit(),
            backend.system_info(),
            backend.gpu_backend(),
        )
    )
    return StoreKey(
        hardware=hardware,
        threads=int(threads),
        build=build,
        offload=bool(offload),
        target_sha256=file_sha256(target),
        draft_sha256=file_sha256(draft) if draft is not None else "",
    )


def file_sha256(path: Path, directory: Path | None = None) -> str:
    """The sha256 of ``path`` (hex), memoised in ``digests.json`` by resolved path, size
    and mtime, so a file is hashed once until it changes."""
    path = Path(path).resolve()
    st = path.stat()
    ident = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    folder = directory or store_dir()
    memo = folder / "digests.json"
    known = _read_json(memo) or {}
    if isinstance(known.get(ident), str):
        return known[ident]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    digest = h.hexdigest()
    try:
        _update_file(memo, lambda old: {**(old if isinstance(old, dict) else {}), ident: digest})
    except OSError as exc:
        log.info("localspec: could not memoise the digest of %s (%s)", path.name, exc)
    return digest


class MachineStore:
    """The records of one folder (default :func:`store_dir`)."""

    def __init__(self, directory: Path | None = None):
        self.directory = Path(directory) if directory is not None else store_dir()

    def path(self, key: StoreKey) -> Path:
        return self.directory / key.file_name

    def load(self, key: StoreKey) -> dict | None:
        """The record stored for ``key``, or None: none stored, or a file that is corrupt,
        of another version or of another key (said once in the log, then ignored)."""
        path = self.path(key)
        if not path.exists():
            return None
        data = _read_json(path)
        return _record_of(data, key, path)

    def update(self, key: StoreKey, merge: Callable[[dict | None], dict]) -> dict:
        """Replace ``key``'s record with ``merge(current record or None)``, read and written
        under the folder's lock so concurrent updates all count.  Returns what was written;
        OSError when the folder cannot be written."""

        def rewrite(data):
            current = _record_of(data, key, self.path(key)) if data is not None else None
            record = merge(current)
            return {
                "version": VERSION,
                "key": asdict(key),
                "updated": time.time(),
                "record": record,
            }

        return _update_file(self.path(key), rewrite)["record"]

    def entries(self) -> list[dict]:
        """Every valid file's ``{"path", "key", "updated", "record"}`` (for ``doctor``)."""
        found = []
        for path in sorted(self.directory.glob("*.json")):
            data = _read_json(path, quiet=True)
            if (
                isinstance(data, dict)
                and data.get("version") == VERSION
                and isinstance(data.get("key"), dict)
            ):
                found.append(
                    {"path": str(path), **{k: data.get(k) for k in ("key", "updated", "record")}}
                )
        return found

    def forget(self) -> int:
        """Delete every record (not the digests); returns how many were deleted."""
        removed = 0
        for path in self.directory.glob("*.json"):
            if path.name != "digests.json":
                path.unlink(missing_ok=True)
                removed += 1
        return removed


def _record_of(data, key: StoreKey, path: Path) -> dict | None:
    if data is None:
        return None
    if (
        not isinstance(data, dict)
        or data.get("version") != VERSION
        or not isinstance(data.get("record"), dict)
    ):
        log.warning("localspec: ignoring %s: not a record of this version", path)
        return None
    if data.get("key") != asdict(key):
        log.warning("localspec: ignoring %s: it holds another machine, build or model", path)
        return None
    return data["record"]


def _read_json(path: Path, quiet: bool = False):
    """The parsed file, None when missing; a corrupt file is None too (logged)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        if not quiet:
            log.warning("localspec: ignoring %s: %s", path, exc)
        return None


def _update_file(path: Path, rewrite: Callable) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=30):
        data = _read_json(path)
        new = rewrite(data)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(new, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return new
