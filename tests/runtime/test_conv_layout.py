"""The channels-last hint on depthwise convolutions (runtime/layout.py): where the graph sets
it, that the op then computes on NHWC, and that the values stay those of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import ember.runtime as rt
from ember.runtime.graph.ir import run_node
from ember.runtime.graph.layout import CHANNELS_LAST, NHWC, POOLED
from tests.runtime.models import make_model, tensor

rng = np.random.default_rng(3)


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((2, 6, 9, 8), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
        ((1, 4, 11, 10), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "dilations": [2, 1]}),
        ((1, 3, 8, 8), (6, 1, 3, 3), {"group": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((6, 8, 3, 12), (8, 1, 5, 5), {"group": 8, "pads": [2, 2, 2, 2], "strides": [2, 1]}),
        ((1, 5, 13), (5, 1, 5), {"group": 5, "pads": [2, 1]}),  # 1-D
    ],
)
def test_channels_last_depthwise_equals_channels_first(x_shape, w_shape, attrs) -> None:
    import jax

    from ember.runtime.ops.conv import conv

    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        x, w, b = randn(*x_shape, dtype=dtype), randn(*w_shape, dtype=dtype), randn(w_shape[0])
        first = jax.jit(lambda x, w, b: conv(x, w, b, **attrs))(x, w, b.astype(dtype))
        last = jax.jit(lambda x, w, b: conv(x, w, b, **attrs, _ember_channels_last=1))(
            x, w, b.astype(dtype)
        )
        assert last.shape == first.shape
        np.testing.assert_allclose(np.asarray(last), np.asarray(first), rtol=tol, atol=tol)


def test_channels_last_depthwise_transposes_its_input_to_nhwc() -> None:
    import jax

    from ember.runtime.ops.conv import conv

    x, w = randn(1, 4, 6, 6), randn(4, 1, 3, 3)
    hinted = jax.jit(lambda x, w: conv(x, w, group=4, _ember_channels_last=1)).lower(x, w)
    plain = jax.jit(lambda x, w: conv(x, w, group=4)).lower(x, w)
    assert "dims = [0, 2, 3, 1]" in hinted.as_text()
    assert "dims = [0, 2, 3, 1]" not in plain.as_text()


def _weights(name: str, value: np.ndarray) -> helper.NodeProto:
    """A weight as a Constant node, as paddle2onnx writes them."""
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(value.astype(np.float32), name)
    )


def _mobile_block(se: bool, from_input: bool = False):
    """1x1 Conv -> HardSwish -> depthwise 3x3 Conv -> BatchNormalization -> Clip -> 1x1 Conv,
    optionally with a squeeze-excitation (GlobalAveragePool, 1x1, HardSigmoid, Mul) after the
    Clip, or with the depthwise Conv reading the model input directly."""
    c = 8
    nodes = [
        _weights("w1", randn(c, 3, 1, 1)),
        _weights("wd", randn(c, 1, 3, 3)),
        _weights("w2", randn(4, c, 1, 1)),
        _weights("scale", rng.uniform(0.5, 1.5, c)),
        _weights("bias", randn(c)),
        _weights("mean", randn(c)),
        _weights("var", rng.uniform(0.5, 2.0, c)),
    ]
    if from_input:
        dw_in, x_ch = "x", c
    else:
        nodes += [
            helper.make_node("Conv", ["x", "w1"], ["a"]),
            helper.make_node("HardSwish", ["a"], ["h"]),
        ]
        dw_in, x_ch = "h", 3
    nodes += [
        helper.make_node(
            "Conv", [dw_in, "wd"], ["d"], group=c, pads=[1, 1, 1, 1], strides=[2, 1], name="dw"
        ),
        helper.make_node("BatchNormalization", ["d", "scale", "bias", "mean", "var"], ["n"]),
        _weights("lo", np.array(0.0)),
        _weights("hi", np.array(6.0)),
        helper.make_node("Clip", ["n", "lo", "hi"], ["r"]),
    ]
    last = "r"
    if se:
        nodes += [
            _weights("ws", randn(c, c, 1, 1)),
            helper.make_node("GlobalAveragePool", ["r"], ["g"]),
            helper.make_node("Conv", ["g", "ws"], ["gs"]),
            helper.make_node("HardSigmoid", ["gs"], ["s"]),
            helper.make_node("Mul", ["r", "s"], ["e"]),
        ]
        last = "e"
    nodes.append(helper.make_node("Conv", [last, "w2"], ["y"]))
    model = make_model(
        nodes, [tensor("x", shape=[2, x_ch, 12, 10])], [tensor("y", shape=[2, 4, 6, 10])], opset=17
    )
    return model, {"x": randn(2, x_ch, 12, 10)}


@pytest.mark.parametrize(
    ("se", "from_input", "hinted"),
    [(False, False, True), (True, False, False), (False, True, False)],
)
def test_hint_set_between_convolutions_only_and_values_match_onnxruntime(
    se: bool, from_input: bool, hinted: bool
) -> None:
    model, feeds = _mobile_block(se, from_input)
    loaded = rt.load(model)
    (dw,) = [n for n in loaded.graph.nodes if n.name == "dw"]
    assert bool(dw.attrs.get(CHANNELS_LAST)) is hinted
    got = np.asarray(rt.compile(loaded)(feeds)["y"])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(["y"], feeds)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))


@pytest.mark.parametrize("channels_last", [0, 1])
def test_depthwise_taps_that_read_only_padding_are_left_out(channels_last: int) -> None:
    import jax

    from ember.runtime.ops.conv import conv

    # 5x5 over two rows padded by 2: kernel rows 0 and 4 see padding only, 15 of 25 taps stay
    x, w = randn(1, 4, 2, 9), randn(4, 1, 5, 5)
    jaxpr = jax.make_jaxpr(
        lambda x, w: conv(x, w, group=4, pads=[2, 2, 2, 2], _ember_channels_last=channels_last)
    )(x, w)
    assert sum(e.primitive.name == "mul" for e in jaxpr.eqns) == 15


def test_512_bit_vectors_are_an_option_xla_cpu_accepts_with_the_same_values() -> None:
    import jax

    from ember.runtime.jit import xla_cpu
    from ember.runtime.ops.conv import conv

    # runtime/xla_cpu.py asks for them on AVX-512 CPUs; the option must exist under this
    # name (XLA rejects an unknown one) and change no value, here or on any CPU
    x, w = randn(2, 16, 9, 40), randn(16, 1, 3, 3)

    def f(x, w):
        y = conv(x, w, group=16, pads=[1, 1, 1, 1], _ember_channels_last=1)
        return y * jax.numpy.clip(y / 6 + 0.5, 0, 1)

    lowered = jax.jit(f).lower(x, w)
    wide = lowered.compile(compiler_options={"xla_cpu_prefer_vector_width": "512"})
    plain = lowered.compile()
    np.testing.assert_allclose(np.asarray(wide(x, w)), np.asarray(plain(x, w)), rtol=1e-6)
    cpuinfo = Path("/proc/cpuinfo")
    avx512 = cpuinfo.exists() and " avx512f" in cpuinfo.read_text()
    assert ("xla_cpu_prefer_vector_width" in xla_cpu.COMPILER_OPTIONS) is avx512


def _stem_16_channels():
    """YOLOv8n's and PP-LCNet's first stage at a small size: a stride-2 3x3 Conv to 16
    channels + SiLU (Sigmoid, Mul), then a 16-channel depthwise 3x3 Conv + HardSwish and a
    1x1 Conv: the 16-channel NHWC loops that LLVM's -O3 vectorised across width."""
    c = 16
    nodes = [
        _weights("w0", randn(c, 3, 3, 3)),
        _weights("b0", randn(c)),
        _weights("wd", randn(c, 1, 3, 3)),
        _weights("bd", randn(c)),
        _weights("w2", randn(8, c, 1, 1)),
        helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Sigmoid", ["a"], ["sa"]),
        helper.make_node("Mul", ["a", "sa"], ["s"]),
        helper.make_node("Conv", ["s", "wd", "bd"], ["d"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["d"], ["h"]),
        helper.make_node("Conv", ["h", "w2"], ["y"]),
    ]
    model = make_model(
        nodes, [tensor("x", shape=[1, 3, 40, 36])], [tensor("y", shape=[1, 8, 20, 18])], opset=17
    )
    return model, {"x": randn(1, 3, 40, 36)}


def test_llvm_o2_is_an_option_xla_cpu_accepts_and_16_channel_stages_match_onnxruntime() -> None:
    import jax

    from ember.runtime.jit import xla_cpu

    # runtime/xla_cpu.py compiles every segment at LLVM -O2 on XLA:CPU: the option must
    # exist under this name (XLA rejects an unknown one) and change no value
    model, feeds = _stem_16_channels()
    if jax.default_backend() == "cpu":
        assert xla_cpu.compiler_options() == xla_cpu.COMPILER_OPTIONS
        assert xla_cpu.COMPILER_OPTIONS["xla_backend_optimization_level"] == "2"
    got = np.asarray(rt.compile(rt.load(model))(feeds)["y"])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(["y"], feeds)
    assert got.shape == want.shape == (1, 8, 20, 18)
    assert np.max(np.abs(got - want)) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))

    def silu_hardswish(x):  # the same loops in plain JAX, at -O2 and at XLA's default
        y = x * jax.nn.sigmoid(x)
        return y * jax.numpy.clip(y / 6 + 0.5, 0, 1)

    x = randn(1, 20, 18, 16)
    lowered = jax.jit(silu_hardswish).lower(x)
    o2 = lowered.compile(compiler_options={"xla_backend_optimization_level": "2"})
    y = x / (1 + np.exp(-x))
    np.testing.assert_allclose(np.asarray(o2(x)), y * np.clip(y / 6 + 0.5, 0, 1), atol=1e-6)
    np.testing.assert_allclose(np.asarray(o2(x)), np.asarray(lowered.compile()(x)), rtol=1e-6)


