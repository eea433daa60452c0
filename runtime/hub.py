"""Models from the Hugging Face Hub, in the Hugging Face cache, with the Hub cache events.

``download_model("owner/repo", "onnx/model.onnx")`` fetches the model file, its external
data files and the config file next to it into the ``huggingface_hub`` cache
(``HF_HUB_CACHE``, ``HF_HOME``; the same layout every Hugging Face tool reads), and returns
the model's path inside the snapshot folder of the resolved commit. Each file emits one
event (see the "Hub events" section of the Transmuter telemetry seed):

* ``ember.hub.hit`` ``{count: 1, bytes}`` ``{source, revision, check}``: the cached file is
  current. ``check`` is ``etag`` (Ember's saved ETag of the file equals the repository's),
  ``hash`` (the file had no saved ETag, e.g. another tool downloaded it: Ember hashed it
  like the Hub does, compared and saved), ``none`` (the repository gives no ETag for the
  file) or ``offline`` (``HF_HUB_OFFLINE=1`` or ``offline=True``: used without a check).
* span ``ember.hub.download`` ``{source, revision}``, stop measurement ``bytes``.

``source`` is ``hub_source``'s text: ``hf://owner/repo/path/in/repo``; a one-part repository
id carries its revision, ``hf://gpt2@main/onnx/model.onnx``, so that the id's end is known.

The repository's file list with the ETags (``model_info`` with ``files_metadata``) comes
from span ``ember.hub.info`` ``{source: "hf://owner/repo", revision}``, stop metadata
``result``: ``fetched``, or ``saved`` when the Hub errors or cannot be reached and Ember's
saved copy is used. Ember saves that copy per revision and per commit in
``<cache>/models--owner--repo/ember/revisions/``; a 40-hex commit revision with a saved copy
sends no request and emits no event (a commit's files never change), and so does offline
mode.

Integrity: every downloaded file is hashed against the repository metadata (sha256 for LFS
files, the git blob sha1 otherwise) before Ember saves its ETag; a mismatch removes the file
from the cache. A file without a saved ETag (a killed process, another tool) is hashed before
use, so a partial or damaged file is never taken as good.

Layout note: ``onnx`` refuses external data that is a symbolic link or has several hard
links (GHSA-538c-55jv-c5g9), and the runtime reads external data from the model's own
folder. So the model file and its external data files are stored as plain files in the
snapshot (as ``huggingface_hub`` itself does where symlinks are unsupported); other files
(configs) stay symlinks into ``blobs/``. A blob Ember downloaded moves into the snapshot; a
blob another tool downloaded (or another commit links to) is copied, so that tool's files
stay intact. ``scan_cache_dir`` and ``hf_hub_download(local_files_only=True)`` read the
result like any Hugging Face cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from ember.recorder import bus
from ember.recorder import events as E

from .errors import LoadError

__all__ = [
    "CONFIG_FILES",
    "HubError",
    "HubIntegrityError",
    "HubSource",
    "RepoFile",
    "RepoMetadata",
    "download_model",
    "hub_cache_dir",
    "hub_endpoint",
    "hub_source",
    "is_offline",
    "parse_hub_source",
    "repo_folder",
]

CONFIG_FILES: tuple[str, ...] = ("config.json",)
"""Config files fetched with a model: the nearest one in the model's folder or above."""

