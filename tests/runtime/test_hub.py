"""Hub models through the real ``huggingface_hub`` client against a local Hub on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ember.recorder import bus, record
from ember.runtime.hub import loader as hub
from ember.runtime.hub.loader import HubError, HubIntegrityError, download_model, parse_hub_source
from ember.schemas import validate_file
from tests.runtime.hub_models import CONFIG, DATA, MODEL, REPO, expected_y, model_files
from tests.runtime.hub_server import LocalHub, git_blob_id

HUB_EVENTS = [
    "ember.hub.hit",
    "ember.hub.download.start",
    "ember.hub.download.stop",
    "ember.hub.download.exception",
    "ember.hub.info.start",
    "ember.hub.info.stop",
    "ember.hub.info.exception",
]


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """A running local Hub with REPO published; the HF cache in a fresh tmp folder."""
    server = LocalHub()
    server.publish(REPO, model_files(), lfs={MODEL, DATA})
    server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    yield server
    server.stop()


@pytest.fixture
def events():
    """Every Hub event as a compact tuple, in order.

    The revision of each event is checked against ``handler.revision`` (``"main"`` unless
    a test sets it) and hit counts against 1; mismatches fail the test at teardown (a
    handler that raises would only be detached by the bus).
    """
    seen: list[tuple] = []
    problems: list[str] = []

    def on_event(name, measurements, metadata):
        short = name.removeprefix("ember.hub.")
        if short == "hit":
            seen.append((short, metadata["source"], metadata["check"], measurements["bytes"]))
            if measurements["count"] != 1:
                problems.append(f"{name}: count {measurements['count']}")
        elif short == "download.stop":
            seen.append((short, metadata["source"], measurements["bytes"]))
        elif short == "info.stop":
            seen.append((short, metadata["source"], metadata["result"]))
        elif short.endswith("exception"):
            seen.append((short, metadata["source"], metadata["reason"].split(":")[0]))
        else:
            seen.append((short, metadata["source"]))
        if metadata["revision"] != on_event.revision:
            problems.append(f"{name}: revision {metadata['revision']!r}")

    on_event.revision = "main"
    bus.attach("test-hub-events", HUB_EVENTS, on_event)
    yield seen, on_event
    bus.detach("test-hub-events")
    assert problems == []


def _size(files, name):
    return len(files[name])


def _hits(files, check):
    """The events of a load whose model, data and config files all hit with ``check``."""
    return [
        ("hit", f"hf://{REPO}/{name}", check, len(files[name])) for name in (MODEL, DATA, CONFIG)
    ]


def _repo_dir(tmp_path: Path) -> Path:
    """The repository's folder in the test's Hugging Face cache."""
    return tmp_path / "hf-cache" / f"models--{REPO.replace('/', '--')}"


def _snapshot(tmp_path, commit):
    return _repo_dir(tmp_path) / "snapshots" / commit


def _main(local_hub) -> tuple[str, dict[str, bytes]]:
    """The commit the repository's main branch is at, and its files."""
    commit = local_hub.repos[REPO].branches["main"]
    return commit, local_hub.repos[REPO].commits[commit].files


def _first_load(local_hub) -> tuple[Path, str]:
    path = download_model(REPO, MODEL)
    return path, local_hub.repos[REPO].branches["main"]


