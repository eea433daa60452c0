"""The ``hub_files`` view on traces the real Hub client recorded against a local Hub.

Each source is parsed by ``parse_hub_source`` and fetched by ``download_model``, as
``ember.runtime.load`` does (without importing jax into the analysis tests): a one-part
repository id (``gpt2``), an ``owner/name`` id, files in a folder, and a revision named
in the source text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.recorder import record
from ember.runtime.hub.loader import download_model, parse_hub_source
from tests.analysis.databases import ingested, query_rows
from tests.runtime.hub_models import model_files
from tests.runtime.hub_server import LocalHub

REPO = "acme/tiny-mlp"
MODEL = "onnx/model.onnx"
LFS = {MODEL, "onnx/model.onnx.data"}
SOURCES = [
    ("hf", "gpt2", MODEL),
    f"hf://{REPO}/{MODEL}",
    f"hf://{REPO}@refs%2Fpr%2F1/{MODEL}",
    ("hf", "gpt2", MODEL),  # again: hits
]


@pytest.fixture(scope="module")
def hub_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("hub-files")
    server = LocalHub()
    server.publish("gpt2", model_files(scale=3.0), lfs=LFS)
    server.publish(REPO, model_files(), lfs=LFS)
    server.publish(REPO, model_files(scale=2.0), lfs=LFS, branch="refs/pr/1")
    server.start()
    trace = tmp / "hub.jsonl"
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("HF_ENDPOINT", server.endpoint)
            env.setenv("HF_HUB_CACHE", str(tmp / "hf-cache"))
            env.delenv("HF_HUB_OFFLINE", raising=False)
            env.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            with record(trace, run_id="hub-sources"):
                for source in SOURCES:
                    hub = parse_hub_source(source)
                    download_model(hub.repo_id, hub.filename, revision=hub.revision or "main")
    finally:
        server.stop()
    return ingested(tmp, [trace])


def test_repository_and_path_of_every_kind_of_source(hub_db):
    rows = query_rows(
        hub_db,
        "SELECT repo, path, what, revision, hits, downloads, info_fetched FROM hub_files "
        "ORDER BY repo, revision, path NULLS FIRST",
    )
    files = ["config.json", "onnx/model.onnx", "onnx/model.onnx.data"]
    assert rows == [
        (REPO, None, "repo_info", "main", 0, 0, 1),
        *[(REPO, f, "file", "main", 0, 1, 0) for f in files],
        (REPO, None, "repo_info", "refs/pr/1", 0, 0, 1),
        (REPO, "config.json", "file", "refs/pr/1", 0, 1, 0),
        (REPO, MODEL, "file", "refs/pr/1", 1, 0, 0),  # same bytes as on main: from the cache
        (REPO, "onnx/model.onnx.data", "file", "refs/pr/1", 0, 1, 0),
        ("gpt2", None, "repo_info", "main", 0, 0, 2),
        *[("gpt2", f, "file", "main", 1, 1, 0) for f in files],
    ]


def test_one_part_ids_carry_the_revision_that_ends_them(hub_db):
    sources = query_rows(hub_db, "SELECT source FROM hub_files WHERE repo = 'gpt2' ORDER BY source")
    assert [s for (s,) in sources] == [
        "hf://gpt2@main",
        "hf://gpt2@main/config.json",
        "hf://gpt2@main/onnx/model.onnx",
        "hf://gpt2@main/onnx/model.onnx.data",
    ]


def test_the_macro_reads_sources_written_by_hand(hub_db):
    got = query_rows(
        hub_db,
        "SELECT s, ember_hub_parts(s).repo AS repo, ember_hub_parts(s).path AS path "
        "FROM (VALUES ('hf://acme/tiny-mlp@refs/pr/1/onnx/model.onnx'), "
        "('hf://acme/tiny-mlp@v1.0'), ('hf://acme/tiny-mlp/model@v2.onnx')) t(s) ORDER BY s",
    )
    assert got == [
        ("hf://acme/tiny-mlp/model@v2.onnx", REPO, "model@v2.onnx"),
        ("hf://acme/tiny-mlp@refs/pr/1/onnx/model.onnx", REPO, MODEL),
        ("hf://acme/tiny-mlp@v1.0", REPO, ""),
    ]