_COMMIT = re.compile(r"[0-9a-f]{40}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_CHUNK = 1 << 20


class HubError(LoadError):
    """A Hub model could not be fetched; the message says why and what to do."""


class HubIntegrityError(HubError):
    """A downloaded file does not match the hash in the repository metadata."""


# ---------------------------------------------------------------- sources and validation


class HubSource(NamedTuple):
    """A model file in a Hub repository, as a Hub source names it."""

    repo_id: str
    filename: str
    revision: str | None = None  # named in the source ('@v1'); None: the load's revision


# hf://<id>@<revision>[/<path>] (huggingface_hub's HF URI grammar): '@' ends the id; the
# revision is quoted ('refs%2Fpr%2F1') or one of the Hub's refs/pr/N, refs/convert/NAME
_WITH_REVISION = re.compile(
    r"hf://(?P<id>[^/@]+(?:/[^/@]+)?)@(?P<rev>refs/pr/\d+|refs/convert/\w+|[^/]*)(?:/(?P<path>.*))?",
    re.S,
)


def hub_source(
    repo_id: str, path: str | None = None, revision: str = "main", *, with_revision: bool = False
) -> str:
    """The text form of a Hub file (of the repository without ``path``): the ``source`` of
    Hub events and of ``Model.source``.

    ``hf://owner/name/path/in/repo``, in the grammar of huggingface_hub's HF URIs
    (``hf://<id>[@<revision>][/<path>]``). The revision (quoted) is written
    ``with_revision``, and always after a one-part id (``gpt2``):
    ``hf://gpt2@main/onnx/model.onnx``, because only the '@' says where such an id ends
    (``hf://gpt2/onnx/model.onnx`` reads as the repository ``gpt2/onnx``).
    ``parse_hub_source`` reads every form back, as does the ``hub_files`` view.
    """
    root = f"hf://{repo_id}"
    if with_revision or "/" not in repo_id:
        root += "@" + quote(revision, safe="")
    return root if path is None else f"{root}/{path}"


def parse_hub_source(source: Any) -> HubSource | None:
    """The repository, file and revision of a Hub source; ``None`` for anything else.

    Hub sources are ``"hf://owner/repo/path/in/repo.onnx"``, with a revision
    ``"hf://owner/repo@v1/path/in/repo.onnx"`` (a one-part id needs it:
    ``"hf://gpt2@main/model.onnx"``), and ``("hf", repo_id, file)``.
    The repository id, file name and revision are validated here, before any request: a
    ``ValueError`` names the bad part.
    """
    revision = None
    if isinstance(source, str):
        if not source.startswith("hf://"):
            return None
        tagged = _WITH_REVISION.fullmatch(source)
        if tagged is not None:
            repo_id, filename = tagged["id"], tagged["path"] or ""
            revision = unquote(tagged["rev"])
            validate_revision(revision)
        else:
            parts = source[len("hf://") :].split("/", 2)
            if len(parts) < 3 or not parts[2]:
                parts = [*parts, "", ""]
            repo_id, filename = f"{parts[0]}/{parts[1]}", parts[2]
        if not filename:
            raise ValueError(
                f"Hub source {source!r}: give the repository and the file, "
                "as 'hf://owner/repo/path/in/repo.onnx' (a revision: 'hf://owner/repo@v1/...')"
            )
    elif isinstance(source, (tuple, list)) and source and source[0] == "hf":
        if len(source) != 3 or not all(isinstance(p, str) for p in source):
            raise ValueError(
                f"Hub source {source!r}: give ('hf', 'owner/repo', 'path/in/repo.onnx')"
            )
        repo_id, filename = source[1], source[2]
    else:
        return None
    validate_repo_id(repo_id)
    validate_filename(filename)
    return HubSource(repo_id, filename, revision)


def validate_repo_id(repo_id: str) -> None:
    """Raise ``ValueError`` unless ``repo_id`` is ``name`` or ``owner/name`` as the Hub allows."""
    if not isinstance(repo_id, str) or not repo_id:
        raise ValueError(f"Hub repository id {repo_id!r}: give 'owner/repo'")
    if _CONTROL.search(repo_id):
        raise ValueError(f"Hub repository id {repo_id!r} contains a control character")
    if "\\" in repo_id:
        raise ValueError(f"Hub repository id {repo_id!r} contains a backslash")
    parts = repo_id.split("/")
    if len(parts) > 2:
        raise ValueError(f"Hub repository id {repo_id!r}: has more than 'owner/repo'")
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"Hub repository id {repo_id!r}: the part {part!r} is not a name")
        if not _REPO_PART.fullmatch(part) or ".." in part or "--" in part:
            raise ValueError(
                f"Hub repository id {repo_id!r}: the part {part!r} may only use letters, "
                "digits, '-', '_' and '.', start with a letter or digit, and not contain "
                "'--' or '..'"
            )
    if len(repo_id) > 96:
        raise ValueError(f"Hub repository id {repo_id!r} is longer than 96 characters")


