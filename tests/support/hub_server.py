"""A stand-in for the Hugging Face Hub on 127.0.0.1, enough for huggingface_hub's
``hf_hub_download`` and ``list_repo_tree``.

Like the real Hub, ``HEAD /{repo}/resolve/{rev}/{file}`` answers with a redirect to a
CDN host (here ``localhost`` instead of ``127.0.0.1``, so huggingface_hub does not
follow it) carrying ``X-Repo-Commit``, ``X-Linked-Etag`` (the sha256) and
``X-Linked-Size``; the CDN serves byte ranges.  Errors carry ``X-Error-Code`` as the
Hub's do (GatedRepo, RepoNotFound, EntryNotFound).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from localspec.models.catalog import ModelEntry
from localspec.models.discovery import ModelRef

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class FakeHub:
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (repo, file) -> content
    gated: set[str] = field(default_factory=set)
    private: set[str] = field(default_factory=set)
    corrupt: set[tuple[str, str]] = field(default_factory=set)  # served with one byte flipped
    drop_after: dict[tuple[str, str], int] = field(
        default_factory=dict
    )  # cut the body once after N bytes
    no_ranges: set[str] = field(
        default_factory=set
    )  # repos whose CDN ignores Range (answers 200, whole body)
    trickle_s: float = 0.0  # the CDN sleeps this long before each KiB it sends
    requests: list[tuple[str, str, str | None]] = field(
        default_factory=list
    )  # (method, path, Range)
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, repo: str, file: str, content: bytes) -> str:
        self.files[(repo, file)] = content
        return hashlib.sha256(content).hexdigest()

    def ranges_asked(self, file: str) -> list[int]:
        """Start offsets of the ranged GETs made for ``file``."""
        return [
            int(r.split("=")[1].split("-")[0])
            for m, p, r in self.requests
            if m == "GET" and p.endswith(file) and r
        ]

    def bytes_served(self, file: str) -> int:
        """Bytes asked of the CDN in closed ranges ``bytes=a-b`` of ``file``."""
        spans = [
            r.split("=")[1].split("-")
            for m, p, r in self.requests
            if m == "GET" and p.startswith("/cdn/") and p.endswith(file) and r
        ]
        return sum(int(b) + 1 - int(a) for a, b in spans if b)


def serve(hub: FakeHub) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.handle_error = lambda request, address: None  # a client hanging up mid-body is expected
    hub.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self._route(head=True)

        def do_GET(self):
            self._route(head=False)

        def _route(self, head: bool):
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path, self.headers.get("Range")))
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and "tree" in parts:
                self._tree("/".join(parts[2 : parts.index("tree")]))
            elif parts[0] == "cdn":
                self._content((parts[1] + "/" + parts[2], "/".join(parts[3:])), head)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(("/".join(parts[:2]), "/".join(parts[4:])))
            else:
                self._error(404, "EntryNotFound")

        def _gatekeep(self, repo: str) -> bool:
            if repo in hub.gated:
                self._error(401, "GatedRepo", f"Access to model {repo} is restricted.")
            elif repo in hub.private or not any(r == repo for r, _ in hub.files):
                self._error(401, "RepoNotFound", "Repository not found")
            else:
                return True
            return False

        def _resolve(self, key):
            if not self._gatekeep(key[0]):
                return
            if key not in hub.files:
                self._error(404, "EntryNotFound", "Entry not found")
                return
            content = hub.files[key]
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{hub.port}/cdn/{key[0]}/{key[1]}")
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Linked-Etag", f'"{hashlib.sha256(content).hexdigest()}"')
            self.send_header("X-Linked-Size", str(len(content)))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _content(self, key, head: bool):
            body = hub.files.get(key)
            if body is None:
                self._error(404, "EntryNotFound")
                return
            if key in hub.corrupt:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            start, end = 0, len(body) - 1
            ranged = bool(self.headers.get("Range")) and key[0] not in hub.no_ranges
            if ranged:  # "bytes=a-" or "bytes=a-b"
                first, _, last = self.headers["Range"].split("=")[1].partition("-")
                start, end = int(first), min(int(last), end) if last else end
            self.send_response(206 if ranged else 200)
            self.send_header("Content-Length", str(end + 1 - start))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if head:
                return
            cut = hub.drop_after.pop(key, None)
            if cut is not None:
                self.wfile.write(body[start : start + cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if not hub.trickle_s:
                self.wfile.write(body[start : end + 1])
                return
            for at in range(start, end + 1, 1024):
                time.sleep(hub.trickle_s)
                self.wfile.write(body[at : min(at + 1024, end + 1)])
                self.wfile.flush()

        def _tree(self, repo: str):
            if not self._gatekeep(repo):
                return
            listing = [
                {
                    "type": "file",
                    "path": f,
                    "size": len(c),
                    "oid": hashlib.sha1(c).hexdigest(),
                    "lfs": {
                        "oid": hashlib.sha256(c).hexdigest(),
                        "size": len(c),
                        "pointerSize": 134,
                    },
                }
                for (r, f), c in hub.files.items()
                if r == repo
            ]
            body = json.dumps(listing).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, code: str, message: str = ""):
            body = json.dumps({"error": message or code}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message or code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler


REPO = "acme/Tiny-GGUF"
FILE = "tiny-q4_k_m.gguf"
PAYLOAD = os.urandom(1 << 20) + b"end"  # 1 MiB and a bit: many 64 KiB chunks


def entry_for(fake: FakeHub, repo=REPO, file=FILE, content=PAYLOAD, **kw) -> ModelEntry:
    sha = fake.add(repo, file, content)
    return ModelEntry(name=file, repo=repo, file=file, size=len(content), sha256=sha, **kw)


def hub_ref(fake, content, repo="acme/Tiny-GGUF", file="t-q4_k_m.gguf") -> ModelRef:
    entry = entry_for(fake, repo=repo, file=file, content=content)
    return ModelRef(name=file, entry=entry, size=entry.size)
