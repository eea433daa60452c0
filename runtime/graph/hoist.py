"""Loop-invariant nodes moved out of ``Loop`` bodies, at load.

Exporters that lower a decoder to a ``Loop`` (paddle2onnx's attention decoders) pass the
encoder's features and every weight through the body as carried values that the body
hands back unchanged, and compute from them inside the body: SLANet-plus projects its
encoder features (``MatMul(features, W)``) and transposes its GRU weights in each of its
~200 steps, the same values every step (~0.3 ms a step on XLA:CPU, a third of the step).

``loop_invariants`` moves such nodes in front of the ``Loop``: a body node whose inputs are
all *invariant* (a carried value the body passes through unchanged, a value of the
enclosing scope, a constant, or the output of another such node) is computed once, in the
enclosing graph, reading the ``Loop``'s own input for each pass-through value; the body
reads its output from the enclosing scope. ``Constant`` nodes move only along with a node
that reads them. Nodes with subgraphs, random ops and nodes that the layout passes marked
stay in the body. A Loop that runs no step now computes the moved nodes once (their values
are unused): the only difference, and it costs what one step would.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeGuard

from ember.runtime import ops
from ember.runtime.graph.layout import CHANNELS_LAST, NHWC

if TYPE_CHECKING:
    from ember.runtime.graph.ir import Graph, Node

__all__ = ["loop_invariants"]

# a Loop body's formal inputs before its carried values: (iteration number, condition)
_CARRIED_FROM = 2


def loop_invariants(nodes: list[Node], known: set[str]) -> list[Node]:
    """``nodes`` with each ``Loop``'s invariant body nodes in front of it (see the module
    docstring); ``known`` holds the enclosing graph's other names (inputs, initializers),
    which a moved node's output must not take."""
    names = set(known)
    for node in nodes:
        names.update(o for o in node.outputs if o)
    out: list[Node] = []
    for node in nodes:
        body = node.attrs.get("body")
        if node.op_type == "Loop" and not node.domain and _is_graph(body):
            moved, new_node = _hoist(node, body, names)
            out.extend(moved)
            names.update(o for m in moved for o in m.outputs if o)
            node = new_node
        out.append(node)
    return out


def _is_graph(value: Any) -> TypeGuard[Graph]:
    from ember.runtime.graph.ir import Graph

    return isinstance(value, Graph)


def _hoist(loop: Node, body: Graph, taken: set[str]) -> tuple[list[Node], Node]:
    """The nodes moved out of ``body`` (reading the enclosing scope's names) and ``loop``
    with the body that is left."""
    formal = body.input_names
    outer_of: dict[str, str] = {}  # a pass-through carried value -> the Loop's input for it
    for k, name in enumerate(formal[_CARRIED_FROM:]):
        given = loop.inputs[_CARRIED_FROM + k] if _CARRIED_FROM + k < len(loop.inputs) else ""
        if given and 1 + k < len(body.output_names) and body.output_names[1 + k] == name:
            outer_of[name] = given
    invariant = set(outer_of) | set(body.outer_reads)
    moving: list[Node] = []
    constants: dict[str, Node] = {}
    for node in body.nodes:
        if node.op_type == "Constant" and not node.domain and not node.inputs:
            constants[node.outputs[0]] = node
            invariant.add(node.outputs[0])
            continue
        if (
            node.opdef is None
            or node.opdef.subgraphs
            or node.op_type in ops.RANDOM_OPS
            or node.op_type == "Dropout"  # random where its training_mode is on
            or not node.inputs
            or CHANNELS_LAST in node.attrs
            or NHWC in node.attrs
            or not all(n in invariant for n in node.inputs if n)
            or any(o in taken for o in node.outputs if o)
        ):
            continue
        moving.append(node)
        invariant.update(o for o in node.outputs if o)
    if not moving:
        return [], loop
    needed = [
        constants[n] for n in dict.fromkeys(i for m in moving for i in m.inputs) if n in constants
    ]
    if any(c.outputs[0] in taken for c in needed):
        return [], loop  # a constant's name is taken outside: leave the body as it is
    gone = {id(n) for n in (*moving, *needed)}
    # named for their Loop: a body's node names may repeat names of the enclosing graph
    # (a node's name keys its profile and its speculated shapes)
    moved = [
        replace(n, name=f"{loop.name}/{n.name}", inputs=tuple(outer_of.get(i, i) for i in n.inputs))
        for n in (*needed, *moving)
    ]
    kept = [n for n in body.nodes if id(n) not in gone]
    for position, node in enumerate(kept):
        node.position = position
    reads: set[str] = set(body.output_names)
    for node in kept:
        reads |= node.reads()
    local = set(formal) | set(body.initializers) | {o for n in kept for o in n.outputs if o}
    new_body = replace(body, nodes=kept, outer_reads=frozenset(reads - local))
    # the Loop reads what its body reads outside, now the moved nodes' outputs too
    outer_reads = (set(loop.outer_reads) - set(body.outer_reads)) | new_body.outer_reads
    attrs = dict(loop.attrs)
    attrs["body"] = new_body
    return moved, replace(loop, attrs=attrs, outer_reads=frozenset(outer_reads))