def validate_filename(filename: str, *, what: str = "file name") -> None:
    """Raise ``ValueError`` unless ``filename`` is a plain relative path inside a repository."""
    if not isinstance(filename, str) or not filename:
        raise ValueError(f"Hub {what} {filename!r}: give the path of the file in the repository")
    if _CONTROL.search(filename):
        raise ValueError(f"Hub {what} {filename!r} contains a control character")
    if "\\" in filename:
        raise ValueError(f"Hub {what} {filename!r} contains a backslash; use '/' between folders")
    if filename.startswith("/") or re.match(r"[A-Za-z]:", filename):
        raise ValueError(
            f"Hub {what} {filename!r} is an absolute path; give it relative to the repo"
        )
    for part in filename.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(
                f"Hub {what} {filename!r}: the part {part!r} is not allowed; give a plain "
                "path inside the repository, such as 'onnx/model.onnx'"
            )


def validate_revision(revision: str) -> None:
    """Raise ``ValueError`` for a revision that could not name a branch, tag or commit."""
    if not isinstance(revision, str) or not revision:
        raise ValueError(f"Hub revision {revision!r}: give a branch, a tag or a commit hash")
    if _CONTROL.search(revision) or "\\" in revision:
        raise ValueError(f"Hub revision {revision!r} contains a control character or backslash")
    if revision.startswith("/") or any(p in ("", ".", "..") for p in revision.split("/")):
        raise ValueError(f"Hub revision {revision!r} is not a branch, tag or commit name")


# ---------------------------------------------------------------- settings (read per call)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def is_offline() -> bool:
    """Offline mode as ``huggingface_hub`` defines it, read now (not at import time)."""
    from huggingface_hub import constants

    return (
        _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE") or constants.HF_HUB_OFFLINE
    )


def hub_endpoint() -> str:
    """``HF_ENDPOINT`` as set now, else the endpoint ``huggingface_hub`` read at import."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_cache_dir() -> Path:
    """The Hugging Face Hub cache, with ``huggingface_hub``'s precedence, read now."""
    env = os.environ
    if env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE"):
        raw = env.get("HF_HUB_CACHE") or env["HUGGINGFACE_HUB_CACHE"]
    elif env.get("HF_HOME"):
        raw = os.path.join(env["HF_HOME"], "hub")
    elif env.get("XDG_CACHE_HOME"):
        raw = os.path.join(env["XDG_CACHE_HOME"], "huggingface", "hub")
    else:
        from huggingface_hub import constants

        raw = constants.HF_HUB_CACHE
    return Path(os.path.expandvars(os.path.expanduser(raw))).resolve()


