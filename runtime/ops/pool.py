"""Pooling: MaxPool, AveragePool, LpPool, their global forms, MaxUnpool, MaxRoiPool.

Windows lower to ``lax.reduce_window``, except MaxPool's: a max over strided slices, one
spatial axis at a time (``window_max``). The window geometry (padding, ceil mode) is
computed on the host from static shapes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import op
from .conv import auto_pads, ints_or_default


def pool_geometry(
    x_shape: Sequence[int],
    kernel_shape: Sequence[int],
    *,
    auto_pad: str,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    ceil_mode: int,
) -> tuple[list[int], list[int], list[tuple[int, int]], list[int], list[int]]:
    """Kernel, strides, explicit pads, extra end padding (ceil mode) and output size."""
    spatial = list(x_shape[2:])
    n = len(spatial)
    kernel = [int(k) for k in kernel_shape]
    strides_ = ints_or_default(strides, n, 1)
    dil = ints_or_default(dilations, n, 1)
    pad = auto_pads(auto_pad, pads, spatial, kernel, strides_, dil)
    out, extra = [], []
    for i in range(n):
        window = (kernel[i] - 1) * dil[i] + 1
        span = spatial[i] + pad[i][0] + pad[i][1] - window
        if ceil_mode:
            size = -(-span // strides_[i]) + 1
            # PyTorch/ONNX: the last window must start inside the input or the begin padding.
            if (size - 1) * strides_[i] >= spatial[i] + pad[i][0]:
                size -= 1
        else:
            size = span // strides_[i] + 1
        out.append(size)
        need = (size - 1) * strides_[i] + window
        extra.append(max(0, need - (spatial[i] + pad[i][0] + pad[i][1])))
    return kernel, strides_, pad, extra, dil


@dataclass(frozen=True)
class _Window:
    """The window attributes the pooling ops share (MaxPool below 8 has no dilations or
    ceil mode: None and 0)."""

    kernel_shape: Sequence[int]
    auto_pad: str
    pads: Sequence[int] | None
    strides: Sequence[int] | None
    dilations: Sequence[int] | None = None
    ceil_mode: int = 0

    def geometry(
        self, x_shape: Sequence[int]
    ) -> tuple[list[int], list[int], list[tuple[int, int]], list[int], list[int]]:
        """``pool_geometry`` of these attributes over an input of ``x_shape``."""
        return pool_geometry(
            x_shape,
            self.kernel_shape,
            auto_pad=self.auto_pad,
            pads=self.pads,
            strides=self.strides,
            dilations=self.dilations,
            ceil_mode=self.ceil_mode,
        )


def lowest_value(dtype: Any) -> Any:
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    if dtype.kind == "b":
        return False
    return -np.inf


def _window_counts(
    size: int, lo: int, hi: int, extra: int, k: int, s: int, d: int, include_pad: bool, out: int
) -> np.ndarray:
    """How many elements each output window of one axis averages over."""
    valid = np.zeros(size + lo + hi + extra, dtype=np.int64)
    if include_pad:
        valid[: size + lo + hi] = 1
    else:
        valid[lo : lo + size] = 1
    return np.array([valid[o * s : o * s + (k - 1) * d + 1 : d].sum() for o in range(out)])


# ---------------------------------------------------------------------------------------------
# pooling


def _reduce_window(x, init, computation, kernel, strides, pad, extra, dil):
    window = (1, 1) + tuple(kernel)
    wstrides = (1, 1) + tuple(strides)
    ends = zip(pad, extra, strict=True)
    padding = ((0, 0), (0, 0)) + tuple((lo, hi + e) for (lo, hi), e in ends)
    return lax.reduce_window(
        x, init, computation, window, wstrides, padding, window_dilation=(1, 1) + tuple(dil)
    )


def window_max(
    x: Any,
    axes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dil: Sequence[int],
) -> Any:
    """The max of each window over ``axes`` (each with its kernel size, stride, (lo, hi)
    padding and dilation), as ``reduce_window`` with ``lax.max`` computes it.

    One axis at a time (a window's max is the max of its rows' maxes), each as the max of
    ``k`` strided slices of the padded value: XLA:CPU fuses them into vectorised loops,
    where its reduce-window emitter loops element by element with a bounds check per tap.
    yolov8n's SPPF (three 5x5 MaxPools of a 1x128x10x10 value; 2 cores, load ~11, min of
    200): ~160-220 us each as a reduce-window, ~45 us as slices.
    """
    lowest = jnp.asarray(lowest_value(x.dtype), x.dtype)
    widths = [(0, 0)] * x.ndim
    for axis, ends in zip(axes, padding, strict=True):
        widths[axis] = ends
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
    if any(x.shape[a] + sum(widths[a]) < w for a, w in zip(axes, spans, strict=True)):
        # a window longer than the padded value: no output along that axis
        window, ones = [1] * x.ndim, [1] * x.ndim
        strides_, dil_ = list(ones), list(ones)
        for a, k, s, d in zip(axes, kernel, strides, dil, strict=True):
            window[a], strides_[a], dil_[a] = k, s, d
        return lax.reduce_window(x, lowest, lax.max, window, strides_, widths, window_dilation=dil_)
    y = jnp.pad(x, widths, constant_values=lowest) if any(sum(w) for w in widths) else x
    for axis, k, s, d in zip(axes, kernel, strides, dil, strict=True):
        span = (k - 1) * d + 1
        last = (y.shape[axis] - span) // s * s  # the start of the last window
        taps = [lax.slice_in_dim(y, j * d, j * d + last + 1, s, axis) for j in range(k)]
        y = functools.reduce(lax.max, taps)
    return y


def _max_pool_indices(x, kernel, strides, pad, extra, dil, out_sp, storage_order):
    """Max and flat argmax by gathering each window's (static) positions."""
    spatial = x.shape[2:]
    n = len(spatial)
    axes_pos = []
    for i in range(n):
        o = np.arange(out_sp[i])[:, None] * strides[i] - pad[i][0]
        axes_pos.append(o + np.arange(kernel[i])[None, :] * dil[i])  # (out_i, k_i)
    # Broadcast every axis to (out..., k...) grids.
    grids = []
    for i in range(n):
        shape = [1] * (2 * n)
        shape[i] = out_sp[i]
        shape[n + i] = kernel[i]
        grids.append(axes_pos[i].reshape(shape))
    valid = np.ones([1] * (2 * n), dtype=bool)
    for i in range(n):
        valid = valid & (grids[i] >= 0) & (grids[i] < spatial[i])
    clipped = [np.clip(g, 0, spatial[i] - 1) for i, g in enumerate(grids)]
    row_major = np.zeros([1] * (2 * n), dtype=np.int64)
    col_major = np.zeros([1] * (2 * n), dtype=np.int64)
    for i in range(n):
        row_major = row_major * spatial[i] + clipped[i]
    for i in reversed(range(n)):
        col_major = col_major * spatial[i] + clipped[i]
    full = tuple(out_sp) + tuple(kernel)
    valid = np.broadcast_to(valid, full).reshape(tuple(out_sp) + (-1,))
    row_major = np.broadcast_to(row_major, full).reshape(tuple(out_sp) + (-1,))
    col_major = np.broadcast_to(col_major, full).reshape(tuple(out_sp) + (-1,))
    flat = x.reshape(x.shape[:2] + (-1,))
    windows = jnp.take(flat, jnp.asarray(row_major.reshape(-1)), axis=2).reshape(
        x.shape[:2] + row_major.shape
    )
    windows = jnp.where(jnp.asarray(valid), windows, jnp.asarray(lowest_value(x.dtype), x.dtype))
    arg = jnp.argmax(windows, axis=-1)
    y = jnp.max(windows, axis=-1)
    chosen = row_major if storage_order == 0 else col_major
    pos = jnp.take_along_axis(
        jnp.broadcast_to(jnp.asarray(chosen), windows.shape), arg[..., None], axis=-1
    )[..., 0]
    plane = int(np.prod(spatial))
    base = (jnp.arange(x.shape[0] * x.shape[1], dtype=jnp.int64) * plane).reshape(
        (x.shape[0], x.shape[1]) + (1,) * n
    )
    return y, (pos.astype(jnp.int64) + base)


