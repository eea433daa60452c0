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


def one_relu(shape: list[Any]) -> onnx.ModelProto:
    """One Relu from the input ``x`` to the output ``y``, both of ``shape``."""
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor("x", shape=shape)],
        [tensor("y", shape=shape)],
    )


def tensor(name: str, elem: int = TensorProto.FLOAT, shape: list[Any] | None = None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: Any) -> onnx.NodeProto:
    arr = np.asarray(value)
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(arr, name))


def sum_is_positive(x: str = "x", cond: str = "positive") -> list[onnx.NodeProto]:
    """``cond = ReduceSum(x) > 0``: a condition the data decides, computed in the program
    (an ``If`` on it needs its value on the host, a break)."""
    return [
        const("zero", np.array(0.0, np.float32)),
        helper.make_node("ReduceSum", [x], ["total"], keepdims=0, name="sum"),
        helper.make_node("Greater", ["total", "zero"], [cond], name="Greater_0"),
    ]


def scan_body(nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
    """A Loop body of three floats: (iter, cond_in, v_in[3]) -> (cond_out, v_out[3],
    scan_out[3]); ``nodes`` compute the three outputs."""
    return helper.make_graph(
        nodes,
        "body",
        [
            tensor("iter", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("v_in", shape=[3]),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("v_out", shape=[3]),
            tensor("scan_out", shape=[3]),
        ],
    )


def nonzero_reshape_model(extra_adds: int = 0) -> onnx.ModelProto:
    """y = Reshape(data (+ data x extra_adds), [-1, max(NonZero(x > 0)) + 1]): a NonZero break
    between two segments. ``extra_adds`` grow the segment after it (with none it is small
    enough to run eagerly; test_sync adds 25 so that it is compiled).

    Positions: 0-3 constants, 4 Greater, 5 NonZero (the break), then the segment after it.
    """
    nodes = [
        const("one", np.array([1], np.int64)),
        const("minus_one", np.array([-1], np.int64)),
        const("zero", np.array(0.0, np.float32)),
        const("axes0", np.array([0], np.int64)),
        helper.make_node("Greater", ["x", "zero"], ["mask"], name="greater"),
        helper.make_node("NonZero", ["mask"], ["nz"], name="nonzero"),
        helper.make_node("ReduceMax", ["nz"], ["mx"], name="max", keepdims=0),
        helper.make_node("Unsqueeze", ["mx", "axes0"], ["mx1"], name="unsqueeze"),
        helper.make_node("Add", ["mx1", "one"], ["cols"], name="cols"),
        helper.make_node("Concat", ["minus_one", "cols"], ["shape"], name="concat", axis=0),
    ]
    prev = "data"
    for i in range(extra_adds):
        nodes.append(helper.make_node("Add", [prev, "data"], [f"acc{i}"], name=f"acc{i}"))
        prev = f"acc{i}"
    nodes.append(helper.make_node("Reshape", [prev, "shape"], ["y"], name="reshape"))
    return make_model(
        nodes,
        [tensor("x", shape=[6]), tensor("data", shape=[6])],
        [tensor("y", shape=["rows", "cols"])],
    )
