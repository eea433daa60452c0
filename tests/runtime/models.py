"""Helpers of the runtime tests: ONNX models built with onnx.helper, and onnxruntime's CPU
provider as the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of onnxruntime's CPU provider, by name."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def make_model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto] | None = None,
    opset: int = 17,
    name: str = "g",
    check: bool = True,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    return model


def tensor(name: str, elem: int = TensorProto.FLOAT, shape: list[Any] | None = None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: Any) -> onnx.NodeProto:
    arr = np.asarray(value)
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(arr, name))