def _max_pool(x, window: _Window, storage_order, with_indices):
    kernel, strides_, pad, extra, dil = window.geometry(x.shape)
    padding = [(lo, hi + e) for (lo, hi), e in zip(pad, extra, strict=True)]
    y = window_max(x, range(2, x.ndim), kernel, strides_, padding, dil)
    if not with_indices:
        return y
    _, idx = _max_pool_indices(x, kernel, strides_, pad, extra, dil, y.shape[2:], storage_order)
    return y, idx


@op("MaxPool")
def max_pool_1(X, *, auto_pad="NOTSET", kernel_shape=(), pads=None, strides=None):
    """Max over each window (no dilations, indices or ceil mode); opsets 1-7."""
    return _max_pool(jnp.asarray(X), _Window(kernel_shape, auto_pad, pads, strides), 0, False)


@op("MaxPool", since=8)
def max_pool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    dilations=None,
    kernel_shape=(),
    pads=None,
    storage_order=0,
    strides=None,
    num_outputs=2,
):
    # The interpreter passes the node's output count: the Indices gather is only built
    # when a model asks for it.
    """Max over each window, dilated, ceil mode, with optional flat argmax indices; opset 8+."""
    window = _Window(kernel_shape, auto_pad, pads, strides, dilations, ceil_mode)
    return _max_pool(jnp.asarray(X), window, storage_order, num_outputs > 1)


def _avg_or_lp(x, window: _Window, p, count_include_pad):
    kernel, strides_, pad, extra, dil = window.geometry(x.shape)
    vals = x if p is None else jnp.abs(x) ** p
    total = _reduce_window(
        vals, jnp.asarray(0, x.dtype), lax.add, kernel, strides_, pad, extra, dil
    )
    if p is not None:
        return (total ** (1.0 / p)).astype(x.dtype)
    counts = np.ones((), dtype=np.int64)
    for i, size in enumerate(x.shape[2:]):
        c = _window_counts(
            size,
            *pad[i],
            extra[i],
            kernel[i],
            strides_[i],
            dil[i],
            bool(count_include_pad),
            total.shape[2 + i],
        )
        counts = np.multiply.outer(counts, c)
    return (total / jnp.asarray(counts, x.dtype)).astype(x.dtype)


