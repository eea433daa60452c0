"""Activations and the softmax family.

Host and jax values alike, each result in its inputs' ONNX dtype (see ``ember.runtime.ops``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.runtime.ops import op, xp
from ember.runtime.ops._common import as_str as _str
from ember.runtime.ops.math import astype, erf, widen

Array = Any


# ---------------------------------------------------------------------- activations


@op("Relu")
def relu(X: Array, *, consumed_inputs: Any = None) -> Array:
    """max(X, 0); opset 1+."""
    m = xp(X)
    return astype(m, m.maximum(X, 0), X.dtype)


@op("LeakyRelu")
def leaky_relu(X: Array, *, alpha: float = 0.01, consumed_inputs: Any = None) -> Array:
    """X, or ``alpha`` * X where X < 0; opset 1+."""
    m = xp(X)
    return astype(m, m.where(X >= 0, X, X * alpha), X.dtype)


@op("Elu")
def elu(X: Array, *, alpha: float = 1.0, consumed_inputs: Any = None) -> Array:
    """X, or ``alpha`` * (exp(X) - 1) where X <= 0; opset 1+."""
    m = xp(X)
    return astype(m, m.where(X > 0, X, alpha * (m.exp(X) - 1)), X.dtype)


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
    return astype(m, gamma * m.where(X > 0, X, alpha * (m.exp(X) - 1)), X.dtype)


@op("Celu", since=12)
def celu(X: Array, *, alpha: float = 1.0) -> Array:
    """max(0, X) + min(0, ``alpha`` * (exp(X / ``alpha``) - 1)); opset 12+."""
    m = xp(X)
    dtype = X.dtype
    X = widen(X)
    neg = alpha * (m.exp(m.minimum(X, 0) / alpha) - 1)
    return astype(m, m.maximum(X, 0) + m.minimum(neg, 0), dtype)


@op("Sigmoid")
def sigmoid(X: Array, *, consumed_inputs: Any = None) -> Array:
    """1 / (1 + exp(-X)); opset 1+."""
    m = xp(X)
    return astype(m, 1 / (1 + m.exp(-X)), X.dtype)


@op("HardSigmoid")
def hard_sigmoid(
    X: Array, *, alpha: float = 0.2, beta: float = 0.5, consumed_inputs: Any = None
) -> Array:
    """clip(``alpha`` * X + ``beta``, 0, 1); opset 1+."""
    m = xp(X)
    return astype(m, m.clip(alpha * X + beta, 0, 1), X.dtype)


@op("HardSwish", since=14)
def hard_swish(X: Array) -> Array:
    """X * clip(X / 6 + 0.5, 0, 1); opset 14+."""
    m = xp(X)
    return astype(m, X * m.clip(X / 6 + 0.5, 0, 1), X.dtype)


@op("Softplus")
def softplus(X: Array) -> Array:
    """log(1 + exp(X)), computed without overflow; opset 1+."""
    m = xp(X)
    return astype(m, m.logaddexp(X, 0), X.dtype)


@op("Softsign")
def softsign(input: Array) -> Array:
    """X / (1 + abs(X)); opset 1+."""
    m = xp(input)
    return astype(m, input / (1 + m.abs(input)), input.dtype)


@op("ThresholdedRelu", since=10)
def thresholded_relu(X: Array, *, alpha: float = 1.0) -> Array:
    """X where X > ``alpha``, else 0; opset 10+."""
    m = xp(X)
    return astype(m, m.where(alpha < X, X, 0), X.dtype)


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
    return astype(m, m.where(X < 0, X * slope, X), X.dtype)


@op("Gelu", since=20)
def gelu(X: Array, *, approximate: str = "none") -> Array:
    """X * Phi(X), exact (erf) or the ``approximate='tanh'`` form; opset 20+."""
    m = xp(X)
    if _str(approximate) == "tanh":
        inner = math.sqrt(2 / math.pi) * (X + 0.044715 * X**3)
        return astype(m, 0.5 * X * (1 + m.tanh(inner)), X.dtype)
    return astype(m, 0.5 * X * (1 + erf(X / math.sqrt(2))), X.dtype)


@op("Mish", since=18)
def mish(X: Array) -> Array:
    """X * tanh(softplus(X)); opset 18+."""
    m = xp(X)
    return astype(m, X * m.tanh(m.logaddexp(X, 0)), X.dtype)


@op("Swish", since=24)
def swish(X: Array, *, alpha: float = 1.0) -> Array:
    """X * sigmoid(``alpha`` * X); opset 24+."""
    m = xp(X)
    return astype(m, X / (1 + m.exp(-alpha * X)), X.dtype)


@op("Shrink", since=9)
def shrink(input: Array, *, bias: float = 0.0, lambd: float = 0.5) -> Array:
    """X + ``bias`` below -``lambd``, X - ``bias`` above ``lambd``, else 0; opset 9+."""
    m = xp(input)
    x = input
    out = m.where(x < -lambd, x + bias, m.where(x > lambd, x - bias, 0))
    return astype(m, out, input.dtype)


# ------------------------------------------------------------------ softmax family


def _flattened_2d(m: Any, x: Array, axis: int, fn: Any) -> Array:
    """Opset < 13: the input is coerced to 2-D at ``axis`` and normalised per row."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return fn(m, x.reshape(rows, -1), 1).reshape(x.shape)


