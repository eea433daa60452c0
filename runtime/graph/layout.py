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

Channels-last alone is worse where the depthwise output is read in NCHW: a
squeeze-excitation block (its GlobalAveragePool and the Mul by the scale) makes XLA write
the activation that follows the depthwise Conv in NCHW, and the loop that fuses the taps
into that write reads its NHWC input across the channel stride (the paddle text-direction
classifier: 5.3 -> 7.0 ms). So ``CHANNELS_LAST`` is set only on a grouped Conv whose input
comes from a convolution and whose output goes only to convolutions, in both cases through
elementwise ops alone.

Where the output goes through such a block, ``mark_nhwc_regions`` makes the values
themselves NHWC: the depthwise Conv returns ``(N, H, W, C)``, the activation and the Mul
run on that shape (the SE scale, ``(N, C, 1, 1)``, reshaped to ``(N, 1, 1, C)``), the
GlobalAveragePool reduces over the middle axes, and the 1x1 Conv after the block takes the
value back to NCHW, a transpose that cancels with its own. The block's small convolutions
on the pooled vector stay NCHW. The classifier (9 such blocks; batch 6, 48x192; 2 cores,
machine shared, load ~11-12, min of 300 calls): 3.85-4.21 -> 2.99-3.31 ms a call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ember.runtime.graph.ir import Node

__all__ = [
    "CHANNELS_LAST",
    "NHWC",
    "POOLED",
    "mark_channels_last",
    "mark_nhwc_regions",
    "mark_pooled",
]

CHANNELS_LAST = "_ember_channels_last"
"""The attribute the hint sets on a Conv node (1); ``ops.conv.conv`` takes it as a keyword."""

POOLED = "_ember_pooled"
"""The attribute set on an ungrouped Conv (1) whose output a pooling op reads through
elementwise ops; ``ops.conv.conv`` takes it as a keyword. A Conv of a one-channel input
computes as shifted multiply-adds (``ops/conv.py``), but not where a pool reads it: XLA:CPU
lays the pool's input channels-last, and the sum of taps written channels-last did not
vectorise (a 5x5 Conv, 1 -> 32 channels on 256x256, + Relu + MaxPool: 7.4 ms through XLA's
convolution, 14.8 ms as taps; 0.9 ms as taps without the pool, 9.8 ms as a convolution)."""

_CONVS = frozenset({"Conv"})
_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
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


def _producers_and_consumers(
    nodes: list[Node],
) -> tuple[dict[str, Node], dict[str, list[Node]]]:
    """Each value's producing node, and the nodes that read it in order (unnamed optional
    inputs and outputs, ``""``, are skipped)."""
    producer: dict[str, Node] = {}
    consumers: dict[str, list[Node]] = {}
    for node in nodes:
        for out in node.outputs:
            if out:
                producer[out] = node
        for name in node.inputs:
            if name:
                consumers.setdefault(name, []).append(node)
    return producer, consumers


def _conv_fed(
    value: str, producer: Mapping[str, Node], fed: dict[str, bool], depth: int = 0
) -> bool:
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
            ok = any(_conv_fed(i, producer, fed, depth + 1) for i in node.inputs if i)
    fed[value] = ok
    return ok


def mark_channels_last(nodes: Iterable[Node]) -> None:
    """Set ``CHANNELS_LAST`` on each grouped Conv whose neighbours keep values channels-last.

    ``nodes`` are ``graph.Node`` objects of one graph (its subgraphs are marked when they are
    built). The hint changes how a value is computed, never what: both layouts give the same
    numbers up to float rounding order.
    """
    nodes = list(nodes)
    producer, consumers = _producers_and_consumers(nodes)
    fed: dict[str, bool] = {}

    def conv_fed(value: str) -> bool:
        return _conv_fed(value, producer, fed)

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


def mark_pooled(nodes: Iterable[Node]) -> None:
    """Set ``POOLED`` on each ungrouped Conv whose output a pooling op reads, directly or
    through elementwise ops (``nodes``: one graph's, as ``mark_channels_last``)."""
    nodes = list(nodes)
    _, consumers = _producers_and_consumers(nodes)
    pooled: dict[str, bool] = {}

    def reaches_pool(value: str, depth: int = 0) -> bool:
        if value in pooled:
            return pooled[value]
        pooled[value] = False  # cycles and deep chains: no
        ok = False
        for user in consumers.get(value, []) if depth < 64 else ():
            if user.op_type in _POOLS or (
                user.op_type in _ELEMENTWISE
                and any(reaches_pool(o, depth + 1) for o in user.outputs if o)
            ):
                ok = True
                break
        pooled[value] = ok
        return ok

    for node in nodes:
        if node.op_type != "Conv" or int(node.attrs.get("group", 1)) != 1:
            continue
        y = node.outputs[0] if node.outputs else ""
        if y and reaches_pool(y):
            node.attrs[POOLED] = 1


# ---------------------------------------------------------------------------------------------
# channels-last regions through squeeze-excitation blocks

