"""Which grouped convolutions compute channels-last: a hint set on the graph at load.

XLA:CPU runs every ungrouped convolution channels-last: it transposes a Conv's NCHW input
to NHWC, convolves (a 1x1 Conv becomes a dot over ``[N*H*W, C]``) and transposes back, and
the elementwise ops between two convolutions (bias, BatchNormalization, activations) fuse
with those transposes, so in a chain of convolutions the values stay NHWC in memory. A
depthwise Conv is computed as a sum of shifted slices times taps (``ops/conv.py``); done on
NCHW it makes the chain go NHWC -> NCHW -> NHWC around it, and done on NHWC the transposes
of its neighbours cancel with its own. Measured on the paddle2onnx PP-OCRv4 exports
(2 cores, machine shared, load ~11, min of 30 calls): the text recogniser 20.4 -> 11.3 ms a
call, the detector 66 -> 48 ms.

Channels-last is worse where the depthwise output is read in NCHW: a squeeze-excitation
block (its GlobalAveragePool and the Mul by the scale) makes XLA write the activation that
follows the depthwise Conv in NCHW, and the loop that fuses the taps into that write reads
its NHWC input across the channel stride (the paddle text-direction classifier: 5.3 ->
7.0 ms). So the hint is set only on a grouped Conv whose input comes from a convolution and
whose output goes only to convolutions, in both cases through elementwise ops alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ember.runtime.graph import Node

__all__ = ["CHANNELS_LAST", "mark_channels_last"]

CHANNELS_LAST = "_ember_channels_last"
"""The attribute the hint sets on a Conv node (1); ``ops.conv.conv`` takes it as a keyword."""

_CONVS = frozenset({"Conv"})
# Ops whose output has the layout of their first input: XLA fuses them with the transposes.
_ELEMENTWISE = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Clip",
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Identity",
        "BatchNormalization",
    }
)


def mark_channels_last(nodes: Iterable[Node]) -> None:
    """Set ``CHANNELS_LAST`` on each grouped Conv whose neighbours keep values channels-last.

    ``nodes`` are ``graph.Node`` objects of one graph (its subgraphs are marked when they are
    built). The hint changes how a value is computed, never what: both layouts give the same
    numbers up to float rounding order.
    """
    nodes = list(nodes)
    producer: dict[str, Node] = {}
    consumers: dict[str, list[Node]] = {}
    for node in nodes:
        for out in node.outputs:
            if out:
                producer[out] = node
        for name in node.inputs:
            if name:
                consumers.setdefault(name, []).append(node)
    fed: dict[str, bool] = {}

    def conv_fed(value: str, depth: int = 0) -> bool:
        """The value comes from a Conv through elementwise ops (one fed input is enough)."""
        if value in fed:
            return fed[value]
        fed[value] = False  # cycles and deep chains: no
        node = producer.get(value)
        ok = False
        if node is not None and depth < 64:
            op = node.op_type
            if op in _CONVS:
                ok = True
            elif op in _ELEMENTWISE:
                ok = any(conv_fed(i, depth + 1) for i in node.inputs if i)
        fed[value] = ok
        return ok

    read: dict[str, bool] = {}

    def conv_read(value: str, depth: int = 0) -> bool:
        """Every reader of the value is a Conv (as its input X) or an elementwise op whose
        outputs are themselves conv-read."""
        if value in read:
            return read[value]
        read[value] = False
        users = consumers.get(value, [])
        ok = bool(users) and depth < 64
        for user in users if ok else ():
            op = user.op_type
            if op in _CONVS:
                ok = user.inputs[0] == value and user.inputs.count(value) == 1
            elif op in _ELEMENTWISE:
                outs = [o for o in user.outputs if o]
                ok = bool(outs) and all(conv_read(o, depth + 1) for o in outs)
            else:
                ok = False
            if not ok:
                break
        read[value] = ok
        return ok

    for node in nodes:
        if node.op_type != "Conv" or int(node.attrs.get("group", 1)) <= 1:
            continue
        x = node.inputs[0] if node.inputs else ""
        y = node.outputs[0] if node.outputs else ""
        if x and y and conv_fed(x) and conv_read(y):
            node.attrs[CHANNELS_LAST] = 1
