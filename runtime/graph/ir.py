"""The graph and its interpreter: ONNX graphs as sorted node lists, run node by node.

``Graph.from_proto`` turns an ``onnx.GraphProto`` into a topologically sorted list of
``Node`` objects with their op functions resolved from ``ember.runtime.ops`` and their
attributes converted to Python values (graph attributes become nested ``Graph`` objects).

Running a graph is a loop over its nodes with an *environment*, a dict from value name to
value. Values are ``numpy`` arrays when they are known on the host (initializers,
``Constant``, shape arithmetic folded from static shapes) and ``jax`` arrays (or tracers
inside ``jax.jit``) otherwise; sequences are Python lists of arrays; an absent optional
value is ``None``. The same loop serves every mode:

- ``interpret(graph, inputs)``: eager, one op at a time (``ember.runtime.run``);
- inside ``jax.jit``: the trace of a compiled segment (``ember.runtime.compile``);
- ``run_nodes(graph, env, start, stop, on_node=...)``: a slice of the sorted graph with a
  hook after every node, the building block of profile mode (op timings, tensor liveness).

An op function with a keyword parameter ``num_outputs`` gets the node's number of outputs
when the node has no such attribute (``Split`` without sizes divides into that many parts).

Graph attributes (``If``'s branches, ``Loop``'s body) reach op functions as ``Subgraph``
callables, ``body(*inputs) -> tuple(outputs)``, which see the values of the enclosing
scope, so the same callable runs eagerly, under ``jax.jit``, or inside ``lax`` control flow.

Call these inside ``jax.enable_x64(True)`` (``ember.runtime`` does) so int64 and float64
values keep their ONNX dtypes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ember.runtime import ops
from ember.runtime.errors import LoadError, NodeError, UnsupportedOpsError
from ember.runtime.graph import fold, hoist, layout, one_hot, qdq

__all__ = [
    "Graph",
    "Node",
    "OnNode",
    "Subgraph",
    "interpret",
    "run_node",
    "run_nodes",
    "to_host",
]

OnNode = Callable[[int, "Node", list[Any], tuple[Any, ...]], None]
"""``on_node(position, node, inputs, outputs)``: called after each node of ``run_nodes``."""


@dataclass
class Node:
    """One node of a sorted graph. ``inputs`` keeps ``""`` for an omitted optional input."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    opdef: ops.OpDef | None
    position: int = 0
    # Names this node reads from the enclosing scope through its subgraphs.
    outer_reads: frozenset[str] = frozenset()

    def reads(self) -> set[str]:
        """Every value name the node reads: its inputs and its subgraphs' outer names."""
        return {n for n in self.inputs if n} | set(self.outer_reads)

    def label(self) -> str:
        return f"node {self.position} {self.name!r} ({self.op_type})"


@dataclass
class Graph:
    """A topologically sorted graph with resolved ops."""

    name: str
    nodes: list[Node]
    initializers: dict[str, Any]
    input_names: list[str]
    output_names: list[str]
    opsets: dict[str, int]
    # Names read from an enclosing scope (for subgraphs): not produced here.
    outer_reads: frozenset[str] = frozenset()
    value_info: dict[str, onnx.TypeProto] = field(default_factory=dict)

    @property
    def opset(self) -> int:
        return self.opsets.get("", self.opsets.get("ai.onnx", 1))

    @classmethod
    def from_proto(
        cls,
        graph: onnx.GraphProto,
        opsets: Mapping[str, int],
        *,
        source: str | None = None,
        check_ops: bool = True,
        base_dir: str | None = None,
    ) -> Graph:
        """Sort and resolve ``graph``; raise one ``UnsupportedOpsError`` for all missing ops."""
        missing: dict[tuple[str, str, int], list[str]] = {}
        try:
            g = _build(graph, _Loading(dict(opsets), missing, base_dir), ())
        except LoadError as exc:
            if source is None:
                raise
            raise LoadError(f"{source}: {exc}") from None
        if check_ops and missing:
            raise UnsupportedOpsError(missing, source)
        return g

    @classmethod
    def from_node(cls, node: onnx.NodeProto, opset: int, n_inputs: int | None = None) -> Graph:
        """A one-node graph, for ``Backend.run_node``."""
        g = onnx.helper.make_graph(
            [node],
            node.name or node.op_type,
            [onnx.helper.make_value_info(n, onnx.TypeProto()) for n in node.input if n],
            [onnx.helper.make_value_info(n, onnx.TypeProto()) for n in node.output if n],
        )
        return cls.from_proto(g, {"": opset, node.domain: opset})


