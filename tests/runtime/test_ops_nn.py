"""Values of the neural-network ops against onnx's reference evaluator, onnxruntime or numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.runtime.ops import lookup
from tests.runtime.models import make_model, reference, tensor
from tests.runtime.op_check import assert_matches, run_op

rng = np.random.default_rng(0)


def _ours_and_onnxruntimes(
    op_type: str,
    feeds: dict[str, np.ndarray | None],
    attrs: dict[str, Any],
    *,
    opset: int | None = None,
    outputs: tuple[str, ...] = ("y",),
) -> tuple[np.ndarray, np.ndarray]:
    """The first output of Ember's ``op_type`` on the float32 ``feeds`` (``None``: an input
    left out), and onnxruntime's from a one-node model. Without ``opset``, Ember's op is
    ``run_op``'s default (opset 22) and the model's opset 17."""
    got = run_op(op_type, list(feeds.values()), attrs, **({"opset": opset} if opset else {}))
    given = {n: v for n, v in feeds.items() if v is not None}
    node = helper.make_node(
        op_type, [n if v is not None else "" for n, v in feeds.items()], list(outputs), **attrs
    )
    model = make_model(
        [node],
        [tensor(n, shape=list(v.shape)) for n, v in given.items()],
        [tensor(n, shape=list(o.shape)) for n, o in zip(outputs, got, strict=False)],
        opset=opset or 17,
    )
    return got[0], reference(model, given)[outputs[0]]


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------- convolution


def test_conv_groups_dilations_strides_same_upper() -> None:
    x, w, b = randn(2, 4, 9, 8), randn(6, 2, 3, 3), randn(6)
    attrs = {"group": 2, "dilations": [2, 1], "strides": [2, 2], "auto_pad": "SAME_UPPER"}
    (y,) = assert_matches("Conv", [x, w, b], attrs)
    assert y.shape == (2, 6, 5, 4)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        # depthwise (one input channel per group): shifted multiply-adds
        ((2, 6, 9, 8), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
        ((1, 4, 11, 10), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "dilations": [2, 1]}),
        ((1, 3, 8, 8), (6, 1, 3, 3), {"group": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((1, 5, 13), (5, 1, 5), {"group": 5, "pads": [2, 1]}),  # 1-D, multiplier 1
        # 5x5 on two rows padded by 2: the first and last kernel rows read padding only
        ((2, 6, 2, 9), (6, 1, 5, 5), {"group": 6, "pads": [2, 2, 2, 2]}),
        # stride 2 over one row padded by 1 and 3 steps over it: every tap reads padding
        ((1, 3, 1, 4), (3, 1, 1, 3), {"group": 3, "pads": [1, 1, 3, 1], "strides": [2, 1]}),
        # one input channel, group 1 (a spectrogram's first layer): shifted multiply-adds
        ((2, 1, 12, 9), (5, 1, 3, 3), {"pads": [0, 1, 0, 1]}),
        ((1, 1, 11, 10), (4, 1, 3, 2), {"strides": [2, 2], "dilations": [1, 2]}),
        ((1, 1, 9), (3, 1, 1), {}),  # 1-D, one tap
        ((1, 1, 1, 4), (3, 1, 1, 3), {"pads": [1, 1, 3, 1], "strides": [2, 1]}),  # padding only
        # grouped 1x1: one batched matmul
        ((2, 8, 7, 6), (12, 2, 1, 1), {"group": 4}),
        ((1, 8, 9, 9), (8, 4, 1, 1), {"group": 2, "strides": [2, 3]}),
        # grouped 3x3 with several channels per group: XLA's own grouped conv
        ((1, 8, 6, 6), (4, 4, 3, 3), {"group": 2, "pads": [1, 0, 1, 0]}),
    ],
)
def test_grouped_and_depthwise_conv_rewrites_match_onnxruntime(x_shape, w_shape, attrs) -> None:
    b = randn(w_shape[0])
    assert_matches("Conv", [randn(*x_shape), randn(*w_shape), b], attrs, rtol=1e-4, atol=1e-4)
    assert_matches(
        "Conv",
        [randn(*x_shape, dtype=np.float64), randn(*w_shape, dtype=np.float64)],
        attrs,
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "group", "grouped_conv_left"),
    [
        ((1, 6, 9, 8), (6, 1, 3, 3), 6, False),  # depthwise: shifted multiply-adds
        ((1, 1, 9, 8), (6, 1, 3, 3), 1, False),  # one input channel: shifted multiply-adds
        ((1, 8, 7, 6), (12, 2, 1, 1), 4, False),  # grouped 1x1: a batched matmul
        ((1, 8, 6, 6), (4, 4, 3, 3), 2, True),  # grouped 3x3: XLA's grouped convolution
    ],
)
def test_grouped_conv_rewrites_leave_no_grouped_convolution(
    x_shape, w_shape, group, grouped_conv_left
) -> None:
    import jax

    from ember.runtime.ops.conv import conv

    lowered = jax.jit(lambda x, w: conv(x, w, group=group)).lower(randn(*x_shape), randn(*w_shape))
    assert (f"feature_group_count = {group}" in lowered.as_text()) is grouped_conv_left


def test_depthwise_convs_in_a_chain_read_each_tap_once() -> None:
    # Depthwise Conv -> SiLU three times: XLA:CPU fused each layer's taps into the next
    # layer's taps, computing the earlier layers again for every tap that reads them (72
    # tap slices in the program for 27 taps; 4 such layers on 128x56x56 took 26 ms a call
    # where one took 0.9). The padded input of each depthwise Conv is now written once.
    import re

    import ember.runtime as rt

    nodes, weights, x = [], [], "x"
    for i in range(3):
        weights.append(numpy_helper.from_array(randn(8, 1, 3, 3), f"w{i}"))
        nodes += [
            helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], group=8, pads=[1, 1, 1, 1]),
            helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"]),
            helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"y{i}"]),
        ]
        x = f"y{i}"
    shape = [1, 8, 10, 10]
    proto = make_model(nodes, [tensor("x", shape=shape)], [tensor("y2", shape=shape)], weights)
    compiled = rt.compile(proto)
    hlo = compiled._main.exe.as_text()
    assert len(re.findall(r" slice\(", hlo)) == 3 * 9  # each tap of each layer read once
    assert len(re.findall(r" exponential\(", hlo)) == 3  # each SiLU computed once
    feeds = {"x": randn(1, 8, 10, 10)}
    np.testing.assert_allclose(
        np.asarray(compiled(feeds)["y2"]), reference(proto, feeds)["y2"], rtol=1e-5, atol=1e-5
    )


def test_conv_explicit_asymmetric_pads_1d() -> None:
    assert_matches("Conv", [randn(1, 3, 11), randn(2, 3, 4)], {"pads": [2, 1], "strides": [3]})


def test_conv_transpose_output_shape_and_groups_against_onnxruntime() -> None:
    x, w = randn(1, 4, 5, 5), randn(4, 3, 3, 3)
    attrs = {"group": 2, "strides": [2, 2], "output_shape": [10, 11]}
    y, want = _ours_and_onnxruntimes("ConvTranspose", {"x": x, "w": w}, attrs)
    assert y.shape == (1, 6, 10, 11)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_conv_transpose_pads_output_padding_dilations() -> None:
    x, w, b = randn(2, 2, 4, 3), randn(2, 3, 2, 3), randn(3)
    attrs = {"strides": [3, 2], "pads": [1, 0, 2, 1], "output_padding": [1, 1], "dilations": [2, 1]}
    assert_matches("ConvTranspose", [x, w, b], attrs)


@pytest.mark.parametrize(
    ("x_shape", "kernel", "attrs"),
    [
        # CenterNet's learned bilinear upsampling: 4x4 taps, stride 2, pads 1
        ((1, 4, 5, 6), (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((2, 3, 5, 5), (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
        ((1, 2, 4, 4), (2, 2), {"strides": [3, 3]}),  # a phase that no tap reaches: zeros
        ((1, 2, 7), (5,), {"strides": [2], "pads": [2, 1]}),
        ((1, 2, 3, 4, 4), (2, 3, 3), {"strides": [1, 2, 2], "pads": [0, 1, 1, 0, 0, 1]}),
        ((1, 3, 6, 6), (4, 4), {"strides": [2, 2], "pads": [3, 0, 2, 1]}),
        ((1, 3, 5, 5), (3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        ((1, 3, 5, 5), (3, 3), {"strides": [2, 2], "output_shape": [10, 10]}),
    ],
)
def test_depthwise_conv_transpose_runs_as_phases(
    x_shape: tuple[int, ...], kernel: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    # one channel per group: no grouped convolution (XLA:CPU's is a slow generic loop)
    import jax

    channels = x_shape[1]
    x, w, b = randn(*x_shape), randn(channels, 1, *kernel), randn(channels)
    attrs = {"group": channels, **attrs}
    # onnxruntime's (onnx's reference evaluator adds a grouped ConvTranspose's bias wrongly)
    y, want = _ours_and_onnxruntimes("ConvTranspose", {"x": x, "w": w, "b": b}, attrs)
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    fn = lookup("ConvTranspose", 22).fn
    jaxpr = jax.make_jaxpr(lambda x, w, b: fn(x, w, b, **attrs))(x, w, b)
    assert "conv_general_dilated" not in str(jaxpr)


def test_conv_integer_subtracts_zero_points() -> None:
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(0, 255, (3, 2, 2, 2)).astype(np.uint8)
    xz, wz = np.uint8(12), np.uint8(100)
    (y,) = run_op("ConvInteger", [x, w, xz, wz], {"pads": [1, 1, 1, 1]})
    want = reference(
        make_model(
            [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])],
            [
                tensor(n, TensorProto.UINT8, list(np.shape(v)))
                for n, v in [("x", x), ("w", w), ("xz", xz), ("wz", wz)]
            ],
            [tensor("y", TensorProto.INT32, [1, 3, 6, 6])],
        ),
        {"x": x, "w": w, "xz": np.asarray(xz), "wz": np.asarray(wz)},
    )["y"]
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want)


# --------------------------------------------------------------------------- pooling


def test_max_pool_indices_ceil_mode_storage_order() -> None:
    x = randn(2, 3, 7, 6)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1, "storage_order": 1}
    y, idx = run_op("MaxPool", [x], attrs)
    want_y, want_idx = reference_pool(x, attrs)
    np.testing.assert_allclose(y, want_y)
    np.testing.assert_array_equal(idx, want_idx)
    assert idx.dtype == np.int64


def reference_pool(x: np.ndarray, attrs: dict) -> list[np.ndarray]:
    from tests.runtime.op_check import reference_op

    return reference_op("MaxPool", [x], attrs, n_outputs=2, opset=12)


def test_max_pool_integers_and_dilations() -> None:
    x = rng.integers(-100, 100, (1, 2, 8, 8)).astype(np.int8)
    assert_matches(
        "MaxPool", [x], {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 0, 0]}
    )


@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "pads", "dil", "ceil"),
    [
        ((1, 3, 10, 10), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 0),  # yolov8n's SPPF
        ((2, 4, 11, 9), (3, 3), (2, 2), (1, 0, 1, 0), (1, 1), 1),  # ceil mode: extra end pad
        ((1, 2, 12, 7), (3, 2), (3, 1), (0, 1, 2, 0), (2, 3), 0),  # dilated, uneven pads
        ((1, 2, 9), (4,), (2,), (1, 2), (1,), 1),  # 1-D
        ((1, 1, 5, 6, 7), (2, 3, 2), (1, 2, 2), (0, 1, 0, 1, 1, 0), (1, 1, 2), 0),  # 3-D
    ],
)
def test_window_max_equals_reduce_window(shape, kernel, strides, pads, dil, ceil) -> None:
    """MaxPool's max over strided slices, axis by axis, gives reduce-window's values, NaN
    included, for floats and integers."""
    import jax.numpy as jnp
    from jax import lax

    from ember.runtime.ops.pool import pool_geometry, window_max

    n = len(kernel)
    geometry = pool_geometry(
        shape, kernel, auto_pad="NOTSET", pads=pads, strides=strides, dilations=dil, ceil_mode=ceil
    )
    kernel_, strides_, pad, extra, dil_ = geometry
    padding = [(lo, hi + e) for (lo, hi), e in zip(pad, extra, strict=True)]
    x = randn(*shape)
    x.flat[3] = np.nan
    for value in (x, (x * 50).astype(np.int16)):
        low = -np.inf if value.dtype.kind == "f" else np.iinfo(value.dtype).min
        want = lax.reduce_window(
            value,
            jnp.asarray(low, value.dtype),
            lax.max,
            (1, 1, *kernel_),
            (1, 1, *strides_),
            ((0, 0), (0, 0), *padding),
            window_dilation=(1, 1, *dil_),
        )
        got = window_max(jnp.asarray(value), range(2, 2 + n), kernel_, strides_, padding, dil_)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.dtype == value.dtype


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_pads_ceil_and_count_include_pad(include_pad: int) -> None:
    x = randn(1, 2, 6, 7)
    attrs = {
        "kernel_shape": [3, 3],
        "strides": [2, 2],
        "pads": [1, 1, 1, 0],
        "ceil_mode": 1,
        "count_include_pad": include_pad,
    }
    assert_matches("AveragePool", [x], attrs)


def test_lp_pool_and_global_pools() -> None:
    x = randn(2, 3, 5, 4)
    assert_matches("LpPool", [x], {"kernel_shape": [2, 2], "p": 3}, opset=18, atol=1e-4)
    for op_type in ("GlobalAveragePool", "GlobalMaxPool"):
        assert_matches(op_type, [x], {})
    (y,) = run_op("GlobalLpPool", [x], {"p": 2})
    np.testing.assert_allclose(y, np.sqrt((x**2).sum(axis=(2, 3), keepdims=True)), rtol=1e-5)


def test_global_average_pool_before_softmax_is_not_recomputed_in_its_fusion() -> None:
    # The NaN of light squeezenet/resnet50 (about one process in four): XLA:CPU recomputed
    # the mean (sum * 1/169) inside the exp's fusion, where an FMA skipped the rounding the
    # max had seen; on logits of ~1e10 every exp underflowed. The mean is now the
    # reduction's own output, so the exp's fusion reads it as it is: no multiply there.
    import re

    import ember.runtime as rt

    proto = make_model(
        [
            helper.make_node("GlobalAveragePool", ["x"], ["m"]),
            helper.make_node("Flatten", ["m"], ["f"]),
            helper.make_node("Softmax", ["f"], ["y"], axis=1),
        ],
        [tensor("x", shape=[1, 1000, 13, 13])],
        [tensor("y", shape=[1, 1000])],
    )
    compiled = rt.compile(proto)
    hlo = compiled._main.exe.as_text()
    fusions = re.findall(r"\n(%?fused_computation[^\n]*\{.*?\n\})", hlo, re.S)
    with_exp = [f for f in fusions if "exponential(" in f]
    assert with_exp
    assert not any("multiply(" in f for f in with_exp)
    # logits of ~9.5e9 as in the light models, one channel 1e6 above the others
    levels = np.full(1000, 9.5e9, np.float32)
    levels[417] += 1e6
    x = np.broadcast_to(levels[None, :, None, None], (1, 1000, 13, 13)).astype(np.float32)
    y = np.asarray(compiled({"x": x})["y"])
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y, reference(proto, {"x": x})["y"])
    assert y[0, 417] == 1.0


def test_max_unpool_inverts_max_pool_indices() -> None:
    x = randn(1, 1, 4, 4)
    y, idx = run_op("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]})
    (up,) = run_op(
        "MaxUnpool", [y, idx, np.array([1, 1, 5, 5])], {"kernel_shape": [2, 2], "strides": [2, 2]}
    )
    assert up.shape == (1, 1, 5, 5)
    assert np.count_nonzero(up) == 4
    np.testing.assert_allclose(np.sort(up[up != 0]), np.sort(y.ravel()))


# --------------------------------------------------------------------------- normalization


def test_batch_normalization_inference_and_training() -> None:
    x, scale, bias = randn(4, 3, 5, 5), randn(3), randn(3)
    mean, var = randn(3), np.abs(randn(3)) + 0.5
    assert_matches("BatchNormalization", [x, scale, bias, mean, var], {"epsilon": 1e-3}, opset=15)
    y, running_mean, running_var = run_op(
        "BatchNormalization",
        [x, scale, bias, mean, var],
        {"training_mode": 1, "momentum": 0.8},
        opset=15,
    )
    batch_mean = x.mean(axis=(0, 2, 3))
    batch_var = x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(running_mean, mean * 0.8 + batch_mean * 0.2, rtol=1e-5)
    np.testing.assert_allclose(running_var, var * 0.8 + batch_var * 0.2, rtol=1e-5)
    want = (x - batch_mean[:, None, None]) / np.sqrt(batch_var[:, None, None] + 1e-5)
    np.testing.assert_allclose(y, want * scale[:, None, None] + bias[:, None, None], atol=1e-4)


def test_layer_normalization_returns_mean_and_inverse_std() -> None:
    x, s, b = randn(2, 3, 4), randn(3, 4), randn(3, 4)
    _y, mean, inv = assert_matches(
        "LayerNormalization", [x, s, b], {"axis": 1, "epsilon": 1e-3}, n_outputs=3, opset=17
    )
    assert mean.shape == inv.shape == (2, 1, 1)


def test_group_normalization_scale_per_group_before_opset_21() -> None:
    x = randn(2, 4, 3, 3)
    per_channel = run_op("GroupNormalization", [x, randn(4), randn(4)], {"num_groups": 2}, opset=21)
    per_group = run_op(
        "GroupNormalization",
        [x, np.ones(2, np.float32), np.zeros(2, np.float32)],
        {"num_groups": 2},
        opset=18,
    )
    g = x.reshape(2, 2, -1)
    norm = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(
        x.shape
    )
    np.testing.assert_allclose(per_group[0], norm, atol=1e-5)
    assert per_channel[0].shape == x.shape


def test_rms_instance_lp_mvn_lrn_match_reference() -> None:
    x = randn(2, 3, 4, 5)
    assert_matches("RMSNormalization", [x, randn(5)], {"epsilon": 1e-4}, opset=23)
    assert_matches("InstanceNormalization", [x, randn(3), randn(3)], {})
    assert_matches("LpNormalization", [x], {"axis": 1, "p": 2})
    (l1,) = run_op("LpNormalization", [x], {"axis": 1, "p": 1})
    np.testing.assert_allclose(l1, x / np.abs(x).sum(axis=1, keepdims=True), rtol=1e-5)
    assert_matches("MeanVarianceNormalization", [x], {"axes": [0, 2, 3]})
    # onnx's reference LRN walks the batch axis instead of channels, so check by formula.
    (y,) = run_op("LRN", [x], {"size": 3, "alpha": 1e-3, "beta": 0.7, "bias": 1.5})
    sq = np.pad(x**2, [(0, 0), (1, 1), (0, 0), (0, 0)])
    window = sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:]
    np.testing.assert_allclose(y, x / (1.5 + 1e-3 / 3 * window) ** 0.7, rtol=1e-5)


# --------------------------------------------------------------------------- losses


def test_losses_with_weights_and_ignore_index() -> None:
    scores = randn(4, 5, 3)
    labels = rng.integers(0, 5, (4, 3)).astype(np.int64)
    labels[0, 0] = -1
    weights = np.abs(randn(5))
    attrs = {"ignore_index": -1, "reduction": "mean"}
    assert_matches(
        "SoftmaxCrossEntropyLoss", [scores, labels, weights], attrs, n_outputs=2, opset=13
    )
    assert_matches(
        "NegativeLogLikelihoodLoss",
        [scores, labels, weights],
        {**attrs, "reduction": "sum"},
        opset=13,
    )
    assert_matches(
        "NegativeLogLikelihoodLoss",
        [scores, labels],
        {"ignore_index": -1, "reduction": "none"},
        opset=13,
    )


# --------------------------------------------------------------------------- image sampling


@pytest.mark.parametrize(
    ("attrs", "scales", "sizes"),
    [
        ({"mode": "linear"}, np.array([1, 1, 1.5, 0.75], np.float32), None),
        ({"mode": "cubic", "antialias": 1}, np.array([1, 1, 0.5, 0.6], np.float32), None),
        (
            {
                "mode": "nearest",
                "nearest_mode": "ceil",
                "coordinate_transformation_mode": "asymmetric",
                "keep_aspect_ratio_policy": "not_larger",
                "axes": [2, 3],
            },
            None,
            np.array([7, 9], np.int64),
        ),
        (
            {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
            None,
            np.array([1, 2, 3, 11], np.int64),
        ),
    ],
)
def test_resize_modes(attrs: dict, scales: np.ndarray | None, sizes: np.ndarray | None) -> None:
    x = randn(1, 2, 6, 8)
    assert_matches("Resize", [x, None, scales, sizes], attrs, opset=19)


def test_resize_tf_crop_and_resize_extrapolates() -> None:
    x = randn(1, 1, 4, 4)
    roi = np.array([0, 0, -0.5, 0.2, 1, 1, 0.9, 1.4], np.float32)
    attrs = {
        "mode": "linear",
        "coordinate_transformation_mode": "tf_crop_and_resize",
        "extrapolation_value": 7.0,
    }
    (y,) = assert_matches(
        "Resize", [x, roi, None, np.array([1, 1, 5, 5], np.int64)], attrs, opset=19
    )
    assert (y == 7.0).any()


def test_resize_integer_input_keeps_dtype() -> None:
    x = rng.integers(0, 255, (1, 1, 3, 3)).astype(np.uint8)
    assert_matches(
        "Resize",
        [x, None, np.array([1, 1, 2, 2], np.float32)],
        {"mode": "linear"},
        opset=19,
        atol=1,
    )


def test_resize_without_scales_or_sizes_is_an_error() -> None:
    with pytest.raises(ValueError, match="scales"):
        run_op("Resize", [randn(1, 1, 2, 2), None, None, None], {}, opset=19, jit=False)


@pytest.mark.parametrize(
    ("mode", "padding_mode"),
    [("linear", "zeros"), ("nearest", "border"), ("cubic", "reflection"), ("linear", "reflection")],
)
def test_grid_sample(mode: str, padding_mode: str) -> None:
    x = randn(1, 2, 4, 5)
    grid = rng.uniform(-1.3, 1.3, (1, 3, 4, 2)).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding_mode, "align_corners": 0}
    assert_matches("GridSample", [x, grid], attrs, opset=20, atol=1e-4)


def test_affine_grid_feeds_grid_sample_identity() -> None:
    theta = np.array([[[1, 0, 0], [0, 1, 0]]], np.float32)
    (grid,) = assert_matches(
        "AffineGrid", [theta, np.array([1, 1, 3, 4], np.int64)], {"align_corners": 1}, opset=20
    )
    x = randn(1, 1, 3, 4)
    (y,) = run_op("GridSample", [x, grid], {"align_corners": 1}, opset=20)
    np.testing.assert_allclose(y, x, atol=1e-5)


def test_roi_align_and_col2im() -> None:
    x = randn(2, 3, 8, 8)
    rois = np.array([[0, 0, 4, 4], [1.5, 2.5, 7, 6]], np.float32)
    assert_matches(
        "RoiAlign",
        [x, rois, np.array([0, 1], np.int64)],
        {"output_height": 3, "output_width": 2},
        opset=16,
    )
    cols = randn(1, 2 * 4, 9)
    assert_matches(
        "Col2Im",
        [cols, np.array([4, 4], np.int64), np.array([2, 2], np.int64)],
        {"strides": [1, 1]},
        opset=18,
    )


# --------------------------------------------------------------------------- recurrent


def _rnn_model(op_type: str, gates: int, attrs: dict, with_lens: bool):
    names = ["X", "W", "R", "B", "L" if with_lens else ""]
    node = helper.make_node(op_type, names, ["Y", "Y_h"], hidden_size=3, **attrs)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    inputs = [
        tensor("X", shape=[5, 2, 4]),
        tensor("W", shape=[dirs, gates * 3, 4]),
        tensor("R", shape=[dirs, gates * 3, 3]),
        tensor("B", shape=[dirs, 2 * gates * 3]),
    ] + ([tensor("L", TensorProto.INT32, [2])] if with_lens else [])
    outputs = [tensor("Y", shape=[5, dirs, 2, 3]), tensor("Y_h", shape=[dirs, 2, 3])]
    return make_model([node], inputs, outputs, opset=14), dirs


@pytest.mark.parametrize(
    ("op_type", "gates", "attrs"),
    [
        ("LSTM", 4, {"direction": "bidirectional"}),
        ("GRU", 3, {"direction": "reverse", "linear_before_reset": 1}),
        ("RNN", 1, {"direction": "forward", "activations": ["Relu"]}),
    ],
)
def test_recurrent_against_onnxruntime_with_sequence_lens(
    op_type: str, gates: int, attrs: dict
) -> None:
    model, dirs = _rnn_model(op_type, gates, attrs, with_lens=True)
    feeds = {
        "X": randn(5, 2, 4),
        "W": randn(dirs, gates * 3, 4) * 0.5,
        "R": randn(dirs, gates * 3, 3) * 0.5,
        "B": randn(dirs, 2 * gates * 3) * 0.1,
        "L": np.array([5, 3], np.int32),
    }
    want = reference(model, feeds)
    got = run_op(
        op_type,
        [feeds["X"], feeds["W"], feeds["R"], feeds["B"], feeds["L"]],
        {"hidden_size": 3, **attrs},
        opset=14,
    )
    np.testing.assert_allclose(got[0], want["Y"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], want["Y_h"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op_type", "gates"), [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_step_has_only_the_recurrent_matmul(op_type: str, gates: int) -> None:
    """The input terms X W^T + b are one matmul over the whole sequence and both directions,
    before the loop; both directions run in one loop, whose step keeps only h's matmuls
    (GRU: z and r together, the candidate apart), batched over the direction: no slice of
    W or R per direction (XLA:CPU copied them on every call: 16 MB for ddddocr's CRNN) and
    no transposed copy of a weight (that CRNN was 4.6x onnxruntime with W.T in the step)."""
    import jax

    fn = lookup(op_type, 14).fn
    w, r = randn(2, gates * 3, 4), randn(2, gates * 3, 3)
    jaxpr = jax.make_jaxpr(lambda x, w, r: fn(x, w, r, hidden_size=3, direction="bidirectional"))(
        randn(5, 2, 4), w, r
    )
    scans = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    assert len(scans) == 1  # both directions in one loop
    outside = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert outside.count("dot_general") == 1  # the input projection of both directions
    weights = {id(v) for v in jaxpr.jaxpr.invars[1:]}
    sliced = [e.primitive.name for e in jaxpr.jaxpr.eqns if weights & {id(v) for v in e.invars}]
    # W and R are read whole (GRU splits R once, outside the loop, for its candidate)
    assert set(sliced) <= (
        {"reshape", "scan", "slice"} if op_type == "GRU" else {"reshape", "scan"}
    )
    body = [e.primitive.name for e in scans[0].params["jaxpr"].jaxpr.eqns]
    assert body.count("dot_general") == (2 if op_type == "GRU" else 1), body
    assert "transpose" not in body, body


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_bidirectional_recurrent_with_initial_state_matches_reference(op_type: str) -> None:
    """Both directions share one loop: each keeps its own weights, biases, initial state
    and (GRU default form) candidate, in both layouts (the reference evaluator ignores
    sequence_lens: that is checked against onnxruntime above)."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
    for layout in (0, 1):
        x = randn(2, 5, 4) if layout else randn(5, 2, 4)
        h0 = randn(2, 2, 3)
        ins = [x, randn(2, gates * 3, 4), randn(2, gates * 3, 3), randn(2, 2 * gates * 3)]
        ins += [None, h0]
        attrs = {"hidden_size": 3, "direction": "bidirectional", "layout": layout}
        assert_matches(op_type, ins, attrs, n_outputs=2, opset=14)


def test_gru_batch_first_layout_matches_reference() -> None:
    x, w, r = randn(2, 5, 4), randn(1, 9, 4), randn(1, 9, 3)
    assert_matches("GRU", [x, w, r], {"hidden_size": 3, "layout": 1}, n_outputs=2, opset=14)


def test_unknown_recurrent_activation_is_an_error() -> None:
    with pytest.raises(ValueError, match="Bogus"):
        run_op(
            "RNN",
            [randn(2, 1, 2), randn(1, 3, 2), randn(1, 3, 3)],
            {"activations": ["Bogus"]},
            jit=False,
        )


# --------------------------------------------------------------------------- attention


def test_attention_causal_grouped_query_3d() -> None:
    q, k, v = randn(2, 4, 8), randn(2, 6, 4), randn(2, 6, 4)
    attrs = {"is_causal": 1, "q_num_heads": 4, "kv_num_heads": 2}
    assert_matches("Attention", [q, k, v], attrs, opset=23)


def test_attention_past_cache_bool_mask_and_softcap() -> None:
    q, k, v = randn(1, 2, 3, 4), randn(1, 2, 2, 4), randn(1, 2, 2, 4)
    past_k, past_v = randn(1, 2, 5, 4), randn(1, 2, 5, 4)
    mask = rng.random((3, 7)) > 0.3
    mask[:, 0] = True
    attrs = {"softcap": 2.0, "qk_matmul_output_mode": 3}
    got = assert_matches("Attention", [q, k, v, mask, past_k, past_v], attrs, n_outputs=4, opset=23)
    assert got[1].shape == (1, 2, 7, 4)


def test_attention_3d_without_head_counts_is_an_error() -> None:
    with pytest.raises(ValueError, match="q_num_heads"):
        run_op("Attention", [randn(1, 2, 4)] * 3, {}, opset=23, jit=False)


def test_rotary_embedding_interleaved_with_positions() -> None:
    x = randn(2, 3, 8)
    cos, sin = randn(10, 2), randn(10, 2)
    pos = np.array([[0, 1, 2], [5, 6, 7]], np.int64)
    attrs = {"interleaved": 1, "num_heads": 2, "rotary_embedding_dim": 4}
    assert_matches("RotaryEmbedding", [x, cos, sin, pos], attrs, opset=23)


# --------------------------------------------------------------------------- signal


def test_dft_matches_numpy_fft() -> None:
    x = randn(2, 8, 1, dtype=np.float64)
    (y,) = run_op("DFT", [x, None, np.array(1, np.int64)], {"onesided": 1}, opset=20)
    want = np.fft.rfft(x[..., 0], axis=1)
    np.testing.assert_allclose(y[..., 0] + 1j * y[..., 1], want, atol=1e-12)
    (back,) = run_op(
        "DFT",
        [y, np.array(8, np.int64), np.array(1, np.int64)],
        {"onesided": 1, "inverse": 1},
        opset=20,
    )
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_stft_with_hann_window() -> None:
    signal = randn(1, 32, 1)
    (window,) = run_op("HannWindow", [np.array(8, np.int64)], {}, opset=17)
    (y,) = assert_matches("STFT", [signal, np.array(4, np.int64), window], {}, opset=17, atol=1e-4)
    assert y.shape == (1, 7, 5, 2)


def test_windows_and_mel_weight_matrix_match_reference() -> None:
    for op_type in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        assert_matches(op_type, [np.array(10, np.int64)], {"periodic": 0}, opset=17)
    args = [np.array(v, np.int64) for v in (8, 16, 8192)] + [
        np.array(0, np.float32),
        np.array(4096, np.float32),
    ]
    assert_matches("MelWeightMatrix", args, {}, opset=17)


# --------------------------------------------------------------------------- random


def test_random_ops_shapes_dtypes_and_ranges() -> None:
    (normal,) = run_op(
        "RandomNormal", [], {"shape": [3, 4], "dtype": TensorProto.DOUBLE, "seed": 1.0}
    )
    assert normal.shape == (3, 4)
    assert normal.dtype == np.float64
    (uniform,) = run_op(
        "RandomUniformLike", [np.zeros((5, 2), np.float16)], {"low": 2.0, "high": 3.0}
    )
    assert uniform.dtype == np.float16
    assert ((uniform >= 2) & (uniform <= 3)).all()
    (coin,) = run_op("Bernoulli", [np.full((100,), 0.5, np.float32)], {"seed": 3.0}, opset=15)
    assert set(np.unique(coin)) <= {0.0, 1.0}
    assert 0 < coin.sum() < 100


def test_every_nn_op_registers_with_its_host_inputs() -> None:
    assert lookup("Resize", 19).host_inputs == (1, 2, 3)
    assert lookup("ConvTranspose", 22) is not None
    assert lookup("MaxPool", 7).fn is not lookup("MaxPool", 12).fn
    assert lookup("FlexAttention", 1, "ai.onnx.preview").subgraphs


def test_max_pool_builds_indices_only_when_the_node_has_two_outputs() -> None:
    x = randn(1, 1, 4, 4)
    only_y = lookup("MaxPool", 12).fn(x, kernel_shape=[2, 2], num_outputs=1)
    both = run_op("MaxPool", [x], {"kernel_shape": [2, 2]}, opset=12)
    assert not isinstance(only_y, tuple)
    np.testing.assert_allclose(np.asarray(only_y), both[0])


@pytest.mark.parametrize("scales", [[1, 1, 0.6, 0.5], [1, 1, 2.0, 1.5]])
def test_resize_10_nearest_rounds_like_onnxruntime(scales: list[float]) -> None:
    x = randn(1, 2, 7, 9)
    s = np.array(scales, np.float32)
    y, want = _ours_and_onnxruntimes("Resize", {"x": x, "s": s}, {"mode": "nearest"}, opset=10)
    np.testing.assert_array_equal(y, want)


def test_conv_transpose_same_with_unit_kernel_never_pads_negatively() -> None:
    x, w = randn(1, 2, 6, 7), randn(2, 3, 1, 1)
    attrs = {"strides": [2, 2], "auto_pad": "SAME_UPPER"}
    y, want = _ours_and_onnxruntimes("ConvTranspose", {"x": x, "w": w}, attrs)
    assert y.shape == (1, 3, 11, 13)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("mode", "scale"), [("asymmetric", 0.8), ("align_corners", 0.8), ("half_pixel", 2.5)]
)
def test_resize_nearest_picks_the_pixels_onnxruntime_picks(mode: str, scale: float) -> None:
    x = np.arange(7, dtype=np.float32).reshape(1, 1, 1, 7)
    s = np.array([1, 1, 1, scale], np.float32)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": mode, "nearest_mode": "floor"}
    feeds = {"x": x, "roi": None, "s": s, "sizes": None}
    y, want = _ours_and_onnxruntimes("Resize", feeds, attrs, opset=19)
    np.testing.assert_array_equal(y, want)


