"""Elementwise math and logic, activations, matrix products, reductions and casts.

Each op works on numpy values (host, shape arithmetic) and on jax values alike: ``xp``
picks the array module, so an op fed only host values returns a host value and stays
static inside ``jax.jit``. Results keep the ONNX dtype of their inputs exactly; numpy's
reductions and jax's small-integer promotion are told the dtype explicitly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.runtime.ops import op, xp

Array = Any

# ---------------------------------------------------------------------------- helpers


def _host(value: Array) -> Array:
    """numpy ufuncs on 0-d arrays return scalars; keep host values ndarrays."""
    return np.asarray(value) if isinstance(value, np.generic) else value


def _astype(m: Any, value: Array, dtype: Any) -> Array:
    if value.dtype == dtype:
        return _host(value)
    return _host(m.asarray(value).astype(dtype))


def _widen(value: Array) -> Array:
    """Half-precision inputs are computed in float32 (as the ONNX reference does)."""
    if value.dtype.name in ("bfloat16", "float16"):
        return value.astype(np.float32)
    return value


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _axes(value: Any) -> list[int] | None:
    """An ``axes`` attribute or host input as a list of ints (None when absent)."""
    if value is None:
        return None
    return [int(a) for a in np.asarray(value).reshape(-1)]


def _is_int(dtype: Any) -> bool:
    return np.issubdtype(np.dtype(dtype), np.integer)


def _is_float(dtype: Any) -> bool:
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt.kind == "V" or "float" in dt.name


# ------------------------------------------------------------- elementwise arithmetic


def _legacy_broadcast(A: Array, B: Array, axis: int | None, broadcast: int) -> Array:
    """Before opset 7, ``broadcast=1`` aligns B with A's dims starting at ``axis``
    (default: trailing dims) instead of numpy broadcasting."""
    if not broadcast or axis is None or B.ndim >= A.ndim:
        return B
    axis = axis + A.ndim if axis < 0 else axis
    return B.reshape(tuple(B.shape) + (1,) * (A.ndim - axis - B.ndim))


@op("Add")
def add(
    A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0, consumed_inputs: Any = None
) -> Array:
    """A + B, numpy broadcasting (below 7 also ``broadcast``/``axis``); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    return _host(xp(A, B).add(A, B))


@op("Sub")
def sub(
    A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0, consumed_inputs: Any = None
) -> Array:
    """A - B, numpy broadcasting (below 7 also ``broadcast``/``axis``); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    return _host(xp(A, B).subtract(A, B))


@op("Mul")
def mul(
    A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0, consumed_inputs: Any = None
) -> Array:
    """A * B (logical and for bool), broadcast (below 7 also ``broadcast``/``axis``); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    m = xp(A, B)
    if np.dtype(A.dtype) == np.bool_:
        return _host(m.logical_and(A, B))
    return _host(m.multiply(A, B))


