"""Traces for the dashboard tests, recorded by the real runtime and recorder.

``record_runs(folder)`` writes three runs:

* ``small-cache``: a model with a graph break (NonZero) called on a sequence-length sweep
  with ``cache_size=2``, so segments are evicted and compiled again (thrashing), with
  device memory read at every call and a few tensor alloc/free records by category;
* ``big-cache``: the same sweep with ``cache_size=8``: no evictions;
* ``hub``: the model loaded three times from a local Hub (``tests/runtime/hub_server``):
  a download, a cache hit checked by ETag, and with the Hub stopped the saved metadata.

The expected values the tests assert are the module constants below.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from ember import runtime
from ember.recorder import record
from ember.runtime.memory import track_device_memory

BREAK_SWEEP = [16, 24, 16, 32, 16, 24, 40, 16]
"""Sequence lengths of the calls of the two sweep runs."""
DISTINCT = sorted(set(BREAK_SWEEP))
CHAIN = 22
"""Nodes of each side of the break: long enough that both segments are compiled."""
MODEL = "tiny-break"
MODEL_FILE = "tiny-break.onnx"
HUB_REPO = "acme/tiny-break"
HUB_FILE = "onnx/model.onnx"
ALLOCS = [("parameter", 4096), ("activation", 1 << 20), ("activation", 1 << 19)]
"""(category, bytes) allocated once per call in the sweep runs, freed in reverse order."""


def break_model() -> onnx.ModelProto:
    """x[1, seq] -> 22 elementwise nodes -> NonZero (the break) -> 22 nodes -> y."""
    nodes = []
    inits = [
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
    ]
    cur = "x"
    for i in range(CHAIN):
        out = f"a{i}"
        nodes.append(helper.make_node("Mul" if i % 2 else "Add", [cur, "one"], [out]))
        cur = out
    nodes.append(helper.make_node("Greater", [cur, "zero"], ["positive"]))
    nodes.append(helper.make_node("NonZero", ["positive"], ["nz"]))
    nodes.append(helper.make_node("Cast", ["nz"], ["nzf"], to=TensorProto.FLOAT))
    cur = "nzf"
    for i in range(CHAIN):
        out = f"b{i}"
        nodes.append(helper.make_node("Add" if i % 2 else "Mul", [cur, "one"], [out]))
        cur = out
    nodes.append(helper.make_node("ReduceSum", [cur], ["y"], keepdims=0))
    graph = helper.make_graph(
        nodes,
        "tiny_break",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _sweep(path: Path, run_id: str, cache_size: int, model_path: Path) -> None:
    with record(path, run_id=run_id, model=MODEL, team="perf", cache=str(cache_size)) as rec:
        compiled = runtime.compile(runtime.load(model_path), cache_size=cache_size)
        with track_device_memory():
            for i, n in enumerate(BREAK_SWEEP):
                # activations live while the call runs (the shape of a profile's timeline)
                for j, (category, nbytes) in enumerate(ALLOCS):
                    rec.memory(
                        "alloc",
                        f"c{i}t{j}",
                        nbytes,
                        dtype="float32",
                        device="cpu:0",
                        category=category,
                    )
                compiled({"x": np.ones((1, n), np.float32)})
                for j, (category, nbytes) in reversed(list(enumerate(ALLOCS))):
                    rec.memory(
                        "free",
                        f"c{i}t{j}",
                        nbytes,
                        dtype="float32",
                        device="cpu:0",
                        category=category,
                    )


def _hub(path: Path, tmp: Path, model: onnx.ModelProto) -> None:
    from ember.runtime.hub.loader import download_model
    from tests.runtime.hub_server import LocalHub

    hub = LocalHub()
    data = model.SerializeToString()
    hub.publish(
        HUB_REPO, {HUB_FILE: data, "config.json": b'{"model_type": "tiny-break"}'}, lfs={HUB_FILE}
    )
    hub.start()
    saved = {k: os.environ.get(k) for k in ("HF_ENDPOINT", "HF_HUB_CACHE", "HF_HUB_OFFLINE")}
    os.environ.update(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(tmp / "hf-cache"))
    os.environ.pop("HF_HUB_OFFLINE", None)
    try:
        with record(path, run_id="hub", model=MODEL, team="perf"):
            download_model(HUB_REPO, HUB_FILE)  # downloads
            download_model(HUB_REPO, HUB_FILE)  # hits, checked by ETag
            # The Hub unreachable (nothing listens on that port): the saved metadata.
            os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
            download_model(HUB_REPO, HUB_FILE)
    finally:
        hub.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_runs(folder: Path) -> list[Path]:
    """Record the three runs into ``folder``; returns the trace files."""
    folder.mkdir(parents=True, exist_ok=True)
    model = break_model()
    model_path = folder / MODEL_FILE
    onnx.save(model, model_path)
    small, big, hub = folder / "small-cache.jsonl", folder / "big-cache.jsonl", folder / "hub.jsonl"
    _sweep(small, "small-cache", 2, model_path)
    _sweep(big, "big-cache", 8, model_path)
    _hub(hub, folder, model)
    return [small, big, hub]