def _se_block(hardswish: str, reader: str = ""):
    """1x1 Conv -> Relu -> depthwise 3x3 Conv (+ a per-channel Add of a rank-3 constant) ->
    HardSwish (the op, or paddle2onnx's Add/Clip/Mul/Div) -> squeeze-excitation
    (GlobalAveragePool, 1x1 Conv + bias, Relu, 1x1 Conv + bias, HardSigmoid, Mul) -> 1x1 Conv.
    ``reader``: "output" makes the SE's Mul also a graph output, "op" adds a ReduceSum of
    the HardSwish output to the outputs: values a channels-last region must not take."""
    c, mid = 16, 4
    nodes = [
        _weights("w1", randn(c, 3, 1, 1)),
        _weights("wd", randn(c, 1, 3, 3)),
        _weights("cb", randn(c, 1, 1)),
        _weights("w_se1", randn(mid, c, 1, 1)),
        _weights("b_se1", randn(mid)),
        _weights("w_se2", randn(c, mid, 1, 1)),
        _weights("b_se2", randn(c)),
        _weights("w2", randn(6, c, 1, 1)),
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node(
            "Conv", ["r", "wd"], ["d0"], group=c, pads=[1, 1, 1, 1], strides=[2, 1], name="dw"
        ),
        helper.make_node("Add", ["d0", "cb"], ["d"]),
    ]
    if hardswish == "op":
        nodes.append(helper.make_node("HardSwish", ["d"], ["h"]))
    else:
        nodes += [
            _weights("three", np.array(3.0)),
            _weights("lo", np.array(0.0)),
            _weights("hi", np.array(6.0)),
            _weights("six", np.array(6.0)),
            helper.make_node("Add", ["d", "three"], ["d3"]),
            helper.make_node("Clip", ["d3", "lo", "hi"], ["dc"]),
            helper.make_node("Mul", ["d", "dc"], ["dm"]),
            helper.make_node("Div", ["dm", "six"], ["h"]),
        ]
    nodes += [
        helper.make_node("GlobalAveragePool", ["h"], ["g"], name="gap"),
        helper.make_node("Conv", ["g", "w_se1", "b_se1"], ["g1"]),
        helper.make_node("Relu", ["g1"], ["g2"]),
        helper.make_node("Conv", ["g2", "w_se2", "b_se2"], ["g3"]),
        helper.make_node("HardSigmoid", ["g3"], ["s"], alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["h", "s"], ["e"], name="se_mul"),
        helper.make_node("Conv", ["e", "w2"], ["y"], name="pw"),
    ]
    outputs = [tensor("y", shape=[2, 6, 5, 9])]
    if reader == "output":
        outputs.append(tensor("e", shape=[2, c, 5, 9]))
    elif reader == "op":
        nodes.append(helper.make_node("ReduceSum", ["h"], ["hs"], keepdims=0))
        outputs.append(tensor("hs", shape=[]))
    model = make_model(nodes, [tensor("x", shape=[2, 3, 10, 9])], outputs, opset=17)
    return model, {"x": randn(2, 3, 10, 9)}