# ---------------------------------------------------------------- sources


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("hf://acme/tiny-mlp/onnx/model.onnx", ("acme/tiny-mlp", "onnx/model.onnx", None)),
        (("hf", "acme/tiny-mlp", "model.onnx"), ("acme/tiny-mlp", "model.onnx", None)),
        (("hf", "gpt2", "onnx/decoder.onnx"), ("gpt2", "onnx/decoder.onnx", None)),
        # a revision in the text, as in huggingface_hub's hf://<id>[@<revision>]/<path>
        ("hf://gpt2@main/onnx/decoder.onnx", ("gpt2", "onnx/decoder.onnx", "main")),
        ("hf://acme/tiny-mlp@v1.0/onnx/model.onnx", ("acme/tiny-mlp", "onnx/model.onnx", "v1.0")),
        (
            "hf://acme/tiny-mlp@refs%2Fpr%2F1/model.onnx",
            ("acme/tiny-mlp", "model.onnx", "refs/pr/1"),
        ),
        ("hf://acme/tiny-mlp@refs/pr/1/model.onnx", ("acme/tiny-mlp", "model.onnx", "refs/pr/1")),
        ("hf://acme/tiny-mlp/model@v2.onnx", ("acme/tiny-mlp", "model@v2.onnx", None)),
        ("model.onnx", None),
        (Path("hf:/x/y/z.onnx"), None),
        (("local", "a", "b"), None),
    ],
)
def test_parse_hub_source(source, expected):
    assert parse_hub_source(source) == expected


@pytest.mark.parametrize(
    ("repo_id", "path", "revision", "text"),
    [
        ("acme/tiny-mlp", "onnx/model.onnx", "main", "hf://acme/tiny-mlp/onnx/model.onnx"),
        ("acme/tiny-mlp", None, "v1", "hf://acme/tiny-mlp"),
        # a one-part id: only the '@' says where it ends
        ("gpt2", "onnx/decoder.onnx", "main", "hf://gpt2@main/onnx/decoder.onnx"),
        ("gpt2", "model.onnx", "refs/pr/1", "hf://gpt2@refs%2Fpr%2F1/model.onnx"),
        ("gpt2", None, "main", "hf://gpt2@main"),
    ],
)
def test_hub_source_text_reads_back_to_the_same_file(repo_id, path, revision, text):
    assert hub.hub_source(repo_id, path, revision) == text
    if path is not None:
        assert parse_hub_source(text)[:2] == (repo_id, path)
        named = hub.hub_source(repo_id, path, revision, with_revision=True)
        assert parse_hub_source(named) == (repo_id, path, revision)


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("hf://acme/tiny-mlp/../../etc/passwd", "'..'"),
        ("hf://acme/tiny-mlp/onnx/../../x.onnx", "'..'"),
        ("hf://acme/tiny-mlp//etc/passwd", "absolute"),
        ("hf://acme/tiny-mlp/onnx\\model.onnx", "backslash"),
        ("hf://acme/tiny-mlp/model\n.onnx", "control character"),
        ("hf://acme/tiny-mlp/model\x00.onnx", "control character"),
        ("hf://acme/tiny-mlp/a//b.onnx", "the part ''"),
        ("hf://acme/tiny-mlp/./model.onnx", "the part '.'"),
        ("hf://acme/tiny-mlp", "give the repository and the file"),
        ("hf://gpt2@main", "give the repository and the file"),
        ("hf://gpt2", "give the repository and the file"),
        ("hf://acme/tiny-mlp@/model.onnx", "give a branch, a tag or a commit"),
        ("hf://acme/tiny-mlp@..%2F..%2Fx/model.onnx", "not a branch, tag or commit"),
        ("hf://acme/tiny-mlp@v1/../model.onnx", "the part '..'"),
        ("hf://../tiny-mlp/model.onnx", "the part '..'"),
        ("hf://acme/tiny--mlp/model.onnx", "'--'"),
        (("hf", "acme/x/y", "model.onnx"), "more than 'owner/repo'"),
        (("hf", "acme\\x", "model.onnx"), "backslash"),
        (("hf", "acme/x\t", "model.onnx"), "control character"),
        (("hf", "acme/x", "/abs/model.onnx"), "absolute"),
        (("hf", "acme/x", "C:/model.onnx"), "absolute"),
        (("hf", "acme/x"), "give ('hf', 'owner/repo'"),
    ],
)
def test_bad_sources_are_refused_before_any_request(local_hub, events, source, names):
    with pytest.raises(ValueError, match=re.escape(names)):
        parse_hub_source(source)
    assert local_hub.requests == []
    assert events[0] == []


