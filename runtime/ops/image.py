"""Image sampling ops: Resize/Upsample, GridSample, AffineGrid, RoiAlign, Col2Im.

Resize is separable: each resized axis becomes one small (out, in) weight matrix computed on
the host from static shapes (or a gather for ``nearest``), so XLA sees a dot per axis instead
of data-dependent indexing. The coordinate rules follow the ONNX reference implementation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import op

# ---------------------------------------------------------------------------------------------
# Resize


def _nearest_coeffs(ratio: float, mode: str) -> np.ndarray:
    if float(ratio).is_integer():
        return np.array([0.0, 1.0])
    if mode == "round_prefer_floor":
        return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
    if mode == "round_prefer_ceil":
        return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
    if mode == "floor":
        return np.array([1.0, 0.0])
    if mode == "ceil":
        return np.array([0.0, 1.0])
    raise ValueError(f"Resize: unknown nearest_mode {mode!r}")


def _cubic_coeffs(ratio: float, scale: float, a: float) -> np.ndarray:
    r = ratio
    return np.array(
        [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
            ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a,
        ]
    )


def _cubic_coeffs_antialias(ratio: float, scale: float, a: float) -> np.ndarray:
    scale = min(scale, 1.0)
    i_start = int(np.floor(-2 / scale) + 1)
    x = np.abs(scale * (np.arange(i_start, 2 - i_start) - ratio))
    c = np.where(
        x <= 1,
        (a + 2) * x**3 - (a + 3) * x**2 + 1,
        np.where(x < 2, a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a, 0.0),
    )
    return c / c.sum()


def _linear_coeffs(ratio: float, scale: float) -> np.ndarray:
    return np.array([1 - ratio, ratio])


def _linear_coeffs_antialias(ratio: float, scale: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    footprint = 2 - 2 * start
    c = np.clip(1 - np.abs((np.arange(start, start + footprint) - ratio) * scale), 0, 1)
    return c / c.sum()


def _source_coords(
    mode: str, out_len: int, in_len: int, scale: float, roi, nearest: bool = False
) -> np.ndarray:
    if nearest:
        # Picking a pixel is sensitive to rounding: map coordinates the way ONNX Runtime
        # does, in float32 and with the integer output length for align_corners.
        y32 = np.arange(out_len, dtype=np.float32)
        s32 = np.float32(scale)
        if mode == "align_corners":
            if out_len == 1:
                return np.zeros(out_len)
            return (y32 * np.float32(in_len - 1) / np.float32(out_len - 1)).astype(np.float64)
        if mode == "asymmetric":
            return (y32 / s32).astype(np.float64)
        if mode in ("half_pixel", "pytorch_half_pixel") and not (
            mode == "pytorch_half_pixel" and out_len == 1
        ):
            return ((y32 + np.float32(0.5)) / s32 - np.float32(0.5)).astype(np.float64)
    y = np.arange(out_len, dtype=np.float64)
    out_width = scale * in_len
    if mode == "align_corners":
        return np.zeros(out_len) if out_width == 1 else y * (in_len - 1) / (out_width - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        if out_width == 1:
            x = np.full(out_len, (roi[1] - roi[0]) * (in_len - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (in_len - 1) / (out_width - 1)
        return x + roi[0] * (in_len - 1)
    if mode == "pytorch_half_pixel":
        return np.full(out_len, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / out_width)
        return offset + (y + 0.5) / scale - 0.5
    raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}")


def _axis_taps(
    in_len: int,
    out_len: int,
    scale: float,
    coeffs_fn: Callable[[float, float], np.ndarray],
    coord_mode: str,
    roi,
    exclude_outside: bool,
    nearest: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(out, n) source indices, (out, n) weights and the extrapolated rows of one axis."""
    x = _source_coords(coord_mode, out_len, in_len, scale, roi, nearest)
    extrapolated = None
    if coord_mode == "tf_crop_and_resize":
        extrapolated = (x < 0) | (x > in_len - 1)
    x_int = np.floor(x)
    ratios = np.where(x == x_int, 1.0, x - x_int)
    coeffs = np.stack([np.asarray(coeffs_fn(float(r), scale), np.float64) for r in ratios])
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    idx = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_len), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_len - 1), coeffs, extrapolated


