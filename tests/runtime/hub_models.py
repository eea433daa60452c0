"""The small model the Hub tests publish on the LocalHub: its repository, file names, files
and what it computes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = "acme/tiny-mlp"
MODEL = "onnx/model.onnx"
DATA = "onnx/model.onnx.data"
CONFIG = "config.json"


def model_files(scale: float = 1.0) -> dict[str, bytes]:
    """A MatMul+Add model whose weights live in an external data file."""
    w = (np.arange(64, dtype=np.float32).reshape(8, 8) / 64 * scale).astype(np.float32)
    b = np.full(8, scale, dtype=np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        onnx.save_model(model, f"{tmp}/model.onnx")
        return {
            MODEL: Path(f"{tmp}/model.onnx").read_bytes(),
            DATA: Path(f"{tmp}/model.onnx.data").read_bytes(),
            CONFIG: json.dumps({"model_type": "tiny-mlp", "scale": scale}).encode(),
            "README.md": b"# tiny mlp\n",
        }


def expected_y(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """What the model of ``model_files(scale)`` computes for ``x``."""
    w = (np.arange(64, dtype=np.float32).reshape(8, 8) / 64 * scale).astype(np.float32)
    return x @ w + scale
