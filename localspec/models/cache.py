"""Model files on disk: localspec's own cache (``$LOCALSPEC_CACHE`` or the platformdirs user
cache dir) and the standard Hugging Face cache: where a catalogue entry's file is, deleting one;
and what the fetchers into them share (the progress callback's type, sha256, one-line errors).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import platformdirs

from localspec.errors import DownloadError
from localspec.models.catalog import ModelEntry

ProgressFn = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)``, called as a file is fetched."""

CHUNK = 8 << 20  # bytes copied per read while assembling and hashing


def cache_dir() -> Path:
    """Where localspec keeps model files it assembled itself."""
    override = os.environ.get("LOCALSPEC_CACHE")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("localspec")) / "models"


def cached_path(entry: ModelEntry) -> Path:
    return cache_dir() / entry.repo.replace("/", "--") / entry.file


def find_local(entry: ModelEntry) -> Path | None:
    """The entry's file if it is already on disk (with the catalogued size, when one
    is known), else None.  Looks in localspec's cache, then the Hugging Face cache."""
    own = cached_path(entry)
    if own.is_file() and _has_size(own, entry.size):
        return own
    from huggingface_hub import try_to_load_from_cache

    hf = try_to_load_from_cache(entry.repo, entry.file, revision=entry.revision or None)
    if isinstance(hf, str) and _has_size(Path(hf), entry.size):
        return Path(hf)
    return None


def _has_size(path: Path, size: int) -> bool:
    return size == 0 or path.stat().st_size == size


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def remove_from_hf_cache(path: Path) -> None:
    """Delete a snapshot file, and the blob it points to unless another snapshot of the
    repository still links to it."""
    blob = path.resolve()
    path.unlink(missing_ok=True)
    if blob == path:
        return
    snapshots = blob.parent.parent / "snapshots"
    if not any(p.is_symlink() and p.resolve() == blob for p in snapshots.rglob("*")):
        blob.unlink(missing_ok=True)


def delete_cached(path: Path) -> int:
    """Delete a model file from localspec's cache or the Hugging Face cache; returns
    the bytes freed (0 when another snapshot still uses the data).  Paths are resolved
    first (``..``, symlinked folders), so nothing outside the caches is touched: a file
    outside both raises DownloadError (it is the user's own, not ours to delete)."""
    from huggingface_hub import constants

    path = Path(path).absolute()
    folder = path.parent.resolve()  # the folder as it really is; the file itself may be a link
    own, hf = cache_dir().resolve(), Path(constants.HF_HUB_CACHE).resolve()
    if folder.is_relative_to(own) and path.resolve().is_relative_to(own):
        freed = path.resolve().stat().st_size
        (folder / path.name).unlink()
    elif folder.is_relative_to(hf) and path.resolve().is_relative_to(hf):
        blob = path.resolve()
        size = blob.stat().st_size
        remove_from_hf_cache(folder / path.name)
        freed = 0 if blob.exists() else size
    else:
        raise DownloadError(
            f"{path} is not in localspec's cache nor the Hugging Face cache; delete it yourself "
            "if you mean to"
        )
    return freed


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
