"""QDQ MatMuls run as int8 dots (runtime/graph/qdq.py, MatMulInteger in ops/linalg.py) and
the row max of Softmax (ops/activation.py): when the rewrites happen, when they must not,
and that the values stay those of onnx's reference evaluator."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ember.runtime as rt
from ember.runtime import ops
from ember.runtime.ops.linalg import matmul_integer
from tests.runtime.models import make_model, tensor

_SOFTMAX = ops.lookup("Softmax", 13)
assert _SOFTMAX is not None
softmax = _SOFTMAX.fn  # registered from the softmax family's table

rng = np.random.default_rng(26)
K, N = 16, 6
SA, SB = np.float32(0.05), np.float32(0.03)  # activation scales


def _init(name: str, value: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _qdq(x: str, scale: str, zp: str) -> list:
    """x -> QuantizeLinear -> DequantizeLinear -> {x}_dq (a fake-quantised activation)."""
    return [
        helper.make_node("QuantizeLinear", [x, scale, zp], [f"{x}_q"]),
        helper.make_node("DequantizeLinear", [f"{x}_q", scale, zp], [f"{x}_dq"]),
    ]


def _weight_model(*, weight_zp: np.ndarray, act_dtype=np.uint8, act_zp=131, extra_read=False):
    """x [2, 5, K] -> QDQ (8-bit, one scale) -> MatMul by a per-column DequantizeLinear of
    an int8 [K, N] weight -> y; ``extra_read``: the quantised x is also a graph output."""
    w = rng.integers(-127, 128, (K, N)).astype(np.int8)
    wscale = rng.uniform(0.01, 0.05, N).astype(np.float32)
    inits = [
        _init("xs", SA),
        _init("xz", np.array(act_zp, act_dtype)),
        _init("w", w),
        _init("ws", wscale),
        _init("wz", weight_zp),
    ]
    nodes = [
        *_qdq("x", "xs", "xz"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["w_dq"], axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"], name="mm"),
    ]
    outputs = [tensor("y", shape=[2, 5, N])]
    if extra_read:
        outputs.append(tensor("x_q", TensorProto.UINT8, [2, 5, K]))
    return make_model(nodes, [tensor("x", shape=[2, 5, K])], outputs, inits, opset=19)


def _attention_model():
    """Two fake-quantised uint8 activations (zero points 120 and 7), batched MatMul."""
    inits = [
        _init("as", SA),
        _init("az", np.uint8(120)),
        _init("bs", SB),
        _init("bz", np.uint8(7)),
    ]
    nodes = [
        *_qdq("a", "as", "az"),
        *_qdq("b", "bs", "bz"),
        helper.make_node("MatMul", ["a_dq", "b_dq"], ["y"], name="mm"),
    ]
    inputs = [tensor("a", shape=[1, 2, 4, K]), tensor("b", shape=[1, 2, K, 3])]
    return make_model(nodes, inputs, [tensor("y", shape=[1, 2, 4, 3])], inits, opset=19)


def _run_both(model, feeds: dict[str, np.ndarray]) -> tuple[rt.Model, dict, dict]:
    loaded = rt.load(model)
    got = {k: np.asarray(v) for k, v in rt.compile(loaded)(feeds).items()}
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, ReferenceEvaluator(model).run(None, feeds), strict=True))
    return loaded, got, want


def _ops(loaded: rt.Model) -> list[str]:
    return [n.op_type for n in loaded.graph.nodes]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    # the integer sum is exact; the float reference rounds each product: ~1e-7 relative
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * float(np.max(np.abs(want))))


@pytest.mark.parametrize("act_zp", [131, 128, 0])
def test_qdq_matmul_by_a_symmetric_weight_is_an_int8_dot(act_zp) -> None:
    model = _weight_model(weight_zp=np.zeros(N, np.int8), act_zp=act_zp)
    x = rng.uniform(-8, 8, (2, 5, K)).astype(np.float32)  # some values clip
    loaded, got, want = _run_both(model, {"x": x})
    _close(got["y"], want["y"])
    ops = _ops(loaded)
    assert "MatMul" not in ops
    assert ops.count("MatMulInteger") == 1
    # both DequantizeLinears are gone; the za * colsum(w) term is a constant
    assert ops == [
        "QuantizeLinear",
        "MatMulInteger",
        *(["Sub"] if act_zp != 128 else []),
        "Cast",
        "Mul",
    ]
    assert ("Sub" in ops) == (act_zp != 128)
    (q,) = [n for n in loaded.graph.nodes if n.op_type == "QuantizeLinear"]
    assert loaded.graph.initializers[q.inputs[2]].dtype == np.int8  # uint8 moved to int8
    assert loaded.graph.initializers["w"].dtype == np.int8


def test_qdq_matmul_by_an_asymmetric_weight_keeps_its_zero_points() -> None:
    model = _weight_model(
        weight_zp=rng.integers(-5, 5, N).astype(np.int8), act_dtype=np.int8, act_zp=3
    )
    x = rng.uniform(-6, 6, (2, 5, K)).astype(np.float32)
    loaded, got, want = _run_both(model, {"x": x})
    _close(got["y"], want["y"])
    (mmi,) = [n for n in loaded.graph.nodes if n.op_type == "MatMulInteger"]
    assert len(mmi.inputs) == 4
    assert all(mmi.inputs)


def test_activation_read_by_another_node_stays_uint8_and_still_matches() -> None:
    model = _weight_model(weight_zp=np.zeros(N, np.int8), extra_read=True)
    x = rng.uniform(-6, 6, (2, 5, K)).astype(np.float32)
    loaded, got, want = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got["x_q"], want["x_q"])
    assert got["x_q"].dtype == np.uint8
    _close(got["y"], want["y"])
    assert "MatMulInteger" in _ops(loaded)


def test_qdq_matmul_of_two_activations_is_an_int8_dot() -> None:
    feeds = {
        "a": rng.uniform(-6, 6, (1, 2, 4, K)).astype(np.float32),
        "b": rng.uniform(-3, 4, (1, 2, K, 3)).astype(np.float32),
    }
    loaded, got, want = _run_both(_attention_model(), feeds)
    _close(got["y"], want["y"])
    assert "MatMul" not in _ops(loaded)
    assert "MatMulInteger" in _ops(loaded)


def test_int8_activation_rewrite_is_bit_exact() -> None:
    """QuantizeLinear -> DequantizeLinear -> Relu: the pair moves to int8, values do not."""
    inits = [_init("s", np.float32(0.1)), _init("z", np.uint8(200))]
    nodes = [*_qdq("x", "s", "z"), helper.make_node("Relu", ["x_dq"], ["y"])]
    model = make_model(nodes, [tensor("x", shape=[64])], [tensor("y", shape=[64])], inits, opset=19)
    x = np.linspace(-30, 10, 64, dtype=np.float32)
    loaded, got, want = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    for n in loaded.graph.nodes[:2]:
        assert loaded.graph.initializers[n.inputs[2]] == np.int8(72)


def test_float_matmul_and_per_row_activation_scales_are_left_alone() -> None:
    """A MatMul of a dequantised activation by a float weight is not rewritten."""
    inits = [
        _init("s", np.float32(0.1)),
        _init("z", np.uint8(3)),
        _init("w", np.ones((K, N), np.float32)),
    ]
    nodes = [*_qdq("x", "s", "z"), helper.make_node("MatMul", ["x_dq", "w"], ["y"])]
    model = make_model(
        nodes, [tensor("x", shape=[2, K])], [tensor("y", shape=[2, N])], inits, opset=19
    )
    loaded, got, want = _run_both(model, {"x": rng.uniform(-1, 1, (2, K)).astype(np.float32)})
    assert "MatMul" in _ops(loaded)
    assert "MatMulInteger" not in _ops(loaded)
    _close(got["y"], want["y"])


def _int64_matmul(a, b, za, zb):
    a = a.astype(np.int64) - (np.asarray(za, np.int64).reshape(-1, 1) if np.ndim(za) else za)
    return (a @ (b.astype(np.int64) - np.asarray(zb, np.int64))).astype(np.int32)


@pytest.mark.parametrize("a_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("b_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("traced_zero_points", [False, True])
def test_matmul_integer_on_8_bit_operands_is_exact_under_jit(
    a_dtype, b_dtype, traced_zero_points
) -> None:
    info_a, info_b = np.iinfo(a_dtype), np.iinfo(b_dtype)
    a = rng.integers(info_a.min, info_a.max + 1, (2, 5, 300)).astype(a_dtype)
    b = rng.integers(info_b.min, info_b.max + 1, (300, 7)).astype(b_dtype)
    za = rng.integers(info_a.min, info_a.max + 1, 5).astype(a_dtype)  # one per row
    zb = rng.integers(info_b.min, info_b.max + 1, 7).astype(b_dtype)  # one per column
    for zps in [(None, None), (za, None), (None, zb), (za, zb), (a_dtype(0), b_dtype(0))]:
        if traced_zero_points and all(z is not None for z in zps):
            got = jax.jit(matmul_integer)(a, b, *zps)
        else:
            got = jax.jit(lambda a, b, zps=zps: matmul_integer(a, b, *zps))(a, b)
        want = _int64_matmul(a, b, 0 if zps[0] is None else zps[0], 0 if zps[1] is None else zps[1])
        assert got.dtype == jnp.int32
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize(("shape", "axis"), [((1, 2, 40, 400), -1), ((3, 17, 5), 1), ((33, 2), 0)])
def test_softmax_row_max_by_halving_matches_numpy(shape, axis) -> None:
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    got = np.asarray(jax.jit(lambda v: softmax(v, axis=axis))(x))
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-7)
    x[0, 0] = np.nan  # a NaN in a row spreads over that row, as with max
    got = np.asarray(jax.jit(lambda v: softmax(v, axis=axis))(x))
    assert np.isnan(got).any()
    assert not np.isnan(got).all()
