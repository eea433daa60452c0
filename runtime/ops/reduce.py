"""Reductions, cumulative sums and products, ArgMax/ArgMin and TopK.

Host and jax values alike, each result in its inputs' ONNX dtype (see ``ember.runtime.ops``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.runtime.ops import op, xp
from ember.runtime.ops._common import host as _host
from ember.runtime.ops.math import astype, is_int, normalized_axes

Array = Any


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
    return astype(m, out, X.dtype)


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
    if is_int(dt) and kind in ("l2", "log_sum", "log_sum_exp"):
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
            elif is_int(dt):
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
    if is_int(dt) and not is_int(out.dtype):
        out = m.trunc(out)  # integer results truncate toward zero, as C++ runtimes do
    return astype(m, m.asarray(out), dt)


def _register_reduce(name: str, kind: str, input_since: int) -> None:
    def with_axes_attribute(data: Array, *, axes: Any = None, keepdims: int = 1) -> Array:
        return _reduce(kind, data, normalized_axes(axes), keepdims, 0)

    def with_axes_input(
        data: Array, axes: Array | None = None, *, keepdims: int = 1, noop_with_empty_axes: int = 0
    ) -> Array:
        return _reduce(kind, data, normalized_axes(axes), keepdims, noop_with_empty_axes)

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
    return astype(m, m.asarray(idx), np.int64)


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
    return _host(values), astype(m, indices, np.int64)


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