@dataclass
class _Loading:
    """What building a graph and its subgraphs shares: the model's opsets, the ops found
    missing so far (op -> the nodes, by scope path), the folder of external data."""

    opsets: dict[str, int]
    missing: dict[tuple[str, str, int], list[str]]
    base_dir: str | None


def _attr_value(attr: onnx.AttributeProto, loading: _Loading, scope: tuple[str, ...]) -> Any:
    base_dir = loading.base_dir
    A = onnx.AttributeProto
    t = attr.type
    if t == A.FLOAT:
        return float(attr.f)
    if t == A.INT:
        return int(attr.i)
    if t == A.STRING:
        return attr.s.decode("utf-8", errors="surrogateescape")
    if t == A.TENSOR:
        return _tensor(attr.t, base_dir)
    if t == A.GRAPH:
        return _build(attr.g, loading, scope)
    if t == A.SPARSE_TENSOR:
        return _sparse_to_dense(attr.sparse_tensor, base_dir)
    if t == A.TYPE_PROTO:
        return attr.tp
    if t == A.FLOATS:
        return [float(v) for v in attr.floats]
    if t == A.INTS:
        return [int(v) for v in attr.ints]
    if t == A.STRINGS:
        return [s.decode("utf-8", errors="surrogateescape") for s in attr.strings]
    if t == A.TENSORS:
        return [_tensor(v, base_dir) for v in attr.tensors]
    if t == A.GRAPHS:
        return [_build(g, loading, scope) for g in attr.graphs]
    if t == A.SPARSE_TENSORS:
        return [_sparse_to_dense(v, base_dir) for v in attr.sparse_tensors]
    if t == A.TYPE_PROTOS:
        return list(attr.type_protos)
    return onnx.helper.get_attribute_value(attr)


def _tensor(t: onnx.TensorProto, base_dir: str | None) -> np.ndarray:
    return numpy_helper.to_array(t, base_dir or "")