@pytest.mark.parametrize(
    ("repo_id", "filename", "revision"),
    [
        ("acme/tiny-mlp", "../model.onnx", "main"),
        ("acme/../x", "model.onnx", "main"),
        ("acme/tiny-mlp", "model.onnx", "../../x"),
        ("acme/tiny-mlp", "model.onnx", "main\r\n"),
    ],
)
def test_download_model_validates_before_any_request(
    local_hub, events, repo_id, filename, revision
):
    with pytest.raises(ValueError, match=r"\.\.|control character"):
        download_model(repo_id, filename, revision=revision)
    assert local_hub.requests == []
    assert events[0] == []


# ---------------------------------------------------------------- the cache


def test_first_load_downloads_model_external_data_and_config(local_hub, events, tmp_path):
    _, files = _main(local_hub)
    path, commit = _first_load(local_hub)
    seen, _ = events
    assert seen == [
        ("info.start", f"hf://{REPO}"),
        ("info.stop", f"hf://{REPO}", "fetched"),
        ("download.start", f"hf://{REPO}/{MODEL}"),
        ("download.stop", f"hf://{REPO}/{MODEL}", _size(files, MODEL)),
        ("download.start", f"hf://{REPO}/{DATA}"),
        ("download.stop", f"hf://{REPO}/{DATA}", _size(files, DATA)),
        ("download.start", f"hf://{REPO}/{CONFIG}"),
        ("download.stop", f"hf://{REPO}/{CONFIG}", _size(files, CONFIG)),
    ]
    snap = _snapshot(tmp_path, commit)
    assert path == snap / MODEL
    # the model and its data are plain files (onnx refuses linked external data), the
    # config is huggingface_hub's symlink into blobs/; README.md was not fetched
    assert not path.is_symlink()
    assert not (snap / DATA).is_symlink()
    assert (snap / CONFIG).is_symlink()
    assert not (snap / "README.md").exists()
    assert (snap / DATA).read_bytes() == files[DATA]
    # huggingface_hub's own tools see the same cache: the ref and the snapshot
    repo_dir = snap.parent.parent
    assert (repo_dir / "refs" / "main").read_text() == commit
    saved = json.loads((repo_dir / "ember" / "revisions" / "main.json").read_text())
    assert saved["commit"] == commit
    assert saved["files"][DATA] == {
        "etag": hashlib.sha256(files[DATA]).hexdigest(),
        "lfs": True,
        "size": len(files[DATA]),
    }
    assert json.loads((repo_dir / "ember" / "revisions" / f"{commit}.json").read_text()) == saved
    from huggingface_hub import hf_hub_download, scan_cache_dir

    scan = scan_cache_dir(tmp_path / "hf-cache")
    assert scan.warnings == []
    ((repo,),) = [scan.repos]
    assert (repo.repo_id, set(repo.refs)) == (REPO, {"main"})
    ((revision,),) = [repo.revisions]
    assert sorted(f.file_name for f in revision.files) == [
        "config.json",
        "model.onnx",
        "model.onnx.data",
    ]
    cached = hf_hub_download(REPO, DATA, cache_dir=tmp_path / "hf-cache", local_files_only=True)
    assert Path(cached) == snap / DATA
    # onnx itself loads the model with its external data from the returned path
    proto = onnx.load(str(path))
    assert numpy_helper.to_array(proto.graph.initializer[0]).shape == (8, 8)
    import onnxruntime as ort

    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    (y,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(y, expected_y(x), rtol=1e-6)
    # LFS files: HEAD on the Hub answers 302 with X-Linked-Etag, the bytes come from the CDN
    resolve = f"/{REPO}/resolve/{commit}"
    assert local_hub.requests == [
        ("GET", f"/api/models/{REPO}/revision/main"),
        ("HEAD", f"{resolve}/{MODEL}"),
        ("GET", f"cdn:/lfs/{hashlib.sha256(files[MODEL]).hexdigest()}"),
        ("HEAD", f"{resolve}/{DATA}"),
        ("GET", f"cdn:/lfs/{hashlib.sha256(files[DATA]).hexdigest()}"),
        ("HEAD", f"{resolve}/{CONFIG}"),
        ("GET", f"{resolve}/{CONFIG}"),
    ]


def test_second_load_hits_with_etag_check(local_hub, events):
    _, files = _main(local_hub)
    first, _ = _first_load(local_hub)
    seen, _ = events
    seen.clear()
    before = len(local_hub.requests)
    assert download_model(REPO, MODEL) == first
    assert seen == [
        ("info.start", f"hf://{REPO}"),
        ("info.stop", f"hf://{REPO}", "fetched"),
        *_hits(files, "etag"),
    ]
    # one request: the repository's file list; no file request
    assert local_hub.requests[before:] == [("GET", f"/api/models/{REPO}/revision/main")]


def test_changed_file_downloads_again_and_unchanged_files_come_from_the_cache(
    local_hub, events, tmp_path
):
    old_path, old_commit = _first_load(local_hub)
    changed = model_files()
    new_data = changed[DATA][:-4] + np.float32(9.0).tobytes()  # the last bias value changes
    changed[DATA] = new_data
    new_commit = local_hub.publish(REPO, changed, lfs={MODEL, DATA})
    seen, _ = events
    seen.clear()
    path = download_model(REPO, MODEL)
    # unchanged files at the new commit have no saved ETag: hashed, then taken from the cache
    assert seen == [
        ("info.start", f"hf://{REPO}"),
        ("info.stop", f"hf://{REPO}", "fetched"),
        ("hit", f"hf://{REPO}/{MODEL}", "hash", len(changed[MODEL])),
        ("download.start", f"hf://{REPO}/{DATA}"),
        ("download.stop", f"hf://{REPO}/{DATA}", len(new_data)),
        ("hit", f"hf://{REPO}/{CONFIG}", "hash", len(changed[CONFIG])),
    ]
    assert path == _snapshot(tmp_path, new_commit) / MODEL
    assert (path.parent / "model.onnx.data").read_bytes() == new_data
    # the old commit's snapshot is intact
    assert (old_path.parent / "model.onnx.data").read_bytes() != new_data
    assert (_repo_dir(tmp_path) / "refs" / "main").read_text() == new_commit
    assert old_commit != new_commit
    # and once saved, the next load is all ETag hits
    seen.clear()
    download_model(REPO, MODEL)
    assert [e[2] for e in seen if e[0] == "hit"] == ["etag", "etag", "etag"]


def test_stopped_hub_uses_saved_metadata_and_cached_files(local_hub, events):
    _, files = _main(local_hub)
    first, _ = _first_load(local_hub)
    local_hub.stop()
    seen, _ = events
    seen.clear()
    assert download_model(REPO, MODEL) == first
    assert seen == [
        ("info.start", f"hf://{REPO}"),
        ("info.stop", f"hf://{REPO}", "saved"),
        *_hits(files, "etag"),
    ]


@pytest.mark.parametrize("error", ["repo-not-found", "503"])
def test_hub_error_status_uses_saved_metadata(local_hub, events, error):
    first, _ = _first_load(local_hub)
    if error == "503":
        local_hub.outage = 503
    else:
        del local_hub.repos[REPO]  # the Hub now answers 404 RepoNotFound
    seen, _ = events
    seen.clear()
    assert download_model(REPO, MODEL) == first
    assert seen[:2] == [("info.start", f"hf://{REPO}"), ("info.stop", f"hf://{REPO}", "saved")]
    assert [e[2] for e in seen[2:]] == ["etag", "etag", "etag"]


def test_commit_revision_with_saved_metadata_sends_no_request_and_no_info_event(local_hub, events):
    _, files = _main(local_hub)
    first, commit = _first_load(local_hub)
    seen, handler = events
    seen.clear()
    handler.revision = commit
    before = len(local_hub.requests)
    assert download_model(REPO, MODEL, revision=commit) == first
    assert local_hub.requests[before:] == []
    assert seen == _hits(files, "etag")


def test_commit_revision_without_saved_metadata_asks_the_hub_once(local_hub, events):
    commit, _ = _main(local_hub)
    seen, handler = events
    handler.revision = commit
    download_model(REPO, MODEL, revision=commit)
    assert seen[:2] == [("info.start", f"hf://{REPO}"), ("info.stop", f"hf://{REPO}", "fetched")]
    assert local_hub.requests[0] == ("GET", f"/api/models/{REPO}/revision/{commit}")
    seen.clear()
    before = len(local_hub.requests)
    download_model(REPO, MODEL, revision=commit)
    assert local_hub.requests[before:] == []
    assert [e[0] for e in seen] == ["hit", "hit", "hit"]


@pytest.mark.parametrize("how", ["env", "option"])
def test_offline_uses_the_cache_without_a_check(local_hub, events, monkeypatch, how):
    _, files = _main(local_hub)
    first, _ = _first_load(local_hub)
    seen, _ = events
    seen.clear()
    before = len(local_hub.requests)
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        path = download_model(REPO, MODEL)
    else:
        path = download_model(REPO, MODEL, offline=True)
    assert path == first
    assert local_hub.requests[before:] == []
    assert seen == _hits(files, "offline")


def test_offline_with_an_empty_cache_says_what_to_do(local_hub, events):
    with pytest.raises(HubError, match=r"offline.*run the load once online, or pass a local path"):
        download_model(REPO, MODEL, offline=True)
    assert local_hub.requests == []
    assert events[0] == []


def test_offline_reads_files_other_hugging_face_tools_downloaded(local_hub, events, tmp_path):
    from huggingface_hub import hf_hub_download

    for name in (MODEL, DATA):
        hf_hub_download(REPO, name, cache_dir=tmp_path / "hf-cache", endpoint=local_hub.endpoint)
    _, files = _main(local_hub)
    seen, _ = events
    path = download_model(REPO, MODEL, offline=True)
    # no saved metadata: huggingface_hub's refs/main and snapshot say what is cached
    assert seen == [
        ("hit", f"hf://{REPO}/{MODEL}", "offline", len(files[MODEL])),
        ("hit", f"hf://{REPO}/{DATA}", "offline", len(files[DATA])),
    ]
    assert path.name == "model.onnx"
    assert path.read_bytes() == files[MODEL]


def test_files_without_saved_etag_are_hashed_once(local_hub, events, tmp_path):
    """Files another tool put in the cache have no saved ETag: check ``hash``, then ``etag``."""
    from huggingface_hub import hf_hub_download

    _, files = _main(local_hub)
    for name in (MODEL, DATA, CONFIG):
        hf_hub_download(REPO, name, cache_dir=tmp_path / "hf-cache", endpoint=local_hub.endpoint)
    seen, _ = events
    path = download_model(REPO, MODEL)
    assert seen == [
        ("info.start", f"hf://{REPO}"),
        ("info.stop", f"hf://{REPO}", "fetched"),
        *_hits(files, "hash"),
    ]
    assert not path.is_symlink()
    assert onnx.load(str(path)).graph.node[0].op_type == "MatMul"
    seen.clear()
    download_model(REPO, MODEL)
    assert [e[2] for e in seen if e[0] == "hit"] == ["etag", "etag", "etag"]


def test_file_without_etag_in_the_metadata_is_used_without_check(local_hub, events):
    _, files = _main(local_hub)
    local_hub.no_etag(REPO, CONFIG)
    _first_load(local_hub)
    seen, _ = events
    seen.clear()
    download_model(REPO, MODEL)
    assert seen[2:] == [
        ("hit", f"hf://{REPO}/{MODEL}", "etag", _size(files, MODEL)),
        ("hit", f"hf://{REPO}/{DATA}", "etag", _size(files, DATA)),
        ("hit", f"hf://{REPO}/{CONFIG}", "none", _size(files, CONFIG)),
    ]


# ---------------------------------------------------------------- integrity


def test_corrupted_lfs_download_is_detected_and_not_kept(local_hub, events, tmp_path):
    commit, files = _main(local_hub)
    local_hub.corrupt(REPO, DATA)
    with pytest.raises(HubIntegrityError, match=r"sha256 [0-9a-f]{64} but the repository lists"):
        download_model(REPO, MODEL)
    seen, _ = events
    assert seen[-2:] == [
        ("download.start", f"hf://{REPO}/{DATA}"),
        ("download.exception", f"hf://{REPO}/{DATA}", "HubIntegrityError"),
    ]
    repo_dir = _repo_dir(tmp_path)
    sha = hashlib.sha256(files[DATA]).hexdigest()
    assert not (_snapshot(tmp_path, commit) / DATA).exists()
    assert not (repo_dir / "blobs" / sha).exists()
    assert not any(p.suffix == ".incomplete" for p in (repo_dir / "blobs").iterdir())
    # the Hub is fixed: the next load downloads the data again and takes the model from the cache
    local_hub.corrupted.clear()
    seen.clear()
    path = download_model(REPO, MODEL)
    assert [e[:2] for e in seen[2:]] == [
        ("hit", f"hf://{REPO}/{MODEL}"),
        ("download.start", f"hf://{REPO}/{DATA}"),
        ("download.stop", f"hf://{REPO}/{DATA}"),
        ("download.start", f"hf://{REPO}/{CONFIG}"),
        ("download.stop", f"hf://{REPO}/{CONFIG}"),
    ]
    assert (path.parent / "model.onnx.data").read_bytes() == files[DATA]


def test_corrupted_regular_file_fails_its_git_blob_hash(local_hub, events, tmp_path):
    commit, files = _main(local_hub)
    local_hub.corrupt(REPO, CONFIG)
    with pytest.raises(HubIntegrityError, match=r"git blob sha1 [0-9a-f]{40} but the repository"):
        download_model(REPO, MODEL)
    assert events[0][-1] == ("download.exception", f"hf://{REPO}/{CONFIG}", "HubIntegrityError")
    repo_dir = _repo_dir(tmp_path)
    assert not (_snapshot(tmp_path, commit) / CONFIG).exists()
    assert not (repo_dir / "blobs" / git_blob_id(files[CONFIG])).exists()
    assert list((repo_dir / "blobs").iterdir()) == []  # model and data moved to the snapshot


def test_damaged_cached_file_is_hashed_and_downloaded_again(local_hub, events):
    _, files = _main(local_hub)
    path, _ = _first_load(local_hub)
    data = path.parent / "model.onnx.data"
    data.write_bytes(b"\0" * len(files[DATA]))  # same size, other bytes: the saved ETag is stale
    seen, _ = events
    seen.clear()
    download_model(REPO, MODEL)
    assert [e[:2] for e in seen[2:]] == [
        ("hit", f"hf://{REPO}/{MODEL}"),
        ("download.start", f"hf://{REPO}/{DATA}"),
        ("download.stop", f"hf://{REPO}/{DATA}"),
        ("hit", f"hf://{REPO}/{CONFIG}"),
    ]
    assert data.read_bytes() == files[DATA]


def test_partial_file_left_by_a_killed_download_is_not_taken_as_good(local_hub, events, tmp_path):
    commit, files = _main(local_hub)
    path, _ = _first_load(local_hub)
    # a process killed after the move but before Ember saved the ETag, with a short file
    marker = path.parent.parent.parent.parent / "ember" / "etags" / commit / f"{DATA}.json"
    marker.unlink()
    (path.parent / "model.onnx.data").write_bytes(files[DATA][:10])
    seen, _ = events
    seen.clear()
    download_model(REPO, MODEL)
    assert ("download.stop", f"hf://{REPO}/{DATA}", len(files[DATA])) in seen
    assert (path.parent / "model.onnx.data").read_bytes() == files[DATA]


# ---------------------------------------------------------------- errors


def test_no_saved_metadata_and_no_hub_gives_exception_event_and_advice(local_hub, events):
    local_hub.stop()
    with pytest.raises(HubError) as err:
        download_model(REPO, MODEL)
    message = str(err.value)
    assert f"hf://{REPO}" in message
    assert "'main'" in message
    assert local_hub.endpoint in message
    assert "Check the network and HF_ENDPOINT" in message
    assert "run the load once online" in message
    assert "local path" in message
    seen, _ = events
    assert seen == [
        ("info.start", f"hf://{REPO}"),
        ("info.exception", f"hf://{REPO}", "HubError"),
    ]


def test_unknown_repository_names_it(local_hub, events):
    with pytest.raises(HubError, match=r"hf://acme/missing.*RepositoryNotFoundError"):
        download_model("acme/missing", MODEL)
    assert [e[0] for e in events[0]] == ["info.start", "info.exception"]


def test_hub_outage_during_a_download_keeps_nothing(local_hub, events, tmp_path):
    """The Hub refuses (403, as a proxy may): saved file list, a download error, nothing kept.

    (A 5xx or a dropped connection would do the same after huggingface_hub's ~25 s of
    retries, too slow for a unit test.)"""
    commit, files = _main(local_hub)
    download_model(REPO, MODEL)  # saves the metadata
    snap = _snapshot(tmp_path, commit)
    for name in (MODEL, DATA, CONFIG):
        (snap / name).unlink()
    local_hub.outage = 403
    seen, _ = events
    seen.clear()
    with pytest.raises(HubError, match=r"download from .* failed.*nothing partial was kept"):
        download_model(REPO, MODEL)
    assert seen == [
        ("info.start", f"hf://{REPO}"),
        ("info.stop", f"hf://{REPO}", "saved"),
        ("download.start", f"hf://{REPO}/{MODEL}"),
        ("download.exception", f"hf://{REPO}/{MODEL}", "HubError"),
    ]
    assert not (snap / MODEL).exists()
    assert sorted(p.name for p in (snap.parent.parent / "blobs").iterdir()) == [
        git_blob_id(files[CONFIG])  # the config's blob; no partial file
    ]


def test_file_not_in_the_repository_lists_its_onnx_files(local_hub):
    with pytest.raises(
        HubError, match=r"no file 'onnx/other.onnx'.*its ONNX files: onnx/model.onnx"
    ):
        download_model(REPO, "onnx/other.onnx")


def test_missing_external_data_file_is_named(local_hub):
    files = model_files()
    del files[DATA]
    local_hub.publish(REPO, files, lfs={MODEL})
    with pytest.raises(HubError, match=r"keeps tensors in 'model.onnx.data'.*no file 'onnx/model"):
        download_model(REPO, MODEL)


def test_revision_with_a_slash_is_saved_and_referenced_like_huggingface_hub(
    local_hub, events, tmp_path
):
    commit = local_hub.publish(REPO, model_files(scale=2.0), lfs={MODEL, DATA}, branch="refs/pr/1")
    seen, handler = events
    handler.revision = "refs/pr/1"
    path = download_model(REPO, MODEL, revision="refs/pr/1")
    assert path == _snapshot(tmp_path, commit) / MODEL
    assert seen[1] == ("info.stop", f"hf://{REPO}", "fetched")
    assert local_hub.requests[0] == ("GET", f"/api/models/{REPO}/revision/refs%2Fpr%2F1")
    repo_dir = _repo_dir(tmp_path)
    assert (repo_dir / "refs" / "refs" / "pr" / "1").read_text() == commit
    saved = json.loads((repo_dir / "ember" / "revisions" / "refs%2Fpr%2F1.json").read_text())
    assert saved["commit"] == commit
    x = np.ones((1, 8), dtype=np.float32)
    import onnxruntime as ort

    (y,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(y, expected_y(x, scale=2.0), rtol=1e-6)


def test_external_data_outside_the_model_folder_is_refused(local_hub, tmp_path):
    files = model_files()
    proto = onnx.load_model_from_string(files[MODEL])
    for t in proto.graph.initializer:
        for kv in t.external_data:
            if kv.key == "location":
                kv.value = "../secret.bin"
    local_hub.publish(REPO, {**files, MODEL: proto.SerializeToString()}, lfs={MODEL, DATA})
    with pytest.raises(HubError, match=r"external data location '\.\./secret\.bin'.*'\.\.'"):
        download_model(REPO, MODEL)


# ---------------------------------------------------------------- the trace


def test_runtime_load_of_a_hub_source_records_a_valid_trace(local_hub, tmp_path):
    """``ember.runtime.load("hf://...")`` end to end: Hub events nest in the load span."""
    import ember.runtime as rt

    commit, files = _main(local_hub)
    trace = tmp_path / "run.jsonl"
    with record(trace):
        model = rt.load(f"hf://{REPO}/{MODEL}")
        again = rt.load(("hf", REPO, MODEL), revision=commit)
    report = validate_file(trace)
    assert report.ok, report
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    for m in (model, again):
        assert m.source == f"hf://{REPO}/{MODEL}"
        assert m.folder == _snapshot(tmp_path, commit) / "onnx"
        np.testing.assert_allclose(np.asarray(rt.run(m, x=x)["y"]), expected_y(x), rtol=1e-6)

    records = [json.loads(line) for line in trace.read_text().splitlines()]
    starts = {r["span_id"]: r for r in records if r["kind"] == "span_start"}
    loads = [
        r["span_id"] for r in records if r["kind"] == "span_start" and r["span_kind"] == "load"
    ]
    assert len(loads) == 2
    ends = [r for r in records if r["kind"] == "span_end"]
    assert [(r["span_kind"], r["attrs"].get("result"), r["attrs"].get("bytes")) for r in ends] == [
        ("hub_info", "fetched", None),
        ("hub_download", None, len(files[MODEL])),
        ("hub_download", None, len(files[DATA])),
        ("hub_download", None, len(files[CONFIG])),
        ("load", None, None),
        ("load", None, None),  # the commit's saved metadata: no info span, no request
    ]
    assert ends[4]["attrs"] == {"source": f"hf://{REPO}/{MODEL}", "node_count": 2, "opset": 17}
    assert all(starts[r["span_id"]]["parent_id"] == loads[0] for r in ends[:4])
    assert starts[ends[1]["span_id"]]["attrs"] == {
        "source": f"hf://{REPO}/{MODEL}",
        "revision": "main",
    }
    hits = [r for r in records if r["kind"] == "hub"]
    assert [(h["source"], h["check"], h["revision"], h["bytes"], h["span_id"]) for h in hits] == [
        (f"hf://{REPO}/{MODEL}", "etag", commit, len(files[MODEL]), loads[1]),
        (f"hf://{REPO}/{DATA}", "etag", commit, len(files[DATA]), loads[1]),
        (f"hf://{REPO}/{CONFIG}", "etag", commit, len(files[CONFIG]), loads[1]),
    ]


def test_runtime_load_refuses_a_malicious_hub_source_before_any_request(local_hub, tmp_path):
    import ember.runtime as rt

    trace = tmp_path / "run.jsonl"
    with record(trace), pytest.raises(ValueError, match=r"'\.\.'"):
        rt.load("hf://acme/tiny-mlp/../../../etc/passwd")
    assert local_hub.requests == []
    assert not (tmp_path / "hf-cache").exists()


def test_settings_are_read_per_call(local_hub, tmp_path, monkeypatch):
    assert hub.hub_endpoint() == local_hub.endpoint
    assert hub.hub_cache_dir() == (tmp_path / "hf-cache").resolve()
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub.hub_cache_dir() == (tmp_path / "home" / "hub").resolve()
    monkeypatch.setenv("HF_HUB_OFFLINE", "yes")
    assert hub.is_offline()
