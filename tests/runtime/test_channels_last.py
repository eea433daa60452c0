"""Channels-last values inside a traced segment (runtime/channels_last.py): a YOLO-style
block (Conv, SiLU, Split, Conv, Concat, MaxPool, nearest Resize, Slice on channels) keeps
its activations NHWC in the compiled program, and every output is onnxruntime's."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember.runtime as rt
from ember.runtime.graph.channels_last import ChannelsLastEnv
from tests.runtime.models import make_model, tensor

rng = np.random.default_rng(5)


def _w(name: str, value: np.ndarray) -> helper.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(value.astype(np.float32), name)
    )


def _c2f_model():
    """x -> Conv -> SiLU -> Split(ch) -> [a, b]; b -> Conv+SiLU -> c; Concat(a, b, c) ->
    1x1 Conv -> MaxPool -> nearest Resize x2 -> PRelu (slope C,1,1) -> Add bias (C,1,1),
    outputs: the Resize's value, a channel Slice of it, its GlobalAveragePool and a Shape."""
    c = 8
    nodes = [
        _w("w0", rng.standard_normal((c, 3, 3, 3)) * 0.3),
        _w("b0", rng.standard_normal(c) * 0.1),
        _w("w1", rng.standard_normal((4, 4, 3, 3)) * 0.3),
        _w("w2", rng.standard_normal((c, 12, 1, 1)) * 0.3),
        _w("slope", rng.uniform(0.05, 0.3, (c, 1, 1))),
        _w("bias", rng.standard_normal((c, 1, 1))),
        _w("split", np.array([4, 4])),
        helper.make_node("Conv", ["x", "w0", "b0"], ["a0"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["a0"], ["s0"]),
        helper.make_node("Mul", ["a0", "s0"], ["h0"]),
        helper.make_node("Cast", ["split"], ["split64"], to=7),
        helper.make_node("Split", ["h0", "split64"], ["p", "q"], axis=1),
        helper.make_node("Conv", ["q", "w1"], ["a1"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["a1"], ["s1"]),
        helper.make_node("Mul", ["a1", "s1"], ["h1"]),
        helper.make_node("Concat", ["p", "q", "h1"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w2"], ["a2"]),
        helper.make_node("MaxPool", ["a2"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        _w("scales", np.array([1.0, 1.0, 2.0, 2.0])),
        helper.make_node("Resize", ["m", "", "scales"], ["r"], mode="nearest"),
        helper.make_node("PRelu", ["r", "slope"], ["pr"]),
        helper.make_node("Add", ["pr", "bias"], ["y"]),
        _w("st", np.array([2])),
        _w("en", np.array([6])),
        _w("ax", np.array([-3])),
        helper.make_node("Cast", ["st"], ["st64"], to=7),
        helper.make_node("Cast", ["en"], ["en64"], to=7),
        helper.make_node("Cast", ["ax"], ["ax64"], to=7),
        helper.make_node("Slice", ["y", "st64", "en64", "ax64"], ["sl"]),
        helper.make_node("GlobalAveragePool", ["y"], ["g"]),
        helper.make_node("Shape", ["sl"], ["shape"]),
    ]
    outputs = [
        tensor("y", shape=[2, c, 10, 12]),
        tensor("sl", shape=[2, 4, 10, 12]),
        tensor("g", shape=[2, c, 1, 1]),
        tensor("shape", TensorProto.INT64, shape=[4]),
    ]
    model = make_model(nodes, [tensor("x", shape=[2, 3, 10, 12])], outputs, opset=17)
    return model, {"x": rng.standard_normal((2, 3, 10, 12)).astype(np.float32)}


def test_yolo_style_block_matches_onnxruntime() -> None:
    model, feeds = _c2f_model()
    got = rt.compile(rt.load(model))(feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = ["y", "sl", "g", "shape"]
    for name, want in zip(names, sess.run(names, feeds), strict=True):
        value = np.asarray(got[name])
        assert value.shape == want.shape, name
        assert value.dtype == want.dtype, name
        np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4, err_msg=name)


def _entry(hlo: str) -> list[str]:
    """The instructions of the optimized program's entry computation."""
    return hlo[hlo.index("ENTRY") :].splitlines()[1:]


def test_yolo_style_block_keeps_activations_nhwc_in_the_program() -> None:
    import jax

    if jax.default_backend() != "cpu":
        pytest.skip("channels-last values are an XLA:CPU choice")
    model, feeds = _c2f_model()
    compiled = rt.compile(rt.load(model), feeds)
    entry = _entry(compiled._main.exe.as_text())
    # values of NCHW shape (N=2, C, H in {10, 5}, W in {12, 6}) stored row-major: only the
    # outputs' final copies (before, each Split, Concat and MaxPool read or wrote NCHW
    # between two NHWC convolutions, so the activations went back and forth)
    nchw = re.compile(r"%(\S+) = f32\[2,\d+,(?:10|5),(?:12|6)\]\{3,2,1,0\} (\w[\w-]*)\(")
    inner = [m.group(1) for line in entry if (m := nchw.search(line))]
    assert inner
    assert all(n.startswith(("wrapped_copy", "arg_")) for n in inner), inner
    nhwc = re.compile(r"= f32\[2,(?:10|5),(?:12|6),\d+\]\{3,2,1,0\} (convolution|fusion)\(")
    assert sum(1 for line in entry if nhwc.search(line)) >= 5


def test_env_gives_nchw_when_read_by_name_once() -> None:
    import jax.numpy as jnp

    env = ChannelsLastEnv({"a": 1})
    nhwc = jnp.arange(24.0).reshape(1, 2, 3, 4)  # (N, H, W, C)
    env.nhwc["v"] = nhwc
    assert "v" in env
    assert "a" in env
    assert "w" not in env
    first = env["v"]
    assert first.shape == (1, 4, 2, 3)
    np.testing.assert_array_equal(np.asarray(first), np.transpose(np.asarray(nhwc), (0, 3, 1, 2)))
    assert env["v"] is first  # kept: one transpose
    assert env.get("w", 7) == 7
    with pytest.raises(KeyError):
        env["w"]


@pytest.mark.parametrize(
    ("scales", "mode", "broadcast"),
    [
        ((1, 1, 2, 3), "round_prefer_floor", True),  # YOLO's Upsample x2: each row k times
        ((1, 1, 2, 2), "floor", False),  # half_pixel + floor: row 0 three times, a gather
        ((1, 1, 1.5, 2), "round_prefer_floor", False),
    ],
)
def test_nearest_integer_upscale_is_a_broadcast_not_a_gather(scales, mode, broadcast) -> None:
    import jax

    from ember.runtime.ops.resize import resize

    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    fn = jax.jit(lambda x: resize(x, None, np.array(scales, np.float32), nearest_mode=mode))
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest", nearest_mode=mode)
    s = numpy_helper.from_array(np.array(scales, np.float32), "s")
    out = [int(d * f) for d, f in zip(x.shape, scales, strict=True)]
    model = make_model([node], [tensor("x", shape=list(x.shape))], [tensor("y", shape=out)], [s])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(np.asarray(fn(x)), sess.run(["y"], {"x": x})[0])
    assert ("gather(" in fn.lower(x).compile().as_text()) is not broadcast
