"""BatchNormalization folded into the Conv before it, at load.

Exporters that do not fold (paddle2onnx: the text-direction classifier of PP-OCR keeps 35
``Conv -> BatchNormalization`` pairs) leave a per-channel multiply-add after each
convolution. When the Conv's weight and bias and the BatchNormalization's four inputs are
constants (initializers or ``Constant`` outputs) and nothing else reads the Conv's output,
the pair becomes one Conv with

    W' = W * s[:, None, ...],  B' = (B - mean) * s + bias,  s = scale / sqrt(var + epsilon)

computed once in float64 on the host and stored in W's dtype as new initializers. The
BatchNormalization node is removed and the Conv writes its output. onnxruntime folds the
same pairs; the values differ only by rounding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ember.runtime.graph.ir import Node

__all__ = ["constant_values", "fold_batch_norms", "wiring"]


def constant_values(nodes: list[Node], initializers: Mapping[str, Any]) -> dict[str, np.ndarray]:
    values = {n: v for n, v in initializers.items() if isinstance(v, np.ndarray)}
    for node in nodes:
        value = node.attrs.get("value")
        if node.op_type == "Constant" and isinstance(value, np.ndarray) and node.outputs:
            values[node.outputs[0]] = value
    return values


def wiring(nodes: list[Node], outputs: Iterable[str]) -> tuple[dict[str, int], dict[str, Node]]:
    """How many readers each value has (a graph output counts as one) and which node
    writes it: what a rewrite checks before it removes a node."""
    readers: dict[str, int] = dict.fromkeys(outputs, 1)
    producer: dict[str, Node] = {}
    for node in nodes:
        for name in node.reads():
            readers[name] = readers.get(name, 0) + 1
        for out in node.outputs:
            if out:
                producer[out] = node
    return readers, producer


def fold_batch_norms(
    nodes: list[Node], initializers: dict[str, Any], outputs: Iterable[str] = ()
) -> list[Node]:
    """``nodes`` without the BatchNormalizations folded into their Conv; the folded weights
    are added to ``initializers`` under the Conv's name. A Conv whose own output is one of
    the graph's ``outputs`` keeps its BatchNormalization."""
    consts = constant_values(nodes, initializers)
    readers, producer = wiring(nodes, outputs)
    removed: set[int] = set()
    for bn in nodes:
        if bn.op_type != "BatchNormalization" or len(bn.inputs) != 5:
            continue
        if len([o for o in bn.outputs if o]) != 1 or bn.attrs.get("training_mode", 0):
            continue
        conv = producer.get(bn.inputs[0])
        if conv is None or conv.op_type != "Conv" or readers.get(bn.inputs[0], 0) != 1:
            continue
        if len(conv.outputs) != 1 or not all(n in consts for n in bn.inputs[1:]):
            continue
        w_name = conv.inputs[1] if len(conv.inputs) > 1 else ""
        b_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
        if w_name not in consts or (b_name and b_name not in consts):
            continue
        w = consts[w_name]
        if w.dtype.kind != "f" or w.ndim < 3:
            continue
        scale, bias, mean, var = (consts[n].astype(np.float64).reshape(-1) for n in bn.inputs[1:])
        out_channels = w.shape[0]
        if not all(v.size == out_channels for v in (scale, bias, mean, var)):
            continue
        s = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
        b = consts[b_name].astype(np.float64).reshape(-1) if b_name else np.zeros(out_channels)
        new_w = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        new_b = ((b - mean) * s + bias).astype(w.dtype)
        new_w_name, new_b_name = f"{conv.name}/bn_folded_W", f"{conv.name}/bn_folded_B"
        if new_w_name in consts or new_b_name in consts:
            continue  # a name the model already uses: leave the pair alone
        initializers[new_w_name], initializers[new_b_name] = new_w, new_b
        consts[new_w_name], consts[new_b_name] = new_w, new_b
        conv.inputs = (conv.inputs[0], new_w_name, new_b_name)
        conv.outputs = (bn.outputs[0],)
        producer[bn.outputs[0]] = conv
        removed.add(id(bn))
    return [n for n in nodes if id(n) not in removed] if removed else nodes