def repo_folder(repo_id: str, cache_dir: Path | None = None) -> Path:
    """The cache folder of a model repository: ``<cache>/models--owner--repo``."""
    return (cache_dir or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


# ---------------------------------------------------------------- repository metadata


@dataclass(frozen=True)
class RepoFile:
    """One file of a repository at a commit, as the Hub lists it."""

    path: str
    size: int | None
    etag: str | None  # the Hub's ETag: LFS sha256, else the git blob id
    lfs: bool


@dataclass(frozen=True)
class RepoMetadata:
    """A repository's file list at one commit: what Ember saves per revision."""

    repo_id: str
    commit: str
    files: dict[str, RepoFile]

    def to_json(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "commit": self.commit,
            "files": {
                p: {"size": f.size, "etag": f.etag, "lfs": f.lfs} for p, f in self.files.items()
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RepoMetadata:
        return cls(
            repo_id=data["repo_id"],
            commit=data["commit"],
            files={
                p: RepoFile(p, f.get("size"), f.get("etag"), bool(f.get("lfs")))
                for p, f in data["files"].items()
            },
        )


def _saved_path(folder: Path, revision: str) -> Path:
    return folder / "ember" / "revisions" / (quote(revision, safe="") + ".json")


def _read_saved(folder: Path, revision: str) -> RepoMetadata | None:
    path = _saved_path(folder, revision)
    try:
        return RepoMetadata.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # a damaged copy is as good as none: the Hub is asked again


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _save(folder: Path, revision: str, meta: RepoMetadata) -> None:
    text = json.dumps(meta.to_json(), indent=1, sort_keys=True)
    for rev in {revision, meta.commit}:
        _write_atomic(_saved_path(folder, rev), text)
    if revision != meta.commit:
        # huggingface_hub's ref, so its tools find these files offline by branch name too
        ref = folder / "refs" / revision
        if not ref.is_file() or ref.read_text() != meta.commit:
            _write_atomic(ref, meta.commit)


def _from_snapshot(folder: Path, repo_id: str, revision: str) -> RepoMetadata | None:
    """Metadata rebuilt from huggingface_hub's refs and snapshot (files of other tools)."""
    commit = revision if _COMMIT.fullmatch(revision) else None
    ref = folder / "refs" / revision
    if commit is None and ref.is_file():
        commit = ref.read_text().strip()
    if not commit:
        return None
    snap = folder / "snapshots" / commit
    if not snap.is_dir():
        return None
    files = {}
    for path in snap.rglob("*"):
        if path.is_file():
            rel = path.relative_to(snap).as_posix()
            files[rel] = RepoFile(rel, path.stat().st_size, None, False)
    return RepoMetadata(repo_id, commit, files)


def _fetch_metadata(repo_id: str, revision: str, endpoint: str) -> RepoMetadata:
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True)
    if not info.sha or not _COMMIT.fullmatch(info.sha):
        raise HubError(
            f"the Hub at {endpoint} answered for hf://{repo_id} without a commit hash; "
            "check that HF_ENDPOINT points to a Hugging Face Hub"
        )
    files = {}
    for s in info.siblings or []:
        etag = s.lfs.sha256 if s.lfs is not None else s.blob_id
        files[s.rfilename] = RepoFile(s.rfilename, s.size, etag, s.lfs is not None)
    return RepoMetadata(repo_id, info.sha, files)


def _hub_errors() -> tuple[type[BaseException], ...]:
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    # HfHubHTTPError: any error status; httpx2.HTTPError: unreachable, timeouts;
    # OSError: offline mode and sockets; ValueError/KeyError: a non-Hub answer.
    return (HfHubHTTPError, httpx2.HTTPError, OSError, ValueError, KeyError)


def repo_metadata(
    repo_id: str, revision: str, *, offline: bool, cache_dir: Path, endpoint: str
) -> RepoMetadata:
    """The file list of ``repo_id`` at ``revision``: from the Hub, or Ember's saved copy."""
    folder = repo_folder(repo_id, cache_dir)
    saved = _read_saved(folder, revision)
    if offline:
        found = saved or _from_snapshot(folder, repo_id, revision)
        if found is None:
            raise HubError(
                f"{hub_source(repo_id, revision=revision)} at revision {revision!r} is not in "
                f"the Hub cache {cache_dir} and the Hub is offline (HF_HUB_OFFLINE=1 or "
                "offline=True): run the load once online, or pass a local path to the model"
            )
        return found
    if saved is not None and _COMMIT.fullmatch(revision):
        return saved  # a commit's files never change: no request, no event
    source = hub_source(repo_id, revision=revision)
    with bus.span(E.HUB_INFO, {"source": source, "revision": revision}) as span:
        try:
            meta = _fetch_metadata(repo_id, revision, endpoint)
        except _hub_errors() as exc:
            if saved is None:
                reason = (
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                )
                raise HubError(
                    f"could not get the file list of {source} at revision {revision!r} from "
                    f"the Hub at {endpoint} ({type(exc).__name__}: {reason}), and Ember has no "
                    f"saved copy in {folder}. Check the network and HF_ENDPOINT, check the "
                    "repository id and revision, or run the load once online, or pass a local "
                    "path to the model"
                ) from exc
            span.set(result="saved")
            return saved
        _save(folder, revision, meta)
        span.set(result="fetched")
        return meta


# ---------------------------------------------------------------- files


def _file_etag(path: Path, lfs: bool) -> str:
    """The Hub's ETag of a local file: sha256 for LFS files, git blob sha1 otherwise."""
    if lfs:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1(usedforsecurity=False)
        h.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _marker(folder: Path, commit: str, path: str) -> Path:
    return folder / "ember" / "etags" / commit / (path + ".json")


def _saved_etag(folder: Path, commit: str, path: str, local: Path) -> str | None:
    """Ember's saved ETag of a cached file, if the file is still the one it was saved for."""
    try:
        data = json.loads(_marker(folder, commit, path).read_text(encoding="utf-8"))
        st = local.stat()
    except (OSError, ValueError):
        return None
    if data.get("size") != st.st_size or data.get("mtime_ns") != st.st_mtime_ns:
        return None
    etag = data.get("etag")
    return etag if isinstance(etag, str) else None


def _save_etag(folder: Path, commit: str, path: str, local: Path, etag: str) -> None:
    st = local.stat()
    text = json.dumps({"etag": etag, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    _write_atomic(_marker(folder, commit, path), text)


def _discard(folder: Path, commit: str, path: str, local: Path) -> None:
    """Remove a damaged file: the snapshot entry, the blob it links to, its saved ETag."""
    if local.is_symlink():
        target = local.resolve()
        if target.parent == folder / "blobs":
            target.unlink(missing_ok=True)
    local.unlink(missing_ok=True)
    _marker(folder, commit, path).unlink(missing_ok=True)


def _place(src: Path, dst: Path, *, plain: bool) -> None:
    """Put the cached ``src`` at ``dst`` atomically: a copy if ``plain``, else a symlink."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        if not plain:
            try:
                os.symlink(os.path.relpath(src, dst.parent), tmp)
            except OSError:  # no symlinks here (Windows without developer mode)
                plain = True
        if plain:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _make_plain(local: Path, *, move: bool) -> None:
    """Turn a snapshot symlink into a plain file: the blob moves into the snapshot when
    this load just downloaded it, else it is copied (other snapshots may link to it)."""
    if local.is_symlink():
        if move:
            os.replace(local.resolve(), local)
        else:
            _place(local.resolve(), local, plain=True)


def _cached_copies(folder: Path, entry: RepoFile, commit: str) -> Iterator[Path]:
    """Files in the cache that may hold ``entry``'s content: its blob, or the same path at
    other commits (plain files there). Each is hashed before use."""
    if entry.etag:
        yield folder / "blobs" / entry.etag
    snapshots = folder / "snapshots"
    if snapshots.is_dir():
        for snap in sorted(snapshots.iterdir()):
            cand = snap / entry.path
            if snap.name != commit and cand.is_file() and not cand.is_symlink():
                if entry.size is None or cand.stat().st_size == entry.size:
                    yield cand


@dataclass
class _Fetch:
    repo_id: str
    revision: str
    meta: RepoMetadata
    folder: Path
    cache_dir: Path
    endpoint: str
    offline: bool

    @property
    def snapshot(self) -> Path:
        return self.folder / "snapshots" / self.meta.commit

    def source(self, path: str) -> str:
        return hub_source(self.repo_id, path, self.revision)

    def _hit(self, path: str, local: Path, check: str) -> Path:
        bus.emit(
            E.HUB_HIT,
            {"count": 1, "bytes": local.stat().st_size},
            {"source": self.source(path), "revision": self.revision, "check": check},
        )
        return local

    def file(self, path: str, *, plain: bool) -> Path:
        """Fetch one file: a hit or a download. ``plain``: keep it as a plain file."""
        commit = self.meta.commit
        local = self.snapshot / path
        entry = self.meta.files.get(path)
        if self.offline:
            if local.is_file():
                return self._hit(path, local, "offline")
            raise HubError(
                f"{self.source(path)} at revision {self.revision!r} is not in the Hub cache "
                f"{self.cache_dir} and the Hub is offline (HF_HUB_OFFLINE=1 or offline=True): "
                "run the load once online, or pass a local path to the model"
            )
        if entry is None:
            raise HubError(f"{self.source(path)}: the repository has no such file at {commit}")
        if local.is_file():
            if entry.etag is None:
                return self._hit(path, local, "none")
            saved = _saved_etag(self.folder, commit, path, local)
            if saved == entry.etag:
                if plain and local.is_symlink():
                    _make_plain(local, move=False)
                    _save_etag(self.folder, commit, path, local, entry.etag)
                return self._hit(path, local, "etag")
            if saved is None and _file_etag(local, entry.lfs) == entry.etag:
                if plain:
                    _make_plain(local, move=False)
                _save_etag(self.folder, commit, path, local, entry.etag)
                return self._hit(path, local, "hash")
            _discard(self.folder, commit, path, local)
        elif entry.etag is not None:
            blob = self.folder / "blobs" / entry.etag
            for cand in _cached_copies(self.folder, entry, commit):
                if not cand.is_file():
                    continue
                if _file_etag(cand, entry.lfs) == entry.etag:
                    _place(cand, local, plain=plain)
                    _save_etag(self.folder, commit, path, local, entry.etag)
                    return self._hit(path, local, "hash")
                if cand == blob:
                    blob.unlink()  # named by the ETag but holds other bytes: damaged
        return self._download(path, entry, plain=plain)

    def _download(self, path: str, entry: RepoFile, *, plain: bool) -> Path:
        from huggingface_hub import hf_hub_download

        commit = self.meta.commit
        source = self.source(path)
        with bus.span(E.HUB_DOWNLOAD, {"source": source, "revision": self.revision}) as span:
            try:
                got = Path(
                    hf_hub_download(
                        self.repo_id,
                        path,
                        revision=commit,
                        cache_dir=self.cache_dir,
                        endpoint=self.endpoint,
                    )
                )
            except _hub_errors() as exc:
                raise HubError(
                    f"{source} at revision {self.revision!r}: the download from {self.endpoint} "
                    f"failed ({type(exc).__name__}: {exc}). Check the network and HF_ENDPOINT "
                    "and load again; nothing partial was kept in the cache"
                ) from exc
            local = self.snapshot / path
            if got != local:
                raise HubError(f"{source}: huggingface_hub stored it at {got}, expected {local}")
            if entry.etag is not None:
                actual = _file_etag(local, entry.lfs)
                if actual != entry.etag:
                    _discard(self.folder, commit, path, local)
                    kind = "sha256" if entry.lfs else "git blob sha1"
                    raise HubIntegrityError(
                        f"{source} at revision {self.revision!r}: the downloaded file has "
                        f"{kind} {actual} but the repository lists {entry.etag}; it was removed "
                        "from the cache. Load again; if it happens again, the file on the Hub "
                        "or a proxy on the way is damaged"
                    )
            if plain:
                # with an ETag, the blob did not exist before this download (see file()), so
                # no other snapshot links to it and it can move; without one, copy it
                _make_plain(local, move=entry.etag is not None)
            if entry.etag is not None:
                _save_etag(self.folder, commit, path, local, entry.etag)
            span.measure(bytes=local.stat().st_size)
        return local


# ---------------------------------------------------------------- model files


def external_data_locations(model_path: Path) -> list[str]:
    """The external data files of an ONNX model, in first-use order, without reading them.

    Walks the initializers, sparse initializers, tensor attributes and subgraphs of the
    main graph and of the model's functions.
    """
    import onnx

    try:
        proto = onnx.load_model(str(model_path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise LoadError(f"{model_path}: not an ONNX model ({exc})") from exc
    seen: dict[str, None] = {}

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for kv in t.external_data:
                if kv.key == "location":
                    seen.setdefault(kv.value, None)

    def nodes(ns: Any) -> None:
        for n in ns:
            for a in n.attribute:
                if a.HasField("t"):
                    tensor(a.t)
                for t in a.tensors:
                    tensor(t)
                if a.HasField("sparse_tensor"):
                    tensor(a.sparse_tensor.values)
                    tensor(a.sparse_tensor.indices)
                if a.HasField("g"):
                    graph(a.g)
                for g in a.graphs:
                    graph(g)

    def graph(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            tensor(t)
        for s in g.sparse_initializer:
            tensor(s.values)
            tensor(s.indices)
        nodes(g.node)

    graph(proto.graph)
    for f in proto.functions:
        nodes(f.node)
    return list(seen)


def _config_file(meta: RepoMetadata, filename: str) -> str | None:
    folder = posixpath.dirname(filename)
    while True:
        for name in CONFIG_FILES:
            cand = posixpath.join(folder, name) if folder else name
            if cand in meta.files:
                return cand
        if not folder:
            return None
        folder = posixpath.dirname(folder)


def download_model(
    repo_id: str,
    filename: str,
    *,
    revision: str = "main",
    offline: bool | None = None,
) -> Path:
    """Fetch a model file, its external data files and its config file from the Hub.

    Returns the model's path in the Hugging Face cache snapshot of the resolved commit,
    with its external data next to it. ``offline=None`` follows ``HF_HUB_OFFLINE``.
    Raises ``ValueError`` for a bad repository id, file name or revision (before any
    request), ``HubError`` when a file cannot be fetched, ``HubIntegrityError`` when a
    download does not match its hash.
    """
    validate_repo_id(repo_id)
    validate_filename(filename)
    validate_revision(revision)
    offline = is_offline() if offline is None else offline
    cache_dir = hub_cache_dir()
    endpoint = hub_endpoint()
    meta = repo_metadata(repo_id, revision, offline=offline, cache_dir=cache_dir, endpoint=endpoint)
    fetch = _Fetch(
        repo_id, revision, meta, repo_folder(repo_id, cache_dir), cache_dir, endpoint, offline
    )
    if filename not in meta.files:
        near = sorted(p for p in meta.files if p.endswith(".onnx"))[:10]
        raise HubError(
            f"{hub_source(repo_id, revision=revision)} has no file {filename!r} at revision "
            f"{revision!r} (commit {meta.commit}); its ONNX files: {', '.join(near) or 'none'}"
        )
    model = fetch.file(filename, plain=True)
    source = fetch.source(filename)
    folder = posixpath.dirname(filename)
    for location in external_data_locations(model):
        try:
            validate_filename(location, what="external data location")
        except ValueError as exc:
            raise HubError(
                f"{source}: {exc}; external data must be a file inside the model's folder"
            ) from None
        data = posixpath.join(folder, location) if folder else location
        if data not in meta.files and not offline:
            raise HubError(
                f"{source} keeps tensors in {location!r}, but the repository has no file"
                f" {data!r} at commit {meta.commit}"
            )
        fetch.file(data, plain=True)
    config = _config_file(meta, filename)
    if config is not None:
        fetch.file(config, plain=False)
    return model
