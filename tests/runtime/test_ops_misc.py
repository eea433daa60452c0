"""Quantization, detection, string, image-decoding and optimizer ops."""

from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember.runtime as rt
from tests.runtime.op_check import assert_matches, reference_op, run_op

rng = np.random.default_rng(1)


def test_quantize_per_axis_and_blocked_match_reference() -> None:
    x = rng.standard_normal((3, 4)).astype(np.float32) * 10
    scale = np.array([0.5, 1.0, 2.0], np.float32)
    zp = np.array([0, 10, -5], np.int8)
    assert_matches("QuantizeLinear", [x, scale, zp], {"axis": 0}, opset=21)
    block_scale = np.abs(rng.standard_normal((3, 2)).astype(np.float32)) + 0.1
    block_zp = np.zeros((3, 2), np.uint8)
    assert_matches(
        "QuantizeLinear", [x, block_scale, block_zp], {"axis": 1, "block_size": 2}, opset=21
    )


def test_quantize_float8_saturates_and_int4_clips() -> None:
    x = np.array([1000.0, -1000.0, 0.3], np.float32)
    zp8 = np.zeros((), ml_dtypes.float8_e4m3fn)
    (sat,) = run_op("QuantizeLinear", [x, np.float32(1.0), zp8], {}, opset=21)
    assert sat.dtype == ml_dtypes.float8_e4m3fn
    assert float(sat[0]) == 448.0
    assert float(sat[1]) == -448.0
    (int4,) = run_op(
        "QuantizeLinear", [x, np.float32(1.0)], {"output_dtype": TensorProto.INT4}, opset=21
    )
    assert int4.dtype == ml_dtypes.int4
    assert [int(v) for v in int4] == [7, -8, 0]


def test_dequantize_and_dynamic_quantize_round_trip() -> None:
    q = rng.integers(0, 255, (2, 3)).astype(np.uint8)
    assert_matches(
        "DequantizeLinear",
        [q, np.array([0.1, 0.2, 0.3], np.float32), np.array([1, 2, 3], np.uint8)],
        {"axis": 1},
        opset=21,
    )
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y, scale, zp = assert_matches("DynamicQuantizeLinear", [x], {}, n_outputs=3, opset=11)
    back = (y.astype(np.float32) - zp.astype(np.float32)) * scale
    np.testing.assert_allclose(back, x, atol=float(scale))


def test_qlinear_matmul_and_conv_match_reference() -> None:
    a = rng.integers(0, 255, (2, 4)).astype(np.uint8)
    b = rng.integers(0, 255, (4, 3)).astype(np.uint8)
    args = [a, np.float32(0.02), np.uint8(120), b, np.float32(0.03), np.uint8(130)]
    assert_matches("QLinearMatMul", [*args, np.float32(0.1), np.uint8(128)], {}, opset=10)
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(0, 255, (3, 2, 3, 3)).astype(np.uint8)
    conv_args = [x, np.float32(0.01), np.uint8(100), w, np.float32(0.02), np.uint8(90)]
    assert_matches("QLinearConv", [*conv_args, np.float32(0.5), np.uint8(10)], {}, opset=10)


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_matches_reference(center: int) -> None:
    corners = rng.uniform(0, 10, (1, 8, 2)).astype(np.float32)
    sizes = rng.uniform(1, 4, (1, 8, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + sizes], axis=-1)
    if center:
        boxes = np.concatenate([corners, sizes], axis=-1)
    scores = rng.random((1, 2, 8)).astype(np.float32)
    inputs = [
        boxes,
        scores,
        np.array([3], np.int64),
        np.array([0.3], np.float32),
        np.array([0.1], np.float32),
    ]
    (got,) = run_op("NonMaxSuppression", inputs, {"center_point_box": center}, opset=11)
    (want,) = reference_op("NonMaxSuppression", inputs, {"center_point_box": center}, opset=11)
    np.testing.assert_array_equal(got, want)


