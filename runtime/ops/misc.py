"""Quantization, detection and string ops.

String tensors are numpy object arrays and only ever live on the host; the string ops are
registered ``value_shaped`` so the interpreter always runs them eagerly.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from . import op
from .linalg import matmul_integer

_FP8 = {
    np.dtype(ml_dtypes.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2),
    np.dtype(ml_dtypes.float8_e5m2fnuz),
}


def _np_dtype(code: int) -> np.dtype:
    from onnx.helper import tensor_dtype_to_np_dtype

    return np.dtype(tensor_dtype_to_np_dtype(code))


def _per_axis(value, shape, axis: int, block_size: int):
    """Broadcast a scale/zero point (scalar, per-axis or blocked) against ``shape``."""
    v = jnp.asarray(value)
    if v.ndim == 0:
        return v
    if v.size == 1 and not block_size:
        return v.reshape(())
    axis = axis % len(shape)
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = v.size
        return v.reshape(dims)
    v = jnp.repeat(v, block_size, axis=axis)
    if v.shape[axis] != shape[axis]:
        v = jnp.take(v, jnp.arange(shape[axis]), axis=axis)
    return v


def _exact_div(x, scale, subnormal: bool = False):
    """``x / scale`` rounded like IEEE float32 division (x of 16 bits: divided as float32,
    as onnxruntime converts it).

    XLA rewrites a division by a broadcast value as a multiply by its reciprocal, which is
    not correctly rounded (-2.5 / 0.019607844 gives -127.5, not -127.49999) and flips
    round-half-to-even. The scale is broadcast behind an optimization barrier, so the
    program divides (float32 division is IEEE's; 10 % faster than float64 on a GELU +
    quantize of 400x1536). XLA:CPU's programs treat subnormal float32 values as zero, so a
    constant scale holding one (``subnormal``, ``_subnormal_constant``) is divided in
    float64, which XLA folds while compiling (a subnormal scale computed in the program is
    read as zero either way).
    """
    if x.dtype in (jnp.float16, jnp.bfloat16):
        x = x.astype(jnp.float32)
    if x.dtype != jnp.float32:
        return x / jnp.asarray(scale)
    if subnormal:
        return (x.astype(jnp.float64) / jnp.asarray(scale).astype(jnp.float64)).astype(x.dtype)
    divisor = jnp.broadcast_to(jnp.asarray(scale, jnp.float32), x.shape)
    return x / lax.optimization_barrier(divisor)


def _subnormal_constant(value) -> bool:
    """Whether ``value`` is known while tracing (a host value: the op's input, before any
    jnp function makes it part of the trace) and holds a subnormal float32."""
    if isinstance(value, jax.core.Tracer):
        return False
    host = np.abs(np.asarray(value, np.float32))
    return bool(np.any((host > 0) & (host < np.finfo(np.float32).tiny)))


def _quantize(x, y_scale, y_zero_point, *, axis, saturate, block_size, output_dtype, precision):
    x = jnp.asarray(x)
    if y_zero_point is not None:
        target = np.dtype(y_zero_point.dtype)
    elif output_dtype:
        target = _np_dtype(output_dtype)
    else:
        target = np.dtype(np.uint8)
    scale = _per_axis(y_scale, x.shape, axis, block_size)
    if precision:
        p = _np_dtype(precision)
        q = x.astype(p) / scale.astype(p)
    else:
        q = _exact_div(x, scale, _subnormal_constant(y_scale))
    if target in _FP8:
        if saturate:
            info = ml_dtypes.finfo(target)
            q = jnp.clip(q, float(info.min), float(info.max))
        return q.astype(target)
    if target.name.startswith("float"):  # float4 / float6
        if y_zero_point is not None:
            q = q + _per_axis(y_zero_point, x.shape, axis, block_size).astype(q.dtype)
        return q.astype(target)
    qi = jnp.round(q).astype(jnp.int32)
    if y_zero_point is not None:
        qi = qi + _per_axis(y_zero_point, x.shape, axis, block_size).astype(jnp.int32)
    bounds = ml_dtypes.iinfo(target)
    return jnp.clip(qi, int(bounds.min), int(bounds.max)).astype(target)


@op("QuantizeLinear", since=10)
def quantize_linear(
    x,
    y_scale,
    y_zero_point=None,
    *,
    axis=1,
    saturate=1,
    block_size=0,
    output_dtype=0,
    precision=0,
):
    """round(x / scale) + zero point, saturated to the output type; per axis/block; opset 10+."""
    return _quantize(
        x,
        y_scale,
        y_zero_point,
        axis=axis,
        saturate=saturate,
        block_size=block_size,
        output_dtype=output_dtype,
        precision=precision,
    )


@op("DequantizeLinear", since=10)
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """(x - zero point) * scale, per tensor, axis or block; opset 10+."""
    xv = jnp.asarray(x)
    scale = jnp.asarray(x_scale)
    dx = xv.astype(jnp.float32)
    is_float = np.dtype(xv.dtype) in _FP8 or np.dtype(xv.dtype).name.startswith("float")
    if x_zero_point is not None and not is_float:
        dx = dx - _per_axis(x_zero_point, xv.shape, axis, block_size).astype(jnp.float32)
    y = dx * _per_axis(scale, xv.shape, axis, block_size)
    return y.astype(_np_dtype(output_dtype) if output_dtype else scale.dtype)


@op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(x):
    """x quantized to uint8 with the scale and zero point of its range; opset 11+."""
    xv = jnp.asarray(x).astype(jnp.float32)
    hi = jnp.maximum(0.0, jnp.max(xv))
    lo = jnp.minimum(0.0, jnp.min(xv))
    scale = _exact_div(jnp.where(hi == lo, 1.0, hi - lo).astype(jnp.float32), np.float32(255))
    zp = jnp.round(jnp.clip(0.0 - _exact_div(lo, scale), 0, 255))
    y = jnp.clip(jnp.round(_exact_div(xv, scale)) + zp, 0, 255).astype(jnp.uint8)
    return y, scale.astype(jnp.asarray(x).dtype), zp.astype(jnp.uint8)


@op("QLinearMatMul", since=10)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """Quantized matrix product: dequantize a and b, multiply, requantize to y; opset 10+."""
    av = jnp.asarray(a)
    bv = jnp.asarray(b)
    if np.dtype(av.dtype) in _FP8:
        a_real = av.astype(jnp.float32) * jnp.asarray(a_scale, jnp.float32)
        b_real = bv.astype(jnp.float32) * jnp.asarray(b_scale, jnp.float32)
        prod = jnp.matmul(a_real, b_real) / jnp.asarray(y_scale, jnp.float32)
        return prod.astype(np.dtype(y_zero_point.dtype))
    acc = matmul_integer(av, bv, a_zero_point, b_zero_point)  # an int8 dot where it can
    sa = jnp.asarray(a_scale)
    if sa.ndim == 1 and sa.size > 1:
        sa = sa.reshape(-1, 1)
    factor = sa * jnp.asarray(b_scale) / jnp.asarray(y_scale)
    d = acc.astype(factor.dtype) * factor
    dtype = np.dtype(y_zero_point.dtype) if y_zero_point is not None else np.dtype(av.dtype)
    if y_zero_point is not None:
        d = d + jnp.asarray(y_zero_point).astype(d.dtype)
    info = np.iinfo(dtype)
    return jnp.clip(jnp.round(d), info.min, info.max).astype(dtype)


# ---------------------------------------------------------------------------------------------
# detection


def _iou_suppress(a: np.ndarray, b: np.ndarray, center: int, threshold: float) -> bool:
    if center:
        ax0, ax1 = a[0] - a[2] / 2, a[0] + a[2] / 2
        ay0, ay1 = a[1] - a[3] / 2, a[1] + a[3] / 2
        bx0, bx1 = b[0] - b[2] / 2, b[0] + b[2] / 2
        by0, by1 = b[1] - b[3] / 2, b[1] + b[3] / 2
    else:
        ay0, ay1 = sorted((a[0], a[2]))
        ax0, ax1 = sorted((a[1], a[3]))
        by0, by1 = sorted((b[0], b[2]))
        bx0, bx1 = sorted((b[1], b[3]))
    iw = min(ax1, bx1) - max(ax0, bx0)
    ih = min(ay1, by1) - max(ay0, by0)
    if iw <= 0 or ih <= 0:
        return False
    inter = iw * ih
    area_a = (ax1 - ax0) * (ay1 - ay0)
    area_b = (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > threshold


@op("NonMaxSuppression", since=10, value_shaped=True)
def non_max_suppression(
    boxes,
    scores,
    max_output_boxes_per_class=None,
    iou_threshold=None,
    score_threshold=None,
    *,
    center_point_box=0,
):
    """Per batch and class, the boxes kept by greedy IoU suppression; opset 10+."""
    bx = np.asarray(boxes)
    sc = np.asarray(scores)

    def scalar(v, default):
        return default if v is None or np.asarray(v).size == 0 else np.asarray(v).reshape(-1)[0]

    max_out = max(int(scalar(max_output_boxes_per_class, 0)), 0)
    iou = float(scalar(iou_threshold, 0.0))
    min_score = scalar(score_threshold, None)
    selected: list[tuple[int, int, int]] = []
    for b in range(sc.shape[0]):
        for c in range(sc.shape[1]):
            s = sc[b, c]
            order = np.argsort(-s, kind="stable")
            if min_score is not None:
                order = order[s[order] > min_score]
            kept: list[int] = []
            for i in order:
                if len(kept) >= max_out:
                    break
                if all(not _iou_suppress(bx[b, i], bx[b, k], center_point_box, iou) for k in kept):
                    kept.append(int(i))
            selected.extend((b, c, k) for k in kept)
    return np.asarray(selected, np.int64).reshape(-1, 3)


# ---------------------------------------------------------------------------------------------
# strings (host only)


def _strings(x) -> np.ndarray:
    return np.asarray(x, dtype=object)


@op("StringConcat", since=20, value_shaped=True)
def string_concat(X, Y):
    """X + Y as strings, elementwise; opset 20+."""
    joined = np.char.add(_strings(X).astype(np.str_), _strings(Y).astype(np.str_))
    return np.asarray(joined, dtype=object)


@op("RegexFullMatch", since=20, value_shaped=True)
def regex_full_match(X, *, pattern=""):
    """True where the whole string matches ``pattern`` (Python's re); opset 20+."""
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise ValueError(f"RegexFullMatch: invalid pattern {pattern!r}: {e}") from e
    match = np.vectorize(lambda s: regex.fullmatch(s) is not None, otypes=[np.bool_])
    return match(_strings(X))


@op("StringSplit", since=20, value_shaped=True)
def string_split(X, *, delimiter=None, maxsplit=None):
    """Each string split at ``delimiter`` (whitespace when absent), padded; counts; opset 20+."""
    x = _strings(X)
    sep = delimiter or None
    parts = [(s.split(sep) if maxsplit is None else s.split(sep, maxsplit)) for s in x.reshape(-1)]
    counts = np.array([len(p) for p in parts], np.int64).reshape(x.shape)
    width = max((len(p) for p in parts), default=0)
    out = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        out[i, : len(p)] = p
    return out.reshape(x.shape + (width,)), counts


@op("StringNormalizer", since=10, value_shaped=True)
def string_normalizer(
    X, *, case_change_action="NONE", is_case_sensitive=0, locale=None, stopwords=None
):
    """Strings with ``stopwords`` removed and their case changed; opset 10+."""
    x = _strings(X)
    stops = set(stopwords or ())
    folded_stops = {w.lower() for w in stops}

    def keep(s: str) -> bool:
        return (s not in stops) if is_case_sensitive else (s.lower() not in folded_stops)

    def change(s: str) -> str:
        if case_change_action == "LOWER":
            return s.lower()
        if case_change_action == "UPPER":
            return s.upper()
        return s

    if x.ndim == 2 and x.shape[0] == 1:
        row = [change(s) for s in x[0] if keep(s)]
        return np.array([row or [""]], dtype=object)
    if x.ndim == 1:
        row = [change(s) for s in x if keep(s)]
        return np.array(row or [""], dtype=object)
    raise ValueError("StringNormalizer: input must be [C] or [1, C]")


# ---------------------------------------------------------------------------------------------
# text features (host only: counting n-grams is a dictionary walk)


@op("TfIdfVectorizer", since=9, value_shaped=True)
def tfidf_vectorizer(
    X,
    *,
    max_gram_length,
    max_skip_count,
    min_gram_length,
    mode,
    ngram_counts,
    ngram_indexes,
    pool_int64s=None,
    pool_strings=None,
    weights=None,
):
    """Counts (TF, IDF or TF-IDF) of the listed n-grams, skip-grams too; opset 9+."""
    pool = list(pool_int64s) if pool_int64s else list(pool_strings or [])
    columns: dict[tuple, int] = {}
    gram_id = 0
    for i, start in enumerate(ngram_counts):
        end = ngram_counts[i + 1] if i + 1 < len(ngram_counts) else len(pool)
        n = i + 1
        for k in range(start, end - n + 1, n):
            if min_gram_length <= n <= max_gram_length:
                columns.setdefault(tuple(pool[k : k + n]), int(ngram_indexes[gram_id]))
            gram_id += 1
    width = max(ngram_indexes) + 1
    x = np.asarray(X)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], width), np.float32)
    for r, row in enumerate(rows):
        values = [v.item() if isinstance(v, np.generic) else v for v in row]
        for skip in range(1, max_skip_count + 2):
            lowest = min_gram_length if skip == 1 else max(min_gram_length, 2)
            if lowest > max_gram_length:
                break
            for start in range(len(values)):
                for n in range(lowest, max_gram_length + 1):
                    last = start + skip * (n - 1)
                    if last >= len(values):
                        break
                    col = columns.get(tuple(values[start : last + 1 : skip]))
                    if col is not None:
                        counts[r, col] += 1
    w = np.asarray(weights, np.float32) if weights else None
    if mode == "TF":
        out = counts
    elif mode == "IDF":
        out = (counts > 0).astype(np.float32) * (w if w is not None else 1.0)
    elif mode == "TFIDF":
        out = counts * (w if w is not None else 1.0)
    else:
        raise ValueError(f"TfIdfVectorizer: unknown mode {mode!r}")
    return out.astype(np.float32).reshape(-1) if x.ndim == 1 else out.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# images (host only: decoding is Pillow's job)


@op("ImageDecoder", since=20, value_shaped=True)
def image_decoder(encoded_stream, *, pixel_format="RGB"):
    """An encoded image (PNG, JPEG, ...) decoded to HWC uint8 in RGB, BGR or grey; opset 20+."""
    import io

    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - Pillow ships with streamlit
        raise ImportError("ImageDecoder needs Pillow: pip install pillow") from e
    image = Image.open(io.BytesIO(np.asarray(encoded_stream, np.uint8).tobytes()))
    if pixel_format == "Grayscale":
        return np.asarray(image.convert("L"))[:, :, None]
    rgb = np.asarray(image.convert("RGB"))
    if pixel_format == "RGB":
        return rgb
    if pixel_format == "BGR":
        return np.ascontiguousarray(rgb[:, :, ::-1])
    raise ValueError(f"ImageDecoder: unknown pixel_format {pixel_format!r} (RGB, BGR, Grayscale)")