def _resize(
    X,
    roi,
    scales,
    sizes,
    *,
    antialias=0,
    axes=None,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    keep_aspect_ratio_policy="stretch",
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    """Resize of every version, in named steps: the output shape, the tap weights' rule,
    then one separable pass per resized axis in at least float32."""
    x = jnp.asarray(X)
    rank = x.ndim
    shape = x.shape
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]

    def given(v):
        return None if v is None or np.asarray(v).size == 0 else np.asarray(v, np.float64)

    roi, scales, sizes = given(roi), given(scales), given(sizes)
    if roi is not None and len(roi) == 2 * len(axes) and len(axes) != rank:
        full = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full[a], full[rank + a] = roi[i], roi[len(axes) + i]
        roi = np.asarray(full)
    factors, out = _resize_shape(shape, axes, scales, sizes, keep_aspect_ratio_policy)
    coeffs_fn = _resize_coeffs_fn(mode, nearest_mode, antialias, cubic_coeff_a)
    out_dtype = x.dtype
    # Interpolate in at least float32: half-precision weights lose whole pixels of accuracy.
    wide = x.dtype in (jnp.float32, jnp.float64)
    work = x if wide else x.astype(jnp.float32)
    for a in axes:
        trivial_roi = roi is None or (
            math.isclose(roi[a], 0.0) and math.isclose(roi[a + rank], 1.0)
        )
        if math.isclose(factors[a], 1.0) and out[a] == shape[a] and trivial_roi:
            continue
        axis_roi = None if roi is None else (roi[a], roi[a + rank])
        idx, coeffs, extrapolated = _axis_taps(
            shape[a],
            out[a],
            factors[a],
            coeffs_fn,
            coordinate_transformation_mode,
            axis_roi,
            bool(exclude_outside),
            mode == "nearest",
        )
        work = _resize_axis(work, a, idx, coeffs, nearest=mode == "nearest")
        if extrapolated is not None and extrapolated.any():
            mask = extrapolated.reshape((1,) * a + (-1,) + (1,) * (rank - a - 1))
            work = jnp.where(jnp.asarray(mask), jnp.asarray(extrapolation_value, work.dtype), work)
    if work.dtype != out_dtype:
        if jnp.issubdtype(out_dtype, jnp.integer):
            info = jnp.iinfo(out_dtype)
            work = jnp.clip(jnp.round(work), info.min, info.max)
        work = work.astype(out_dtype)
    return work


def _resize_shape(shape, axes, scales, sizes, keep_aspect_ratio_policy):
    """Each dim's scale factor and output length, from ``sizes`` (with the aspect-ratio
    policy) or else ``scales``."""
    rank = len(shape)
    if sizes is not None:
        out = list(shape)
        for i, a in enumerate(axes):
            out[a] = int(sizes[i])
        factors = [out[i] / shape[i] for i in range(rank)]
        if keep_aspect_ratio_policy != "stretch":
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            s = pick(factors[a] for a in axes)
            factors = [s if i in axes else 1.0 for i in range(rank)]
            out = [int(s * shape[i] + 0.5) if i in axes else shape[i] for i in range(rank)]
    elif scales is not None:
        factors = [1.0] * rank
        for i, a in enumerate(axes):
            factors[a] = float(scales[i])
        out = [int(factors[i] * shape[i]) for i in range(rank)]
    else:
        raise ValueError("Resize needs one of the 'scales' or 'sizes' inputs")
    return factors, out


def _resize_coeffs_fn(mode, nearest_mode, antialias, cubic_coeff_a):
    """The tap weights of ``mode`` as a function of (fractional position, scale)."""
    if mode == "nearest":

        def coeffs_fn(r, s):
            if nearest_mode == "simple":  # Resize-10/Upsample: ceil when shrinking, else floor
                return _nearest_coeffs(r, "ceil" if s < 1 else "floor")
            return _nearest_coeffs(r, nearest_mode)

        return coeffs_fn
    if mode == "linear":
        return _linear_coeffs_antialias if antialias else _linear_coeffs
    if mode == "cubic":
        base = _cubic_coeffs_antialias if antialias else _cubic_coeffs

        def cubic_fn(r, s):
            return base(r, s, cubic_coeff_a)

        return cubic_fn
    raise ValueError(f"Resize: unknown mode {mode!r}")


def _resize_axis(work, a, idx, coeffs, *, nearest):
    """One resized axis: a gather of the heaviest tap (nearest), else a dot with the
    (out, in) weight matrix."""
    if nearest:
        pick = idx[np.arange(idx.shape[0]), np.argmax(coeffs, axis=1)]
        return jnp.take(work, jnp.asarray(pick), axis=a)
    weights = np.zeros((idx.shape[0], work.shape[a]), np.float64)
    np.add.at(
        weights, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()), coeffs.ravel()
    )
    w = jnp.asarray(weights, work.dtype)
    return jnp.moveaxis(jnp.tensordot(work, w, axes=([a], [1])), -1, a)


