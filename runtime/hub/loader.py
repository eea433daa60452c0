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

The module layout: ``hub_names.py`` writes, reads and checks Hub sources; ``hub_cache.py``
owns the cache on disk (saved metadata and ETags, hashing, snapshot layout); this module asks
the Hub, decides hit or download per file and emits the events. Its public names include
those of both.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime.errors import LoadError
from ember.runtime.hub.cache import (
    COMMIT,
    RepoFile,
    RepoMetadata,
    cached_copies,
    discard,
    file_etag,
    hub_cache_dir,
    make_plain,
    metadata_from_snapshot,
    place,
    read_saved_metadata,
    repo_folder,
    save_etag,
    save_metadata,
    saved_etag,
)
from ember.runtime.hub.names import (
    HubSource,
    hub_source,
    parse_hub_source,
    validate_filename,
    validate_repo_id,
    validate_revision,
)

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


class HubError(LoadError):
    """A Hub model could not be fetched; the message says why and what to do."""


class HubIntegrityError(HubError):
    """A downloaded file does not match the hash in the repository metadata."""


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


# ---------------------------------------------------------------- repository metadata


def _fetch_metadata(repo_id: str, revision: str, endpoint: str) -> RepoMetadata:
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True)
    if not info.sha or not COMMIT.fullmatch(info.sha):
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
    saved = read_saved_metadata(folder, revision)
    if offline:
        found = saved or metadata_from_snapshot(folder, repo_id, revision)
        if found is None:
            raise HubError(
                f"{hub_source(repo_id, revision=revision)} at revision {revision!r} is not in "
                f"the Hub cache {cache_dir} and the Hub is offline (HF_HUB_OFFLINE=1 or "
                "offline=True): run the load once online, or pass a local path to the model"
            )
        return found
    if saved is not None and COMMIT.fullmatch(revision):
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
        save_metadata(folder, revision, meta)
        span.set(result="fetched")
        return meta


# ---------------------------------------------------------------- files


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
            saved = saved_etag(self.folder, commit, path, local)
            if saved == entry.etag:
                if plain and local.is_symlink():
                    make_plain(local, move=False)
                    save_etag(self.folder, commit, path, local, entry.etag)
                return self._hit(path, local, "etag")
            if saved is None and file_etag(local, entry.lfs) == entry.etag:
                if plain:
                    make_plain(local, move=False)
                save_etag(self.folder, commit, path, local, entry.etag)
                return self._hit(path, local, "hash")
            discard(self.folder, commit, path, local)
        elif entry.etag is not None:
            blob = self.folder / "blobs" / entry.etag
            for cand in cached_copies(self.folder, entry, commit):
                if not cand.is_file():
                    continue
                if file_etag(cand, entry.lfs) == entry.etag:
                    place(cand, local, plain=plain)
                    save_etag(self.folder, commit, path, local, entry.etag)
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
                actual = file_etag(local, entry.lfs)
                if actual != entry.etag:
                    discard(self.folder, commit, path, local)
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
                make_plain(local, move=entry.etag is not None)
            if entry.etag is not None:
                save_etag(self.folder, commit, path, local, entry.etag)
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
