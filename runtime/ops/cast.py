"""Casts: Cast, CastLike, BitCast, and ONNX's dtype codes.

Host and jax values alike, each result in its inputs' ONNX dtype (see ``ember.runtime.ops``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.runtime.ops import op, xp
from ember.runtime.ops._common import as_str as _str
from ember.runtime.ops.math import is_float, is_int

Array = Any


# --------------------------------------------------------------------------- casts

_FLOAT8_SATURATING = {17, 18, 19, 20}  # FLOAT8E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ


def onnx_dtype(to: int) -> np.dtype:
    """The numpy dtype of an ONNX ``TensorProto.DataType`` number."""
    import onnx.helper

    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(to)))


def _cast(
    input: Array, dtype: np.dtype, saturate: int, to: int | None, round_mode: str = "up"
) -> Array:
    src = np.dtype(input.dtype)
    if dtype.kind == "O" or src.kind in "OUS":
        return _cast_strings(np.asarray(input), dtype)
    m = xp(input)
    value = input
    if to in _FLOAT8_SATURATING and saturate and is_float(src) and src.itemsize >= 2:
        import ml_dtypes

        info = ml_dtypes.finfo(dtype)
        wide = value.astype(np.float32) if src.itemsize < 4 else value
        value = m.where(m.isnan(wide), wide, m.clip(wide, float(info.min), float(info.max)))
    if to == 24:  # FLOAT8E8M0: onnx's helper implements its rounding modes
        import onnx.numpy_helper

        rounded = onnx.numpy_helper.to_float8e8m0(np.asarray(value), bool(saturate), round_mode)
        return rounded.astype(dtype)
    if dtype.name in _SUB_BYTE_INTS and not is_int(src) and src != np.bool_:
        return _float_to_sub_byte_int(m, value, dtype)
    if m is np:
        return np.asarray(value).astype(dtype)
    if dtype.kind == "u" and is_float(src):
        # XLA saturates negative floats to 0 where C casts (onnxruntime, numpy) wrap
        # around; go through int64 so that both paths agree.
        return m.where(value < 0, value.astype(np.int64).astype(dtype), value.astype(dtype))
    return value.astype(dtype)


def _float_to_sub_byte_int(m: Any, value: Array, dtype: np.dtype) -> Array:
    """Float -> int4/uint4/int2/uint2, the same on the host and under jit.

    ONNX leaves a float outside the target's range undefined, and the libraries disagree
    (XLA saturates; ml_dtypes 0.6 wrapped, 0.7 gives 0; onnxruntime rounds, then wraps).
    Ember's choice, the spec's rule for fixed point -> narrower fixed point applied to the
    truncated value: truncate toward zero (as in range), keep the low bits, read them as
    two's complement. So an integral value agrees with onnxruntime (100.0 -> int4 4, -9.0 -> 7);
    NaN and infinities give 0. Never ml_dtypes' own cast, which changes between releases.
    """
    bits, signed = _SUB_BYTE_INTS[dtype.name]
    wide = value.astype(np.float32) if np.dtype(value.dtype).itemsize < 4 else value
    whole = m.where(m.isfinite(wide), m.trunc(wide), 0)
    span = 1 << bits
    half = span // 2 if signed else 0
    # The wrap is computed in floats: exact, since span is a power of two and a float too
    # large for its low bits to be exact is a multiple of span (no int64 under jit).
    low = whole - span * m.floor((whole + half) / span)
    return low.astype(np.int32).astype(dtype)


_SUB_BYTE_INTS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


def _cast_strings(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "O":
        if value.dtype.kind in "OUS":
            return value.astype(object)
        if value.dtype.kind == "f" or "float" in value.dtype.name:
            flat = [_format_float(float(v)) for v in value.reshape(-1)]
        else:
            flat = [str(v) for v in value.reshape(-1).tolist()]
        return np.array(flat, dtype=object).reshape(value.shape)
    text = np.array([_str(v) for v in value.reshape(-1)], dtype=object)
    if dtype == np.bool_:
        floats = np.array([float(t) for t in text], dtype=np.float32)
        return (floats != 0).reshape(value.shape)
    floats = np.array([float(t) for t in text], dtype=np.float64)
    if is_int(dtype):
        return np.array([int(t) for t in text], dtype=dtype).reshape(value.shape)
    return floats.astype(np.float32).astype(dtype).reshape(value.shape)


def _format_float(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return str(np.float32(v))


@op("Cast")
def cast(input: Array, *, to: int, saturate: int = 1, round_mode: str = "up") -> Array:
    """X converted to type ``to`` (strings, saturating float8, sub-byte ints too); opset 1+."""
    return _cast(input, onnx_dtype(to), saturate, int(to), _str(round_mode))


@op("CastLike", since=15)
def cast_like(
    input: Array, target_type: Array, *, saturate: int = 1, round_mode: str = "up"
) -> Array:
    """X converted to the type of ``target_type``; opset 15+."""
    import onnx.helper

    dtype = np.dtype(target_type.dtype)
    to = None
    if dtype.kind != "O":
        to = onnx.helper.np_dtype_to_tensor_dtype(dtype)
    return _cast(input, dtype, saturate, to, _str(round_mode))


@op("BitCast", since=26)
def bit_cast(input: Array, *, to: int) -> Array:
    """X's bits reinterpreted as the type ``to`` of the same width; opset 26+."""
    dtype = onnx_dtype(to)
    src = np.dtype(input.dtype)
    if src.kind in "OUS" or dtype.kind in "OUS":
        raise TypeError("BitCast does not take strings (their width is not defined)")
    if src.itemsize != dtype.itemsize:
        raise TypeError(
            f"BitCast needs types of one width: {src} has {src.itemsize * 8} bits, "
            f"{dtype} has {dtype.itemsize * 8}"
        )
    m = xp(input)
    if m is np:
        return np.array(input, order="C").view(dtype)
    import jax

    value = input.astype(np.uint8) if src == np.bool_ else input
    if dtype == np.bool_:
        return value.astype(np.uint8) != 0
    return jax.lax.bitcast_convert_type(value, dtype)