@op("Div")
def div(
    A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0, consumed_inputs: Any = None
) -> Array:
    """A / B, integers truncated toward zero (below 7 also ``broadcast``/``axis``); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    m = xp(A, B)
    if _is_int(A.dtype):
        # ONNX integer division truncates toward zero (C semantics); stay in integers so
        # large int64 values keep their precision.
        q = m.floor_divide(A, B)
        adjust = (m.remainder(A, B) != 0) & ((A < 0) ^ (B < 0))
        return _astype(m, q + adjust.astype(q.dtype), A.dtype)
    return _astype(m, m.divide(A, B), A.dtype)


@op("Pow")
def pow_(X: Array, Y: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """X ** Y in X's type (int X, float Y: computed in Y's type); opset 1+."""
    Y = _legacy_broadcast(X, Y, axis, broadcast)
    m = xp(X, Y)
    if _is_int(X.dtype) and not _is_int(Y.dtype):
        # an integer base with a fractional exponent: compute in the exponent's type
        return _astype(m, m.power(X.astype(Y.dtype), Y), X.dtype)
    return _astype(m, m.power(X, Y.astype(X.dtype)), X.dtype)


@op("Mod", since=10)
def mod(A: Array, B: Array, *, fmod: int = 0) -> Array:
    """A mod B with the divisor's sign, or C's fmod (sign of A) when ``fmod=1``; opset 10+."""
    m = xp(A, B)
    if fmod:
        return _astype(m, m.fmod(A, B), A.dtype)
    return _astype(m, m.mod(A, B), A.dtype)


def _unary(name: str, fn_name: str, since: int = 1) -> None:
    def fn(X: Array, *, consumed_inputs: Any = None) -> Array:
        m = xp(X)
        return _astype(m, getattr(m, fn_name)(X), X.dtype)

    fn.__name__ = fn_name
    fn.__doc__ = f"numpy's ``{fn_name}`` elementwise, in X's type; opset {since}+."
    op(name, since=since)(fn)


for _name, _fn in [
    ("Neg", "negative"),
    ("Abs", "abs"),
    ("Sqrt", "sqrt"),
    ("Exp", "exp"),
    ("Log", "log"),
    ("Sin", "sin"),
    ("Cos", "cos"),
    ("Tan", "tan"),
    ("Asin", "arcsin"),
    ("Acos", "arccos"),
    ("Atan", "arctan"),
    ("Sinh", "sinh"),
    ("Cosh", "cosh"),
    ("Tanh", "tanh"),
    ("Asinh", "arcsinh"),
    ("Acosh", "arccosh"),
    ("Atanh", "arctanh"),
    ("Sign", "sign"),
    ("Ceil", "ceil"),
    ("Floor", "floor"),
    ("Round", "round"),
    ("BitwiseNot", "invert"),
]:
    _unary(_name, _fn)


@op("Reciprocal")
def reciprocal(X: Array, *, consumed_inputs: Any = None) -> Array:
    """1 / X elementwise; opset 1+."""
    m = xp(X)
    return _astype(m, m.reciprocal(X), X.dtype)


@op("Erf")
def erf(input: Array) -> Array:
    """The Gauss error function elementwise; opset 1+."""
    if xp(input) is np:
        return np.vectorize(math.erf, otypes=[input.dtype])(input).reshape(input.shape)
    import jax.scipy.special

    return jax.scipy.special.erf(input)


def _variadic(ufunc: str, inputs: tuple[Array, ...]) -> Array:
    m = xp(*inputs)
    result = inputs[0]
    for other in inputs[1:]:
        result = getattr(m, ufunc)(result, other)
    if len(inputs) == 1:
        result = m.asarray(result)
    return _host(result)


@op("Max")
def max_(*data_0: Array) -> Array:
    """The elementwise maximum of any number of inputs, broadcast; opset 1+."""
    return _variadic("maximum", data_0)


@op("Min")
def min_(*data_0: Array) -> Array:
    """The elementwise minimum of any number of inputs, broadcast; opset 1+."""
    return _variadic("minimum", data_0)


@op("Sum")
def sum_(*data_0: Array) -> Array:
    """The elementwise sum of any number of inputs, broadcast; opset 1+."""
    return _variadic("add", data_0)


@op("Mean")
def mean(*data_0: Array) -> Array:
    """The elementwise mean of any number of inputs, broadcast; opset 1+."""
    m = xp(*data_0)
    total = _variadic("add", data_0)
    return _astype(m, total / len(data_0), data_0[0].dtype)


# ------------------------------------------------------------------ logic and compare


@op("And")
def and_(A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """Logical A and B (below 7 also ``broadcast``/``axis``); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    return _host(xp(A, B).logical_and(A, B))


