"""Exporter conventions for dynamic dimensions: what other exporters write, Ember accepts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import ember.runtime as rt
from tests.runtime.models import make_model, reference, tensor


def _dims_model(dims: list[object]) -> onnx.ModelProto:
    """y = Relu(x) * 2 with x declared as ``dims`` (ints, symbols)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Add", ["r", "r"], ["y"]),
    ]
    return make_model(nodes, [tensor("x", shape=dims)], [tensor("y", shape=dims)])


def _with_dim_value(proto: onnx.ModelProto, axis: int, value: int) -> onnx.ModelProto:
    """The model with input dim ``axis`` written as ``dim_value: value`` (helper refuses -1)."""
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    for vi in (proto.graph.input[0], proto.graph.output[0]):
        dim = vi.type.tensor_type.shape.dim[axis]
        dim.Clear()
        dim.dim_value = value
    return proto


@pytest.mark.parametrize(
    ("value", "convention"),
    [(-1, "paddle2onnx writes -1"), (0, "some exporters write 0")],
)
def test_a_non_positive_dim_value_is_a_dynamic_dimension(value, convention):
    # like paddle2onnx's text-direction classifier: x declared [-1, 3, ?, ?]
    proto = _with_dim_value(_dims_model([1, 3, "h", "w"]), 0, value)
    model = rt.load(proto)
    assert model.inputs[0].shape == (None, 3, "h", "w"), convention
    assert str(model.inputs[0]) == "x: float32[?, 3, h, w]"
    compiled = rt.compile(model)
    rng = np.random.default_rng(0)
    for batch in (6, 1, 0):  # every size onnxruntime accepts, and more for a declared 0
        x = rng.standard_normal((batch, 3, 4, 5)).astype(np.float32)
        out = compiled({"x": x})
        np.testing.assert_array_equal(np.asarray(out["y"]), np.maximum(x, 0) * 2)
        if value < 0 or batch == 0:  # what onnxruntime itself runs
            np.testing.assert_array_equal(np.asarray(out["y"]), reference(proto, {"x": x})["y"])
    # the static dims are still checked
    with pytest.raises(
        rt.InputError, match=r"input 'x' has shape \[6, 4, 4, 5\], but dim 1 must be 3"
    ):
        compiled({"x": np.zeros((6, 4, 4, 5), np.float32)})
