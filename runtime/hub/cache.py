"""The Hugging Face Hub cache on disk, as Ember reads and writes it.

Where the cache is (``HF_HUB_CACHE``, ``HF_HOME``, read per call), the folder of a
repository (``<cache>/models--owner--repo``), the repository metadata Ember saves per
revision and per commit (``<folder>/ember/revisions/``), the ETag it saves per cached file
(``<folder>/ember/etags/<commit>/``, valid while the file's size and mtime are unchanged),
how a file is hashed like the Hub does, and how files are placed in a snapshot. Nothing here
sends a request or emits an event: that is ``hub.py``.

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
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = [
    "COMMIT",
    "RepoFile",
    "RepoMetadata",
    "cached_copies",
    "discard",
    "file_etag",
    "hub_cache_dir",
    "make_plain",
    "metadata_from_snapshot",
    "place",
    "read_saved_metadata",
    "repo_folder",
    "save_etag",
    "save_metadata",
    "saved_etag",
]

COMMIT = re.compile(r"[0-9a-f]{40}")
"""A commit hash: a revision whose files never change."""
_CHUNK = 1 << 20


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


def read_saved_metadata(folder: Path, revision: str) -> RepoMetadata | None:
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


def save_metadata(folder: Path, revision: str, meta: RepoMetadata) -> None:
    text = json.dumps(meta.to_json(), indent=1, sort_keys=True)
    for rev in {revision, meta.commit}:
        _write_atomic(_saved_path(folder, rev), text)
    if revision != meta.commit:
        # huggingface_hub's ref, so its tools find these files offline by branch name too
        ref = folder / "refs" / revision
        if not ref.is_file() or ref.read_text() != meta.commit:
            _write_atomic(ref, meta.commit)


def metadata_from_snapshot(folder: Path, repo_id: str, revision: str) -> RepoMetadata | None:
    """Metadata rebuilt from huggingface_hub's refs and snapshot (files of other tools)."""
    commit = revision if COMMIT.fullmatch(revision) else None
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


# ---------------------------------------------------------------- files


def file_etag(path: Path, lfs: bool) -> str:
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


def saved_etag(folder: Path, commit: str, path: str, local: Path) -> str | None:
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


def save_etag(folder: Path, commit: str, path: str, local: Path, etag: str) -> None:
    st = local.stat()
    text = json.dumps({"etag": etag, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    _write_atomic(_marker(folder, commit, path), text)


def discard(folder: Path, commit: str, path: str, local: Path) -> None:
    """Remove a damaged file: the snapshot entry, the blob it links to, its saved ETag."""
    if local.is_symlink():
        target = local.resolve()
        if target.parent == folder / "blobs":
            target.unlink(missing_ok=True)
    local.unlink(missing_ok=True)
    _marker(folder, commit, path).unlink(missing_ok=True)


def place(src: Path, dst: Path, *, plain: bool) -> None:
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


def make_plain(local: Path, *, move: bool) -> None:
    """Turn a snapshot symlink into a plain file: the blob moves into the snapshot when
    this load just downloaded it, else it is copied (other snapshots may link to it)."""
    if local.is_symlink():
        if move:
            os.replace(local.resolve(), local)
        else:
            place(local.resolve(), local, plain=True)


def cached_copies(folder: Path, entry: RepoFile, commit: str) -> Iterator[Path]:
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
