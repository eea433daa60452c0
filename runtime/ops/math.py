"""Elementwise arithmetic, logic and comparisons.

Host and jax values alike, each result in its inputs' ONNX dtype (see ``ember.runtime.ops``).

Activations are in ``activation.py``, matrix products in ``linalg.py``, reductions in
``reduce.py`` and casts in ``cast.py``; they share the helpers here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.runtime.ops import op, xp

from ._common import as_str as _str
from ._common import host as _host

Array = Any

# ---------------------------------------------------------------------------- helpers


def astype(m: Any, value: Array, dtype: Any) -> Array:
    if value.dtype == dtype:
        return _host(value)
    return _host(m.asarray(value).astype(dtype))


def widen(value: Array) -> Array:
    """Half-precision inputs are computed in float32 (as the ONNX reference does)."""
    if value.dtype.name in ("bfloat16", "float16"):
        return value.astype(np.float32)
    return value


def normalized_axes(value: Any) -> list[int] | None:
    """An ``axes`` attribute or host input as a list of ints (None when absent)."""
    if value is None:
        return None
    return [int(a) for a in np.asarray(value).reshape(-1)]


def is_int(dtype: Any) -> bool:
    return np.issubdtype(np.dtype(dtype), np.integer)


def is_float(dtype: Any) -> bool:
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


def _legacy_broadcasting(
    name: str, *, consumed_inputs: bool = False
) -> Callable[[Callable[[Array, Array], Array]], Callable[..., Any]]:
    """Register ``fn(A, B)`` as the op ``name`` with the attributes it had below opset 7:
    ``broadcast``/``axis`` (applied before ``fn``) and, for the four arithmetic ops,
    ``consumed_inputs`` (ignored)."""

    def register(fn: Callable[[Array, Array], Array]) -> Callable[..., Any]:
        def legacy(A: Array, B: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
            return fn(A, _legacy_broadcast(A, B, axis, broadcast))

        def arithmetic(
            A: Array,
            B: Array,
            *,
            axis: int | None = None,
            broadcast: int = 0,
            consumed_inputs: Any = None,
        ) -> Array:
            return fn(A, _legacy_broadcast(A, B, axis, broadcast))

        wrapper = arithmetic if consumed_inputs else legacy
        wrapper.__name__ = wrapper.__qualname__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        return op(name)(wrapper)

    return register


@_legacy_broadcasting("Add", consumed_inputs=True)
def add(A: Array, B: Array) -> Array:
    """A + B, numpy broadcasting (below 7 also ``broadcast``/``axis``); opset 1+."""
    return _host(xp(A, B).add(A, B))


@_legacy_broadcasting("Sub", consumed_inputs=True)
def sub(A: Array, B: Array) -> Array:
    """A - B, numpy broadcasting (below 7 also ``broadcast``/``axis``); opset 1+."""
    return _host(xp(A, B).subtract(A, B))


@_legacy_broadcasting("Mul", consumed_inputs=True)
def mul(A: Array, B: Array) -> Array:
    """A * B (logical and for bool), broadcast (below 7 also ``broadcast``/``axis``); opset 1+."""
    m = xp(A, B)
    if np.dtype(A.dtype) == np.bool_:
        return _host(m.logical_and(A, B))
    return _host(m.multiply(A, B))


@_legacy_broadcasting("Div", consumed_inputs=True)
def div(A: Array, B: Array) -> Array:
    """A / B, integers truncated toward zero (below 7 also ``broadcast``/``axis``); opset 1+."""
    m = xp(A, B)
    if is_int(A.dtype):
        # ONNX integer division truncates toward zero (C semantics); stay in integers so
        # large int64 values keep their precision.
        q = m.floor_divide(A, B)
        adjust = (m.remainder(A, B) != 0) & ((A < 0) ^ (B < 0))
        return astype(m, q + adjust.astype(q.dtype), A.dtype)
    return astype(m, m.divide(A, B), A.dtype)


@op("Pow")
def pow_(X: Array, Y: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """X ** Y in X's type (int X, float Y: computed in Y's type); opset 1+."""
    Y = _legacy_broadcast(X, Y, axis, broadcast)
    m = xp(X, Y)
    if is_int(X.dtype) and not is_int(Y.dtype):
        # an integer base with a fractional exponent: compute in the exponent's type
        return astype(m, m.power(X.astype(Y.dtype), Y), X.dtype)
    return astype(m, m.power(X, Y.astype(X.dtype)), X.dtype)


@op("Mod", since=10)
def mod(A: Array, B: Array, *, fmod: int = 0) -> Array:
    """A mod B with the divisor's sign, or C's fmod (sign of A) when ``fmod=1``; opset 10+."""
    m = xp(A, B)
    if fmod:
        return astype(m, m.fmod(A, B), A.dtype)
    return astype(m, m.mod(A, B), A.dtype)


def _unary(name: str, fn_name: str, since: int = 1) -> None:
    def fn(X: Array, *, consumed_inputs: Any = None) -> Array:
        m = xp(X)
        return astype(m, getattr(m, fn_name)(X), X.dtype)

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
    return astype(m, m.reciprocal(X), X.dtype)


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
    return astype(m, total / len(data_0), data_0[0].dtype)


# ------------------------------------------------------------------ logic and compare


def _numpy_binary(name: str, fn_name: str, what: str, since: int, legacy: bool) -> None:
    """Register numpy's (or jax.numpy's) ``fn_name`` of A and B as the op ``name``;
    ``legacy``: with the ``broadcast``/``axis`` attributes of opsets below 7."""

    def fn(A: Array, B: Array) -> Array:
        return _host(getattr(xp(A, B), fn_name)(A, B))

    fn.__name__ = fn_name
    legacy_note = " (below 7 also ``broadcast``/``axis``)" if legacy else ""
    fn.__doc__ = f"{what}{legacy_note}; opset {since}+."
    (_legacy_broadcasting(name) if legacy else op(name, since=since))(fn)


for _name, _fn, _what, _since, _legacy in [
    ("And", "logical_and", "Logical A and B", 1, True),
    ("Or", "logical_or", "Logical A or B", 1, True),
    ("Xor", "logical_xor", "Logical A xor B", 1, True),
    ("Less", "less", "A < B elementwise", 1, True),
    ("Greater", "greater", "A > B elementwise", 1, True),
    ("LessOrEqual", "less_equal", "A <= B elementwise", 12, False),
    ("GreaterOrEqual", "greater_equal", "A >= B elementwise", 12, False),
    ("BitwiseAnd", "bitwise_and", "A & B on integers", 18, False),
    ("BitwiseOr", "bitwise_or", "A | B on integers", 18, False),
    ("BitwiseXor", "bitwise_xor", "A ^ B on integers", 18, False),
]:
    _numpy_binary(_name, _fn, _what, _since, _legacy)


@op("Not")
def not_(X: Array) -> Array:
    """Logical not X; opset 1+."""
    return _host(xp(X).logical_not(X))


@_legacy_broadcasting("Equal")
def equal(A: Array, B: Array) -> Array:
    """A == B elementwise, strings as text (below 7 also ``broadcast``/``axis``); opset 1+."""
    m = xp(A, B)
    if A.dtype == object or B.dtype == object or A.dtype.kind in "US":
        return np.asarray(np.asarray(A).astype(str) == np.asarray(B).astype(str))
    return _host(m.equal(A, B))


@op("BitShift", since=11)
def bit_shift(X: Array, Y: Array, *, direction: str = "LEFT") -> Array:
    """X shifted left or right by Y bits (``direction``), unsigned integers; opset 11+."""
    m = xp(X, Y)
    shift = m.left_shift if _str(direction) == "LEFT" else m.right_shift
    return astype(m, shift(X, Y.astype(X.dtype)), X.dtype)


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
    return astype(m, m.minimum(m.maximum(input, min), max), input.dtype)


@op("Clip", since=11)
def clip(input: Array, min: Array | None = None, max: Array | None = None) -> Array:
    """X limited to the optional ``min``/``max`` inputs; opset 11+."""
    m = xp(input, min, max)
    result = input
    if min is not None:
        result = m.maximum(result, min)
    if max is not None:
        result = m.minimum(result, max)
    return astype(m, m.asarray(result), input.dtype)