@op("Resize", since=10, host_inputs=(1,))
def resize_10(X, scales, *, mode="nearest"):
    """X resized by ``scales`` (asymmetric coordinates, nearest or linear); opset 10."""
    return _resize(
        X,
        None,
        scales,
        None,
        mode=mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="simple",
    )


@op("Resize", since=11, host_inputs=(1, 2, 3))
def resize(
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    antialias=0,
    axes=None,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    keep_aspect_ratio_policy="stretch",
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    """X resized by ``scales`` or to ``sizes`` (nearest, linear, cubic), on ``axes``; opset 11+."""
    return _resize(
        X,
        roi,
        scales,
        sizes,
        antialias=antialias,
        axes=axes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        keep_aspect_ratio_policy=keep_aspect_ratio_policy,
        mode=mode,
        nearest_mode=nearest_mode,
    )


@op("Upsample", since=7)
def upsample_7(X, *, mode="nearest", scales=()):
    """X scaled up by the ``scales`` attribute (nearest or linear); opsets 7-8."""
    return _upsample(X, scales, mode)


@op("Upsample", since=9, host_inputs=(1,))
def upsample(X, scales, *, mode="nearest"):
    """X scaled up by the ``scales`` input (nearest or linear); opset 9+."""
    return _upsample(X, scales, mode)


def _upsample(X, scales, mode):
    # Upsample is Resize with asymmetric coordinates and floor rounding.
    return _resize(
        X,
        None,
        np.asarray(scales, np.float64),
        None,
        mode="linear" if mode in ("linear", "bilinear") else mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="simple",
    )


# ---------------------------------------------------------------------------------------------
# GridSample / AffineGrid


def _reflect(x, lo: float, hi: float):
    span = hi - lo
    below, above = x < lo, x > hi
    dx = jnp.where(below, lo - x, x - hi)
    n = jnp.floor(dx / span)
    r = dx - n * span
    even = jnp.mod(n, 2) == 0
    from_below = jnp.where(even, lo + r, hi - r)
    from_above = jnp.where(even, hi - r, lo + r)
    return jnp.where(below, from_below, jnp.where(above, from_above, x))


def _cubic_weights(t):
    a = -0.75
    return [
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
        ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a,
    ]


def _grid_sample(X, grid, mode, padding_mode, align_corners):
    x = jnp.asarray(X)
    g = jnp.asarray(grid)
    n_batch, channels = x.shape[:2]
    dims = x.shape[2:]
    nd = len(dims)
    out_sp = g.shape[1:-1]
    work = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    g = g.astype(work).reshape((n_batch, -1, nd))
    taps_per_dim = []  # per spatial dim: list of (index, weight, in_range)
    for i, size in enumerate(dims):
        v = g[..., nd - 1 - i]
        if align_corners:
            c = (v + 1) / 2.0 * (size - 1)
            lo, hi = 0.0, size - 1.0
        else:
            c = ((v + 1) * size - 1) / 2.0
            lo, hi = -0.5, size - 0.5
        if mode == "nearest":
            c = jnp.round(c)
        outside = (c < lo) | (c > hi)
        if padding_mode == "border" and mode != "cubic":
            # Cubic keeps the coordinate and clamps each tap, as ONNX Runtime and PyTorch do.
            c = jnp.where(outside, jnp.clip(c, 0, size - 1), c)
        elif padding_mode == "reflection":
            c = jnp.where(outside, _reflect(c, lo, hi), c)
        if mode == "nearest":
            starts, weights = [c], [jnp.ones_like(c)]
        else:
            base = jnp.floor(c)
            t = c - base
            if mode == "linear":
                starts, weights = [base, base + 1], [1 - t, t]
            else:
                starts = [base - 1, base, base + 1, base + 2]
                weights = _cubic_weights(t)
        taps = []
        for s, w in zip(starts, weights, strict=True):
            if padding_mode == "zeros":
                ok = (s >= 0) & (s < size)
                idx = jnp.clip(s, 0, size - 1)
            elif padding_mode == "border":
                ok = None
                idx = jnp.clip(s, 0, size - 1)
            else:
                ok = None
                idx = jnp.clip(jnp.trunc(_reflect(s, lo, hi)), 0, size - 1)
            taps.append((idx.astype(jnp.int32), w, ok))
        taps_per_dim.append(taps)
    xf = x.reshape((n_batch, channels, -1)).astype(work)
    total = None
    for combo in np.ndindex(*(len(t) for t in taps_per_dim)):
        flat = None
        weight = None
        ok_all = None
        for i, k in enumerate(combo):
            idx, w, ok = taps_per_dim[i][k]
            flat = idx if flat is None else flat * dims[i] + idx
            weight = w if weight is None else weight * w
            if ok is not None:
                ok_all = ok if ok_all is None else ok_all & ok
        vals = jax.vmap(lambda xb, ib: xb[:, ib])(xf, flat)  # (N, C, M)
        if ok_all is not None:
            weight = jnp.where(ok_all, weight, 0)
        term = vals * weight[:, None, :]
        total = term if total is None else total + term
    return total.reshape((n_batch, channels) + tuple(out_sp)).astype(x.dtype)


@op("GridSample", since=16)
def grid_sample_16(X, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    """X sampled at the grid's 2-D coordinates (bilinear, nearest, bicubic); opsets 16-19."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return _grid_sample(X, grid, mode, padding_mode, align_corners)


@op("GridSample", since=20)
def grid_sample(X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    """X sampled at the grid's N-d coordinates (linear, nearest, cubic), padded; opset 20+."""
    return _grid_sample(X, grid, mode, padding_mode, align_corners)


@op("AffineGrid", since=20, host_inputs=(1,))
def affine_grid(theta, size, *, align_corners=0):
    """The sampling grid of the affine matrices ``theta`` for an output ``size``; opset 20+."""
    t = jnp.asarray(theta)
    spatial = [int(s) for s in np.asarray(size)[2:]]
    axes = []
    for n in spatial:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1))
        else:
            axes.append((np.arange(n) * 2.0 + 1.0) / n - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")  # (D,) H, W
    # Homogeneous coordinates ordered (x, y[, z], 1): the fastest axis first.
    coords = [m for m in reversed(mesh)] + [np.ones_like(mesh[0])]
    base = np.stack(coords, axis=-1).reshape(-1, len(spatial) + 1)
    out = jnp.einsum("pk,nck->npc", jnp.asarray(base, t.dtype), t)
    return out.reshape((t.shape[0],) + tuple(spatial) + (len(spatial),)).astype(t.dtype)


# ---------------------------------------------------------------------------------------------
# RoiAlign: the sampling grid of each box is decided by its coordinates, so rois are a host input


def _roi_samples(roi, height, width, ph, pw, sampling_ratio, spatial_scale, half_pixel):
    offset = 0.5 if half_pixel else 0.0
    x1, y1, x2, y2 = (float(v) * spatial_scale - offset for v in roi)
    rw, rh = x2 - x1, y2 - y1
    if not half_pixel:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    bh, bw = rh / ph, rw / pw
    gh = int(sampling_ratio) if sampling_ratio > 0 else int(np.ceil(rh / ph))
    gw = int(sampling_ratio) if sampling_ratio > 0 else int(np.ceil(rw / pw))
    count = max(gh * gw, 1)
    yy = y1 + np.arange(ph)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh  # (ph, gh)
    xx = x1 + np.arange(pw)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw  # (pw, gw)
    y = np.broadcast_to(yy[:, None, :, None], (ph, pw, gh, gw)).reshape(ph * pw, -1)
    x = np.broadcast_to(xx[None, :, None, :], (ph, pw, gh, gw)).reshape(ph * pw, -1)
    empty = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y = np.maximum(y, 0)
    x = np.maximum(x, 0)
    y_low = y.astype(np.int64)
    x_low = x.astype(np.int64)
    y_edge = y_low >= height - 1
    x_edge = x_low >= width - 1
    y_low = np.where(y_edge, height - 1, y_low)
    x_low = np.where(x_edge, width - 1, x_low)
    y_high = np.where(y_edge, height - 1, y_low + 1)
    x_high = np.where(x_edge, width - 1, x_low + 1)
    y = np.where(y_edge, y_low, y)
    x = np.where(x_edge, x_low, x)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    pos = np.stack(
        [
            y_low * width + x_low,
            y_low * width + x_high,
            y_high * width + x_low,
            y_high * width + x_high,
        ],
        axis=-1,
    )
    w = np.stack([hy * hx, hy * lx, ly * hx, ly * lx], axis=-1)
    pos = np.where(empty[..., None], 0, pos)
    w = np.where(empty[..., None], 0.0, w)
    return pos, w, count


def _roi_align(
    X,
    rois,
    batch_indices,
    *,
    half_pixel,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
):
    x = jnp.asarray(X)
    r = np.asarray(rois, np.float64)
    n_rois = r.shape[0]
    channels, height, width = x.shape[1:]
    samples = [
        _roi_samples(
            roi,
            height,
            width,
            output_height,
            output_width,
            sampling_ratio,
            spatial_scale,
            half_pixel,
        )
        for roi in r
    ]
    s_max = max([p.shape[1] for p, _, _ in samples] + [1])
    cells = output_height * output_width
    pos = np.zeros((n_rois, cells, s_max, 4), np.int64)
    w = np.zeros((n_rois, cells, s_max, 4), np.float64)
    valid = np.zeros((n_rois, cells, s_max), bool)
    counts = np.ones((n_rois,), np.float64)
    for i, (p, wt, count) in enumerate(samples):
        s = p.shape[1]
        pos[i, :, :s], w[i, :, :s], valid[i, :, :s] = p, wt, True
        counts[i] = count
    xf = x.reshape((x.shape[0], channels, -1))
    per_roi = jnp.take(xf, jnp.asarray(batch_indices).astype(jnp.int64), axis=0)  # (R, C, HW)
    vals = jax.vmap(lambda xb, pb: xb[:, pb])(per_roi, jnp.asarray(pos.reshape(n_rois, -1)))
    vals = vals.reshape((n_rois, channels, cells, s_max, 4)) * jnp.asarray(w, x.dtype)[:, None]
    if mode == "avg":
        out = jnp.sum(vals, axis=(-1, -2)) / jnp.asarray(counts, x.dtype)[:, None, None]
    else:
        m = jnp.max(vals, axis=-1)
        m = jnp.where(jnp.asarray(valid)[:, None], m, -jnp.inf)
        out = jnp.max(m, axis=-1)
    return out.reshape((n_rois, channels, output_height, output_width)).astype(x.dtype)


@op("RoiAlign", since=10, host_inputs=(1,))
def roi_align_10(
    X,
    rois,
    batch_indices,
    *,
    mode="avg",
    output_height=1,
    output_width=1,
    sampling_ratio=0,
    spatial_scale=1.0,
):
    """Average or max of bilinear samples over each region's bins (no half-pixel); opsets 10-15."""
    return _roi_align(
        X,
        rois,
        batch_indices,
        half_pixel=False,
        mode=mode,
        output_height=output_height,
        output_width=output_width,
        sampling_ratio=sampling_ratio,
        spatial_scale=spatial_scale,
    )


@op("RoiAlign", since=16, host_inputs=(1,))
def roi_align(
    X,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode="half_pixel",
    mode="avg",
    output_height=1,
    output_width=1,
    sampling_ratio=0,
    spatial_scale=1.0,
):
    """Average or max of bilinear samples over each region's bins; opset 16+."""
    return _roi_align(
        X,
        rois,
        batch_indices,
        half_pixel=coordinate_transformation_mode == "half_pixel",
        mode=mode,
        output_height=output_height,
        output_width=output_width,
        sampling_ratio=sampling_ratio,
        spatial_scale=spatial_scale,
    )


# ---------------------------------------------------------------------------------------------
# Col2Im


@op("Col2Im", since=18, host_inputs=(1, 2))
def col2im(input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """Columns of image blocks summed back into an image (the inverse of im2col); opset 18+."""
    x = jnp.asarray(input)
    image = [int(v) for v in np.asarray(image_shape)]
    block = [int(v) for v in np.asarray(block_shape)]
    n = len(image)
    dil = [1] * n if not dilations else [int(v) for v in dilations]
    st = [1] * n if not strides else [int(v) for v in strides]
    p = [0] * (2 * n) if not pads else [int(v) for v in pads]
    padded = [image[i] + p[i] + p[i + n] for i in range(n)]
    blocks_per_dim = [(padded[i] - (dil[i] * (block[i] - 1) + 1)) // st[i] + 1 for i in range(n)]
    # Target position (in the padded image) of every (kernel offset, block) pair.
    k_grid = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing="ij"), -1)
    k_grid = k_grid.reshape(-1, n)
    b_grid = np.stack(np.meshgrid(*[np.arange(b) for b in blocks_per_dim], indexing="ij"), -1)
    b_grid = b_grid.reshape(-1, n)
    coords = k_grid[:, None, :] * np.asarray(dil) + b_grid[None, :, :] * np.asarray(st)
    flat = np.zeros(coords.shape[:2], np.int64)
    for i in range(n):
        flat = flat * padded[i] + coords[..., i]
    batch, _, _ = x.shape
    channels = x.shape[1] // int(np.prod(block))
    cols = x.reshape((batch, channels, -1))
    out = jnp.zeros((batch, channels, int(np.prod(padded))), x.dtype)
    out = out.at[:, :, jnp.asarray(flat.reshape(-1))].add(cols)
    out = out.reshape((batch, channels) + tuple(padded))
    crop = tuple(slice(p[i], p[i] + image[i]) for i in range(n))
    return out[(slice(None), slice(None)) + crop]