@op("Or")
def or_(A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """Logical A or B (below 7 also ``broadcast``/``axis``); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    return _host(xp(A, B).logical_or(A, B))


@op("Xor")
def xor(A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """Logical A xor B (below 7 also ``broadcast``/``axis``); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    return _host(xp(A, B).logical_xor(A, B))


@op("Not")
def not_(X: Array) -> Array:
    """Logical not X; opset 1+."""
    return _host(xp(X).logical_not(X))


@op("Equal")
def equal(A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """A == B elementwise (strings compared as text); opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    m = xp(A, B)
    if A.dtype == object or B.dtype == object or A.dtype.kind in "US":
        return np.asarray(np.asarray(A).astype(str) == np.asarray(B).astype(str))
    return _host(m.equal(A, B))


@op("Less")
def less(A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """A < B elementwise; opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    return _host(xp(A, B).less(A, B))


@op("Greater")
def greater(A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """A > B elementwise; opset 1+."""
    B = _legacy_broadcast(A, B, axis, broadcast)
    return _host(xp(A, B).greater(A, B))


@op("LessOrEqual", since=12)
def less_or_equal(A: Array, B: Array) -> Array:
    """A <= B elementwise; opset 12+."""
    return _host(xp(A, B).less_equal(A, B))


@op("GreaterOrEqual", since=12)
def greater_or_equal(A: Array, B: Array) -> Array:
    """A >= B elementwise; opset 12+."""
    return _host(xp(A, B).greater_equal(A, B))


@op("BitShift", since=11)
def bit_shift(X: Array, Y: Array, *, direction: str = "LEFT") -> Array:
    """X shifted left or right by Y bits (``direction``), unsigned integers; opset 11+."""
    m = xp(X, Y)
    shift = m.left_shift if _str(direction) == "LEFT" else m.right_shift
    return _astype(m, shift(X, Y.astype(X.dtype)), X.dtype)


@op("BitwiseAnd", since=18)
def bitwise_and(A: Array, B: Array) -> Array:
    """A & B on integers; opset 18+."""
    return _host(xp(A, B).bitwise_and(A, B))


@op("BitwiseOr", since=18)
def bitwise_or(A: Array, B: Array) -> Array:
    """A | B on integers; opset 18+."""
    return _host(xp(A, B).bitwise_or(A, B))


@op("BitwiseXor", since=18)
def bitwise_xor(A: Array, B: Array) -> Array:
    """A ^ B on integers; opset 18+."""
    return _host(xp(A, B).bitwise_xor(A, B))


@op("IsNaN", since=9)
def is_nan(X: Array) -> Array:
    """True where X is NaN; opset 9+."""
    return _host(xp(X).isnan(X))


@op("IsInf", since=10)
def is_inf(X: Array, *, detect_negative: int = 1, detect_positive: int = 1) -> Array:
    """True where X is +inf and/or -inf, as ``detect_positive``/``_negative`` say; opset 10+."""
    m = xp(X)
    if detect_negative and detect_positive:
        return _host(m.isinf(X))
    if detect_negative:
        return _host(m.isneginf(X))
    if detect_positive:
        return _host(m.isposinf(X))
    return _host(m.zeros(X.shape, dtype=bool))


@op("Where", since=9)
def where(condition: Array, X: Array, Y: Array) -> Array:
    """X where ``condition`` else Y, broadcast (strings too); opset 9+."""
    m = xp(condition, X, Y)
    if X.dtype == object or Y.dtype == object:
        return np.where(np.asarray(condition), np.asarray(X), np.asarray(Y))
    return _host(m.where(condition, X, Y))


@op("Clip")
def clip_v1(
    input: Array, *, min: float = -math.inf, max: float = math.inf, consumed_inputs: Any = None
) -> Array:
    """X limited to the ``min``/``max`` attributes; opsets 1-10."""
    m = xp(input)
    return _astype(m, m.minimum(m.maximum(input, min), max), input.dtype)


@op("Clip", since=11)
def clip(input: Array, min: Array | None = None, max: Array | None = None) -> Array:
    """X limited to the optional ``min``/``max`` inputs; opset 11+."""
    m = xp(input, min, max)
    result = input
    if min is not None:
        result = m.maximum(result, min)
    if max is not None:
        result = m.minimum(result, max)
    return _astype(m, m.asarray(result), input.dtype)


# ---------------------------------------------------------------------- activations


@op("Relu")
def relu(X: Array, *, consumed_inputs: Any = None) -> Array:
    """max(X, 0); opset 1+."""
    m = xp(X)
    return _astype(m, m.maximum(X, 0), X.dtype)


@op("LeakyRelu")
def leaky_relu(X: Array, *, alpha: float = 0.01, consumed_inputs: Any = None) -> Array:
    """X, or ``alpha`` * X where X < 0; opset 1+."""
    m = xp(X)
    return _astype(m, m.where(X >= 0, X, X * alpha), X.dtype)


@op("Elu")
def elu(X: Array, *, alpha: float = 1.0, consumed_inputs: Any = None) -> Array:
    """X, or ``alpha`` * (exp(X) - 1) where X <= 0; opset 1+."""
    m = xp(X)
    return _astype(m, m.where(X > 0, X, alpha * (m.exp(X) - 1)), X.dtype)


@op("Selu")
def selu(
    X: Array,
    *,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
    consumed_inputs: Any = None,
) -> Array:
    """``gamma`` * elu(X) with the SELU constants; opset 1+."""
    m = xp(X)
    return _astype(m, gamma * m.where(X > 0, X, alpha * (m.exp(X) - 1)), X.dtype)


@op("Celu", since=12)
def celu(X: Array, *, alpha: float = 1.0) -> Array:
    """max(0, X) + min(0, ``alpha`` * (exp(X / ``alpha``) - 1)); opset 12+."""
    m = xp(X)
    dtype = X.dtype
    X = _widen(X)
    neg = alpha * (m.exp(m.minimum(X, 0) / alpha) - 1)
    return _astype(m, m.maximum(X, 0) + m.minimum(neg, 0), dtype)


@op("Sigmoid")
def sigmoid(X: Array, *, consumed_inputs: Any = None) -> Array:
    """1 / (1 + exp(-X)); opset 1+."""
    m = xp(X)
    return _astype(m, 1 / (1 + m.exp(-X)), X.dtype)


@op("HardSigmoid")
def hard_sigmoid(
    X: Array, *, alpha: float = 0.2, beta: float = 0.5, consumed_inputs: Any = None
) -> Array:
    """clip(``alpha`` * X + ``beta``, 0, 1); opset 1+."""
    m = xp(X)
    return _astype(m, m.clip(alpha * X + beta, 0, 1), X.dtype)


@op("HardSwish", since=14)
def hard_swish(X: Array) -> Array:
    """X * clip(X / 6 + 0.5, 0, 1); opset 14+."""
    m = xp(X)
    return _astype(m, X * m.clip(X / 6 + 0.5, 0, 1), X.dtype)


@op("Softplus")
def softplus(X: Array) -> Array:
    """log(1 + exp(X)), computed without overflow; opset 1+."""
    m = xp(X)
    return _astype(m, m.logaddexp(X, 0), X.dtype)


@op("Softsign")
def softsign(input: Array) -> Array:
    """X / (1 + abs(X)); opset 1+."""
    m = xp(input)
    return _astype(m, input / (1 + m.abs(input)), input.dtype)


@op("ThresholdedRelu", since=10)
def thresholded_relu(X: Array, *, alpha: float = 1.0) -> Array:
    """X where X > ``alpha``, else 0; opset 10+."""
    m = xp(X)
    return _astype(m, m.where(alpha < X, X, 0), X.dtype)


@op("PRelu")
def prelu_v1(X: Array, slope: Array, *, consumed_inputs: Any = None) -> Array:
    # Before opset 7 the slope is one value per channel (axis 1), not numpy-broadcast.
    """X, or slope * X where X < 0; a 1-D slope is one value per channel; opsets 1-6."""
    if slope.ndim == 1 and X.ndim > 2 and slope.shape[0] == X.shape[1] > 1:
        slope = slope.reshape((-1,) + (1,) * (X.ndim - 2))
    return prelu(X, slope)


@op("PRelu", since=7)
def prelu(X: Array, slope: Array) -> Array:
    """X, or slope * X where X < 0, slope broadcast; opset 7+."""
    m = xp(X, slope)
    return _astype(m, m.where(X < 0, X * slope, X), X.dtype)


@op("Gelu", since=20)
def gelu(X: Array, *, approximate: str = "none") -> Array:
    """X * Phi(X), exact (erf) or the ``approximate='tanh'`` form; opset 20+."""
    m = xp(X)
    if _str(approximate) == "tanh":
        inner = math.sqrt(2 / math.pi) * (X + 0.044715 * X**3)
        return _astype(m, 0.5 * X * (1 + m.tanh(inner)), X.dtype)
    return _astype(m, 0.5 * X * (1 + erf(X / math.sqrt(2))), X.dtype)


@op("Mish", since=18)
def mish(X: Array) -> Array:
    """X * tanh(softplus(X)); opset 18+."""
    m = xp(X)
    return _astype(m, X * m.tanh(m.logaddexp(X, 0)), X.dtype)


@op("Swish", since=24)
def swish(X: Array, *, alpha: float = 1.0) -> Array:
    """X * sigmoid(``alpha`` * X); opset 24+."""
    m = xp(X)
    return _astype(m, X / (1 + m.exp(-alpha * X)), X.dtype)


@op("Shrink", since=9)
def shrink(input: Array, *, bias: float = 0.0, lambd: float = 0.5) -> Array:
    """X + ``bias`` below -``lambd``, X - ``bias`` above ``lambd``, else 0; opset 9+."""
    m = xp(input)
    x = input
    out = m.where(x < -lambd, x + bias, m.where(x > lambd, x - bias, 0))
    return _astype(m, out, input.dtype)


# ------------------------------------------------------------------ softmax family


def _flattened_2d(m: Any, x: Array, axis: int, fn: Any) -> Array:
    """Opset < 13: the input is coerced to 2-D at ``axis`` and normalised per row."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return fn(m, x.reshape(rows, -1), 1).reshape(x.shape)


def _softmax(m: Any, x: Array, axis: int) -> Array:
    e = m.exp(x - m.max(x, axis=axis, keepdims=True))
    return e / m.sum(e, axis=axis, keepdims=True)


def _log_softmax(m: Any, x: Array, axis: int) -> Array:
    shifted = x - m.max(x, axis=axis, keepdims=True)
    return shifted - m.log(m.sum(m.exp(shifted), axis=axis, keepdims=True))


def _hardmax(m: Any, x: Array, axis: int) -> Array:
    idx = m.argmax(x, axis=axis)
    axis = axis + x.ndim if axis < 0 else axis
    positions = np.arange(x.shape[axis]).reshape([-1] + [1] * (x.ndim - axis - 1))
    return (m.expand_dims(idx, axis) == positions).astype(x.dtype)


@op("Softmax")
def softmax_v1(input: Array, *, axis: int = 1) -> Array:
    """Softmax of the input coerced to 2-D at ``axis`` (rows normalised); opsets 1-12."""
    m = xp(input)
    return _astype(m, _flattened_2d(m, input, axis, _softmax), input.dtype)


@op("Softmax", since=13)
def softmax(input: Array, *, axis: int = -1) -> Array:
    """Softmax along ``axis``; opset 13+."""
    m = xp(input)
    return _astype(m, _softmax(m, input, axis), input.dtype)


@op("LogSoftmax")
def log_softmax_v1(input: Array, *, axis: int = 1) -> Array:
    """Log-softmax of the input coerced to 2-D at ``axis``; opsets 1-12."""
    m = xp(input)
    return _astype(m, _flattened_2d(m, input, axis, _log_softmax), input.dtype)


@op("LogSoftmax", since=13)
def log_softmax(input: Array, *, axis: int = -1) -> Array:
    """Log-softmax along ``axis``; opset 13+."""
    m = xp(input)
    return _astype(m, _log_softmax(m, input, axis), input.dtype)


@op("Hardmax")
def hardmax_v1(input: Array, *, axis: int = 1) -> Array:
    """One-hot of the row's first maximum, input coerced to 2-D at ``axis``; opsets 1-12."""
    m = xp(input)
    return _host(_flattened_2d(m, input, axis, _hardmax))


@op("Hardmax", since=13)
def hardmax(input: Array, *, axis: int = -1) -> Array:
    """One-hot of the first maximum along ``axis``; opset 13+."""
    return _host(_hardmax(xp(input), input, axis))


# ----------------------------------------------------------------- matrix products


@op("MatMul")
def matmul(A: Array, B: Array) -> Array:
    """Matrix product with numpy's batching and broadcasting rules; opset 1+."""
    m = xp(A, B)
    return _astype(m, m.matmul(A, B), A.dtype)


@op("MatMulInteger", since=10)
def matmul_integer(
    A: Array, B: Array, a_zero_point: Array | None = None, b_zero_point: Array | None = None
) -> Array:
    """Integer matrix product in int32 after subtracting the zero points; opset 10+."""
    m = xp(A, B, a_zero_point, b_zero_point)
    a = A.astype(np.int32)
    b = B.astype(np.int32)
    if a_zero_point is not None:
        azp = a_zero_point.astype(np.int32)
        if azp.ndim == 1 and azp.shape[0] > 1:
            azp = azp.reshape(-1, 1)  # one zero point per row of A
        a = a - azp
    if b_zero_point is not None:
        b = b - b_zero_point.astype(np.int32)
    return _astype(m, m.matmul(a, b), np.int32)


@op("Gemm")
def gemm(
    A: Array,
    B: Array,
    C: Array | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    broadcast: int = 0,
) -> Array:
    """``alpha`` * A' @ B' + ``beta`` * C, with A', B' optionally transposed; opset 1+."""
    m = xp(A, B, C)
    if m is np:
        result = np.matmul(A.T if transA else A, B.T if transB else B)
    else:
        # Contract the stored axes directly: ``B.T @ ...`` makes XLA:CPU copy the whole
        # transposed weight on every call (500+ ms for a 4096x25088 FC layer; 17 ms so).
        from jax import lax

        contract = (((0 if transA else 1,), (1 if transB else 0,)), ((), ()))
        result = lax.dot_general(A, B, contract)
    if alpha != 1.0:
        result = alpha * result
    if C is not None and beta != 0.0:
        result = result + (C if beta == 1.0 else beta * C)
    return _astype(m, result, A.dtype)


@op("Einsum", since=12)
def einsum(*Inputs: Array, equation: str = "") -> Array:
    """Einstein summation over the inputs as ``equation`` says; opset 12+."""
    m = xp(*Inputs)
    eq = _str(equation).replace(" ", "")
    if m is np and Inputs[0].dtype.name == "bfloat16":
        widened = [x.astype(np.float32) for x in Inputs]
        return _astype(m, np.einsum(eq, *widened), Inputs[0].dtype)
    return _astype(m, m.einsum(eq, *Inputs), Inputs[0].dtype)


@op("Det", since=11)
def det(X: Array) -> Array:
    """The determinant of each square matrix in the trailing two dims; opset 11+."""
    m = xp(X)
    return _astype(m, m.linalg.det(X), X.dtype)


# --------------------------------------------------------------------- cumulative


def _cumulative(X: Array, axis: Array, exclusive: int, reverse: int, kind: str) -> Array:
    m = xp(X)
    ax = int(np.asarray(axis).reshape(-1)[0])
    ax = ax + X.ndim if ax < 0 else ax
    x = m.flip(X, ax) if reverse else X
    if kind == "sum":
        out = m.cumsum(x, axis=ax, dtype=X.dtype)
        if exclusive:
            out = out - x
    else:
        out = m.cumprod(x, axis=ax, dtype=X.dtype)
        if exclusive:
            ones = m.ones_like(m.take(x, np.array([0]), axis=ax))
            head = m.take(out, np.arange(x.shape[ax] - 1), axis=ax)
            out = m.concatenate([ones, head], axis=ax)
    if reverse:
        out = m.flip(out, ax)
    return _astype(m, out, X.dtype)


@op("CumSum", since=11, host_inputs=(1,))
def cum_sum(x: Array, axis: Array, *, exclusive: int = 0, reverse: int = 0) -> Array:
    """Cumulative sum along ``axis``, optionally exclusive and/or reversed; opset 11+."""
    return _cumulative(x, axis, exclusive, reverse, "sum")


@op("CumProd", since=26, host_inputs=(1,))
def cum_prod(x: Array, axis: Array, *, exclusive: int = 0, reverse: int = 0) -> Array:
    """Cumulative product along ``axis``, optionally exclusive and/or reversed; opset 26+."""
    return _cumulative(x, axis, exclusive, reverse, "prod")


# ---------------------------------------------------------------------- reductions


def _reduce(kind: str, data: Array, axes: list[int] | None, keepdims: int, noop: int) -> Array:
    m = xp(data)
    if not axes:
        if noop:
            return data
        axes = list(range(data.ndim))
    axis = tuple(sorted(a + data.ndim if a < 0 else a for a in axes))
    keep = bool(keepdims)
    dt = data.dtype
    if _is_int(dt) and kind in ("l2", "log_sum", "log_sum_exp"):
        data = data.astype(np.float64)  # exp/log/sqrt of integers: compute in float64
    empty = any(data.shape[a] == 0 for a in axis)
    if kind == "sum":
        out = m.sum(data, axis=axis, keepdims=keep, dtype=dt)
    elif kind == "mean":
        out = m.mean(data, axis=axis, keepdims=keep)
    elif kind == "prod":
        out = m.prod(data, axis=axis, keepdims=keep, dtype=dt)
    elif kind in ("max", "min"):
        fn = m.max if kind == "max" else m.min
        if empty:
            initial = -np.inf if kind == "max" else np.inf
            if dt == np.bool_:
                initial = kind == "min"
            elif _is_int(dt):
                info = np.iinfo(dt)
                initial = info.min if kind == "max" else info.max
            out = fn(data, axis=axis, keepdims=keep, initial=initial)
        else:
            out = fn(data, axis=axis, keepdims=keep)
    elif kind == "l1":
        out = m.sum(m.abs(data), axis=axis, keepdims=keep, dtype=dt)
    elif kind == "l2":
        out = m.sqrt(m.sum(data * data, axis=axis, keepdims=keep))
    elif kind == "sum_square":
        out = m.sum(data * data, axis=axis, keepdims=keep, dtype=dt)
    elif kind == "log_sum":
        out = m.log(m.sum(data, axis=axis, keepdims=keep))
    elif kind == "log_sum_exp":
        if empty:
            out = m.log(m.sum(m.exp(data), axis=axis, keepdims=keep))
        else:
            peak = m.max(data, axis=axis, keepdims=True)
            peak = m.where(m.isfinite(peak), peak, 0)
            total = m.sum(m.exp(data - peak), axis=axis, keepdims=True)
            out = m.log(total) + peak
            if not keep:
                out = m.squeeze(out, axis=axis)
    else:  # pragma: no cover - the registrations below name every kind
        raise ValueError(kind)
    if _is_int(dt) and not _is_int(out.dtype):
        out = m.trunc(out)  # integer results truncate toward zero, as C++ runtimes do
    return _astype(m, m.asarray(out), dt)


def _register_reduce(name: str, kind: str, input_since: int) -> None:
    def with_axes_attribute(data: Array, *, axes: Any = None, keepdims: int = 1) -> Array:
        return _reduce(kind, data, _axes(axes), keepdims, 0)

    def with_axes_input(
        data: Array, axes: Array | None = None, *, keepdims: int = 1, noop_with_empty_axes: int = 0
    ) -> Array:
        return _reduce(kind, data, _axes(axes), keepdims, noop_with_empty_axes)

    with_axes_attribute.__name__ = f"reduce_{kind}_v1"
    with_axes_input.__name__ = f"reduce_{kind}"
    with_axes_attribute.__doc__ = (
        f"{name} over the ``axes`` attribute (all when absent); opsets 1-{input_since - 1}."
    )
    with_axes_input.__doc__ = (
        f"{name} over the ``axes`` input (all when empty, unless ``noop_with_empty_axes``); "
        f"opset {input_since}+."
    )
    op(name)(with_axes_attribute)
    op(name, since=input_since, host_inputs=(1,))(with_axes_input)


for _name, _kind, _since in [
    ("ReduceSum", "sum", 13),
    ("ReduceMean", "mean", 18),
    ("ReduceProd", "prod", 18),
    ("ReduceMax", "max", 18),
    ("ReduceMin", "min", 18),
    ("ReduceL1", "l1", 18),
    ("ReduceL2", "l2", 18),
    ("ReduceSumSquare", "sum_square", 18),
    ("ReduceLogSum", "log_sum", 18),
    ("ReduceLogSumExp", "log_sum_exp", 18),
]:
    _register_reduce(_name, _kind, _since)


def _arg_extreme(data: Array, axis: int, keepdims: int, select_last_index: int, fn: str) -> Array:
    m = xp(data)
    axis = axis + data.ndim if axis < 0 else axis
    if select_last_index:
        flipped = m.flip(data, axis)
        idx = data.shape[axis] - 1 - getattr(m, fn)(flipped, axis=axis)
    else:
        idx = getattr(m, fn)(data, axis=axis)
    if keepdims:
        idx = m.expand_dims(idx, axis)
    return _astype(m, m.asarray(idx), np.int64)


@op("ArgMax")
def arg_max(data: Array, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Array:
    """Index of the first (or last) maximum along ``axis``; opset 1+."""
    return _arg_extreme(data, axis, keepdims, select_last_index, "argmax")


@op("ArgMin")
def arg_min(data: Array, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Array:
    """Index of the first (or last) minimum along ``axis``; opset 1+."""
    return _arg_extreme(data, axis, keepdims, select_last_index, "argmin")


def _top_k(X: Array, k: int, axis: int, largest: int) -> tuple[Array, Array]:
    m = xp(X)
    axis = axis + X.ndim if axis < 0 else axis
    key = X
    if largest:
        # Descending order with ties kept in index order: sort a key that reverses the
        # order of the values (negation, or bitwise not for unsigned integers).
        if X.dtype == np.bool_:
            key = m.logical_not(X)
        elif np.dtype(X.dtype).kind == "u":
            key = m.invert(X)
        else:
            key = -X
    order = m.argsort(key, axis=axis, stable=True)
    indices = m.take(order, np.arange(k), axis=axis)
    values = m.take_along_axis(X, indices, axis=axis)
    return _host(values), _astype(m, indices, np.int64)


@op("TopK")
def top_k_v1(X: Array, *, k: int = 1, axis: int = -1) -> tuple[Array, Array]:
    """The ``k`` (attribute) largest values along ``axis``, and their indices; opsets 1-9."""
    return _top_k(X, int(k), axis, 1)


@op("TopK", since=10, host_inputs=(1,))
def top_k(
    X: Array, K: Array, *, axis: int = -1, largest: int = 1, sorted: int = 1
) -> tuple[Array, Array]:
    """The K largest/smallest values along ``axis`` and their indices, ties in order; opset 10+."""
    return _top_k(X, int(np.asarray(K).reshape(-1)[0]), axis, largest)


# --------------------------------------------------------------------------- casts

_FLOAT8_SATURATING = {17, 18, 19, 20}  # FLOAT8E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ


def onnx_dtype(to: int) -> np.dtype:
    """The numpy dtype of an ONNX ``TensorProto.DataType`` number."""
    import onnx.helper

    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(to)))


def _cast(
    input: Array, dtype: np.dtype, saturate: int, to: int | None, round_mode: str = "up"
) -> Array:
    src = np.dtype(input.dtype)
    if dtype.kind == "O" or src.kind in "OUS":
        return _cast_strings(np.asarray(input), dtype)
    m = xp(input)
    value = input
    if to in _FLOAT8_SATURATING and saturate and _is_float(src) and src.itemsize >= 2:
        import ml_dtypes

        info = ml_dtypes.finfo(dtype)
        wide = value.astype(np.float32) if src.itemsize < 4 else value
        value = m.where(m.isnan(wide), wide, m.clip(wide, float(info.min), float(info.max)))
    if to == 24:  # FLOAT8E8M0: onnx's helper implements its rounding modes
        import onnx.numpy_helper

        rounded = onnx.numpy_helper.to_float8e8m0(np.asarray(value), bool(saturate), round_mode)
        return rounded.astype(dtype)
    if m is np:
        return np.asarray(value).astype(dtype)
    if dtype.kind == "u" and _is_float(src):
        # XLA saturates negative floats to 0 where C casts (onnxruntime, numpy) wrap
        # around; go through int64 so that both paths agree.
        return m.where(value < 0, value.astype(np.int64).astype(dtype), value.astype(dtype))
    if dtype.name in _SUB_BYTE_INTS and not _is_int(src):
        # XLA saturates float -> int4/int2 where ONNX (and ml_dtypes) truncate and wrap.
        bits, signed = _SUB_BYTE_INTS[dtype.name]
        wide = value.astype(np.int32) if src.itemsize < 8 else value.astype(np.int64)
        span = 1 << bits
        half = span // 2 if signed else 0
        value = (wide + half) % span - half
    return value.astype(dtype)


_SUB_BYTE_INTS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


def _cast_strings(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "O":
        if value.dtype.kind in "OUS":
            return value.astype(object)
        if value.dtype.kind == "f" or "float" in value.dtype.name:
            flat = [_format_float(float(v)) for v in value.reshape(-1)]
        else:
            flat = [str(v) for v in value.reshape(-1).tolist()]
        return np.array(flat, dtype=object).reshape(value.shape)
    text = np.array([_str(v) for v in value.reshape(-1)], dtype=object)
    if dtype == np.bool_:
        floats = np.array([float(t) for t in text], dtype=np.float32)
        return (floats != 0).reshape(value.shape)
    floats = np.array([float(t) for t in text], dtype=np.float64)
    if _is_int(dtype):
        return np.array([int(t) for t in text], dtype=dtype).reshape(value.shape)
    return floats.astype(np.float32).astype(dtype).reshape(value.shape)


def _format_float(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return str(np.float32(v))


@op("Cast")
def cast(input: Array, *, to: int, saturate: int = 1, round_mode: str = "up") -> Array:
    """X converted to type ``to`` (strings, saturating float8, sub-byte ints too); opset 1+."""
    return _cast(input, onnx_dtype(to), saturate, int(to), _str(round_mode))


@op("CastLike", since=15)
def cast_like(
    input: Array, target_type: Array, *, saturate: int = 1, round_mode: str = "up"
) -> Array:
    """X converted to the type of ``target_type``; opset 15+."""
    import onnx.helper

    dtype = np.dtype(target_type.dtype)
    to = None
    if dtype.kind != "O":
        to = onnx.helper.np_dtype_to_tensor_dtype(dtype)
    return _cast(input, dtype, saturate, to, _str(round_mode))


@op("BitCast", since=26)
def bit_cast(input: Array, *, to: int) -> Array:
    """X's bits reinterpreted as the type ``to`` of the same width; opset 26+."""
    dtype = onnx_dtype(to)
    src = np.dtype(input.dtype)
    if src.kind in "OUS" or dtype.kind in "OUS":
        raise TypeError("BitCast does not take strings (their width is not defined)")
    if src.itemsize != dtype.itemsize:
        raise TypeError(
            f"BitCast needs types of one width: {src} has {src.itemsize * 8} bits, "
            f"{dtype} has {dtype.itemsize * 8}"
        )
    m = xp(input)
    if m is np:
        return np.array(input, order="C").view(dtype)
    import jax

    value = input.astype(np.uint8) if src == np.bool_ else input
    if dtype == np.bool_:
        return value.astype(np.uint8) != 0
    return jax.lax.bitcast_convert_type(value, dtype)
