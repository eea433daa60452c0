"""Matrix products: MatMul, MatMulInteger, Gemm, Einsum, Det, and Ember's OneHotMatMul.

Host and jax values alike, each result in its inputs' ONNX dtype (see ``ember.runtime.ops``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.runtime.ops import EMBER_DOMAIN, is_host, op, xp
from ember.runtime.ops._common import as_str as _str
from ember.runtime.ops.math import astype

Array = Any


# ----------------------------------------------------------------- matrix products


@op("MatMul")
def matmul(A: Array, B: Array) -> Array:
    """Matrix product with numpy's batching and broadcasting rules; opset 1+."""
    m = xp(A, B)
    return astype(m, m.matmul(A, B), A.dtype)


@op("MatMulInteger", since=10)
def matmul_integer(
    A: Array, B: Array, a_zero_point: Array | None = None, b_zero_point: Array | None = None
) -> Array:
    """Integer matrix product in int32 after subtracting the zero points; opset 10+."""
    m = xp(A, B, a_zero_point, b_zero_point)
    if m is not np and _bytes_wide(A) and _bytes_wide(B) and A.ndim >= 2 and B.ndim >= 2:
        return _int8_matmul(A, B, a_zero_point, b_zero_point)
    a = A.astype(np.int32)
    b = B.astype(np.int32)
    if a_zero_point is not None:
        azp = a_zero_point.astype(np.int32)
        if azp.ndim == 1 and azp.shape[0] > 1:
            azp = azp.reshape(-1, 1)  # one zero point per row of A
        a = a - azp
    if b_zero_point is not None:
        b = b - b_zero_point.astype(np.int32)
    return astype(m, m.matmul(a, b), np.int32)


def _bytes_wide(x: Array) -> bool:
    return np.dtype(x.dtype) in (np.dtype(np.int8), np.dtype(np.uint8))


def _as_int8(x: Array) -> tuple[Array, int]:
    """``x`` as int8 and the offset taken off: uint8 values less 128 (exact), int8 as is."""
    import jax.numpy as jnp
    from jax import lax

    if np.dtype(x.dtype) == np.dtype(np.int8):
        return x, 0
    return lax.bitcast_convert_type(jnp.bitwise_xor(x, jnp.uint8(128)), jnp.int8), 128


def _zero_point(zp: Array | None, offset: int, per_row: bool) -> Array | int:
    """The zero point of the int8 operand (``zp - offset``) in int32; 0 where it is none."""
    if zp is None:
        return -offset
    z = zp.astype(np.int32) - offset
    if is_host(z) and not np.any(z):
        return 0
    return z.reshape(-1, 1) if per_row and z.ndim == 1 and z.shape[0] > 1 else z


def _int8_matmul(A: Array, B: Array, a_zp: Array | None, b_zp: Array | None) -> Array:
    """MatMulInteger of 8-bit operands as an int8 x int8 -> int32 dot, exact.

    XLA:CPU runs int8 dots on the CPU's int8 instructions (AMX / VNNI: a 400x1536x384 dot
    in 0.26 ms against 3.7 ms in float32), but a uint8 or mixed dot, or one in int32, in
    slow loops. So uint8 operands are shifted to int8 (``a - 128``) and the zero points with
    them, and with ``a' = a - za``, ``b' = b - zb`` on the int8 values:

        sum_k (a_k - za)(b_k - zb) = a.b - za * colsum(b) - zb * rowsum(a) + K za zb
    """
    import jax.numpy as jnp

    a, a_off = _as_int8(A)
    b, b_off = _as_int8(B)
    za = _zero_point(a_zp, a_off, per_row=True)
    zb = _zero_point(b_zp, b_off, per_row=False)
    acc = jnp.matmul(a, b, preferred_element_type=jnp.int32)
    if not (isinstance(za, int) and za == 0):
        acc = acc - za * jnp.sum(b, axis=-2, keepdims=True, dtype=jnp.int32)
    if not (isinstance(zb, int) and zb == 0):
        acc = acc - zb * jnp.sum(a, axis=-1, keepdims=True, dtype=jnp.int32)
        if not (isinstance(za, int) and za == 0):
            acc = acc + A.shape[-1] * za * zb
    return acc


@op("Gemm")
def gemm(
    A: Array,
    B: Array,
    C: Array | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    broadcast: int = 0,
) -> Array:
    """``alpha`` * A' @ B' + ``beta`` * C, with A', B' optionally transposed; opset 1+."""
    m = xp(A, B, C)
    if m is np:
        result = np.matmul(A.T if transA else A, B.T if transB else B)
    else:
        # Contract the stored axes directly: ``B.T @ ...`` makes XLA:CPU copy the whole
        # transposed weight on every call (500+ ms for a 4096x25088 FC layer; 17 ms so).
        from jax import lax

        contract = (((0 if transA else 1,), (1 if transB else 0,)), ((), ()))
        result = lax.dot_general(A, B, contract)
    if alpha != 1.0:
        result = alpha * result
    if C is not None and beta != 0.0:
        result = result + (C if beta == 1.0 else beta * C)
    return astype(m, result, A.dtype)


@op("OneHotMatMul", domain=EMBER_DOMAIN)
def one_hot_matmul(X: Array, R: Array, W: Array, *, to: int) -> Array:
    """MatMul(Cast(Equal(X, R)), W) for R = 0..K-1: the rows of W that X picks; opset 1+.

    Only Ember's own rewrite (``graph/one_hot.py``) writes this op."""
    m = xp(X, R, W)
    k = W.shape[0]
    if X.ndim == 0 or X.shape[-1] != 1 or X.ndim < R.ndim:  # not one id per row: as written
        from ember.runtime.ops.cast import cast
        from ember.runtime.ops.math import equal

        return matmul(cast(equal(X, R), to=to), W)
    ids = X[..., 0]
    if k - 1 >= np.iinfo(ids.dtype).max:
        # K itself does not fit the ids' type (uint8 ids of a 256-row table): compared in
        # that type, ``ids < K`` wraps to ``ids < 0`` and would drop every row
        ids = ids.astype(np.int64 if k > np.iinfo(np.int32).max else np.int32)
    rows = m.take(W, m.clip(ids, 0, k - 1), axis=0)
    inside = ((ids >= 0) & (ids < k))[..., None]
    return astype(m, m.where(inside, rows, m.zeros((), W.dtype)), W.dtype)


@op("Einsum", since=12)
def einsum(*Inputs: Array, equation: str = "") -> Array:
    """Einstein summation over the inputs as ``equation`` says; opset 12+."""
    m = xp(*Inputs)
    eq = _str(equation).replace(" ", "")
    if m is np and Inputs[0].dtype.name == "bfloat16":
        widened = [x.astype(np.float32) for x in Inputs]
        return astype(m, np.einsum(eq, *widened), Inputs[0].dtype)
    return astype(m, m.einsum(eq, *Inputs), Inputs[0].dtype)


@op("Det", since=11)
def det(X: Array) -> Array:
    """The determinant of each square matrix in the trailing two dims; opset 11+."""
    m = xp(X)
    return astype(m, m.linalg.det(X), X.dtype)