@pytest.mark.parametrize("hardswish", ["op", "paddle"])
def test_squeeze_excitation_computes_channels_last_and_matches_onnxruntime(
    hardswish: str,
) -> None:
    model, feeds = _se_block(hardswish)
    loaded = rt.load(model)
    marks = {n.name: n.attrs.get(NHWC) for n in loaded.graph.nodes}
    # the region: from the depthwise Conv through the SE's Mul to the 1x1 Conv that reads it
    assert marks["dw"] == ("out", ())
    assert marks["gap"] == ("pool", (0,))
    assert marks["se_mul"] == ("inout", (0,))
    assert marks["pw"] == ("in", (0,))
    elementwise = [n for n in loaded.graph.nodes if n.attrs.get(NHWC, ("",))[0] == "inout"]
    assert len(elementwise) == (3 if hardswish == "op" else 6)
    # the SE's own convolutions work on the pooled NCHW vector, outside the region
    assert sum(1 for n in loaded.graph.nodes if n.op_type == "Conv" and NHWC in n.attrs) == 2
    got = np.asarray(rt.compile(loaded)(feeds)["y"])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(["y"], feeds)
    assert got.shape == want.shape == (2, 6, 5, 9)
    assert np.max(np.abs(got - want)) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))


def test_squeeze_excitation_region_nodes_hand_on_nhwc_values() -> None:
    """Each marked node run alone: the depthwise Conv returns (N, H, W, C), the pool takes
    it and returns NCHW, the Mul takes the NHWC activation and the NCHW scale, and the 1x1
    Conv after the block takes NHWC; the values are the NCHW ones transposed."""
    model, _ = _se_block("op")
    loaded = rt.load(model)
    node = {n.name: n for n in loaded.graph.nodes}
    env = dict(loaded.graph.initializers)
    for n in loaded.graph.nodes:  # the weights are Constant nodes
        if n.op_type == "Constant":
            env[n.outputs[0]] = run_node(n, env)[0]
    r = np.abs(randn(2, 16, 10, 9))
    d = np.asarray(run_node(node["dw"], {**env, "r": r})[0])
    wd = env["wd"]
    want = np.zeros((2, 16, 5, 9), np.float32)
    rp = np.pad(r, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(3):
        for j in range(3):
            want += rp[:, :, i : i + 9 : 2, j : j + 9] * wd[None, :, 0, i, j, None, None]
    assert d.shape == (2, 5, 9, 16)
    np.testing.assert_allclose(d, want.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)
    h = np.abs(randn(2, 5, 9, 16))
    g = np.asarray(run_node(node["gap"], {"h": h})[0])
    np.testing.assert_allclose(g, h.mean(axis=(1, 2)).reshape(2, 16, 1, 1), rtol=1e-5)
    s = randn(2, 16, 1, 1)
    e = np.asarray(run_node(node["se_mul"], {"h": h, "s": s})[0])
    np.testing.assert_allclose(e, h * s.transpose(0, 2, 3, 1), rtol=1e-6)
    y = np.asarray(run_node(node["pw"], {**env, "e": e})[0])
    want_y = np.einsum("oc,nhwc->nohw", env["w2"][:, :, 0, 0], e)
    assert y.shape == (2, 6, 5, 9)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("reader", ["output", "op"])
def test_squeeze_excitation_region_left_alone_when_a_value_is_read_elsewhere(
    reader: str,
) -> None:
    model, feeds = _se_block("op", reader)
    loaded = rt.load(model)
    assert not any(NHWC in n.attrs for n in loaded.graph.nodes)
    names = [o.name for o in model.graph.output]
    got = rt.compile(loaded)(feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, want in zip(names, sess.run(names, feeds), strict=True):
        value = np.asarray(got[name])
        assert value.shape == want.shape
        assert np.max(np.abs(value - want)) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))


