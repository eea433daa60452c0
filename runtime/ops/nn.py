"""Neural-network ops: convolution, pooling, normalization, losses, activations, random.

Spatial ops take NCHW-style layouts (batch, channels, spatial...) as ONNX does and lower to
``lax.conv_general_dilated`` / ``lax.reduce_window`` so that XLA fuses and tiles them well.
Padding arithmetic is done on the host from static shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import op, xp

# ---------------------------------------------------------------------------------------------
# padding / window arithmetic shared by Conv and the pools


def _ints(values: Sequence[int] | None, n: int, default: int) -> list[int]:
    return [default] * n if values is None or len(values) == 0 else [int(v) for v in values]


def _split_pad(total: int, auto_pad: str) -> tuple[int, int]:
    """(begin, end) of ``total`` padding: the odd one at the end for ``SAME_UPPER``, else at
    the begin (``SAME_LOWER``, and ConvTranspose's ``output_shape`` without auto_pad)."""
    small, big = total // 2, total - total // 2
    return (small, big) if auto_pad == "SAME_UPPER" else (big, small)


def _auto_pads(
    auto_pad: str,
    pads: Sequence[int] | None,
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[tuple[int, int]]:
    """(begin, end) padding per spatial axis for ``auto_pad``/``pads``."""
    n = len(in_shape)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(n):
            target = -(-in_shape[i] // strides[i])
            window = (kernel[i] - 1) * dilations[i] + 1
            total = max(0, (target - 1) * strides[i] + window - in_shape[i])
            out.append(_split_pad(total, auto_pad))
        return out
    if auto_pad == "VALID":
        return [(0, 0)] * n
    p = _ints(pads, 2 * n, 0)
    return [(p[i], p[i + n]) for i in range(n)]


def _pool_geometry(
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
    strides_ = _ints(strides, n, 1)
    dil = _ints(dilations, n, 1)
    pad = _auto_pads(auto_pad, pads, spatial, kernel, strides_, dil)
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


def _lowest(dtype: Any) -> Any:
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
# convolution


# XLA:CPU runs grouped convolutions (``feature_group_count``) through a slow generic
# loop: a 3x3 depthwise conv on 136x56x56 takes 23 ms there and 0.4 ms as nine shifted
# multiply-adds, and a grouped 1x1 conv is about twice as fast as a batched matmul. Both
# rewrites keep float32/float64 math (a sum of products in the input's dtype).
_SHIFT_ADD_MAX_TAPS = 49


def _depthwise_shift_add(x, w, strides, dil, pad):
    """Conv with one input channel per group, as a sum of strided slices times taps."""
    n = x.ndim - 2
    multiplier = w.shape[0] // x.shape[1]
    if multiplier > 1:  # each input channel feeds ``multiplier`` output channels
        x = jnp.repeat(x, multiplier, axis=1)
    x = jnp.pad(x, [(0, 0), (0, 0), *pad])
    kernel = w.shape[2:]
    out_size = [
        (x.shape[2 + a] - ((kernel[a] - 1) * dil[a] + 1)) // strides[a] + 1 for a in range(n)
    ]
    out = None
    for tap in np.ndindex(*kernel):
        index = (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(tap, dil, out_size, strides, strict=True)
        )
        weight = w[(slice(None), 0, *tap)].reshape((1, -1) + (1,) * n)
        term = x[index] * weight
        out = term if out is None else out + term
    return out


def _grouped_pointwise(x, w, group, strides):
    """A grouped 1x1 conv without padding, as one batched matmul over the groups."""
    x = x[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]
    b, c_in, *spatial = x.shape
    c_out = w.shape[0]
    xs = x.reshape(b, group, c_in // group, -1)
    ws = w.reshape(group, c_out // group, c_in // group)
    return jnp.einsum("goc,bgcp->bgop", ws, xs).reshape(b, c_out, *spatial)


def _conv(x, w, *, auto_pad, dilations, group, pads, strides, preferred=None):
    n = x.ndim - 2
    kernel = list(w.shape[2:])
    strides_ = _ints(strides, n, 1)
    dil = _ints(dilations, n, 1)
    pad = _auto_pads(auto_pad, pads, x.shape[2:], kernel, strides_, dil)
    plain_float = preferred is None and x.dtype in (jnp.float32, jnp.float64) and w.dtype == x.dtype
    if group > 1 and plain_float and all(p >= 0 for pp in pad for p in pp):
        if w.shape[1] == 1 and int(np.prod(kernel)) <= _SHIFT_ADD_MAX_TAPS:
            return _depthwise_shift_add(x, w, strides_, dil, pad)
        if all(k == 1 for k in kernel) and all(p == (0, 0) for p in pad):
            return _grouped_pointwise(x, w, group, strides_)
    return lax.conv_general_dilated(
        x,
        w,
        window_strides=strides_,
        padding=pad,
        rhs_dilation=dil,
        feature_group_count=group,
        preferred_element_type=preferred,
    )


@op("Conv")
def conv(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """N-d convolution of X by W (+ bias B): pads, strides, dilations, groups; opset 1+."""
    y = _conv(
        jnp.asarray(X),
        jnp.asarray(W),
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        pads=pads,
        strides=strides,
    )
    if B is not None:
        y = y + jnp.reshape(B, (1, -1) + (1,) * (y.ndim - 2))
    return y


@op("ConvInteger", since=10)
def conv_integer(
    x,
    w,
    x_zero_point=None,
    w_zero_point=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """Integer convolution in int32 after subtracting the zero points; opset 10+."""
    xi = jnp.asarray(x).astype(jnp.int32)
    wi = jnp.asarray(w).astype(jnp.int32)
    if x_zero_point is not None:
        xi = xi - jnp.asarray(x_zero_point).astype(jnp.int32)
    if w_zero_point is not None:
        wz = jnp.asarray(w_zero_point).astype(jnp.int32)
        wi = wi - (wz.reshape((-1,) + (1,) * (wi.ndim - 1)) if wz.ndim == 1 else wz)
    # Zero points pad with the zero point itself, i.e. zero after the subtraction.
    return _conv(
        xi,
        wi,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        pads=pads,
        strides=strides,
        preferred=jnp.int32,
    )


@op("ConvTranspose")
def conv_transpose(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    output_padding=None,
    output_shape=None,
    pads=None,
    strides=None,
):
    """N-d transposed convolution (output_shape/output_padding/auto_pad), + bias; opset 1+."""
    x = jnp.asarray(X)
    w = jnp.asarray(W)
    n = x.ndim - 2
    in_sp = x.shape[2:]
    kernel = list(w.shape[2:])
    strides_ = _ints(strides, n, 1)
    dil = _ints(dilations, n, 1)
    out_pad = _ints(output_padding, n, 0)
    explicit = output_shape is not None and len(output_shape) > 0
    if explicit:
        target = [int(v) for v in output_shape][-n:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [in_sp[i] * strides_[i] for i in range(n)]
    else:
        target = None
    if target is not None:
        pad = []
        for i in range(n):
            total = (
                strides_[i] * (in_sp[i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1 - target[i]
            )
            if not explicit:
                # ONNX Runtime never pads negatively for SAME: a 1-wide kernel with stride s
                # yields (in - 1) * s + 1, not in * s.
                total = max(total, 0)
            pad.append(_split_pad(total, auto_pad))
    else:  # VALID or explicit pads (SAME always has a target)
        pad = _auto_pads(auto_pad, pads, in_sp, kernel, strides_, dil)
    # A transposed conv is a conv over the stride-dilated input with the flipped kernel
    # whose in/out channel axes are swapped within each group.
    c_in, c_out_g = w.shape[0], w.shape[1]
    wg = w.reshape((group, c_in // group, c_out_g) + tuple(kernel))
    wg = jnp.swapaxes(wg, 1, 2).reshape((group * c_out_g, c_in // group) + tuple(kernel))
    wg = jnp.flip(wg, axis=tuple(range(2, 2 + n)))
    conv_pad, crop = [], []
    for i in range(n):
        lo = dil[i] * (kernel[i] - 1) - pad[i][0]
        hi = dil[i] * (kernel[i] - 1) - pad[i][1] + out_pad[i]
        conv_pad.append((max(lo, 0), max(hi, 0)))
        crop.append((max(-lo, 0), max(-hi, 0)))
    y = lax.conv_general_dilated(
        x,
        wg,
        window_strides=[1] * n,
        padding=conv_pad,
        lhs_dilation=strides_,
        rhs_dilation=dil,
        feature_group_count=group,
    )
    if any(c != (0, 0) for c in crop):
        y = y[
            (slice(None), slice(None))
            + tuple(slice(a, y.shape[2 + i] - b) for i, (a, b) in enumerate(crop))
        ]
    if B is not None:
        y = y + jnp.reshape(B, (1, -1) + (1,) * n)
    return y


@op("QLinearConv", since=10)
def qlinear_conv(
    x,
    x_scale,
    x_zero_point,
    w,
    w_scale,
    w_zero_point,
    y_scale,
    y_zero_point,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """Quantized convolution: ConvInteger, rescaled and requantized to y's type; opset 10+."""
    acc = conv_integer(
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        pads=pads,
        strides=strides,
    )
    if B is not None:
        acc = acc + jnp.reshape(jnp.asarray(B).astype(jnp.int32), (1, -1) + (1,) * (acc.ndim - 2))
    ws = jnp.asarray(w_scale, jnp.float32)
    if ws.ndim == 1:
        ws = ws.reshape((1, -1) + (1,) * (acc.ndim - 2))
    real = acc.astype(jnp.float32) * (jnp.asarray(x_scale, jnp.float32) * ws)
    out_dtype = np.dtype(y_zero_point.dtype) if y_zero_point is not None else np.dtype(np.uint8)
    q = jnp.round(real / jnp.asarray(y_scale, jnp.float32))
    if y_zero_point is not None:
        q = q + jnp.asarray(y_zero_point).astype(jnp.float32)
    info = np.iinfo(out_dtype)
    return jnp.clip(q, info.min, info.max).astype(out_dtype)


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
    windows = jnp.where(jnp.asarray(valid), windows, jnp.asarray(_lowest(x.dtype), x.dtype))
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


def _max_pool(
    x, kernel_shape, auto_pad, ceil_mode, dilations, pads, strides, storage_order, with_indices
):
    kernel, strides_, pad, extra, dil = _pool_geometry(
        x.shape,
        kernel_shape,
        auto_pad=auto_pad,
        pads=pads,
        strides=strides,
        dilations=dilations,
        ceil_mode=ceil_mode,
    )
    y = _reduce_window(
        x, jnp.asarray(_lowest(x.dtype), x.dtype), lax.max, kernel, strides_, pad, extra, dil
    )
    if not with_indices:
        return y
    _, idx = _max_pool_indices(x, kernel, strides_, pad, extra, dil, y.shape[2:], storage_order)
    return y, idx


@op("MaxPool")
def max_pool_1(X, *, auto_pad="NOTSET", kernel_shape=(), pads=None, strides=None):
    """Max over each window (no dilations, indices or ceil mode); opsets 1-7."""
    return _max_pool(jnp.asarray(X), kernel_shape, auto_pad, 0, None, pads, strides, 0, False)


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
    return _max_pool(
        jnp.asarray(X),
        kernel_shape,
        auto_pad,
        ceil_mode,
        dilations,
        pads,
        strides,
        storage_order,
        num_outputs > 1,
    )


def _avg_or_lp(
    x, kernel_shape, p, *, auto_pad, ceil_mode, count_include_pad, dilations, pads, strides
):
    kernel, strides_, pad, extra, dil = _pool_geometry(
        x.shape,
        kernel_shape,
        auto_pad=auto_pad,
        pads=pads,
        strides=strides,
        dilations=dilations,
        ceil_mode=ceil_mode,
    )
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
    return _avg_or_lp(
        jnp.asarray(X),
        kernel_shape,
        None,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        dilations=dilations,
        pads=pads,
        strides=strides,
    )


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
    return _avg_or_lp(
        jnp.asarray(X),
        kernel_shape,
        p,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        count_include_pad=1,
        dilations=dilations,
        pads=pads,
        strides=strides,
    )


def _spatial_axes(x) -> tuple[int, ...]:
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
    axes = _spatial_axes(x)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    if not jnp.issubdtype(x.dtype, jnp.floating) or n == 0:
        return jnp.mean(x, axis=axes, keepdims=True).astype(x.dtype)
    return jnp.sum(x * jnp.asarray(1.0 / n, x.dtype), axis=axes, keepdims=True)


@op("GlobalMaxPool")
def global_max_pool(X):
    """Max over all spatial dims, kept as size 1; opset 1+."""
    x = jnp.asarray(X)
    return jnp.max(x, axis=_spatial_axes(x), keepdims=True)


@op("GlobalLpPool", since=2)
def global_lp_pool(X, *, p=2):
    """The p-norm over all spatial dims, kept as size 1; opset 2+."""
    x = jnp.asarray(X)
    s = jnp.sum(jnp.abs(x) ** p, axis=_spatial_axes(x), keepdims=True)
    return (s ** (1.0 / p)).astype(x.dtype)


@op("MaxUnpool", since=9, host_inputs=(2,))
def max_unpool(X, I, output_shape=None, *, kernel_shape=(), pads=None, strides=None):
    """MaxPool's values scattered back to their indices, zeros elsewhere; opset 9+."""
    x = jnp.asarray(X)
    n = x.ndim - 2
    strides_ = _ints(strides, n, 1)
    p = _ints(pads, 2 * n, 0)
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


# ---------------------------------------------------------------------------------------------
# normalization


def _channel(v, ndim: int):
    return jnp.reshape(v, (1, -1) + (1,) * (ndim - 2))


@op("BatchNormalization")
def batch_normalization(
    X,
    scale,
    B,
    input_mean,
    input_var,
    *,
    epsilon=1e-5,
    momentum=0.9,
    training_mode=0,
    is_test=1,
    spatial=1,
    consumed_inputs=None,
):
    """Per-channel normalization by running stats, or batch stats in training; opset 1+."""
    x = jnp.asarray(X)
    if not training_mode:
        # Fold into one multiply-add (on the host when the statistics are initializers):
        # XLA fuses it into the preceding conv's epilogue.
        m = xp(scale, B, input_mean, input_var)
        inv = m.asarray(scale) / m.sqrt(m.asarray(input_var) + epsilon)
        shift = m.asarray(B) - m.asarray(input_mean) * inv
        return (x * _channel(inv, x.ndim) + _channel(shift, x.ndim)).astype(x.dtype)
    axes = (0,) + _spatial_axes(x)
    mean = jnp.mean(x, axis=axes)
    var = jnp.var(x, axis=axes)
    y = (x - _channel(mean, x.ndim)) * lax.rsqrt(_channel(var, x.ndim) + epsilon)
    y = y * _channel(scale, x.ndim) + _channel(B, x.ndim)
    running_mean = jnp.asarray(input_mean) * momentum + mean * (1 - momentum)
    running_var = jnp.asarray(input_var) * momentum + var * (1 - momentum)
    return (
        y.astype(x.dtype),
        running_mean.astype(jnp.asarray(input_mean).dtype),
        running_var.astype(jnp.asarray(input_var).dtype),
    )


@op("InstanceNormalization")
def instance_normalization(input, scale, B, *, epsilon=1e-5):
    """Each (sample, channel) normalized over its spatial dims, scaled, shifted; opset 1+."""
    x = jnp.asarray(input)
    xs = _stash(x, 1)
    axes = _spatial_axes(x)
    mean = jnp.mean(xs, axis=axes, keepdims=True)
    var = jnp.var(xs, axis=axes, keepdims=True)
    y = (xs - mean) * lax.rsqrt(var + epsilon)
    return (y * _channel(scale, x.ndim) + _channel(B, x.ndim)).astype(x.dtype)


def _stash(x, stash_type: int):
    return (
        x.astype(jnp.float32) if stash_type == 1 and x.dtype in (jnp.float16, jnp.bfloat16) else x
    )


@op("LayerNormalization", since=17)
def layer_normalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """Normalized over the dims from ``axis`` on; Y, mean and inverse std dev; opset 17+."""
    x = jnp.asarray(X)
    axis = axis % x.ndim
    axes = tuple(range(axis, x.ndim))
    xs = _stash(x, stash_type)
    mean = jnp.mean(xs, axis=axes, keepdims=True)
    d = xs - mean
    var = jnp.mean(d * d, axis=axes, keepdims=True)
    inv = 1.0 / jnp.sqrt(var + epsilon)
    y = (d * inv).astype(x.dtype) * jnp.asarray(Scale)
    if B is not None:
        y = y + jnp.asarray(B)
    return y.astype(x.dtype), mean.astype(x.dtype), inv.astype(x.dtype)


@op("RMSNormalization", since=23)
def rms_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """X divided by its root mean square over the dims from ``axis``, scaled; opset 23+."""
    x = jnp.asarray(X)
    axis = axis % x.ndim
    xs = _stash(x, stash_type)
    ms = jnp.mean(xs * xs, axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = xs * lax.rsqrt(ms + epsilon)
    return (y.astype(x.dtype) * jnp.asarray(scale)).astype(x.dtype)


def _group_norm(x, scale, bias, epsilon, num_groups, stash_type, per_channel):
    n, c = x.shape[:2]
    xs = _stash(x, stash_type)
    g = xs.reshape((n, num_groups, -1))
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.var(g, axis=-1, keepdims=True)
    y = ((g - mean) * lax.rsqrt(var + epsilon)).reshape(x.shape).astype(x.dtype)
    if not per_channel:  # opset 18: scale and bias are per group
        scale = jnp.repeat(jnp.asarray(scale), c // num_groups)
        bias = jnp.repeat(jnp.asarray(bias), c // num_groups)
    return (y * _channel(scale, x.ndim) + _channel(bias, x.ndim)).astype(x.dtype)


@op("GroupNormalization", since=18)
def group_normalization_18(X, scale, bias, *, epsilon=1e-5, num_groups=1):
    """Normalized over channel groups; scale and bias are per group; opsets 18-20."""
    return _group_norm(jnp.asarray(X), scale, bias, epsilon, num_groups, 0, per_channel=False)


@op("GroupNormalization", since=21)
def group_normalization(X, scale, bias, *, epsilon=1e-5, num_groups=1, stash_type=1):
    """Normalized over channel groups; scale and bias are per channel; opset 21+."""
    return _group_norm(jnp.asarray(X), scale, bias, epsilon, num_groups, stash_type, True)


@op("LpNormalization")
def lp_normalization(input, *, axis=-1, p=2):
    """X divided by its p-norm (p 1 or 2) along ``axis``; opset 1+."""
    x = jnp.asarray(input)
    if p == 1:
        norm = jnp.sum(jnp.abs(x), axis=axis, keepdims=True)
    else:
        norm = jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=True))
    return jnp.where(norm == 0, 0, x / jnp.where(norm == 0, 1, norm)).astype(x.dtype)


@op("MeanVarianceNormalization", since=9)
def mean_variance_normalization(X, *, axes=(0, 2, 3)):
    """(X - mean) / std dev over ``axes``; opset 9+."""
    x = jnp.asarray(X)
    axes = tuple(int(a) for a in axes)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(x * x, axis=axes, keepdims=True) - mean * mean
    return ((x - mean) / (jnp.sqrt(var) + 1e-9)).astype(x.dtype)


@op("LRN")
def lrn(X, *, alpha=1e-4, beta=0.75, bias=1.0, size=1):
    """Local response normalization across ``size`` neighbouring channels; opset 1+."""
    x = jnp.asarray(X)
    lo = (size - 1) // 2
    hi = size - 1 - lo
    sq = x * x
    window = (1, size) + (1,) * (x.ndim - 2)
    padding = ((0, 0), (lo, hi)) + ((0, 0),) * (x.ndim - 2)
    s = lax.reduce_window(sq, jnp.asarray(0, x.dtype), lax.add, window, (1,) * x.ndim, padding)
    return (x / (bias + alpha / size * s) ** beta).astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# losses


def _reduce_loss(loss, weight_sum, reduction: str):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / weight_sum


def _nll(log_prob, target, weight, ignore_index, reduction):
    lp = jnp.asarray(log_prob)
    t = jnp.asarray(target).astype(jnp.int64)
    c = lp.shape[1]
    if ignore_index is not None:
        keep = t != ignore_index
        t_safe = jnp.where(keep, t, 0)
    else:
        keep = jnp.ones(t.shape, bool)
        t_safe = t
    picked = jnp.take_along_axis(lp, jnp.expand_dims(t_safe, 1), axis=1)[:, 0]
    w = jnp.ones((c,), lp.dtype) if weight is None else jnp.asarray(weight)
    wt = jnp.where(keep, w[t_safe], 0).astype(lp.dtype)
    loss = -picked * wt
    if reduction == "mean":
        return (jnp.sum(loss) / jnp.sum(wt)).astype(lp.dtype)
    return _reduce_loss(loss, None, reduction).astype(lp.dtype)


@op("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(
    input, target, weight=None, *, ignore_index=None, reduction="mean"
):
    """NLL loss of log-probabilities at the targets, weighted, reduced; opset 12+."""
    return _nll(input, target, weight, ignore_index, reduction)


@op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(
    scores, labels, weights=None, *, ignore_index=None, reduction="mean"
):
    """Cross entropy of softmax(scores) and the labels; loss, log_prob; opset 12+."""
    s = jnp.asarray(scores)
    log_prob = jax.nn.log_softmax(s, axis=1)
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return loss, log_prob.astype(s.dtype)


# ---------------------------------------------------------------------------------------------
# random: ONNX leaves the values unspecified (tests check shapes and dtypes). The key comes from
# ``seed``, or is drawn when the node is traced, so a compiled segment repeats its draws.


_ONNX_FLOAT = {1: np.float32, 10: np.float16, 11: np.float64, 16: jnp.bfloat16}


def _key(seed):
    if seed is None:
        seed = np.random.randint(0, 2**31 - 1)
    return jax.random.PRNGKey(
        int(np.float32(seed).view(np.int32)) if isinstance(seed, float) else int(seed)
    )


def _onnx_dtype(code: int, like=None):
    from onnx.helper import tensor_dtype_to_np_dtype

    if code is None:
        return np.dtype(like.dtype)
    return _ONNX_FLOAT.get(code) or tensor_dtype_to_np_dtype(code)


@op("RandomNormal")
def random_normal(*, dtype=1, mean=0.0, scale=1.0, seed=None, shape=()):
    """Normal draws of ``shape`` (jax.random: not numpy's stream); opset 1+."""
    d = _onnx_dtype(dtype)
    z = jax.random.normal(_key(seed), tuple(int(s) for s in shape), jnp.float32)
    return (z * scale + mean).astype(d)


@op("RandomUniform")
def random_uniform(*, dtype=1, high=1.0, low=0.0, seed=None, shape=()):
    """Uniform draws in [``low``, ``high``) of ``shape`` (jax.random); opset 1+."""
    d = _onnx_dtype(dtype)
    u = jax.random.uniform(_key(seed), tuple(int(s) for s in shape), jnp.float32, low, high)
    return u.astype(d)


@op("RandomNormalLike")
def random_normal_like(input, *, dtype=None, mean=0.0, scale=1.0, seed=None):
    """Normal draws of the input's shape (jax.random); opset 1+."""
    d = _onnx_dtype(dtype, jnp.asarray(input))
    z = jax.random.normal(_key(seed), jnp.shape(input), jnp.float32)
    return (z * scale + mean).astype(d)


@op("RandomUniformLike")
def random_uniform_like(input, *, dtype=None, high=1.0, low=0.0, seed=None):
    """Uniform draws of the input's shape (jax.random); opset 1+."""
    d = _onnx_dtype(dtype, jnp.asarray(input))
    u = jax.random.uniform(_key(seed), jnp.shape(input), jnp.float32, low, high)
    return u.astype(d)


@op("Bernoulli", since=15)
def bernoulli(input, *, dtype=None, seed=None):
    """1 with the input's probability, else 0 (jax.random: not numpy's draws); opset 15+."""
    p = jnp.asarray(input)
    d = _onnx_dtype(dtype, p)
    u = jax.random.uniform(_key(seed), p.shape, jnp.float32)
    return (u < p.astype(jnp.float32)).astype(d)


@op("SwiGLU", since=28)
def swiglu(A, B, *, alpha=1.0):
    """A * sigmoid(``alpha`` * A) * B; opset 28+."""
    a = jnp.asarray(A)
    return (a * jax.nn.sigmoid(alpha * a).astype(a.dtype) * jnp.asarray(B)).astype(a.dtype)


@op("DeformConv", since=19)
def deform_conv(
    X,
    W,
    offset,
    B=None,
    mask=None,
    *,
    dilations=None,
    group=1,
    kernel_shape=None,
    offset_group=1,
    pads=None,
    strides=None,
):
    """Deformable convolution: kernel taps moved by learned offsets, masked; opset 19+."""
    x = jnp.asarray(X)
    w = jnp.asarray(W)
    off = jnp.asarray(offset)
    n, c, height, width = x.shape
    oc = w.shape[0]
    kh, kw = w.shape[2:]
    oh, ow = off.shape[2:]
    sh, sw = _ints(strides, 2, 1)
    dh, dw = _ints(dilations, 2, 1)
    p = _ints(pads, 4, 0)
    off = off.reshape(n, offset_group, kh, kw, 2, oh, ow)
    m = (
        jnp.ones((n, offset_group, kh, kw, oh, ow), x.dtype)
        if mask is None
        else jnp.asarray(mask).reshape(n, offset_group, kh, kw, oh, ow)
    )
    base_h = (-p[0] + sh * np.arange(oh))[None, :] + (dh * np.arange(kh))[:, None]  # (kh, oh)
    base_w = (-p[1] + sw * np.arange(ow))[None, :] + (dw * np.arange(kw))[:, None]  # (kw, ow)
    ph = jnp.asarray(base_h)[None, None, :, None, :, None] + off[:, :, :, :, 0]
    pw = jnp.asarray(base_w)[None, None, None, :, None, :] + off[:, :, :, :, 1]
    # Bilinear sampling with zero padding, per offset group.
    xg = x.reshape(n, offset_group, c // offset_group, height * width)
    y0, x0 = jnp.floor(ph), jnp.floor(pw)
    cols = 0
    for yy, wy in ((y0, 1 - (ph - y0)), (y0 + 1, ph - y0)):
        for xx, wx in ((x0, 1 - (pw - x0)), (x0 + 1, pw - x0)):
            ok = (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
            idx = (jnp.clip(yy, 0, height - 1) * width + jnp.clip(xx, 0, width - 1)).astype(
                jnp.int32
            )
            flat = idx.reshape(n, offset_group, -1)
            vals = jnp.take_along_axis(xg, flat[:, :, None, :], axis=-1)
            weight = jnp.where(ok, wy * wx, 0).reshape(n, offset_group, 1, -1)
            cols = cols + vals * weight
    cols = cols * m.reshape(n, offset_group, 1, -1)
    cols = cols.reshape(n, c, kh * kw, oh * ow).reshape(n, group, (c // group) * kh * kw, -1)
    wg = w.reshape(group, oc // group, -1)
    y = jnp.einsum("gok,ngkp->ngop", wg, cols).reshape(n, oc, oh, ow)
    if B is not None:
        y = y + jnp.asarray(B).reshape(1, -1, 1, 1)
    return y.astype(x.dtype)
