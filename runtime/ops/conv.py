"""Convolutions: Conv, ConvInteger, ConvTranspose, QLinearConv, DeformConv.

They take NCHW-style layouts (batch, channels, spatial...) as ONNX does and lower to
``lax.conv_general_dilated`` so that XLA fuses and tiles them well. Padding arithmetic is
done on the host from static shapes; the pools share it (``ints_or_default``, ``auto_pads``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import op

# ---------------------------------------------------------------------------------------------
# padding / window arithmetic shared by Conv and the pools


def ints_or_default(values: Sequence[int] | None, n: int, default: int) -> list[int]:
    return [default] * n if values is None or len(values) == 0 else [int(v) for v in values]


def _split_pad(total: int, auto_pad: str) -> tuple[int, int]:
    """(begin, end) of ``total`` padding: the odd one at the end for ``SAME_UPPER``, else at
    the begin (``SAME_LOWER``, and ConvTranspose's ``output_shape`` without auto_pad)."""
    small, big = total // 2, total - total // 2
    return (small, big) if auto_pad == "SAME_UPPER" else (big, small)


def auto_pads(
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
    p = ints_or_default(pads, 2 * n, 0)
    return [(p[i], p[i + n]) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# convolution


# XLA:CPU runs grouped convolutions (``feature_group_count``) through a slow generic
# loop: a 3x3 depthwise conv on 136x56x56 takes 23 ms there and 0.4 ms as nine shifted
# multiply-adds, and a grouped 1x1 conv is about twice as fast as a batched matmul. A
# convolution of a one-channel input (a spectrogram's or a grey image's first layer) is the
# same work, each output channel its own filter over the one input channel, and its library
# convolution is as slow: openwakeword's speech embedding (a 3x3, 1 -> 24 channels on 76x32
# first) 1.02 -> 0.88 ms a call as shifted multiply-adds. The rewrites keep float32/float64
# math (a sum of products in the input's dtype).
_SHIFT_ADD_MAX_TAPS = 49


def _depthwise_shift_add(
    x: Any,
    w: Any,
    strides: Sequence[int],
    dil: Sequence[int],
    pad: Sequence[tuple[int, int]],
    channels_last: bool = False,
) -> Any:
    """Conv with one input channel per group (depthwise, or a one-channel input), as a sum
    of strided slices times taps.

    ``channels_last``: computed on the NHWC transpose of ``x`` and transposed back, so that
    XLA cancels the transposes with those of neighbouring convolutions (``runtime/layout.py``
    says when the graph asks for it).
    """
    n = x.ndim - 2
    multiplier = w.shape[0] // x.shape[1]
    ch = x.ndim - 1 if channels_last else 1  # the channel axis of the computation
    if channels_last:
        x = jnp.transpose(x, (0, *range(2, n + 2), 1))
    if multiplier > 1 and x.shape[ch] > 1:  # each input channel feeds ``multiplier`` outputs
        x = jnp.repeat(x, multiplier, axis=ch)  # (one input channel: the taps broadcast it)
    spatial = list(range(1, n + 1)) if channels_last else list(range(2, n + 2))
    sizes = [x.shape[a] for a in spatial]
    widths = [(0, 0)] * x.ndim
    for a, p in zip(spatial, pad, strict=True):
        widths[a] = p
    # The padded input goes through an optimization barrier, so the taps read it as a
    # value of its own, computed once. Without it XLA:CPU fused the taps of a depthwise
    # Conv that feeds this one (through elementwise ops) into each of these taps and
    # computed them again per tap: a chain of depthwise Convs cost exponentially in its
    # length (4 with SiLU on 128x56x56: 26 ms a call, 4.9 ms with the barrier; one: 0.9 ms;
    # ``test_depthwise_convs_in_a_chain_read_each_tap_once``). Where the input's producer is
    # not a depthwise Conv, XLA wrote the padded input once already (the pad fusions).
    x = lax.optimization_barrier(jnp.pad(x, widths))
    kernel = w.shape[2:]
    out_size = [
        (x.shape[spatial[a]] - ((kernel[a] - 1) * dil[a] + 1)) // strides[a] + 1 for a in range(n)
    ]
    bshape = [1] * x.ndim
    bshape[ch] = -1
    # A tap whose every position along some axis falls in the zero padding adds nothing
    # (a 5x5 kernel on a 2-row input padded by 2: its first and last rows).
    reads_data = [
        [
            any(pad[a][0] <= t * dil[a] + k * strides[a] < pad[a][0] + sizes[a] for k in range(o))
            for t in range(kernel[a])
        ]
        for a, o in enumerate(out_size)
    ]
    out: Any = None
    for tap in np.ndindex(*kernel):
        if not all(reads_data[a][t] for a, t in enumerate(tap)):
            continue
        index = [slice(None)] * x.ndim
        for a, (t, d, o, s) in enumerate(zip(tap, dil, out_size, strides, strict=True)):
            index[spatial[a]] = slice(t * d, t * d + (o - 1) * s + 1, s)
        weight = w[(slice(None), 0, *tap)].reshape(bshape)
        term = x[tuple(index)] * weight
        out = term if out is None else out + term
    if out is None:  # every tap reads padding only
        shape = list(x.shape)
        shape[ch] = w.shape[0]
        for a, o in zip(spatial, out_size, strict=True):
            shape[a] = o
        out = jnp.zeros(shape, x.dtype)
    if channels_last:
        out = jnp.transpose(out, (0, n + 1, *range(1, n + 1)))
    return out


def _grouped_pointwise(x, w, group, strides):
    """A grouped 1x1 conv without padding, as one batched matmul over the groups."""
    x = x[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]
    b, c_in, *spatial = x.shape
    c_out = w.shape[0]
    xs = x.reshape(b, group, c_in // group, -1)
    ws = w.reshape(group, c_out // group, c_in // group)
    return jnp.einsum("goc,bgcp->bgop", ws, xs).reshape(b, c_out, *spatial)


def _conv(
    x,
    w,
    *,
    auto_pad,
    dilations,
    group,
    pads,
    strides,
    preferred=None,
    channels_last=False,
    pooled=False,
):
    n = x.ndim - 2
    kernel = list(w.shape[2:])
    strides_ = ints_or_default(strides, n, 1)
    dil = ints_or_default(dilations, n, 1)
    pad = auto_pads(auto_pad, pads, x.shape[2:], kernel, strides_, dil)
    plain_float = preferred is None and x.dtype in (jnp.float32, jnp.float64) and w.dtype == x.dtype
    if plain_float and all(p >= 0 for pp in pad for p in pp):
        n_taps = int(np.prod(kernel))
        # one input channel per group: depthwise, or (group 1) a one-channel input that no
        # pool reads (``graph/layout.POOLED``) and, in 2-D or 3-D, not a strided kernel of
        # more than 9 taps (a 7x7 stride-2 stem on 8x1x128x128: 2.4 ms as XLA's convolution,
        # 6 ms as taps)
        ungrouped_slow = pooled or (n > 1 and max(strides_) > 1 and n_taps > 9)
        as_taps = w.shape[1] == 1 and x.shape[1] == group and n_taps <= _SHIFT_ADD_MAX_TAPS
        if as_taps and (group > 1 or not ungrouped_slow):
            return _depthwise_shift_add(x, w, strides_, dil, pad, channels_last)
        if group > 1 and all(k == 1 for k in kernel) and all(p == (0, 0) for p in pad):
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
    _ember_channels_last=0,
    _ember_pooled=0,
):
    """N-d convolution of X by W (+ bias B): pads, strides, dilations, groups; opset 1+.

    ``_ember_channels_last`` and ``_ember_pooled`` are Ember's own hints, set at load
    (``runtime/graph/layout.py``): a depthwise Conv between convolutions computes on NHWC; a
    Conv whose output a pool reads keeps XLA's convolution for a one-channel input.
    """
    y = _conv(
        jnp.asarray(X),
        jnp.asarray(W),
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        pads=pads,
        strides=strides,
        channels_last=bool(_ember_channels_last),
        pooled=bool(_ember_pooled),
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


def _depthwise_transposed(
    x: Any,
    w: Any,
    strides: Sequence[int],
    pad: Sequence[tuple[int, int]],
    out_size: Sequence[int],
) -> Any:
    """A transposed Conv with one channel per group (CenterNet's learned bilinear 2x
    upsampling: 4x4 kernels at stride 2), as its ``prod(strides)`` output phases.

    Output ``o`` gets ``x[i] * w[k]`` where ``o + pad_begin = i * s + k``. Along each axis,
    the outputs of one phase ``r`` (``(o + pad_begin) % s == r``) are a correlation of ``x``
    with the taps ``k = r, r + s, ...``: a sum of shifted slices of ``x`` times a tap, as in
    ``_depthwise_shift_add``. The phases are interleaved and the padding cropped. XLA:CPU's
    grouped convolution over the stride-dilated input took 60 ms for one 256-channel
    upsampling to 128x128 of wired-table-rec's CenterNet (a 512x512 call: 250 of 640 ms).
    """
    n = x.ndim - 2
    kernel = w.shape[2:]
    taps = [-(-kernel[a] // strides[a]) for a in range(n)]  # per phase, at most
    full = [x.shape[2 + a] + taps[a] - 1 for a in range(n)]  # outputs of a phase
    widths = [(0, 0), (0, 0), *((t - 1, t - 1) for t in taps)]
    xp = jnp.pad(x, widths)
    phases = []
    for r in np.ndindex(*strides):
        term: Any = None
        for m in np.ndindex(*taps):
            k = tuple(r[a] + strides[a] * m[a] for a in range(n))
            if any(k[a] >= kernel[a] for a in range(n)):
                continue
            index = (slice(None), slice(None)) + tuple(
                slice(taps[a] - 1 - m[a], taps[a] - 1 - m[a] + full[a]) for a in range(n)
            )
            t = xp[index] * w[(slice(None), 0, *k)].reshape((1, -1) + (1,) * n)
            term = t if term is None else term + t
        phases.append(jnp.zeros(x.shape[:2] + tuple(full), x.dtype) if term is None else term)
    # (phases..., N, C, *full) -> (N, C, full_0, s_0, full_1, s_1, ...) -> (N, C, *full * s)
    y = jnp.stack(phases).reshape(tuple(strides) + x.shape[:2] + tuple(full))
    order = [n, n + 1]
    for a in range(n):
        order += [n + 2 + a, a]
    y = jnp.transpose(y, order).reshape(
        x.shape[:2] + tuple(f * s for f, s in zip(full, strides, strict=True))
    )
    crop: list[slice] = [slice(None), slice(None)]
    ends = []
    for a in range(n):
        end = pad[a][0] + out_size[a]
        ends.append(max(0, end - y.shape[2 + a]))
        crop.append(slice(pad[a][0], end))
    if any(ends):  # positions past every input's reach: zeros
        y = jnp.pad(y, [(0, 0), (0, 0), *((0, e) for e in ends)])
    return y[tuple(crop)]


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
    strides_ = ints_or_default(strides, n, 1)
    dil = ints_or_default(dilations, n, 1)
    out_pad = ints_or_default(output_padding, n, 0)
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
        pad = auto_pads(auto_pad, pads, in_sp, kernel, strides_, dil)
    depthwise = (
        group == w.shape[0]
        and w.shape[1] == 1
        and all(d == 1 for d in dil)
        and all(p >= 0 for pp in pad for p in pp)
        and x.dtype in (jnp.float32, jnp.float64)
        and w.dtype == x.dtype
        and int(np.prod(kernel)) <= _SHIFT_ADD_MAX_TAPS
    )
    if depthwise:
        out_size = [
            strides_[i] * (in_sp[i] - 1) + out_pad[i] + kernel[i] - pad[i][0] - pad[i][1]
            for i in range(n)
        ]
        y = _depthwise_transposed(x, w, strides_, pad, out_size)
    else:
        y = _transposed_as_conv(x, w, group, strides_, dil, pad, out_pad)
    if B is not None:
        y = y + jnp.reshape(B, (1, -1) + (1,) * n)
    return y


def _transposed_as_conv(
    x: Any,
    w: Any,
    group: int,
    strides: Sequence[int],
    dil: Sequence[int],
    pad: Sequence[tuple[int, int]],
    out_pad: Sequence[int],
) -> Any:
    """A transposed conv as a conv over the stride-dilated input with the flipped kernel
    whose in/out channel axes are swapped within each group."""
    n = x.ndim - 2
    kernel = list(w.shape[2:])
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
        lhs_dilation=strides,
        rhs_dilation=dil,
        feature_group_count=group,
    )
    if any(c != (0, 0) for c in crop):
        y = y[
            (slice(None), slice(None))
            + tuple(slice(a, y.shape[2 + i] - b) for i, (a, b) in enumerate(crop))
        ]
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
    sh, sw = ints_or_default(strides, 2, 1)
    dh, dw = ints_or_default(dilations, 2, 1)
    p = ints_or_default(pads, 4, 0)
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
    cols: Any = 0
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
