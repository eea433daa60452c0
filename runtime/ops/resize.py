"""Resize and Upsample.

Resize is separable: each resized axis becomes one small (out, in) weight matrix computed on
the host from static shapes (or a gather for ``nearest``), so XLA sees a dot per axis instead
of data-dependent indexing. The coordinate rules follow the ONNX reference implementation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
    """X resized by ``scales`` or to ``sizes`` (nearest, linear, cubic), on ``axes``; opset 11+.

    Resize of every version (and Upsample), in named steps: the output shape, the tap weights'
    rule, then one separable pass per resized axis in at least float32."""
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
        n = work.shape[a]
        k = len(pick) // n if n else 0
        if k >= 1 and len(pick) == n * k and np.array_equal(pick, np.arange(n).repeat(k)):
            # each source index k times in order (an integer upscale): a broadcast and a
            # reshape, which XLA fuses into the reader, instead of a gather
            wide = jnp.expand_dims(work, a + 1)
            shape = (*work.shape[: a + 1], k, *work.shape[a + 1 :])
            out = (*work.shape[:a], n * k, *work.shape[a + 1 :])
            return jnp.broadcast_to(wide, shape).reshape(out)
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
    return resize(
        X,
        None,
        scales,
        None,
        mode=mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="simple",
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
    return resize(
        X,
        None,
        np.asarray(scales, np.float64),
        None,
        mode="linear" if mode in ("linear", "bilinear") else mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="simple",
    )
