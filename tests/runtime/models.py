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


def counter_loop(rows: int = 1) -> onnx.ModelProto:
    """paddle2onnx's decoders (SLANet-plus): a Loop on a trip count computed on the device
    whose body carries its own step counter and reads ``Slice(tbl, starts=counter,
    ends=min(len, counter + rows))`` (fewer rows near the end), a value read on the host;
    each step adds the sum of the rows it reads (of ``tbl = 2 * table``, computed before the
    Loop) to an accumulator, and emits it as a scan output."""
    body = helper.make_graph(
        [
            const("b_rows", np.array([rows], np.int64)),
            const("b_one", np.array([1], np.int64)),
            const("b_axis", np.array([0], np.int64)),
            helper.make_node("Shape", ["tbl"], ["b_shape"]),
            helper.make_node("Slice", ["b_shape", "b_axis", "b_one"], ["b_len"]),
            helper.make_node("Add", ["count_in", "b_rows"], ["b_far"]),
            helper.make_node("Min", ["b_len", "b_far"], ["b_end"]),
            helper.make_node("Slice", ["tbl", "count_in", "b_end", "b_axis"], ["b_cut"]),
            helper.make_node("ReduceSum", ["b_cut", "b_axis"], ["b_sum"], keepdims=1),
            helper.make_node("Tanh", ["b_sum"], ["b_t"]),
            helper.make_node("Add", ["acc_in", "b_t"], ["acc_out"]),
            helper.make_node("Add", ["count_in", "b_one"], ["count_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["b_t"], ["scan_out"]),
        ],
        "body",
        [
            tensor("iter", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("count_in", TensorProto.INT64, [1]),
            tensor("acc_in", shape=[1, 4]),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("count_out", TensorProto.INT64, [1]),
            tensor("acc_out", shape=[1, 4]),
            tensor("scan_out", shape=[1, 4]),
        ],
    )
    nodes = [
        const("zero", np.array([0], np.int64)),
        const("acc0", np.zeros((1, 4), np.float32)),
        const("true", np.array(True)),
        const("two", np.array(2.0, np.float32)),
        helper.make_node("Mul", ["table", "two"], ["tbl"]),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Cast", ["total"], ["trips"], to=TensorProto.INT64),
        helper.make_node(
            "Loop", ["trips", "true", "zero", "acc0"], ["count", "acc", "sums"], body=body
        ),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=[3]), tensor("table", shape=[6, 4])],
        [
            tensor("count", TensorProto.INT64, [1]),
            tensor("acc", shape=[1, 4]),
            tensor("sums", shape=["n", 1, 4]),
        ],
    )
