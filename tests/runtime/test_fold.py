"""BatchNormalization folded into the Conv before it at load (runtime/fold.py): when it
happens, when it must not, and that the values stay those of onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import ember.runtime as rt
from tests.runtime.models import make_model, tensor

rng = np.random.default_rng(5)
C_IN, C_OUT = 4, 6


def _const(name: str, value: np.ndarray) -> helper.NodeProto:
    """A weight as a Constant node, as paddle2onnx writes them."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _bn_inputs(c: int) -> list[helper.NodeProto]:
    return [
        _const("scale", rng.uniform(0.5, 1.5, c).astype(np.float32)),
        _const("bias", rng.standard_normal(c).astype(np.float32)),
        _const("mean", rng.standard_normal(c).astype(np.float32)),
        _const("var", rng.uniform(0.2, 2.0, c).astype(np.float32)),
    ]


def _model(*, conv_bias: bool, group: int = 1, also_read: bool = False, conv_out: bool = False):
    """x -> Conv (constant W, optional B) -> BatchNormalization -> Relu -> y; ``also_read``:
    a second node reads the Conv's output; ``conv_out``: it is also a graph output."""
    w = rng.standard_normal((C_OUT, C_IN // group, 3, 3)).astype(np.float32)
    nodes = [_const("w", w), *_bn_inputs(C_OUT)]
    conv_inputs = ["x", "w"]
    if conv_bias:
        nodes.append(_const("b", rng.standard_normal(C_OUT).astype(np.float32)))
        conv_inputs.append("b")
    nodes += [
        helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1], group=group, name="conv"),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    outputs = [tensor("y", shape=[2, C_OUT, 7, 5])]
    if also_read:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"]))
        outputs.append(tensor("z", shape=[2, C_OUT, 7, 5]))
    if conv_out:
        outputs.append(tensor("c", shape=[2, C_OUT, 7, 5]))
    return make_model(nodes, [tensor("x", shape=[2, C_IN, 7, 5])], outputs, opset=15)


def _check_against_onnxruntime(model) -> rt.Model:
    feeds = {"x": rng.standard_normal((2, C_IN, 7, 5)).astype(np.float32)}
    loaded = rt.load(model)
    got = rt.compile(loaded)(feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, want in zip(names, sess.run(names, feeds), strict=True):
        value = np.asarray(got[name])
        assert value.shape == want.shape
        assert np.max(np.abs(value - want)) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))
    return loaded


@pytest.mark.parametrize(("conv_bias", "group"), [(True, 1), (False, 1), (True, 2)])
def test_batch_norm_after_a_constant_conv_is_folded_into_its_weights(conv_bias, group) -> None:
    loaded = _check_against_onnxruntime(_model(conv_bias=conv_bias, group=group))
    ops = [n.op_type for n in loaded.graph.nodes if n.op_type != "Constant"]
    assert ops == ["Conv", "Relu"]
    (conv,) = [n for n in loaded.graph.nodes if n.op_type == "Conv"]
    assert conv.inputs == ("x", "conv/bn_folded_W", "conv/bn_folded_B")
    assert conv.outputs == ("n",)
    assert loaded.graph.initializers["conv/bn_folded_W"].shape == (C_OUT, C_IN // group, 3, 3)
    assert loaded.graph.initializers["conv/bn_folded_W"].dtype == np.float32


@pytest.mark.parametrize("case", ["conv output read twice", "conv output is a graph output"])
def test_batch_norm_stays_when_the_conv_output_is_needed_as_it_is(case: str) -> None:
    model = (
        _model(conv_bias=True, also_read=True)
        if case == "conv output read twice"
        else _model(conv_bias=True, conv_out=True)
    )
    loaded = _check_against_onnxruntime(model)
    assert "BatchNormalization" in [n.op_type for n in loaded.graph.nodes]
    assert not any(name.endswith("bn_folded_W") for name in loaded.graph.initializers)


def test_batch_norm_with_a_computed_scale_stays() -> None:
    nodes = [
        _const("w", rng.standard_normal((C_OUT, C_IN, 1, 1)).astype(np.float32)),
        *_bn_inputs(C_OUT)[1:],
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Abs", ["s"], ["scale"]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor("x", shape=[2, C_IN, 7, 5]), tensor("s", shape=[C_OUT])],
        [tensor("y", shape=[2, C_OUT, 7, 5])],
        opset=15,
    )
    loaded = rt.load(model)
    assert "BatchNormalization" in [n.op_type for n in loaded.graph.nodes]
