"""A GGUF file's header read from the Hugging Face Hub with HTTP range requests, without
downloading the weights (:func:`remote_gguf_header`).
"""

from __future__ import annotations

import functools
import io
import re
import time

from localspec.errors import DownloadError
from localspec.models.cache import one_line
from localspec.models.catalog import ModelEntry
from localspec.models.gguf_info import GGUFInfo, read_gguf_header
from localspec.models.hub import check_reachable, hub_error_message

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
        raise DownloadError(f"{repo}/{file}: {one_line(exc)}") from None


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