def _max_along(m: Any, x: Array, axis: int) -> Array:
    """``max(x, axis, keepdims=True)``; on jax, the axis is first halved by elementwise
    maxima down to 16 (the halves overlap by one where the length is odd: max does not
    mind) and only the rest reduced. XLA:CPU's max reduction (NaN-propagating) runs a
    scalar loop: over the 400 keys of a [1, 6, 400, 400] attention it took 1.26 ms, the
    halving 0.24 ms; NaNs propagate through ``maximum`` alike."""
    if m is np:
        return np.max(x, axis=axis, keepdims=True)
    from jax import lax

    axis = axis % x.ndim
    n = x.shape[axis]
    while n > 16:
        h = (n + 1) // 2
        x = m.maximum(
            lax.slice_in_dim(x, 0, h, axis=axis), lax.slice_in_dim(x, n - h, n, axis=axis)
        )
        n = h
    return m.max(x, axis=axis, keepdims=True)


def _softmax(m: Any, x: Array, axis: int) -> Array:
    e = m.exp(x - _max_along(m, x, axis))
    return e / m.sum(e, axis=axis, keepdims=True)


def _log_softmax(m: Any, x: Array, axis: int) -> Array:
    shifted = x - _max_along(m, x, axis)
    return shifted - m.log(m.sum(m.exp(shifted), axis=axis, keepdims=True))


def _hardmax(m: Any, x: Array, axis: int) -> Array:
    idx = m.argmax(x, axis=axis)
    axis = axis + x.ndim if axis < 0 else axis
    positions = np.arange(x.shape[axis]).reshape([-1] + [1] * (x.ndim - axis - 1))
    return (m.expand_dims(idx, axis) == positions).astype(x.dtype)


def _register_normalizer(name: str, fn: Any, what: str) -> None:
    """``name`` for opsets 1-12 (the input coerced to 2-D at ``axis``, each row taken by
    ``fn``) and 13+ (``fn`` along ``axis``), in the input's dtype."""

    def per_row(input: Array, *, axis: int = 1) -> Array:
        m = xp(input)
        return astype(m, _flattened_2d(m, input, axis, fn), input.dtype)

    def along_axis(input: Array, *, axis: int = -1) -> Array:
        m = xp(input)
        return astype(m, fn(m, input, axis), input.dtype)

    snake = fn.__name__.lstrip("_")
    per_row.__name__, along_axis.__name__ = f"{snake}_v1", snake
    per_row.__doc__ = f"{what} of each row, the input coerced to 2-D at ``axis``; opsets 1-12."
    along_axis.__doc__ = f"{what} along ``axis``; opset 13+."
    op(name)(per_row)
    op(name, since=13)(along_axis)


for _name, _fn, _what in [
    ("Softmax", _softmax, "Softmax"),
    ("LogSoftmax", _log_softmax, "Log-softmax"),
    ("Hardmax", _hardmax, "One-hot of the first maximum"),
]:
    _register_normalizer(_name, _fn, _what)