@pytest.mark.parametrize(
    ("after", "pooled", "shape"),
    [
        (["Relu", "MaxPool"], True, [2, 6, 5, 6]),  # a pool reads it through an elementwise op
        (["AveragePool"], True, [2, 6, 5, 6]),
        (["Relu", "Conv"], False, [2, 4, 10, 12]),  # a Conv reads it: the taps stay NCHW
        (["Relu"], False, [2, 6, 10, 12]),  # the graph's output
    ],
)
def test_pooled_hint_on_a_one_channel_conv_and_values_match_onnxruntime(
    after: list[str], pooled: bool, shape: list[int]
) -> None:
    # A one-channel Conv is shifted multiply-adds (ops/conv.py) unless a pool reads it:
    # XLA:CPU lays the pool's input channels-last, where the taps' loop did not vectorise
    nodes = [
        _weights("w", randn(6, 1, 3, 3)),
        helper.make_node("Conv", ["x", "w"], ["v0"], pads=[1, 1, 1, 1], name="c"),
    ]
    for i, op in enumerate(after):
        attrs: dict = {"kernel_shape": [2, 2], "strides": [2, 2]} if op.endswith("Pool") else {}
        inputs = [f"v{i}"]
        if op == "Conv":
            nodes.append(_weights("w2", randn(4, 6, 1, 1)))
            inputs.append("w2")
        nodes.append(helper.make_node(op, inputs, [f"v{i + 1}"], **attrs))
    nodes.append(helper.make_node("Identity", [f"v{len(after)}"], ["y"]))
    model = make_model(
        nodes, [tensor("x", shape=[2, 1, 10, 12])], [tensor("y", shape=shape)], opset=17
    )
    loaded = rt.load(model)
    (conv,) = [n for n in loaded.graph.nodes if n.name == "c"]
    assert bool(conv.attrs.get(POOLED)) is pooled
    feeds = {"x": randn(2, 1, 10, 12)}
    got = np.asarray(rt.compile(loaded)(feeds)["y"])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(["y"], feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("w_shape", "attrs", "convolution"),
    [
        ((6, 1, 3, 3), {"pads": [1, 1, 1, 1]}, False),  # shifted multiply-adds
        ((6, 1, 3, 3), {"pads": [1, 1, 1, 1], "_ember_pooled": 1}, True),  # a pool reads it
        ((6, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),
        # a strided kernel of more than 9 taps: XLA's convolution (a 7x7 stride-2 stem)
        ((6, 1, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, True),
    ],
)
def test_one_channel_conv_keeps_a_convolution_where_a_pool_reads_it_or_a_large_kernel_strides(
    w_shape, attrs, convolution
) -> None:
    import jax

    from ember.runtime.ops.conv import conv

    x, w = randn(2, 1, 16, 16), randn(*w_shape)
    lowered = jax.jit(lambda x, w: conv(x, w, **attrs)).lower(x, w)
    assert ("convolution" in lowered.as_text()) is convolution
    got = np.asarray(jax.jit(lambda x, w: conv(x, w, **attrs))(x, w))
    pads = attrs["pads"]  # begins then ends, as ONNX writes them
    want = np.asarray(
        jax.lax.conv_general_dilated(
            x, w, attrs.get("strides", [1, 1]), [(pads[0], pads[2]), (pads[1], pads[3])]
        )
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_weight_of_one_input_channel_on_a_many_channel_input_is_refused() -> None:
    # group 1, three input channels, a weight of one: an invalid model (onnxruntime refuses
    # it), not a depthwise conv
    from ember.runtime.ops.conv import conv

    with pytest.raises((TypeError, ValueError)):
        conv(randn(1, 3, 8, 8), randn(3, 1, 3, 3), pads=[1, 1, 1, 1])