def test_grid_sample_cubic_border_clamps_taps_like_onnxruntime() -> None:
    x = randn(1, 2, 5, 6)
    grid = rng.uniform(-1.4, 1.4, (1, 4, 7, 2)).astype(np.float32)
    attrs = {"mode": "cubic", "padding_mode": "border"}
    y, want = _ours_and_onnxruntimes("GridSample", {"x": x, "g": grid}, attrs, opset=20)
    assert y.shape == (1, 2, 4, 7)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_recurrent_activation_alphas_are_consumed_by_the_functions_that_take_them() -> None:
    attrs = {"activations": ["Sigmoid", "LeakyRelu"], "activation_alpha": [0.2], "hidden_size": 3}
    x, w, r = randn(4, 2, 3), randn(1, 9, 3), randn(1, 9, 3)
    feeds = {"x": x, "w": w, "r": r}
    y, want = _ours_and_onnxruntimes("GRU", feeds, attrs, opset=14, outputs=("y", "y_h"))
    assert y.shape == (4, 1, 2, 3)
    np.testing.assert_allclose(y, want, atol=1e-5)


def test_attention_sliding_window_of_zero_attends_only_to_itself() -> None:
    q, k, v = randn(1, 1, 4, 2), randn(1, 1, 4, 2), randn(1, 1, 4, 2)
    attrs = {"left_window_size": 0, "right_window_size": 0}
    (y, *_) = assert_matches("Attention", [q, k, v], attrs, opset=25)
    np.testing.assert_allclose(y, v, rtol=1e-5)
