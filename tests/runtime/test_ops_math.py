"""Values and dtypes of the math ops (ember.runtime.ops.math) against onnx's reference.

``assert_matches`` runs each op under ``jax.jit`` (host inputs stay numpy) and compares
values, shapes and dtypes with ``onnx.reference.ReferenceEvaluator``; the host tests check
that the same ops on numpy inputs give numpy back, which keeps shape arithmetic static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from ember.runtime.ops import lookup
from tests.runtime.models import make_model, reference, tensor
from tests.runtime.op_check import assert_matches, run_op

rng = np.random.default_rng(1)


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def host(op_type: str, *inputs: object, opset: int = 22, **attrs: object) -> object:
    opdef = lookup(op_type, opset)
    assert opdef is not None
    return opdef.fn(*inputs, **attrs)


# ------------------------------------------------------------------------ arithmetic


def test_integer_div_truncates_toward_zero_and_keeps_int64_precision() -> None:
    a = np.array([7, -7, 7, -7, 2**62 + 1, -9], np.int64)
    b = np.array([2, 2, -2, -2, 3, 4], np.int64)
    (q,) = assert_matches("Div", [a, b])
    assert q.tolist() == [3, -3, -3, 3, (2**62 + 1) // 3, -2]


def test_float_div_broadcasts_and_keeps_float16() -> None:
    a, b = randn(2, 3, dtype=np.float16), randn(3, dtype=np.float16)
    (q,) = assert_matches("Div", [a, b], rtol=2e-3)
    assert q.dtype == np.float16


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_sign_follows_divisor_or_dividend(fmod: int) -> None:
    a = np.array([-4, 7, 5, 4, -7, 8], np.int32)
    b = np.array([2, -3, 8, -2, 3, 5], np.int32)
    (r,) = assert_matches("Mod", [a, b], {"fmod": fmod})
    want = np.fmod(a, b) if fmod else np.mod(a, b)
    assert r.tolist() == want.tolist()


def test_float_mod_with_fmod() -> None:
    assert_matches("Mod", [randn(3, 4) * 5, randn(4) + 3], {"fmod": 1})


def test_legacy_broadcast_aligns_b_at_axis_before_opset_7() -> None:
    a, b = randn(2, 3, 4), randn(3)
    (y,) = run_op("Add", [a, b], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_allclose(y, a + b[:, None], rtol=1e-6)
    (y,) = run_op("Mul", [a, randn(3, 4)], {"broadcast": 1}, opset=6)  # trailing dims
    assert y.shape == (2, 3, 4)


@pytest.mark.parametrize(
    ("op_type", "reference_op"),
    [
        ("Sub", np.subtract),
        ("Div", np.divide),
        ("Less", np.less),
        ("Greater", np.greater),
        ("Equal", np.equal),
    ],
)
def test_legacy_broadcast_of_the_compare_and_arithmetic_ops(op_type: str, reference_op) -> None:
    a, b = randn(2, 3, 4), randn(3) + 5
    (y,) = run_op(op_type, [a, b], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_allclose(y, reference_op(a, b[:, None]), rtol=1e-6)


@pytest.mark.parametrize(
    ("op_type", "reference_op"),
    [("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)],
)
def test_legacy_broadcast_of_the_logic_ops(op_type: str, reference_op) -> None:
    a, b = randn(2, 3, 4) > 0, np.array([True, False, True])
    (y,) = run_op(op_type, [a, b], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_array_equal(y, reference_op(a, b[:, None]))


def test_pow_keeps_the_base_type() -> None:
    (y,) = assert_matches(
        "Pow", [np.array([1, 2, 3], np.int32), np.array([2.0, 0.5, 3], np.float32)]
    )
    assert y.dtype == np.int32
    assert_matches("Pow", [np.abs(randn(2, 3)), np.array(2, np.int64)])


@pytest.mark.parametrize(
    "op_type",
    ["Sign", "Ceil", "Round", "Erf", "Reciprocal", "Sigmoid", "Softplus", "Mish",
     "HardSwish", "Selu"],
)  # fmt: skip
def test_unary_ops_match_reference(op_type: str) -> None:
    x = np.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 0.7], np.float32)
    assert_matches(op_type, [x])


@pytest.mark.parametrize("op_type", ["Log", "Atanh"])
def test_unary_ops_on_their_domain(op_type: str) -> None:
    assert_matches(op_type, [np.linspace(0.1, 0.9, 7).astype(np.float32)])


def test_round_is_half_to_even() -> None:
    (y,) = run_op("Round", [np.array([0.5, 1.5, 2.5, -0.5, -2.5], np.float32)])
    assert y.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]


@pytest.mark.parametrize(
    ("op_type", "attrs"),
    [
        ("LeakyRelu", {"alpha": 0.2}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("ThresholdedRelu", {"alpha": 0.4}),
        ("Shrink", {"bias": 0.3, "lambd": 0.6}),
        ("Gelu", {"approximate": "tanh"}),
        ("Gelu", {}),
        ("Celu", {"alpha": 2.0}),
    ],
)
def test_activations_with_attributes(op_type: str, attrs: dict) -> None:
    assert_matches(op_type, [randn(3, 5)], attrs)


def test_prelu_broadcasts_slope() -> None:
    assert_matches("PRelu", [randn(2, 3, 4), randn(3, 1)])


def test_prelu_before_opset_7_has_one_slope_per_channel() -> None:
    x, slope = randn(2, 3, 4), np.array([0.1, 0.2, 0.3], np.float32)
    (y,) = run_op("PRelu", [x, slope], opset=6)
    np.testing.assert_allclose(y, np.where(x < 0, x * slope[:, None], x), rtol=1e-6)


@pytest.mark.parametrize("op_type", ["Max", "Min", "Sum", "Mean"])
def test_variadic_ops_broadcast_three_inputs(op_type: str) -> None:
    assert_matches(op_type, [randn(2, 3), randn(3), randn(1, 3)])


def test_max_of_one_input_and_of_integers() -> None:
    (y,) = assert_matches("Max", [np.array([3, -1], np.int8)])
    assert y.dtype == np.int8
    assert_matches("Min", [np.array([3, 1], np.uint32), np.array([1, 5], np.uint32)])


# ------------------------------------------------------------------- logic, compare


@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_give_bool(op_type: str) -> None:
    a = np.array([[1, 2, 3]], np.int64)
    (y,) = assert_matches(op_type, [a, np.array([[2], [3]], np.int64)])
    assert y.dtype == np.bool_
    assert y.shape == (2, 3)


def test_equal_on_strings() -> None:
    a = np.array(["a", "b", "c"], dtype=object)
    b = np.array(["a", "x", "c"], dtype=object)
    assert host("Equal", a, b, opset=19).tolist() == [True, False, True]


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logical_ops(op_type: str) -> None:
    a = np.array([True, True, False, False])
    assert_matches(op_type, [a, np.array([True, False, True, False])])


def test_not() -> None:
    assert_matches("Not", [np.array([[True, False]])])


@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary(op_type: str) -> None:
    assert_matches(op_type, [np.array([12, 5, 255], np.uint8), np.array([10, 3, 15], np.uint8)])


def test_bitwise_not_and_bit_shift() -> None:
    assert_matches("BitwiseNot", [np.array([0, 5, -3], np.int32)])
    x = np.array([16, 4, 1], np.uint32)
    (y,) = assert_matches("BitShift", [x, np.array([1, 2, 3], np.uint32)], {"direction": "RIGHT"})
    assert y.tolist() == [8, 1, 0]
    (y,) = assert_matches("BitShift", [x, np.array([1, 2, 3], np.uint32)], {"direction": "LEFT"})
    assert y.tolist() == [32, 16, 8]


def test_isnan_isinf_detect_one_sign() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert_matches("IsNaN", [x])
    (y,) = assert_matches("IsInf", [x], {"detect_positive": 0})
    assert y.tolist() == [False, False, True, False]
    (y,) = assert_matches("IsInf", [x], {"detect_negative": 0})
    assert y.tolist() == [False, True, False, False]


def test_where_broadcasts() -> None:
    cond = np.array([[True], [False]])
    assert_matches("Where", [cond, randn(2, 3), randn(3)])


def test_clip_with_inputs_and_with_attributes() -> None:
    x = randn(4, 4) * 3
    assert_matches("Clip", [x, np.array(-1.0, np.float32), np.array(1.0, np.float32)])
    assert_matches("Clip", [x, None, np.array(0.5, np.float32)])
    (y,) = assert_matches("Clip", [x], {"min": -0.5, "max": 0.5}, opset=6)
    assert y.min() >= -0.5
    assert y.max() <= 0.5
    # min above max: everything becomes max
    (y,) = run_op("Clip", [x, np.array(2.0, np.float32), np.array(1.0, np.float32)])
    assert (y == 1.0).all()


def test_clip_integers() -> None:
    x = np.array([-5, 0, 9], np.int64)
    (y,) = assert_matches("Clip", [x, np.array(-1, np.int64), np.array(3, np.int64)])
    assert y.tolist() == [-1, 0, 3]


# ----------------------------------------------------------------- softmax family


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_family_normalises_one_axis_from_opset_13(op_type: str, axis: int) -> None:
    x = randn(2, 3, 4)
    x[0, 0, :2] = 5.0  # a tie for Hardmax: the first index wins
    assert_matches(op_type, [x], {"axis": axis}, opset=13)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_flattens_at_axis_before_opset_13(op_type: str, axis: int) -> None:
    # onnx's reference evaluator implements only the opset-13 semantics; onnxruntime
    # implements both.
    x = randn(2, 3, 4)
    x[1, 2, :2] = 5.0
    (got,) = run_op(op_type, [x], {"axis": axis}, opset=11)
    node = helper.make_node(op_type, ["x"], ["y"], axis=axis)
    model = make_model(
        [node], [tensor("x", shape=[2, 3, 4])], [tensor("y", shape=[2, 3, 4])], opset=11
    )
    np.testing.assert_allclose(got, reference(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_softmax_default_axis_differs_between_opsets() -> None:
    x = randn(2, 3, 4)
    (old,) = run_op("Softmax", [x], opset=11)
    (new,) = run_op("Softmax", [x], opset=13)
    np.testing.assert_allclose(old.reshape(2, 12).sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(new.sum(axis=-1), 1.0, rtol=1e-5)


# ---------------------------------------------------------------- matrix products


def test_matmul_batched_and_vector() -> None:
    assert_matches("MatMul", [randn(2, 1, 3, 4), randn(5, 4, 2)])
    assert_matches("MatMul", [randn(4), randn(2, 4, 3)])


def test_gemm_transposes_alpha_beta_and_broadcast_bias() -> None:
    attrs = {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}
    assert_matches("Gemm", [randn(4, 3), randn(5, 4), randn(5)], attrs)
    assert_matches("Gemm", [randn(3, 4), randn(4, 5)])


def test_matmul_integer_with_per_row_zero_point() -> None:
    a = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    b = rng.integers(0, 255, (4, 2)).astype(np.uint8)
    azp = np.array([1, 2, 3], np.uint8)
    (y,) = run_op("MatMulInteger", [a, b, azp, np.uint8(7)])
    want = (a.astype(np.int32) - azp.astype(np.int32)[:, None]) @ (b.astype(np.int32) - 7)
    assert y.dtype == np.int32
    assert y.tolist() == want.tolist()


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(3, 3)]), ("ij->", [(3, 4)]),
     ("...ij,...jk", [(2, 3, 4), (2, 4, 2)])],
)  # fmt: skip
def test_einsum(equation: str, shapes: list) -> None:
    assert_matches("Einsum", [randn(*s) for s in shapes], {"equation": equation})


def test_det_batched() -> None:
    assert_matches("Det", [randn(2, 3, 3)])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_exclusive_reverse(exclusive: int, reverse: int) -> None:
    x = np.arange(1, 13, dtype=np.int32).reshape(3, 4)
    attrs = {"exclusive": exclusive, "reverse": reverse}
    (y,) = assert_matches("CumSum", [x, np.array(-1, np.int64)], attrs)
    assert y.dtype == np.int32


# ------------------------------------------------------------------------ reductions


REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]  # fmt: skip


@pytest.mark.parametrize("op_type", REDUCTIONS)
def test_reductions_with_axes_input(op_type: str) -> None:
    x = np.abs(randn(2, 3, 4)) + 0.5
    (y,) = assert_matches(op_type, [x, np.array([0, -1], np.int64)], {"keepdims": 0}, opset=18)
    assert y.shape == (3,)


@pytest.mark.parametrize("op_type", REDUCTIONS)
def test_reductions_with_axes_attribute(op_type: str) -> None:
    x = np.abs(randn(2, 3, 4)) + 0.5
    (y,) = assert_matches(op_type, [x], {"axes": [1]}, opset=11)
    assert y.shape == (2, 1, 4)


def test_reduce_sum_axes_become_an_input_at_opset_13() -> None:
    x = randn(2, 3)
    assert_matches("ReduceSum", [x, np.array([1], np.int64)], opset=13)
    assert_matches("ReduceSum", [x], {"axes": [1]}, opset=12)
    assert lookup("ReduceSum", 13).host_inputs == (1,)
    assert lookup("ReduceMax", 17).host_inputs == ()
    assert lookup("ReduceMax", 18).host_inputs == (1,)


def test_reduce_noop_with_empty_axes_returns_the_input() -> None:
    x = randn(2, 3)
    (y,) = run_op("ReduceSum", [x, np.array([], np.int64)], {"noop_with_empty_axes": 1}, opset=13)
    np.testing.assert_array_equal(y, x)
    (y,) = run_op("ReduceSum", [x], {"keepdims": 0}, opset=13)
    assert y.shape == ()
    assert np.isclose(y, x.sum())


def test_reduce_sum_of_int32_stays_int32() -> None:
    # numpy's sum would widen int32 to int64; ONNX keeps the element type
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    (y,) = assert_matches("ReduceSum", [x, np.array([1], np.int64)], opset=13)
    assert y.dtype == np.int32
    assert host("ReduceSum", x, np.array([1], np.int64), opset=13).dtype == np.int32


def test_reduce_log_sum_exp_of_integers_is_computed_in_float() -> None:
    x = np.array([[1, 2], [3, 3]], np.int32)
    (y,) = run_op("ReduceLogSumExp", [x, np.array([1], np.int64)], {"keepdims": 0}, opset=18)
    assert y.dtype == np.int32
    assert y.tolist() == [2, 3]


def test_reduce_over_an_empty_axis() -> None:
    x = np.zeros((2, 0, 3), np.float32)
    (y,) = assert_matches("ReduceMax", [x, np.array([1], np.int64)], opset=18)
    assert np.isneginf(y).all()
    (y,) = assert_matches("ReduceSum", [x, np.array([1], np.int64)], opset=13)
    assert (y == 0).all()


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("select_last_index", [0, 1])
def test_arg_extremes_pick_first_or_last_tie(op_type: str, select_last_index: int) -> None:
    x = np.array([[2, 2, 1, 1], [0, 3, 3, 0]], np.float32)
    attrs = {"axis": 1, "keepdims": 0, "select_last_index": select_last_index}
    (y,) = assert_matches(op_type, [x], attrs)
    assert y.dtype == np.int64


def test_topk_ties_keep_index_order_and_k_is_a_host_input() -> None:
    x = np.array([[3, 1, 3, 2, 3], [0, 5, 5, 1, 0]], np.float32)
    _values, indices = assert_matches("TopK", [x, np.array([3], np.int64)], n_outputs=2)
    assert indices.tolist() == [[0, 2, 4], [1, 2, 3]]
    _, indices = assert_matches(
        "TopK", [x, np.array([2], np.int64)], {"largest": 0, "axis": 0}, n_outputs=2
    )
    assert lookup("TopK", 11).host_inputs == (1,)


def test_topk_unsigned_largest() -> None:
    x = np.array([0, 255, 7, 255], np.uint8)
    values, indices = assert_matches("TopK", [x, np.array([3], np.int64)], n_outputs=2)
    assert values.tolist() == [255, 255, 7]
    assert indices.tolist() == [1, 3, 2]


# ----------------------------------------------------------------------------- casts


@pytest.mark.parametrize(
    ("src", "to"),
    [(np.float32, TensorProto.INT32), (np.float64, TensorProto.FLOAT16),
     (np.int64, TensorProto.FLOAT), (np.float32, TensorProto.BOOL),
     (np.float32, TensorProto.BFLOAT16), (np.int32, TensorProto.UINT8)],
)  # fmt: skip
def test_cast_numbers(src: type, to: int) -> None:
    x = np.array([-2.7, -0.4, 0.0, 1.5, 3.9], src) if src != np.int64 else np.arange(-2, 3)
    if to == TensorProto.UINT8:
        x = np.array([0, 5, 250], src)
    assert_matches("Cast", [x], {"to": to})


def test_cast_negative_floats_to_unsigned_wraps_on_both_paths() -> None:
    # out of range in the spec; numpy and onnxruntime wrap, XLA would saturate to 0
    x = np.array([-3.0, 2.0, -1.0], np.float32)
    (traced,) = run_op("Cast", [x], {"to": TensorProto.UINT8})
    assert traced.tolist() == [253, 2, 255]
    assert host("Cast", x, to=TensorProto.UINT8).tolist() == [253, 2, 255]


def test_cast_strings_both_ways() -> None:
    s = np.array(["1.5", "-2", "NaN", "INF", "-INF"], dtype=object)
    y = host("Cast", s, to=TensorProto.FLOAT)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.array([1.5, -2, np.nan, np.inf, -np.inf], np.float32))
    out = host("Cast", np.array([1.5, -2.0, np.inf], np.float32), to=TensorProto.STRING)
    assert out.dtype == object
    assert out.tolist() == ["1.5", "-2.0", "INF"]
    assert host("Cast", np.array([3, -4], np.int64), to=TensorProto.STRING).tolist() == ["3", "-4"]


@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_float8_saturates_out_of_range_values(saturate: int) -> None:
    x = np.array([1000.0, -1000.0, 1.0, np.nan], np.float32)
    attrs = {"to": TensorProto.FLOAT8E4M3FN, "saturate": saturate}
    (y,) = run_op("Cast", [x], attrs, opset=19)
    assert y.dtype == ml_dtypes.float8_e4m3fn
    got = y.astype(np.float32)
    if saturate:
        assert got[:3].tolist() == [448.0, -448.0, 1.0]
    else:
        assert np.isnan(got[0])
        assert np.isnan(got[1])
    assert np.isnan(got[3])


SUB_BYTE = [
    (TensorProto.INT4, "int4"),
    (TensorProto.UINT4, "uint4"),
    (TensorProto.INT2, "int2"),
    (TensorProto.UINT2, "uint2"),
]


@pytest.mark.parametrize(("to", "name"), SUB_BYTE)
def test_float_to_sub_byte_int_out_of_range_is_embers_documented_choice(to: int, name: str) -> None:
    # Out of range the spec leaves the value undefined (ml_dtypes 0.6 and 0.7 disagree);
    # Ember truncates toward zero and keeps the low bits, on the host and under jit alike.
    x = np.array([-10.5, -9.0, -1.5, 7.6, 8.0, 15.0, 100.0, 1e10, np.inf, -np.inf, np.nan])
    x = x.astype(np.float32)
    bits = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}[name]
    signed = name.startswith("int")
    whole = np.where(np.isfinite(x), np.trunc(x), 0).astype(np.int64)
    low = whole % (1 << bits)
    want = np.where(signed & (low >= 1 << (bits - 1)), low - (1 << bits), low)
    (jitted,) = run_op("Cast", [x], {"to": to}, opset=21)
    on_host = host("Cast", x, to=to, opset=21)
    assert jitted.astype(np.int32).tolist() == want.tolist()
    assert np.asarray(on_host).astype(np.int32).tolist() == want.tolist()


@pytest.mark.parametrize(("to", "name"), SUB_BYTE[:2])
def test_float_to_int4_agrees_with_onnxruntime_where_onnxruntime_is_defined(
    to: int, name: str
) -> None:
    # onnxruntime rounds half away from zero, then wraps; on integral values (in range or
    # not) and in-range values without a half there is one answer, and Ember gives it.
    x = np.array([-12.0, -9.0, -8.0, -1.25, -0.75, 0.0, 2.25, 7.0, 8.0, 16.0, 100.0, -100.0])
    x = x.astype(np.float32)
    nodes = [
        helper.make_node("Cast", ["x"], ["q"], to=to),
        helper.make_node("Cast", ["q"], ["y"], to=TensorProto.INT32),
    ]
    model = make_model(
        nodes, [tensor("x", shape=[len(x)])], [tensor("y", TensorProto.INT32, [len(x)])], opset=21
    )
    model.ir_version = 10
    ort = reference(model, {"x": x})["y"]
    (ember,) = run_op("Cast", [x], {"to": to}, opset=21)
    integral = x == np.trunc(x)
    assert ember.astype(np.int32)[integral].tolist() == ort[integral].tolist()
    # In range and without a half, rounding and truncation differ only by onnxruntime's
    # rounding of the fraction: Ember truncates, as the reference evaluator does.
    lo, hi = (-8, 7) if name == "int4" else (0, 15)
    in_range = ~integral & (x >= lo) & (x <= hi)
    assert ember.astype(np.int32)[in_range].tolist() == np.trunc(x[in_range]).tolist()


def test_cast_like_takes_the_target_type() -> None:
    (y,) = assert_matches("CastLike", [randn(3), np.zeros(1, np.float16)], opset=19)
    assert y.dtype == np.float16


def test_bit_cast_reinterprets_bits_and_checks_widths() -> None:
    x = np.array([1.0, -2.0], np.float32)
    (y,) = run_op("BitCast", [x], {"to": TensorProto.INT32}, opset=26)
    assert y.tolist() == x.view(np.int32).tolist()
    with pytest.raises(TypeError, match="one width"):
        host("BitCast", x, to=TensorProto.INT64, opset=26)
    with pytest.raises(TypeError, match="strings"):
        host("BitCast", np.array(["a"], dtype=object), to=TensorProto.INT64, opset=26)


# ------------------------------------------------------- host values stay on the host


@pytest.mark.parametrize(
    ("op_type", "inputs", "attrs"),
    [
        ("Add", [np.array(2, np.int64), np.array(3, np.int64)], {}),
        ("Mul", [np.array([2, 3], np.int64), np.array(4, np.int64)], {}),
        ("Div", [np.array(7, np.int64), np.array(2, np.int64)], {}),
        ("Sub", [np.array([7], np.int64), np.array(2, np.int64)], {}),
        ("Equal", [np.array(1, np.int64), np.array(1, np.int64)], {}),
        ("Cast", [np.array(3.7, np.float32)], {"to": TensorProto.INT64}),
        ("ReduceProd", [np.array([2, 3, 4], np.int64)], {"keepdims": 0}),
        ("Max", [np.array(2, np.int64), np.array(5, np.int64)], {}),
        ("Where", [np.array(True), np.array(1, np.int64), np.array(2, np.int64)], {}),
        ("Neg", [np.array(3, np.int64)], {}),
        ("Sqrt", [np.array(9.0, np.float32)], {}),
    ],
)
def test_shape_arithmetic_on_host_values_returns_numpy_arrays(
    op_type: str, inputs: list, attrs: dict
) -> None:
    out = host(op_type, *inputs, opset=17, **attrs)
    # ndarray (not a jax array, not a numpy scalar): static inside jax.jit
    assert type(out) is np.ndarray
    with jax.enable_x64(True):
        traced = host(op_type, *[jnp.asarray(v) for v in inputs], opset=17, **attrs)
    np.testing.assert_array_equal(np.asarray(traced), out)
    assert np.asarray(traced).dtype == out.dtype


def test_host_inputs_are_declared_for_static_arguments() -> None:
    assert lookup("TopK", 10).host_inputs == (1,)
    assert lookup("CumSum", 11).host_inputs == (1,)
    for name in REDUCTIONS:
        assert 1 in lookup(name, 18).host_inputs, name
        assert lookup(name, 11).host_inputs == (), name