def test_string_ops() -> None:
    words = np.array(["Hello", "the", "World", "THE"], dtype=object)
    (norm,) = run_op(
        "StringNormalizer", [words], {"case_change_action": "LOWER", "stopwords": ["the"]}, opset=10
    )
    assert norm.tolist() == ["hello", "world"]
    (joined,) = run_op("StringConcat", [words, np.array("!", dtype=object)], {}, opset=20)
    assert joined.tolist() == ["Hello!", "the!", "World!", "THE!"]
    (parts, counts) = run_op(
        "StringSplit", [np.array(["a,b", "c"], dtype=object)], {"delimiter": ","}, opset=20
    )
    assert parts.tolist() == [["a", "b"], ["c", ""]]
    assert counts.tolist() == [2, 1]
    (match,) = run_op("RegexFullMatch", [words], {"pattern": "[A-Z].*"}, opset=20)
    assert match.tolist() == [True, False, True, True]


def test_string_op_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="invalid pattern"):
        run_op("RegexFullMatch", [np.array(["a"], dtype=object)], {"pattern": "("}, opset=20)
    with pytest.raises(ValueError, match=r"\[C\] or \[1, C\]"):
        run_op("StringNormalizer", [np.full((2, 2), "a", dtype=object)], {}, opset=10)


def test_tfidf_vectorizer_matches_reference() -> None:
    x = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int32)
    attrs = {
        "mode": "TFIDF",
        "min_gram_length": 1,
        "max_gram_length": 2,
        "max_skip_count": 2,
        "ngram_counts": [0, 4],
        "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
        "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
        "weights": [0.5, 1, 1, 2, 1, 3, 1],
    }
    assert_matches("TfIdfVectorizer", [x], attrs, opset=9)


def test_image_decoder_decodes_png_in_every_pixel_format() -> None:
    from PIL import Image

    pixels = rng.integers(0, 255, (4, 5, 3)).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    data = np.frombuffer(buf.getvalue(), np.uint8)
    (rgb,) = run_op("ImageDecoder", [data], {"pixel_format": "RGB"}, opset=20)
    (bgr,) = run_op("ImageDecoder", [data], {"pixel_format": "BGR"}, opset=20)
    (gray,) = run_op("ImageDecoder", [data], {"pixel_format": "Grayscale"}, opset=20)
    np.testing.assert_array_equal(rgb, pixels)
    np.testing.assert_array_equal(bgr, pixels[:, :, ::-1])
    assert gray.shape == (4, 5, 1)
    with pytest.raises(ValueError, match="pixel_format"):
        run_op("ImageDecoder", [data], {"pixel_format": "CMYK"}, opset=20)


def test_adam_and_momentum_update_every_tensor_group() -> None:
    r, t = np.float32(0.1), np.int64(3)
    x1, x2 = np.ones(2, np.float32), np.full(3, 2.0, np.float32)
    g1, g2 = np.full(2, 0.5, np.float32), np.full(3, -1.0, np.float32)
    v1, v2 = np.zeros(2, np.float32), np.zeros(3, np.float32)
    out = run_op(
        "Momentum",
        [r, t, x1, x2, g1, g2, v1, v2],
        {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.0},
        domain="ai.onnx.preview.training",
        opset=1,
    )
    np.testing.assert_allclose(out[0], x1 - 0.1 * 0.5 * g1)
    np.testing.assert_allclose(out[3], 0.5 * g2)
    h1 = np.zeros(2, np.float32)
    x_new, v_new, h_new = run_op(
        "Adam",
        [r, np.int64(0), x1, g1, v1, h1],
        {"epsilon": 1e-6},
        domain="ai.onnx.preview.training",
        opset=1,
    )
    np.testing.assert_allclose(v_new, 0.1 * g1, rtol=1e-6)
    np.testing.assert_allclose(x_new, x1 - 0.1 * v_new / (np.sqrt(h_new) + 1e-6), rtol=1e-5)


