"""load() of a Hub source: the model and its external data through the local Hub."""

from __future__ import annotations

import numpy as np
import pytest

import ember.runtime as rt
from tests.runtime.hub_server import LocalHub
from tests.runtime.test_hub import MODEL, REPO, _expected, _model_files


@pytest.fixture
def hub_endpoint(tmp_path, monkeypatch):
    server = LocalHub()
    server.publish(REPO, _model_files(), lfs={MODEL, "onnx/model.onnx.data"})
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
    np.testing.assert_allclose(np.asarray(out["y"]), _expected(x), rtol=1e-6)
    starts = ember_events.of("ember.load.start")
    assert [s["source"] for s in starts] == [source, source]
    stops = ember_events.of("ember.load.stop")
    assert stops[0]["node_count"] == 2 and stops[0]["opset"] == 17
