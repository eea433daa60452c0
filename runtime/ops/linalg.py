"""Matrix products: MatMul, MatMulInteger, Gemm, Einsum, Det.

Host and jax values alike, each result in its inputs' ONNX dtype (see ``ember.runtime.ops``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.runtime.ops import op, xp
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
