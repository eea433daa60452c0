"""One-hot products as row lookups, at load.

TensorFlow and JAX exports write an embedding as a one-hot matrix times the table:

    E = Equal(X, R)          # X: integer ids [..., 1]; R: the constant 0, 1, ..., K-1
    A = Cast(E, to=float)    # [..., K], one 1 per row (none for an id outside 0..K-1)
    Y = MatMul(A, W)         # W: a constant table [K, N]

Run as written, that is a [rows, K] x [K, N] dot over a matrix of zeros: magika's byte
embedding (2,048 bytes, K = 257, N = 64) takes ~1 ms of a 4.8 ms call on XLA:CPU, where the
rows of ``W`` the ids pick take ~0.1 ms. ``one_hot_products`` replaces the three nodes by one
``OneHotMatMul(X, R, W)`` (``ops/linalg.py``), which takes those rows (a zero row for an id
outside the table) when ``X``'s last axis is 1, and computes the three ops as written
otherwise. The values are the same: each output is one ``W`` value times 1 plus zeros
(tables with an infinity or NaN, where ``0 * inf`` would make the product NaN, are left
alone).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.runtime import ops
from ember.runtime.graph.fold import constant_values, wiring
from ember.runtime.ops import EMBER_DOMAIN
from ember.runtime.ops.cast import onnx_dtype

if TYPE_CHECKING:
    from ember.runtime.graph.ir import Node

__all__ = ["one_hot_products"]


def _is_range(r: np.ndarray) -> bool:
    """``r`` is 0, 1, ..., K-1 along its last axis, of shape (1, ..., 1, K)."""
    if r.ndim == 0 or r.dtype.kind not in "iu" or any(d != 1 for d in r.shape[:-1]):
        return False
    return bool(np.array_equal(r.reshape(-1), np.arange(r.shape[-1])))


def one_hot_products(
    nodes: list[Node], initializers: dict[str, Any], outputs: Iterable[str]
) -> list[Node]:
    """``nodes`` with every ``MatMul(Cast(Equal(X, range)), table)`` of the module docstring
    as one ``OneHotMatMul`` node, where the Equal and the Cast have no other reader."""
    consts = constant_values(nodes, initializers)
    readers, producer = wiring(nodes, outputs)
    replaced: dict[int, Node] = {}
    removed: set[int] = set()
    for mm in nodes:
        if mm.op_type != "MatMul" or mm.domain or len(mm.inputs) != 2:
            continue
        cast = producer.get(mm.inputs[0])
        table = consts.get(mm.inputs[1])
        if (
            cast is None
            or cast.op_type != "Cast"
            or cast.domain
            or readers.get(cast.outputs[0]) != 1
            or table is None
            or table.ndim != 2
            or table.dtype.kind != "f"
            or not np.all(np.isfinite(table))
        ):
            continue
        equal = producer.get(cast.inputs[0])
        if equal is None or equal.op_type != "Equal" or equal.domain or equal.attrs:
            continue
        to = cast.attrs.get("to")
        if not isinstance(to, int) or onnx_dtype(to) != table.dtype:
            continue  # Cast-1's ``to`` is a name; another type is no valid MatMul as written
        if readers.get(equal.outputs[0]) != 1 or len(equal.inputs) != 2:
            continue
        a, b = equal.inputs
        ids, r = (a, consts.get(b)) if b in consts else (b, consts.get(a))
        if r is None or ids in consts or not _is_range(r) or r.shape[-1] != table.shape[0]:
            continue
        from ember.runtime.graph.ir import Node

        replaced[id(mm)] = Node(
            f"{mm.name}/OneHotMatMul",
            "OneHotMatMul",
            EMBER_DOMAIN,
            (ids, b if ids == a else a, mm.inputs[1]),
            mm.outputs,
            {"to": cast.attrs.get("to", 1)},
            ops.lookup("OneHotMatMul", 1, EMBER_DOMAIN),
        )
        removed.update((id(cast), id(equal)))
    if not replaced:
        return nodes
    return [replaced.get(id(n), n) for n in nodes if id(n) not in removed]