@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear_rounds_float32_quotients_at_a_half_as_ieee_division(
    per_axis: bool,
) -> None:
    # Values at or one ulp from k + 0.5 times the scale: XLA rewrites a division by a
    # broadcast scale as a multiply by its reciprocal, which lands on the other side of the
    # half for some of them (-2.5 / 0.019607844: -127.5, not -127.49999).
    rng = np.random.default_rng(3)
    scales = np.array([0.019607844, 0.0078125, 0.1, 0.0037], np.float32)
    k = rng.integers(-128, 127, (4, 512)).astype(np.float32) + np.float32(0.5)
    x = (k * scales[:, None]).astype(np.float32)
    x = np.nextafter(x, rng.choice([-np.inf, 0, np.inf], x.shape).astype(np.float32))
    x[0, :8] = -2.5
    if per_axis:
        inputs, attrs, divisor = [x, scales, np.zeros(4, np.int8)], {"axis": 0}, scales[:, None]
    else:
        x = x[:1]
        inputs, attrs, divisor = [x, scales[0], np.int8(0)], {}, scales[0]
    (got,) = run_op("QuantizeLinear", inputs, attrs, jit=True)
    want = np.clip(np.round(x / divisor), -128, 127).astype(np.int8)  # numpy: IEEE division
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, reference_op("QuantizeLinear", inputs, attrs)[0])


def test_quantize_linear_by_a_subnormal_constant_scale_divides_by_it() -> None:
    # XLA:CPU's programs read subnormal float32 values as zero: 1.2e-38 / 1e-40 is 117.5
    scale = numpy_helper.from_array(np.array(1e-40, np.float32), "s")
    zero = numpy_helper.from_array(np.uint8(0), "z")
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
        "subnormal_scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [3])],
        [scale, zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.array([1.1754944e-38, 0.0, 2.3e-38], np.float32)
    got = np.asarray(rt.compile(rt.load(model.SerializeToString()))({"x": x})["y"])
    np.testing.assert_array_equal(got, [118, 0, 230])


def test_quantize_linear_of_float16_rounds_the_float32_quotient() -> None:
    # 126.506, 13.497, 68.831 exactly; rounded to float16 first they were 126.5, 13.5, 68.8
    x = np.array([2.48, 0.2646, 1.3496], np.float16)
    scale = np.float16(0.0196)
    (got,) = run_op("QuantizeLinear", [x, scale, np.int8(0)], jit=True)
    want = np.round(x.astype(np.float32) / np.float32(scale))
    np.testing.assert_array_equal(got, want.astype(np.int8))
    np.testing.assert_array_equal(got, [127, 13, 69])


def test_dynamic_quantize_linear_scale_is_the_ieee_quotient_of_the_range() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        x = (rng.standard_normal(64) * rng.uniform(0.1, 10)).astype(np.float32)
        _, scale, zp = run_op("DynamicQuantizeLinear", [x], {}, opset=11, jit=True)
        hi, lo = max(np.float32(0), x.max()), min(np.float32(0), x.min())
        want = np.float32(hi - lo) / np.float32(255)
        assert scale == want
        assert zp == np.uint8(np.clip(np.round(np.float32(0) - lo / want), 0, 255))


@pytest.mark.parametrize("jit", [False, True])
def test_quantize_rounds_the_exact_quotient(jit: bool) -> None:
    # -2.5 / scale is -127.49999 in float32; XLA's approximate division would give -127.5.
    x = np.array([0, 2, -3, -2.5, 1.34, 0.5], np.float32)
    y, _, zp = run_op("DynamicQuantizeLinear", [x], {}, opset=11, jit=jit)
    (want, _, _) = reference_op("DynamicQuantizeLinear", [x], {}, n_outputs=3, opset=11)
    np.testing.assert_array_equal(y, want)
    assert int(zp) == 153
