"""Image sampling ops: GridSample, AffineGrid, RoiAlign, Col2Im (Resize is in ``resize.py``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import op

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
    total: Any = None
    for combo in np.ndindex(*(len(t) for t in taps_per_dim)):
        flat: Any = None
        weight: Any = None
        ok_all: Any = None
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
    half_pixel = coordinate_transformation_mode == "half_pixel"
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
def roi_align_10(X, rois, batch_indices, **attributes):
    """Average or max of bilinear samples over each region's bins (no half-pixel); opsets 10-15."""
    # opset 16 added coordinate_transformation_mode; before it, no half-pixel offset
    mode = "output_half_pixel"
    return roi_align(X, rois, batch_indices, coordinate_transformation_mode=mode, **attributes)


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
