"""Indexing ops: Gather/Scatter and their element and N-d forms; the value-shaped ops
(Compress, NonZero, Unique) whose output shape depends on the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.runtime.ops import op, xp
from ember.runtime.ops._common import as_str as _str
from ember.runtime.ops._common import host as _host
from ember.runtime.ops.tensor import normalized_axis

Array = Any


# ------------------------------------------------------------------ gather/scatter


def _normalize_indices(indices: Array, dim: Any) -> Array:
    """Negative indices count from the end. Host indices stay numpy (constants in XLA)."""
    return xp(indices).where(indices < 0, indices + dim, indices)


@op("Gather")
def gather(data: Array, indices: Array, *, axis: int = 0) -> Array:
    """Entries of ``data`` along ``axis`` picked by ``indices`` (negatives count back); opset 1+."""
    m = xp(data, indices)
    axis = normalized_axis(axis, data.ndim)
    idx = _normalize_indices(indices, data.shape[axis])
    if m is np:
        return np.asarray(np.take(data, idx, axis=axis))
    return m.take(data, idx, axis=axis)


@op("GatherElements", since=11)
def gather_elements(data: Array, indices: Array, *, axis: int = 0) -> Array:
    """``data`` indexed elementwise along ``axis`` (numpy's take_along_axis); opset 11+."""
    m = xp(data, indices)
    axis = normalized_axis(axis, data.ndim)
    idx = _normalize_indices(indices, data.shape[axis])
    return _host(m.take_along_axis(data, idx, axis=axis))


@op("GatherND", since=11)
def gather_nd(data: Array, indices: Array, *, batch_dims: int = 0) -> Array:
    """Slices of ``data`` at the index tuples in ``indices``, after ``batch_dims``; opset 11+."""
    m = xp(data, indices)
    batch_shape = tuple(data.shape[:batch_dims])
    batch = int(np.prod(batch_shape, dtype=np.int64))
    k = indices.shape[-1]
    inner = tuple(indices.shape[batch_dims:-1])
    flat_data = m.asarray(data).reshape((batch,) + tuple(data.shape[batch_dims:]))
    flat_idx = indices.reshape((batch,) + inner + (k,))
    dims = np.asarray(data.shape[batch_dims : batch_dims + k], dtype=np.int64)
    flat_idx = _normalize_indices(flat_idx, dims)
    batch_ids = np.arange(batch).reshape((batch,) + (1,) * len(inner))
    picked = flat_data[(batch_ids,) + tuple(flat_idx[..., i] for i in range(k))]
    out_shape = batch_shape + inner + tuple(data.shape[batch_dims + k :])
    return _host(picked.reshape(out_shape))


def _scatter_at(data: Array, index: tuple[Array, ...], updates: Array, reduction: str) -> Array:
    reduction = _str(reduction)
    if xp(data, updates, *index) is np:
        out = np.array(data, copy=True)
        if reduction == "none":
            out[index] = updates
        else:
            ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
            ufunc[reduction].at(out, index, updates)
        return out
    import jax.numpy as jnp

    at = jnp.asarray(data).at[index]
    if reduction == "none":
        return at.set(updates)
    update: Any = {"add": at.add, "mul": at.multiply, "max": at.max, "min": at.min}[reduction]
    return update(updates)


def _scatter_elements(
    data: Array, indices: Array, updates: Array, axis: int, reduction: str
) -> Array:
    axis = normalized_axis(axis, data.ndim)
    idx = _normalize_indices(indices, data.shape[axis])
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = idx
    return _scatter_at(data, tuple(grid), updates, reduction)


@op("Scatter", since=9)
def scatter(data: Array, indices: Array, updates: Array, *, axis: int = 0) -> Array:
    """ScatterElements without reduction (its deprecated name); opset 9+."""
    return _scatter_elements(data, indices, updates, axis, "none")


@op("ScatterElements", since=11)
def scatter_elements(
    data: Array, indices: Array, updates: Array, *, axis: int = 0, reduction: str = "none"
) -> Array:
    """``data`` with ``updates`` written along ``axis`` at ``indices``, reduced; opset 11+."""
    return _scatter_elements(data, indices, updates, axis, reduction)


@op("ScatterND", since=11)
def scatter_nd(data: Array, indices: Array, updates: Array, *, reduction: str = "none") -> Array:
    """``data`` with ``updates`` written at the index tuples, optionally reduced; opset 11+."""
    k = indices.shape[-1]
    dims = np.asarray(data.shape[:k], dtype=np.int64)
    idx = _normalize_indices(indices, dims)
    return _scatter_at(data, tuple(idx[..., i] for i in range(k)), updates, reduction)


# ---------------------------------------------------------- value-shaped outputs


@op("Compress", since=9, value_shaped=True)
def compress(input: Array, condition: Array, *, axis: int | None = None) -> Array:
    """The slices of ``input`` along ``axis`` (or flattened) where ``condition`` holds; opset 9+."""
    m = xp(input)
    keep = np.flatnonzero(np.asarray(condition).reshape(-1))
    if axis is None:
        return _host(m.take(m.reshape(input, -1), keep))
    return _host(m.take(input, keep, axis=normalized_axis(axis, input.ndim)))


@op("NonZero", since=9, value_shaped=True)
def non_zero(X: Array) -> np.ndarray:
    """The indices of the non-zero elements, one row per dim; opset 9+."""
    return np.asarray(np.nonzero(np.asarray(X)), dtype=np.int64).reshape(np.ndim(X), -1)


@op("Unique", since=11, value_shaped=True)
def unique(
    X: Array, *, axis: int | None = None, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unique values (or slices along ``axis``), first indices, inverse and counts; opset 11+."""
    x = np.asarray(X)
    ax = None if axis is None else normalized_axis(axis, x.ndim)
    values, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=ax
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if ax is None else ax)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return (
        values,
        first.astype(np.int64),
        inverse.astype(np.int64),
        counts.astype(np.int64),
    )