@op("AveragePool")
def average_pool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    count_include_pad=0,
    dilations=None,
    kernel_shape=(),
    pads=None,
    strides=None,
):
    """Mean over each window, with or without the padding counted; opset 1+."""
    window = _Window(kernel_shape, auto_pad, pads, strides, dilations, ceil_mode)
    return _avg_or_lp(jnp.asarray(X), window, None, count_include_pad)


@op("LpPool")
def lp_pool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    dilations=None,
    kernel_shape=(),
    p=2,
    pads=None,
    strides=None,
):
    """The p-norm over each window; opset 1+."""
    window = _Window(kernel_shape, auto_pad, pads, strides, dilations, ceil_mode)
    return _avg_or_lp(jnp.asarray(X), window, p, 1)


def spatial_axes(x) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@op("GlobalAveragePool")
def global_average_pool(X):
    """Mean over all spatial dims, kept as size 1; opset 1+."""
    # Scaled before the sum, so the mean is the reduction's own output. As sum * (1/n),
    # XLA:CPU recomputes the product inside each consumer's fusion; before a Softmax, LLVM
    # contracts one copy with the max-subtract into an FMA that skips the product's rounding
    # while the max saw the rounded value, and on logits of ~1e10 (ulp 1024) every exp
    # underflows: softmax gave 0/0 = NaN in about one process in four (light squeezenet,
    # resnet50).
    x = jnp.asarray(X)
    axes = spatial_axes(x)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    if not jnp.issubdtype(x.dtype, jnp.floating) or n == 0:
        return jnp.mean(x, axis=axes, keepdims=True).astype(x.dtype)
    return jnp.sum(x * jnp.asarray(1.0 / n, x.dtype), axis=axes, keepdims=True)


@op("GlobalMaxPool")
def global_max_pool(X):
    """Max over all spatial dims, kept as size 1; opset 1+."""
    x = jnp.asarray(X)
    return jnp.max(x, axis=spatial_axes(x), keepdims=True)


@op("GlobalLpPool", since=2)
def global_lp_pool(X, *, p=2):
    """The p-norm over all spatial dims, kept as size 1; opset 2+."""
    x = jnp.asarray(X)
    s = jnp.sum(jnp.abs(x) ** p, axis=spatial_axes(x), keepdims=True)
    return (s ** (1.0 / p)).astype(x.dtype)


@op("MaxUnpool", since=9, host_inputs=(2,))
def max_unpool(X, I, output_shape=None, *, kernel_shape=(), pads=None, strides=None):
    """MaxPool's values scattered back to their indices, zeros elsewhere; opset 9+."""
    x = jnp.asarray(X)
    n = x.ndim - 2
    strides_ = ints_or_default(strides, n, 1)
    p = ints_or_default(pads, 2 * n, 0)
    inferred = list(x.shape[:2]) + [
        (x.shape[2 + i] - 1) * strides_[i] + kernel_shape[i] - p[i] - p[i + n] for i in range(n)
    ]
    flat = jnp.zeros((int(np.prod(inferred)),), x.dtype)
    y = flat.at[jnp.asarray(I).reshape(-1)].set(x.reshape(-1)).reshape(inferred)
    if output_shape is None:
        return y
    # Indices address the inferred shape; a larger output_shape pads at the end.
    out = [int(v) for v in np.asarray(output_shape)]
    return jnp.pad(y, [(0, o - i) for o, i in zip(out, inferred, strict=False)])


@op("MaxRoiPool", host_inputs=(1,))
def max_roi_pool(X, rois, *, pooled_shape=(), spatial_scale=1.0):
    """Max over a ``pooled_shape`` grid of cells in each region of interest; opset 1+."""
    x = jnp.asarray(X)
    r = np.asarray(rois)
    ph, pw = (int(v) for v in pooled_shape)
    height, width = x.shape[2], x.shape[3]
    outs = []
    for roi in r:
        b = int(roi[0])
        x1, y1, x2, y2 = (int(np.round(v * spatial_scale)) for v in roi[1:5])
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        cells = []
        for i in range(ph):
            row = []
            hs = min(max(int(np.floor(i * rh / ph)) + y1, 0), height)
            he = min(max(int(np.ceil((i + 1) * rh / ph)) + y1, 0), height)
            for j in range(pw):
                ws = min(max(int(np.floor(j * rw / pw)) + x1, 0), width)
                we = min(max(int(np.ceil((j + 1) * rw / pw)) + x1, 0), width)
                if he <= hs or we <= ws:
                    row.append(jnp.zeros((x.shape[1],), x.dtype))
                else:
                    row.append(jnp.max(x[b, :, hs:he, ws:we], axis=(1, 2)))
            cells.append(jnp.stack(row, axis=-1))
        outs.append(jnp.stack(cells, axis=-2))
    return jnp.stack(outs)
