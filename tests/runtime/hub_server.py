"""A small Hugging Face Hub on 127.0.0.1 for tests: the endpoints ``huggingface_hub`` calls.

* ``GET /api/models/{owner}/{repo}/revision/{rev}[?blobs=True]``: the model info with
  ``sha`` and ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs``). A one-part
  repository id (``gpt2``) works in every route too.
* ``HEAD``/``GET /{owner}/{repo}/resolve/{rev}/{path}``: a regular file answers 200 with
  ``ETag`` (its git blob id), ``X-Repo-Commit`` and the bytes; an LFS file answers 302 to
  the CDN with ``X-Linked-Etag`` (its sha256), ``X-Linked-Size`` and ``X-Repo-Commit``, as
  the Hub does.
* The CDN is a second server answering ``GET /lfs/{sha256}``, on another loopback address
  (127.0.0.2): the client must not follow the HEAD's redirect to it, and it follows one to
  any origin it trusts as a Hub, among them ``HF_ENDPOINT`` as it was when
  ``huggingface_hub`` was imported. An earlier test's Hub on 127.0.0.1 at the port a later
  CDN got made the client follow the redirect and fail on the CDN's answer (no
  ``X-Repo-Commit``): a flaky ``test_load_hub`` on a clean clone.

Errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``)
the way ``huggingface_hub`` maps them. Every request is logged in ``requests``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

__all__ = ["CDN_HOST", "LocalHub", "git_blob_id"]

# The CDN's address: loopback, never a Hub endpoint's host (see the module docstring)
CDN_HOST = "127.0.0.2"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class _Commit:
    sha: str
    files: dict[str, bytes]
    lfs: set[str]


@dataclass
class _Repo:
    commits: dict[str, _Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)

    def resolve(self, revision: str) -> _Commit | None:
        sha = self.branches.get(revision, revision)
        return self.commits.get(sha)


class LocalHub:
    """``publish()`` files, ``start()``, point ``HF_ENDPOINT`` at ``endpoint``, ``stop()``.

    ``corrupt(repo, path)`` serves other bytes of the same size for that file (from the
    CDN for LFS files); ``no_etag(repo, path)`` leaves its ETag out of the model info;
    ``outage = 503`` makes every Hub route answer that status.
    """

    def __init__(self) -> None:
        self.repos: dict[str, _Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.corrupted: set[tuple[str, str]] = set()
        self.without_etag: set[tuple[str, str]] = set()
        self.outage: int | None = None  # an HTTP status every Hub route answers, e.g. 503
        self._blobs: dict[str, bytes] = {}
        self._servers: list[ThreadingHTTPServer] = []
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.endpoint = ""
        self.cdn = ""

    # ------------------------------------------------------------ content

    def publish(
        self, repo_id: str, files: dict[str, bytes], *, lfs: set[str] = frozenset(), branch="main"
    ) -> str:
        """A new commit on ``branch`` with these files (the whole tree); returns its sha."""
        repo = self.repos.setdefault(repo_id, _Repo())
        digest = hashlib.sha1(repr((repo_id, len(repo.commits), sorted(files.items()))).encode())
        sha = digest.hexdigest()
        repo.commits[sha] = _Commit(sha, dict(files), set(lfs))
        repo.branches[branch] = sha
        for path in lfs:
            self._blobs[hashlib.sha256(files[path]).hexdigest()] = files[path]
        return sha

    def corrupt(self, repo_id: str, path: str) -> None:
        self.corrupted.add((repo_id, path))

    def no_etag(self, repo_id: str, path: str) -> None:
        self.without_etag.add((repo_id, path))

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for m, _ in self.requests if method is None or m == method)

    # ------------------------------------------------------------ servers

    def start(self) -> LocalHub:
        hub_server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(cdn=False))
        cdn_server = ThreadingHTTPServer((CDN_HOST, 0), self._handler(cdn=True))
        self.endpoint = f"http://127.0.0.1:{hub_server.server_address[1]}"
        self.cdn = f"http://{CDN_HOST}:{cdn_server.server_address[1]}"
        for server in (hub_server, cdn_server):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        """Stop both servers and drop open (keep-alive) connections: the Hub is gone."""
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()
        with self._lock:
            connections, self._connections = self._connections, set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _handler(self, *, cdn: bool) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def setup(self) -> None:
                super().setup()
                with hub._lock:
                    hub._connections.add(self.connection)

            def finish(self) -> None:
                with hub._lock:
                    hub._connections.discard(self.connection)
                super().finish()

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, *, body: bool) -> None:
                path = urlsplit(self.path).path
                if path == "/api/agent-harnesses":
                    # huggingface_hub's once-a-process user-agent lookup, not a Hub access
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with hub._lock:
                    hub.requests.append((self.command, ("cdn:" if cdn else "") + path))
                status, headers, data = hub._cdn(path) if cdn else hub._route(path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        return Handler

    # ------------------------------------------------------------ routes

    def _error(self, code: str, commit: str | None = None) -> tuple[int, dict, bytes]:
        headers = {"X-Error-Code": code, "Content-Type": "application/json"}
        if commit:
            headers["X-Repo-Commit"] = commit
        return 404, headers, json.dumps({"error": code}).encode()

    def _route(self, path: str) -> tuple[int, dict, bytes]:
        if self.outage is not None:
            return self.outage, {"Content-Type": "text/plain"}, b"the Hub is down"
        parts = path.lstrip("/").split("/")
        # an id is 'owner/name' or, like 'gpt2', one part: the word after it says which
        if parts[:2] == ["api", "models"]:
            for n in (2, 1):
                if len(parts) >= 4 + n and parts[2 + n] == "revision":
                    repo_id = "/".join(parts[2 : 2 + n])
                    return self._model_info(repo_id, unquote("/".join(parts[3 + n :])))
        for n in (2, 1):
            if len(parts) >= 3 + n and parts[n] == "resolve":
                return self._resolve("/".join(parts[:n]), unquote(parts[n + 1]), parts[n + 2 :])
        return 404, {}, b"not found"

    def _commit(self, repo_id: str, revision: str) -> _Commit | tuple[int, dict, bytes]:
        """The commit ``revision`` names in ``repo_id``, else the Hub's error answer (a tuple)."""
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error("RepoNotFound")
        commit = repo.resolve(revision)
        return self._error("RevisionNotFound") if commit is None else commit

    def _model_info(self, repo_id: str, revision: str) -> tuple[int, dict, bytes]:
        commit = self._commit(repo_id, revision)
        if isinstance(commit, tuple):
            return commit
        siblings = []
        for name, data in sorted(commit.files.items()):
            s: dict = {"rfilename": name, "size": len(data)}
            if (repo_id, name) not in self.without_etag:
                if name in commit.lfs:
                    sha = hashlib.sha256(data).hexdigest()
                    s["blobId"] = git_blob_id(f"oid sha256:{sha}\n".encode())
                    s["lfs"] = {"size": len(data), "sha256": sha, "pointerSize": 134}
                else:
                    s["blobId"] = git_blob_id(data)
            siblings.append(s)
        info = {"id": repo_id, "modelId": repo_id, "sha": commit.sha, "siblings": siblings}
        return 200, {"Content-Type": "application/json"}, json.dumps(info).encode()

    def _resolve(self, repo_id: str, revision: str, rest: list[str]) -> tuple[int, dict, bytes]:
        commit = self._commit(repo_id, revision)
        if isinstance(commit, tuple):
            return commit
        name = unquote("/".join(rest))
        data = commit.files.get(name)
        if data is None:
            return self._error("EntryNotFound", commit.sha)
        headers = {"X-Repo-Commit": commit.sha}
        if name in commit.lfs:
            sha = hashlib.sha256(data).hexdigest()
            headers.update(
                {
                    "Location": f"{self.cdn}/lfs/{sha}?repo={repo_id}&file={name}",
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(data)),
                    "ETag": f'"{git_blob_id(data)}"',
                }
            )
            return 302, headers, b""
        headers["ETag"] = f'"{git_blob_id(data)}"'
        if (repo_id, name) in self.corrupted:
            data = bytes(b ^ 0xFF for b in data[:16]) + data[16:]  # same size, other bytes
        return 200, headers, data

    def _cdn(self, path: str) -> tuple[int, dict, bytes]:
        parts = path.lstrip("/").split("/")
        data = self._blobs.get(parts[1]) if len(parts) == 2 and parts[0] == "lfs" else None
        if data is None:
            return 404, {}, b"no such blob"
        if any(hashlib.sha256(self._file(r, p)).hexdigest() == parts[1] for r, p in self.corrupted):
            data = bytes(b ^ 0xFF for b in data[:16]) + data[16:]  # same size, other bytes
        return 200, {"ETag": f'"{parts[1]}"'}, data

    def _file(self, repo_id: str, path: str) -> bytes:
        repo = self.repos[repo_id]
        return repo.commits[repo.branches["main"]].files.get(path, b"")