def _sparse_to_dense(sp: onnx.SparseTensorProto, base_dir: str | None) -> np.ndarray:
    values = _tensor(sp.values, base_dir)
    indices = _tensor(sp.indices, base_dir).astype(np.int64)
    dims = tuple(sp.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 1:  # linearized indices
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def _node(n: onnx.NodeProto, i: int, loading: _Loading, scope: tuple[str, ...]) -> Node:
    """Graph node ``i``: its op looked up at the model's opset (a missing one noted in
    ``loading.missing``), its attributes read, the outer tensors its subgraphs read."""
    opsets = loading.opsets
    domain = "" if n.domain == "ai.onnx" else n.domain
    opset = opsets.get(domain, opsets.get("", 1) if domain == "" else 1)
    opdef = ops.lookup(n.op_type, opset, domain)
    name = n.name or f"{n.op_type}_{i}"
    if opdef is None:
        loading.missing.setdefault((domain, n.op_type, opset), []).append(
            "/".join((*scope, name)) if scope else name
        )
    attrs = {a.name: _attr_value(a, loading, (*scope, name, a.name)) for a in n.attribute}
    if opdef is not None and "num_outputs" not in attrs and _takes_num_outputs(opdef):
        attrs["num_outputs"] = len(n.output)
    outer: set[str] = set()
    for v in attrs.values():
        subs = [v] if isinstance(v, Graph) else v if isinstance(v, list) else []
        for s in subs:
            if isinstance(s, Graph):
                outer |= s.outer_reads
    return Node(
        name=name,
        op_type=n.op_type,
        domain=domain,
        inputs=tuple(n.input),
        outputs=tuple(n.output),
        attrs=attrs,
        opdef=opdef,
        outer_reads=frozenset(outer),
    )


def _build(graph: onnx.GraphProto, loading: _Loading, scope: tuple[str, ...]) -> Graph:
    initializers: dict[str, Any] = {}
    for t in graph.initializer:
        initializers[t.name] = _tensor(t, loading.base_dir)
    for st in graph.sparse_initializer:
        initializers[st.values.name] = _sparse_to_dense(st, loading.base_dir)
    input_names = [i.name for i in graph.input if i.name not in initializers]
    nodes = [_node(n, i, loading, scope) for i, n in enumerate(graph.node)]
    known = set(initializers) | {i.name for i in graph.input}
    _check_single_writer(nodes, set(initializers), known, graph.name)
    nodes = fold.fold_batch_norms(nodes, initializers, [o.name for o in graph.output])
    nodes = qdq.quantized_matmuls(
        nodes, initializers, [o.name for o in graph.output], loading.opsets
    )
    nodes = one_hot.one_hot_products(nodes, initializers, [o.name for o in graph.output])
    known |= set(initializers)  # the folded weights are initializers now
    nodes = hoist.loop_invariants(nodes, known)
    nodes = _toposort(nodes, known, graph.name)
    layout.mark_channels_last(nodes)
    layout.mark_pooled(nodes)
    layout.mark_nhwc_regions(nodes, initializers, [o.name for o in graph.output])
    produced = set(known)
    reads: set[str] = set()
    for pos, node in enumerate(nodes):
        node.position = pos
        reads |= node.reads()
        produced.update(o for o in node.outputs if o)
    outer_reads = frozenset((reads | {o.name for o in graph.output}) - produced)
    value_info = {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}
    return Graph(
        name=graph.name,
        nodes=nodes,
        initializers=initializers,
        input_names=input_names,
        output_names=[o.name for o in graph.output],
        opsets=dict(loading.opsets),
        outer_reads=outer_reads,
        value_info=value_info,
    )


_NUM_OUTPUTS: dict[int, bool] = {}


def _takes_num_outputs(opdef: ops.OpDef) -> bool:
    """Whether the op function has a ``num_outputs`` keyword (Split's default sizes)."""
    key = id(opdef.fn)
    if key not in _NUM_OUTPUTS:
        import inspect

        try:
            params = inspect.signature(opdef.fn).parameters
            _NUM_OUTPUTS[key] = "num_outputs" in params
        except (TypeError, ValueError):
            _NUM_OUTPUTS[key] = False
    return _NUM_OUTPUTS[key]


def _check_single_writer(
    nodes: list[Node], initializers: set[str], known: set[str], graph_name: str
) -> None:
    """Each tensor has one producer (ONNX graphs are in SSA form, as onnx.checker and
    onnxruntime require): a second writer would silently replace the first one's value."""
    writer: dict[str, Node] = {}
    for n in nodes:
        for o in n.outputs:
            if not o:
                continue
            if o in known:
                what = "an initializer" if o in initializers else "a graph input"
                raise LoadError(
                    f"graph {graph_name!r}: tensor {o!r} is {what} and written by node "
                    f"{n.name!r} ({n.op_type}); give the node's output another name"
                )
            if o in writer:
                w = writer[o]
                raise LoadError(
                    f"graph {graph_name!r}: tensor {o!r} is written by two nodes, {w.name!r} "
                    f"({w.op_type}) and {n.name!r} ({n.op_type}); each tensor must have one "
                    "producer: rename one of the outputs"
                )
            writer[o] = n


def _cycle(nodes: list[Node], deps: list[set[int]], stuck: set[int]) -> list[str]:
    """The names of the nodes on one cycle among the ``stuck`` nodes (those Kahn's sort
    could not place): following dependencies inside ``stuck`` must come back to a node."""
    seen: dict[int, int] = {}
    path: list[int] = []
    i = min(stuck)
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = min(d for d in deps[i] if d in stuck)  # a stuck node waits on a stuck one
    loop = path[seen[i] :][::-1]  # in the direction values flow
    first = loop.index(min(loop))  # from the node that comes first in the file
    loop = loop[first:] + loop[:first]
    return [nodes[j].name for j in (*loop, loop[0])]


def _toposort(nodes: list[Node], known: set[str], graph_name: str) -> list[Node]:
    """Kahn's sort keeping the file's order among ready nodes (most graphs are sorted)."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o:
                producer[o] = i
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        d = {producer[r] for r in n.reads() if r in producer and r not in known}
        d.discard(i)
        deps.append(d)
        for j in d:
            users[j].append(i)
    remaining = [len(d) for d in deps]
    ready = [i for i, r in enumerate(remaining) if r == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        loop = _cycle(nodes, deps, {i for i in range(len(nodes)) if remaining[i] > 0})
        raise LoadError(
            f"graph {graph_name!r} has a cycle: {' -> '.join(repr(n) for n in loop)} (each "
            "feeds the next); an ONNX graph must be acyclic"
        )
    return [nodes[i] for i in order]


# ---------------------------------------------------------------------------------------------
# running


def to_host(value: Any) -> Any:
    """A concrete jax array as numpy (host); tracers, numpy and lists of them pass through."""
    if isinstance(value, list):
        return [to_host(v) for v in value]
    if value is None or ops.is_host(value):
        return value
    import jax

    if isinstance(value, jax.core.Tracer):
        return value
    if isinstance(value, jax.Array):
        return np.asarray(value)
    return value


class Subgraph:
    """A graph attribute bound to the values of its enclosing scope.

    ``body(*inputs)`` runs the subgraph with its formal inputs bound positionally and
    returns the tuple of its outputs. ``input_names``/``output_names`` are the formal names.
    """

    __slots__ = ("graph", "outer")

    def __init__(self, graph: Graph, outer: Mapping[str, Any]):
        self.graph = graph
        self.outer = outer

    @property
    def input_names(self) -> list[str]:
        return self.graph.input_names

    @property
    def output_names(self) -> list[str]:
        return self.graph.output_names

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        env = self.values(inputs)
        return tuple(env[n] for n in self.graph.output_names)

    def values(self, inputs: Sequence[Any]) -> dict[str, Any]:
        """Every value of one run of the subgraph on ``inputs``, by name."""
        g = self.graph
        env: dict[str, Any] = {n: self.outer[n] for n in g.outer_reads if n in self.outer}
        env.update(g.initializers)
        if len(inputs) != len(g.input_names):
            raise TypeError(
                f"subgraph {g.name!r} takes {len(g.input_names)} inputs "
                f"{g.input_names}, got {len(inputs)}"
            )
        env.update(zip(g.input_names, inputs, strict=True))
        return run_nodes(g, env)


def _bind_attrs(node: Node, env: Mapping[str, Any]) -> dict[str, Any]:
    if not node.outer_reads and not (node.opdef and node.opdef.subgraphs):
        return node.attrs
    out: dict[str, Any] = {}
    for k, v in node.attrs.items():
        if isinstance(v, Graph):
            out[k] = Subgraph(v, env)
        elif isinstance(v, list) and v and isinstance(v[0], Graph):
            out[k] = [Subgraph(g, env) for g in v]
        else:
            out[k] = v
    return out


def run_node(
    node: Node, env: Mapping[str, Any], attrs: Mapping[str, Any] | None = None
) -> tuple[Any, ...]:
    """Run one node on the values in ``env``; returns its outputs as a tuple. ``attrs``
    replaces the node's attributes bound to ``env`` (a break's compiled subgraphs)."""
    opdef = node.opdef
    if opdef is None:
        raise UnsupportedOpsError({(node.domain, node.op_type, 0): [node.name]})
    args = [env[n] if n else None for n in node.inputs]
    if opdef.host_inputs or opdef.value_shaped:
        idx = range(len(args)) if opdef.value_shaped else opdef.host_inputs
        for i in idx:
            if i < len(args) and args[i] is not None:
                args[i] = to_host(args[i])
    try:
        result = opdef.fn(*args, **(_bind_attrs(node, env) if attrs is None else attrs))
    except NodeError:
        raise
    except Exception as exc:
        raise NodeError(
            f"{node.label()} failed: {type(exc).__name__}: {exc}\n"
            f"  inputs: {_describe_args(node, args)}"
        ) from exc
    if not isinstance(result, tuple):
        result = (result,)
    return result


def _describe_args(node: Node, args: list[Any]) -> str:
    parts = []
    for n, a in zip(node.inputs, args, strict=False):
        if a is None:
            parts.append(f"{n or '<omitted>'}=None")
        elif isinstance(a, list):
            parts.append(f"{n}=sequence[{len(a)}]")
        else:
            parts.append(f"{n}={getattr(a, 'dtype', type(a).__name__)}{list(np.shape(a))}")
    return ", ".join(parts)


def run_nodes(
    graph: Graph,
    env: dict[str, Any],
    start: int = 0,
    stop: int | None = None,
    *,
    on_node: OnNode | None = None,
    nodes: Iterable[Node] | None = None,
) -> dict[str, Any]:
    """Run ``graph.nodes[start:stop]`` on ``env`` in place and return ``env``.

    ``env`` must hold every value the nodes read (inputs, initializers, outer values).
    ``on_node(position, node, inputs, outputs)`` runs after each node (profile mode).
    """
    for node in graph.nodes[start:stop] if nodes is None else nodes:
        outs = run_node(node, env)
        for name, value in zip(node.outputs, outs, strict=False):
            if name:
                env[name] = value
        if on_node is not None:
            on_node(node.position, node, [env[n] if n else None for n in node.inputs], outs)
    return env


def interpret(
    graph: Graph,
    inputs: Mapping[str, Any],
    *,
    on_node: OnNode | None = None,
) -> dict[str, Any]:
    """Run the whole graph eagerly (or under an enclosing trace); outputs by name."""
    env: dict[str, Any] = dict(graph.initializers)
    env.update(inputs)
    run_nodes(graph, env, on_node=on_node)
    return {n: env[n] for n in graph.output_names}
