"""Ember's Hub loads against bare ``huggingface_hub.hf_hub_download``, on a local Hub.

    .venv/bin/python benchmarks/hub_download.py [--mb 64] [--repeat 3]

Serves a model whose weights (``--mb`` MB) are in an external data file from the test Hub
on 127.0.0.1 and times, each in a fresh cache: a cold load (everything downloads; Ember
also hashes each file against the repository metadata) and a warm load (all cached: Ember
sends one file-list request, huggingface_hub one HEAD per file). Prints the best time of
``--repeat`` runs and Ember's ratio to huggingface_hub.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.runtime.hub_server import LocalHub

REPO = "bench/mlp"


def model_files(mb: int) -> dict[str, bytes]:
    n = int((mb * 2**20 / 4) ** 0.5)
    w = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.external_data_helper.convert_model_to_external_data(
        model, location="model.onnx.data", size_threshold=0
    )
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save_model(model, f"{tmp}/model.onnx")
        return {
            "onnx/model.onnx": Path(f"{tmp}/model.onnx").read_bytes(),
            "onnx/model.onnx.data": Path(f"{tmp}/model.onnx.data").read_bytes(),
            "config.json": b'{"model_type": "mlp"}',
        }


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        times.append(fn())
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    hub = LocalHub()
    files = model_files(args.mb)
    hub.publish(REPO, files, lfs={"onnx/model.onnx", "onnx/model.onnx.data"})
    hub.start()
    os.environ["HF_ENDPOINT"] = hub.endpoint
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from huggingface_hub import hf_hub_download

    from ember.runtime.hub.loader import download_model

    def run(kind: str, warm: bool) -> float:
        with tempfile.TemporaryDirectory() as cache:
            os.environ["HF_HUB_CACHE"] = cache

            def once() -> None:
                if kind == "ember":
                    download_model(REPO, "onnx/model.onnx")
                else:
                    for name in files:
                        hf_hub_download(REPO, name, cache_dir=cache, endpoint=hub.endpoint)

            if warm:
                once()
            t0 = time.perf_counter()
            once()
            return time.perf_counter() - t0

    size = sum(len(b) for b in files.values()) / 2**20
    print(f"model + external data + config: {size:.1f} MiB, best of {args.repeat}")
    for label, warm in (("cold (download)", False), ("warm (cached)", True)):
        hf = best(lambda warm=warm: run("hf", warm), args.repeat)
        ember = best(lambda warm=warm: run("ember", warm), args.repeat)
        print(
            f"{label:16s} huggingface_hub {hf * 1e3:8.1f} ms   ember {ember * 1e3:8.1f} ms   "
            f"ratio {ember / hf:5.2f}x"
        )
    hub.stop()


if __name__ == "__main__":
    main()
