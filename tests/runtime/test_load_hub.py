"""load() of a Hub source: the model and its external data through the local Hub."""

from __future__ import annotations

import numpy as np
import pytest

import ember.runtime as rt
from tests.runtime.hub_models import MODEL, REPO, expected_y, model_files
from tests.runtime.hub_server import LocalHub


@pytest.fixture
def hub_endpoint(tmp_path, monkeypatch):
    server = LocalHub()
    server.publish(REPO, model_files(), lfs={MODEL, "onnx/model.onnx.data"})
    server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    yield server
    server.stop()


def test_hub_source_loads_with_external_data_and_names_the_source(hub_endpoint, ember_events):
    source = f"hf://{REPO}/{MODEL}"
    model = rt.load(source)
    assert model.source == source
    again = rt.load(("hf", REPO, MODEL))
    assert again.source == source
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(1, 8)
    out = rt.compile(model)(x=x)
    np.testing.assert_allclose(np.asarray(out["y"]), expected_y(x), rtol=1e-6)
    starts = ember_events.of("ember.load.start")
    assert [s["source"] for s in starts] == [source, source]
    stops = ember_events.of("ember.load.stop")
    assert stops[0]["node_count"] == 2
    assert stops[0]["opset"] == 17


def test_one_part_repository_id_round_trips_through_model_source(hub_endpoint, ember_events):
    hub_endpoint.publish("gpt2", model_files(scale=3.0), lfs={MODEL, "onnx/model.onnx.data"})
    model = rt.load(("hf", "gpt2", MODEL))
    # 'hf://gpt2/onnx/model.onnx' would read as the repository 'gpt2/onnx'
    assert model.source == f"hf://gpt2@main/{MODEL}"
    again = rt.load(model.source)
    assert again.source == model.source
    assert again.folder == model.folder
    x = np.ones((1, 8), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(rt.run(again, x=x)["y"]), expected_y(x, 3.0), rtol=1e-6)
    assert [s["source"] for s in ember_events.of("ember.load.start")] == [model.source] * 2


def test_revision_named_in_the_source(hub_endpoint, ember_events):
    branch = "refs/pr/1"
    hub_endpoint.publish(
        REPO, model_files(scale=2.0), lfs={MODEL, "onnx/model.onnx.data"}, branch=branch
    )
    source = f"hf://{REPO}@refs%2Fpr%2F1/{MODEL}"
    model = rt.load(source)
    assert model.source == source  # the revision stays: loading model.source gives this file
    x = np.ones((1, 8), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(rt.run(model, x=x)["y"]), expected_y(x, 2.0), rtol=1e-6)
    main = rt.load(f"hf://{REPO}/{MODEL}")
    np.testing.assert_allclose(np.asarray(rt.run(main, x=x)["y"]), expected_y(x), rtol=1e-6)
    assert rt.load(source, revision=branch).folder == model.folder
    with pytest.raises(ValueError, match=r"names revision 'refs/pr/1'.*revision='main'"):
        rt.load(source, revision="main")


def test_an_earlier_hubs_port_taken_by_this_cdn_does_not_redirect_the_client(
    hub_endpoint, monkeypatch
):
    # huggingface_hub follows a HEAD's redirect to any origin it trusts as a Hub, among them
    # HF_ENDPOINT as it was at its import: an earlier test's Hub (on 127.0.0.1) whose port
    # this test's CDN got. The client then asked the CDN for the file's metadata and failed
    # (no X-Repo-Commit): a flaky test on a clean clone. Here that port is trusted on purpose.
    from urllib.parse import urlsplit

    from huggingface_hub.utils import _http

    cdn_port = urlsplit(hub_endpoint.cdn).port
    stale = ("http", "127.0.0.1", cdn_port)
    monkeypatch.setattr(_http, "_HUB_ORIGINS", _http._HUB_ORIGINS | {stale})
    model = rt.load(f"hf://{REPO}/{MODEL}")
    x = np.ones((1, 8), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(rt.run(model, x=x)["y"]), expected_y(x), rtol=1e-6)
