"""A model whose input dim is symbolic, compiled ahead of time for x[2,3] (no cache lookup),
called three times at that shape and once at x[4,3] (a miss, compiled in the call):
``python -m tests.recordings.ahead_of_time TRACE``."""

from __future__ import annotations

import sys

import numpy as np
from onnx import TensorProto, helper

from ember.recorder import record
from ember.runtime import compile, load


def main(argv: list[str]) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "relu_neg", [x], [y])
    model = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with record(argv[0], run_id="ahead", model="relu_neg"):
        compiled = compile(model, input_specs={"x": ((2, 3), "float32")})
        for n in (2, 2, 2, 4):
            compiled({"x": np.ones((n, 3), np.float32)})


if __name__ == "__main__":
    main(sys.argv[1:])