NHWC = "_ember_nhwc"
"""The attribute a channels-last region sets on its nodes: ``(mode, indices)``.

- ``("out", ())``: a grouped Conv that starts the region; it computes channels-last and
  returns its output NHWC (``(N, *spatial, C)``).
- ``("inout", indices)``: an elementwise op whose inputs at ``indices`` are NHWC; its other
  inputs (NCHW-shaped, or constants) are broadcast to the same rank and transposed, and its
  output is NHWC.
- ``("pool", (0,))``: a GlobalAveragePool of an NHWC input; the pooled output is NCHW.
- ``("in", indices)``: a Conv that reads the NHWC value at ``indices`` (its input X): the
  value is transposed back to NCHW, which XLA cancels with the Conv's own transpose.
"""

# Elementwise ops a region computes on NHWC values: broadcasting, no axis attributes; the ops of
# _ELEMENTWISE less PRelu and BatchNormalization, which a region does not take.
_REGION_ELEMENTWISE = _ELEMENTWISE - {"PRelu", "BatchNormalization"}


def _to_last(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.transpose(x, (0, *range(2, x.ndim), 1))


def _to_first(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.transpose(x, (0, x.ndim - 1, *range(1, x.ndim - 1)))


def _nhwc_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (an op function) run on the layout that the node's ``NHWC`` attribute says."""

    def run(*args: Any, _ember_nhwc: tuple[str, tuple[int, ...]], **attrs: Any) -> Any:
        import jax.numpy as jnp

        mode, indices = _ember_nhwc
        if mode == "out":
            return _to_last(fn(*args, **{**attrs, CHANNELS_LAST: 1}))
        if mode == "in":
            args = tuple(_to_first(a) if i in indices else a for i, a in enumerate(args))
            return fn(*args, **attrs)
        if mode == "pool":  # GlobalAveragePool's mean (ops/pool.py), over NHWC's spatial axes
            x = jnp.asarray(args[0])
            axes = tuple(range(1, x.ndim - 1))
            n = int(np.prod([x.shape[a] for a in axes]))
            if jnp.issubdtype(x.dtype, jnp.floating) and n > 0:
                pooled = jnp.sum(x * jnp.asarray(1.0 / n, x.dtype), axis=axes, keepdims=True)
            else:
                pooled = jnp.mean(x, axis=axes, keepdims=True).astype(x.dtype)
            # (N, 1, .., 1, C) is a reshape away from NCHW's (N, C, 1, .., 1)
            return pooled.reshape(x.shape[0], x.shape[-1], *(1,) * (x.ndim - 2))
        rank = max(jnp.ndim(args[i]) for i in indices)
        moved = []
        for i, a in enumerate(args):
            if a is not None and i not in indices and jnp.ndim(a) > 0:
                a = jnp.asarray(a)
                if a.ndim > rank:
                    raise ValueError(f"input {i} has rank {a.ndim} above the region's {rank}")
                a = _to_last(a.reshape((1,) * (rank - a.ndim) + a.shape))
            moved.append(a)
        return fn(*moved, **attrs)

    return run


def mark_nhwc_regions(
    nodes: Iterable[Node], initializers: Mapping[str, Any], outputs: Iterable[str] = ()
) -> None:
    """Extend channels-last from a grouped Conv through the ops after it, up to the
    convolutions that read the result, when every reader is one a region can take.

    A region starts at a grouped Conv without ``CHANNELS_LAST`` whose input comes from a
    convolution (its transpose to NHWC cancels with that one's). It takes the elementwise
    ops that read its values, a GlobalAveragePool of them (the pooled values are NCHW), and
    it ends at Convs that read a value as their input X. An elementwise op's other inputs
    must be of a rank known at load (constants, Conv outputs, and what broadcasts them) no
    higher than the region's. A value read elsewhere (another op, a graph output, a
    subgraph) leaves the Conv as it was. Each node of an accepted region gets ``NHWC`` and
    its op function wrapped to match.
    """
    nodes = list(nodes)
    graph = _RegionGraph(nodes, initializers, outputs)
    taken: set[int] = set()  # ids of the nodes of accepted regions: a node is in one only
    for seed in nodes:
        if not _is_region_seed(graph, seed, taken):
            continue
        region = _grow_region(graph, seed, taken)
        if region is not None:
            _mark_region(*region, taken)


_Mark = tuple[str, tuple[int, ...]]  # (how a node takes NHWC, its NHWC input positions)


class _RegionGraph:
    """What growing a region reads of the graph: who makes and reads each value, the
    values read from outside (subgraphs, graph outputs), and each value's rank when the
    load can tell it."""

    def __init__(
        self, nodes: list[Node], initializers: Mapping[str, Any], outputs: Iterable[str]
    ) -> None:
        self.producer, self.consumers = _producers_and_consumers(nodes)
        self.outer: set[str] = set()
        self.values: dict[str, Any] = dict(initializers)
        self.graph_outputs = set(outputs)
        for node in nodes:
            self.outer |= node.outer_reads
            value = node.attrs.get("value")
            if node.op_type == "Constant" and isinstance(value, np.ndarray) and node.outputs:
                self.values[node.outputs[0]] = value
        self.consts = {n: int(np.ndim(v)) for n, v in self.values.items()}
        self._ranks: dict[str, int | None] = {}

    def rank(self, value: str, depth: int = 0) -> int | None:
        """The value's rank when the load can tell it, else None."""
        if value in self.consts:
            return self.consts[value]
        if value in self._ranks:
            return self._ranks[value]
        self._ranks[value] = None  # cycles: unknown
        node = self.producer.get(value)
        r: int | None = None
        if node is not None and depth < 64:
            op = node.op_type
            if op == "Conv" and len(node.inputs) > 1 and node.inputs[1] in self.consts:
                r = self.consts[node.inputs[1]]
            elif op in ("GlobalAveragePool", "GlobalMaxPool"):
                r = self.rank(node.inputs[0], depth + 1)
            elif op == "Reshape" and len(node.inputs) > 1 and node.inputs[1] in self.values:
                r = int(np.size(self.values[node.inputs[1]]))
            elif op in _REGION_ELEMENTWISE:
                known = [self.rank(i, depth + 1) for i in node.inputs if i]
                r = None if not known or None in known else max(k for k in known if k is not None)
        self._ranks[value] = r
        return r

    def escapes(self, value: str) -> bool:
        """The value is read by no node, or outside the graph's nodes."""
        users = self.consumers.get(value, [])
        return not users or value in self.outer or value in self.graph_outputs

    def user_mark(self, user: Node, idx: tuple[int, ...], region_rank: int) -> _Mark | None:
        """How ``user`` takes its NHWC inputs at ``idx``, or None when a region cannot
        take it: an X of a Conv ends the region, a pool ends it too (its result is NCHW),
        an elementwise op carries it on when its other inputs broadcast."""
        op = user.op_type
        if op == "Conv" and idx == (0,):
            return ("in", idx)
        if op == "GlobalAveragePool" and len(user.inputs) == 1:
            return ("pool", idx)
        if op in _REGION_ELEMENTWISE and len(user.outputs) == 1:
            others = [n for i, n in enumerate(user.inputs) if n and i not in idx]
            known = [self.rank(n) for n in others]
            if any(k is None or k > region_rank for k in known):
                return None
            return ("inout", idx)
        return None


def _is_region_seed(graph: _RegionGraph, seed: Node, taken: set[int]) -> bool:
    """A grouped Conv not yet channels-last nor in a region, with a constant weight and
    one output, whose input comes from a convolution."""
    if seed.op_type != "Conv" or int(seed.attrs.get("group", 1)) <= 1:
        return False
    if CHANNELS_LAST in seed.attrs or id(seed) in taken:
        return False
    x = seed.inputs[0] if len(seed.inputs) > 1 and seed.inputs[1] in graph.consts else ""
    return bool(x) and _conv_fed(x, graph.producer, {}) and len(seed.outputs) == 1


def _grow_region(
    graph: _RegionGraph, seed: Node, taken: set[int]
) -> tuple[dict[int, _Mark], dict[int, Node], set[str]] | None:
    """The region from ``seed``: each member's mark, the members (by id) and the values
    that are NHWC; None when a value escapes or a reader cannot be taken."""
    region_rank = graph.consts[seed.inputs[1]]
    marks: dict[int, _Mark] = {id(seed): ("out", ())}
    members: dict[int, Node] = {id(seed): seed}
    nhwc = {seed.outputs[0]}
    todo = [seed.outputs[0]]
    while todo:
        value = todo.pop()
        if graph.escapes(value):
            return None
        for user in graph.consumers[value]:
            idx = tuple(i for i, n in enumerate(user.inputs) if n in nhwc)
            mark = graph.user_mark(user, idx, region_rank)
            # a node of another region, or one reached again that would take NHWC otherwise
            if mark is None or id(user) in taken or marks.get(id(user), mark)[0] != mark[0]:
                return None
            marks[id(user)] = mark
            members[id(user)] = user
            if mark[0] == "inout" and user.outputs[0] not in nhwc:
                nhwc.add(user.outputs[0])
                todo.append(user.outputs[0])
    return marks, members, nhwc


def _mark_region(
    marks: dict[int, _Mark], members: dict[int, Node], nhwc: set[str], taken: set[int]
) -> None:
    """Set ``NHWC`` on each member and wrap its op function to match."""
    for key, node in members.items():
        mode, _ = marks[key]
        # an op whose NHWC inputs were found one at a time: mark them all
        idx = tuple(i for i, n in enumerate(node.inputs) if n in nhwc)
        node.attrs[NHWC] = (mode, () if mode == "out" else idx)
        if node.opdef is not None:
            node.opdef = replace(node.opdef, fn=_nhwc_fn(node.opdef.fn))
        taken.add(key)
