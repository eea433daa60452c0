"""Graph-break analysis: which nodes need values that only exist when the model runs.

A value is *host-known* (``host``) when it can be computed on the host while tracing:
initializers, ``Constant``, the outputs of ``Shape``/``Size`` (static shapes under
``jax.jit``), the outputs of a break node (it runs eagerly, so its outputs are concrete), and
the outputs of any other node whose inputs are all host-known. Shape arithmetic
(``Shape -> Gather -> Concat -> Reshape``) is therefore folded, not a break.

A node is a *break* when it needs on the host a value that is not host-known: an input
listed in its op's ``host_inputs`` (``Reshape``'s shape, ``TopK``'s k, ``If``'s condition,
``Loop``'s trip count and condition), or any input of a ``value_shaped`` op (``NonZero``,
``Unique``), whose output shape is its data.

``needs_host`` are the values some later node reads on the host, found backwards from those
inputs through host-known nodes. Values in ``needs_host`` that come from a break node (or
from host work of an earlier segment) enter the next segments as *static values*: their
values are part of the segment cache key. Other values cross segment boundaries as arrays.

**Control flow specialises on its condition.** An ``If`` whose condition is not host-known
is not run as a break node (the whole If would wait on the host for its condition):

- when the condition is computed from constants and *small* inputs (scalars such as a
  sample rate or a flag; an input of unknown or static shape of at most ``PRELUDE_MAX_SIZE``
  elements) it is computed on the host at the start of each call by the *prelude* nodes
  (``Plan.prelude``). The condition is then a static value of the segment holding the
  ``If``: the segment cache key holds the condition's value and the trace inlines the taken
  branch, so such a model is one compiled program per condition value, with no break.
- otherwise (a condition computed from tensors on the device) the ``If`` is a *sync break*
  (``BreakInfo.sync``): the segment before it stops there, the condition comes to the host,
  and the next segment starts *at* the ``If`` with the condition as a static value, so the
  taken branch is compiled (and cached) as part of that segment.

``Plan.labels`` names such conditions for the trace (``"If_0 condition"``).

A break that still runs a subgraph (a ``Loop`` with scan outputs on a trip count computed on
the device; an ``If`` whose branch needs more on the host than its condition) does not run
it node by node either: ``break_subgraphs`` compiles each branch or body and caches it at
the break node's position.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np
import onnx

from ember.runtime import ops
from ember.runtime.graph.ir import Graph, Node

__all__ = [
    "EAGER_SEGMENT_NODES",
    "PARAM_MIN_SIZE",
    "PRELUDE_MAX_SIZE",
    "BreakInfo",
    "Plan",
    "Segment",
    "analyse",
]

EAGER_SEGMENT_NODES = 20
"""A segment after a break with fewer nodes than this runs eagerly (``compiled: false``)."""

PARAM_MIN_SIZE = 1 << 16
"""Initializers with at least this many elements that no node reads on the host are passed
to compiled code as device arrays instead of being baked into the program as constants,
which keeps compiles (and disk-cache entries) small for large models."""

PRELUDE_MAX_SIZE = 1024
"""An input with at most this many elements (by its declared shape; unknown shapes count
as small) may be read on the host by the prelude that computes an ``If`` condition."""

# Ops whose outputs depend only on the *shape* of their input.
SHAPE_OPS = frozenset({"Shape", "Size"})


def computed_from(graph: Graph, names: AbstractSet[str]) -> set[str]:
    """``names`` and every value of ``graph`` computed from them: the values whose *values*
    follow them (a Shape or Size of one depends on its shape only, and is not)."""
    found = set(names)
    for node in graph.nodes:
        if node.op_type not in SHAPE_OPS and any(n in found for n in node.reads()):
            found.update(o for o in node.outputs if o)
    return found


# Ops that never give host-known values, whatever their inputs.
NEVER_HOST_OPS = ops.RANDOM_OPS

_CONTROL_REASONS = {
    ("If", 0): "the If condition",
    ("Loop", 0): "the Loop trip count",
    ("Loop", 1): "the Loop condition",
}


@dataclass(frozen=True)
class BreakInfo:
    position: int
    node: str
    op_type: str
    reason: str
    # True: the break only brings the node's host inputs (an If condition) to the host; the
    # node itself runs compiled at the start of the next segment, which starts *at* it.
    sync: bool = False


@dataclass(frozen=True)
class Segment:
    """Nodes ``[position, stop)`` of the sorted graph; ``stop`` None means the end."""

    position: int
    stop: int | None
    args: tuple[str, ...]  # arrays from the caller or earlier segments, sorted by name
    statics: tuple[str, ...]  # host values from earlier work, sorted by name (in the key)
    params: tuple[str, ...]  # large initializers passed as device arrays
    outputs: tuple[str, ...]  # values the rest of the graph (or the caller) needs
    compiled: bool
    reason: str | None  # what the break at ``stop`` needs, None at the end


@dataclass(frozen=True)
class Plan:
    breaks: dict[int, BreakInfo]
    segments: list[Segment]
    host: frozenset[str]
    needs_host: frozenset[str]
    params: frozenset[str]
    # Values computed from initializers and constants alone: folded once per model.
    const: frozenset[str] = frozenset()
    # Positions of the nodes computed on the host at the start of a call (If conditions
    # from small inputs), in graph order; no segment runs them.
    prelude: tuple[int, ...] = ()
    # A person's name for a static value that decides control flow: {"cond": "If_0 condition"}
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def graph_break(self) -> bool:
        return bool(self.breaks)


def _input_name(node: Node, i: int) -> str:
    try:
        import onnx.defs

        schema = onnx.defs.get_schema(node.op_type, node.domain or "")
        formal = schema.inputs[min(i, len(schema.inputs) - 1)].name
    except Exception:
        formal = f"input {i}"
    return formal


def _reason(node: Node, i: int | None) -> str:
    if i is None:
        return f"the values of {node.op_type}'s input (its output shape depends on them)"
    known = _CONTROL_REASONS.get((node.op_type, i))
    if known:
        return known
    return f"the value of {node.op_type}'s input {_input_name(node, i)!r}"


def _needs(node: Node, host: set[str]) -> str | None:
    """Why ``node`` needs a value that is not host-known, or None."""
    opdef = node.opdef
    if opdef is None:
        return None
    present = [n for n in node.inputs if n]
    if opdef.value_shaped and not all(n in host for n in present):
        return _reason(node, None)
    for i in opdef.host_inputs:
        if i < len(node.inputs) and node.inputs[i] and node.inputs[i] not in host:
            if node.op_type == "Loop" and _loop_without_scans(node):
                continue  # a traced trip count and condition: lax.while_loop
            return _reason(node, i)
    if opdef.subgraphs:
        for value in node.attrs.values():
            subs = value if isinstance(value, list) else [value]
            for sub in subs:
                if isinstance(sub, Graph):
                    inner = _subgraph_needs(sub, host)
                    if inner is not None:
                        return f"{inner} inside {node.op_type} {node.name!r}"
    return None


def _loop_without_scans(node: Node) -> bool:
    from ember.runtime.ops.control import loop_scan_outputs

    body = node.attrs.get("body")
    if not isinstance(body, Graph):
        return False
    return loop_scan_outputs(len(node.inputs), len(body.output_names)) == 0


def _subgraph_needs(graph: Graph, outer_host: set[str]) -> str | None:
    # Formal inputs of a subgraph (Loop's iteration values, Scan's slices) count as computed.
    host = (set(outer_host) - set(graph.input_names)) | set(graph.initializers)
    for node in graph.nodes:
        reason = _needs(node, host)
        if reason is not None:
            return reason
        _propagate(node, host)
    return None


def _propagate(node: Node, host: set[str]) -> None:
    opdef = node.opdef
    if node.op_type in SHAPE_OPS or (
        node.op_type not in NEVER_HOST_OPS
        and not (opdef is not None and opdef.subgraphs)
        and all(n in host for n in node.reads())
    ):
        host.update(o for o in node.outputs if o)


@dataclass
class _Walk:
    """What the forward walk over the sorted nodes learns: the values known on the host, those
    folded from constants, the breaks, and the prelude (host work at the start of a call)."""

    host: set[str]
    const: set[str]
    # values the prelude could compute at the start of a call, and their producers
    pre: set[str]
    breaks: dict[int, BreakInfo] = field(default_factory=dict)
    producer: dict[str, Node] = field(default_factory=dict)
    prelude: set[int] = field(default_factory=set)
    labels: dict[str, str] = field(default_factory=dict)


def _condition_break(node: Node, reason: str | None, walk: _Walk) -> tuple[str | None, bool]:
    """(reason, sync) of a node whose only need on the host is an If's condition: computed
    in the prelude (no break), or brought to the host before the If (sync)."""
    cond = node.inputs[0] if node.op_type == "If" and node.inputs else ""
    if reason is None or not cond or cond in walk.host:
        return reason, False
    if _needs(node, walk.host | {cond}) is not None:
        return reason, False
    walk.labels.setdefault(cond, f"{node.name} condition")
    if cond not in walk.pre:  # computed on the device: brought to the host before the If
        return reason, True
    # computed on the host at the start of each call
    cone = _cone(cond, walk.producer, walk.const)
    walk.prelude.update(n.position for n in cone)
    for n in cone:
        walk.host.update(o for o in n.outputs if o)
    walk.host.add(cond)
    return None, False


def _walk_node(
    node: Node,
    walk: _Walk,
    forced: Mapping[int, str],
    strings: frozenset[str],
    inputs: set[str],
) -> None:
    """One node of the forward walk: a break, or what it adds to host, const and prelude."""
    reason = forced.get(node.position) or _reads_strings(node, strings)
    sync = False
    if reason is None:
        reason, sync = _condition_break(node, _needs(node, walk.host), walk)
    if reason is not None:
        walk.breaks[node.position] = BreakInfo(
            node.position, node.name, node.op_type, reason, sync=sync
        )
        if sync:
            walk.host.add(node.inputs[0])
        else:
            walk.host.update(o for o in node.outputs if o)
        return
    for o in node.outputs:
        if o:
            walk.producer[o] = node
    if _prelude_can_run(node, walk.pre, inputs):
        walk.pre.update(o for o in node.outputs if o)
    _propagate(node, walk.host)
    if (
        node.op_type not in NEVER_HOST_OPS
        and not (node.opdef is not None and node.opdef.subgraphs)
        and all(n in walk.const for n in node.reads())
    ):
        walk.const.update(o for o in node.outputs if o)


def _host_needs(nodes: list[Node], walk: _Walk) -> set[str]:
    """The values some node needs concrete on the host, walking back from the nodes that
    read them (a value-shaped op's inputs, an op's host inputs, what a subgraph reads)."""
    needs: set[str] = set()
    for node in reversed(nodes):
        if node.position in walk.prelude:
            continue  # the prelude runs on the host anyway
        if node.position in walk.breaks and not walk.breaks[node.position].sync:
            continue  # a break node gets concrete inputs anyway
        opdef = node.opdef
        if opdef is not None:
            if opdef.value_shaped:
                needs.update(n for n in node.inputs if n)
            for i in opdef.host_inputs:
                if i < len(node.inputs) and node.inputs[i]:
                    needs.add(node.inputs[i])
        if opdef is not None and opdef.subgraphs:
            # Branches and bodies may read outer values on the host (shape arithmetic).
            needs.update(r for r in node.outer_reads if r in walk.host)
        if node.op_type in SHAPE_OPS:
            continue
        if any(o in needs for o in node.outputs if o) and all(n in walk.host for n in node.reads()):
            needs.update(node.reads())
    return needs


def _device_params(
    graph: Graph, const: set[str], needs: set[str], const_sizes: Mapping[str, int] | None
) -> frozenset[str]:
    """Constant values large enough to pass as device arrays, that no host work needs."""
    sizes = {n: v.size for n, v in graph.initializers.items() if isinstance(v, np.ndarray)}
    sizes.update(const_sizes or {})
    return frozenset(
        name
        for name, size in sizes.items()
        if name in const and name not in needs and size >= PARAM_MIN_SIZE
    )


def analyse(
    graph: Graph,
    forced: Mapping[int, str] | None = None,
    const_sizes: Mapping[str, int] | None = None,
) -> Plan:
    """Find the breaks of ``graph`` and cut it into segments.

    ``forced`` adds breaks found by tracing (position -> reason), for nodes whose needs the
    registry does not declare. ``const_sizes`` gives the element counts of values folded
    from constants, so large ones are passed as device arrays like large initializers.
    """
    walk = _Walk(
        host=set(graph.initializers),
        const=set(graph.initializers),
        pre=set(graph.initializers) | _small_inputs(graph),
    )
    strings = _string_inputs(graph)
    inputs = set(graph.input_names)
    for node in graph.nodes:
        _walk_node(node, walk, forced or {}, strings, inputs)
    needs = _host_needs(graph.nodes, walk)
    params = _device_params(graph, walk.const, needs, const_sizes)
    host, consts, prelude = frozenset(walk.host), frozenset(walk.const), walk.prelude
    segments = _cut(graph, walk.breaks, host, frozenset(needs), params, consts, prelude)
    return Plan(
        walk.breaks,
        segments,
        host,
        frozenset(needs),
        params,
        consts,
        tuple(sorted(prelude)),
        walk.labels,
    )


def _string_inputs(graph: Graph) -> frozenset[str]:
    """The graph inputs declared as string tensors: XLA has no strings, so they stay on
    the host (numpy object arrays) and only break nodes, which run eagerly, read them."""
    strings = set()
    for name in graph.input_names:
        tp = graph.value_info.get(name)
        if tp is not None and tp.HasField("tensor_type"):
            if tp.tensor_type.elem_type == onnx.TensorProto.STRING:
                strings.add(name)
    return frozenset(strings)


def _reads_strings(node: Node, strings: frozenset[str]) -> str | None:
    """The break reason of a node that reads a string input, or None. Its outputs are
    host values, so the nodes after it read strings on the host too."""
    for name in sorted(node.reads() & strings):
        return f"input {name!r} is a string tensor: strings stay on the host"
    return None


def _small_inputs(graph: Graph) -> set[str]:
    """Graph inputs the prelude may read on the host: declared small, or of unknown shape."""
    small = set()
    for name in graph.input_names:
        tp = graph.value_info.get(name)
        if tp is None or not tp.HasField("tensor_type"):
            continue
        tt = tp.tensor_type
        if not tt.HasField("shape"):
            small.add(name)  # unknown rank (exporters leave scalars like this)
            continue
        size = 1
        for d in tt.shape.dim:
            if not d.HasField("dim_value") or d.dim_value <= 0:
                size = -1
                break
            size *= d.dim_value
        if 0 <= size <= PRELUDE_MAX_SIZE:
            small.add(name)
    return small


def _prelude_can_run(node: Node, pre: set[str], inputs: set[str]) -> bool:
    """Whether ``node`` can run on the host at the start of a call, given the values ``pre``."""
    if node.op_type in NEVER_HOST_OPS or (node.opdef is not None and node.opdef.subgraphs):
        return False
    if node.opdef is None:
        return False
    if node.op_type in SHAPE_OPS:
        # the shape of an input is known at the start of a call; of a computed value, not
        return bool(node.inputs) and (node.inputs[0] in inputs or node.inputs[0] in pre)
    return all(n in pre for n in node.reads())


def _cone(value: str, producer: Mapping[str, Node], const: set[str]) -> list[Node]:
    """The nodes that compute ``value`` from inputs and constants, in graph order."""
    seen: dict[int, Node] = {}
    todo = [value]
    while todo:
        v = todo.pop()
        node = producer.get(v)
        if node is None or v in const or node.position in seen:
            continue
        seen[node.position] = node
        if node.op_type not in SHAPE_OPS:
            todo.extend(node.reads())
    return [seen[p] for p in sorted(seen)]


def _cut(
    graph: Graph,
    breaks: dict[int, BreakInfo],
    host: frozenset[str],
    needs: frozenset[str],
    params: frozenset[str],
    const: frozenset[str],
    prelude: AbstractSet[int] = frozenset(),
) -> list[Segment]:
    nodes = graph.nodes
    n = len(nodes)
    # a node break runs the node itself; after a sync break the next segment starts at it
    starts = [0] + [b if breaks[b].sync else b + 1 for b in sorted(breaks)]
    stops: list[int | None] = [*sorted(breaks), None]
    # For "needed later": the first position at which each value is read, from the end.
    graph_outputs = set(graph.output_names)
    segments: list[Segment] = []
    for start, stop in zip(starts, stops, strict=True):
        end = n if stop is None else stop
        if end <= start:
            continue  # two breaks in a row, or a break at the end: nothing to run
        produced: set[str] = set()
        reads: set[str] = set()
        weight = 0
        for node in nodes[start:end]:
            if node.position in prelude:
                continue  # computed by the prelude: its outputs come from outside
            weight += _weight(node)
            reads |= {r for r in node.reads() if r not in produced}
            outs = [o for o in node.outputs if o]
            if outs and all(o in const for o in outs):
                # folded once per model, before any segment runs: for the segment these
                # values come from outside (large ones as parameters), like initializers
                continue
            produced.update(outs)
        later: set[str] = set(graph_outputs)
        for node in nodes[end:]:
            later |= node.reads()
        outside = reads - produced
        statics = sorted(v for v in outside if v in needs and v in host and v not in const)
        params_read = sorted(v for v in outside if v in params)
        args = sorted(v for v in outside if v not in const and v not in statics)
        if start == 0 and stop is None:
            outputs = list(dict.fromkeys(graph.output_names))
        else:
            outputs = sorted(v for v in produced if v in later)
        compiled = start == 0 or weight >= EAGER_SEGMENT_NODES
        reason = breaks[stop].reason if stop is not None else None
        segments.append(
            Segment(
                position=start,
                stop=stop,
                args=tuple(args),
                statics=tuple(statics),
                params=tuple(params_read),
                outputs=tuple(outputs),
                compiled=compiled,
                reason=reason,
            )
        )
    return segments


def _weight(node: Node) -> int:
    """The node count of ``node`` with the nodes of its subgraphs (an If's branches)."""
    n = 1
    for value in node.attrs.values():
        subs = value if isinstance(value, list) else [value]
        for sub in subs:
            if isinstance(sub, Graph):
                n += sum(_weight(inner) for inner in sub.nodes)
    return n
