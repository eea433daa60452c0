"""The programs a break node runs: what they take of the enclosing scope, and a whole ``Loop``.

Helpers of ``break_subgraphs`` (read its docstring first):

- ``split_outer``: how a program gets the outer values its subgraph reads (baked-in model
  constants, the model's device parameters, static values, arguments); ``SubgraphState``
  keeps a subgraph's builder and what was learned about it across calls.
- ``WholeLoop``: a ``Loop`` with scan outputs as one program (``ops.control.loop_bounded``),
  in chunks of 128 steps when its trip count is unknown or large.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime import ops
from ember.runtime.breaks.plan import SHAPE_OPS, Plan, Segment, computed_from
from ember.runtime.describe import segment_key
from ember.runtime.graph.ir import Graph, Node, to_host
from ember.runtime.jit.fastpath import block
from ember.runtime.jit.segment_build import ModelValues, SegmentBuilder
from ember.runtime.jit.segment_trace import Entry
from ember.runtime.ops.control import loop_bounded

__all__ = ["SubgraphState", "SubgraphValues", "WholeLoop", "observed", "split_outer"]

_END = "end"


T = TypeVar("T")


def observed(source: str | None, position: int, entry: Entry | None, run: Callable[[], T]) -> T:
    """``run()`` inside the ``ember.segment`` span of one run of a break's program at
    ``position`` (``entry`` None: the subgraph's nodes one by one), ending at its results
    while ``bus.sync``."""
    meta = {
        "source": source,
        "position": position,
        "stop": _END,
        "compiled": entry is not None and entry.exe is not None,
        "key": entry.key_hex if entry is not None else None,
    }
    with bus.span(E.SEGMENT, meta):
        out = run()
        if bus.sync:
            block(out)
    return out


class SubgraphValues:
    """What tracing a subgraph reads of its model (``segment_build.ModelValues``): the
    subgraph's initializers with the model constants it reads, and the model's parameters."""

    __slots__ = ("base", "hwio", "params")

    def __init__(self, base: dict[str, Any], params: dict[str, Any], hwio: frozenset[str]) -> None:
        self.base = base
        self.params = params
        self.hwio = hwio

    def _base_env(self) -> dict[str, Any]:
        return self.base

    def _device_params(self) -> dict[str, Any]:
        return self.params

    def _hwio_params(self) -> frozenset[str]:
        return self.hwio


class SubgraphState:
    """One subgraph of one break node: its builder, whether its shapes vary from one call
    to the next inside one run of the node (then it is kept eager: a program per iteration
    would cost a compile per iteration), and the shapes its programs speculate on
    (``jit.speculate``): the nodes, the shapes an eager run saw (None: not yet seen), and
    how many runs checked them and found them wrong."""

    __slots__ = ("builder", "checked", "missed", "on_host", "seen", "speculated", "varying")

    def __init__(
        self,
        builder: SegmentBuilder,
        body: Graph | None = None,
        static_inputs: frozenset[str] = frozenset(),
    ) -> None:
        self.builder = builder
        self.varying = False
        self.on_host = _outer_on_host(body if body is not None else builder.graph, static_inputs)
        self.speculated: tuple[Node, ...] | None = None
        self.seen: dict[str, Any] | None = None
        self.checked = 0
        self.missed = 0

    def guard_held(self, held: bool) -> None:
        """Count one run of a speculating program; a subgraph whose speculations fail for
        more than one step in eight (after a few) is kept eager from then on."""
        self.checked += 1
        if not held:
            self.missed += 1
            if self.missed >= 4 and self.missed * 8 > self.checked:
                self.varying = True


def _outer_on_host(graph: Graph, static_inputs: frozenset[str] = frozenset()) -> frozenset[str]:
    """The outer values that nodes of ``graph`` read on the host (a ``Reshape``'s shape
    computed outside): static values of its program. Found backwards from the ops' host
    inputs, like the graph analysis's ``needs_host``, through nodes that read no value
    computed from the subgraph's own inputs: such a node runs in the program whatever its
    outer values are, so they stay arguments (a decoder step's ``If`` on its attention,
    made static, would key the program by the encoder's features). Not the data of a
    value-shaped op (``NonZero``): as a static it would compile a program per input, so
    such a subgraph stays eager. ``static_inputs``: formal inputs that are static values of
    the program (a Loop body's condition), known on the host like the outer values."""
    varying = computed_from(graph, set(graph.input_names) - static_inputs)
    needs: set[str] = set()
    for node in reversed(graph.nodes):
        opdef = node.opdef
        if opdef is None:
            continue
        needs.update(node.inputs[i] for i in opdef.host_inputs if i < len(node.inputs))
        if (
            node.op_type not in SHAPE_OPS
            and any(o in needs for o in node.outputs if o)
            and not any(n in varying for n in node.reads())
        ):
            needs.update(node.reads())
    return frozenset(needs & graph.outer_reads)


def split_outer(
    names: frozenset[str],
    outer: Mapping[str, Any],
    fixed: Mapping[str, Any],
    model: ModelValues,
    const: frozenset[str],
    host: frozenset[str],
    on_host: frozenset[str],
) -> tuple[dict[str, Any], list[str], list[str], SubgraphValues]:
    """How a program gets the outer values ``names`` it reads: constants of the model
    (baked in), its device parameters, static values (read on the host by the subgraph, or
    host values of the model's plan) and arguments (device values). Returns the statics
    (with ``fixed``), the names of the arguments and parameters, and what the trace reads."""
    model_params = model._device_params()
    model_base = model._base_env()
    base: dict[str, Any] = {}
    params: list[str] = []
    statics: dict[str, Any] = dict(fixed)
    outer_args: list[str] = []
    for name in sorted(names):
        if name in statics:
            continue  # given (an If's condition)
        if name in model_params:
            params.append(name)
        elif name in const and name in model_base:
            base[name] = model_base[name]
        elif name not in outer:
            continue  # read by a branch not taken inside it, say: the trace tells
        elif name in on_host or (name in host and ops.all_on_host(outer[name])):
            statics[name] = to_host(outer[name])
        else:
            outer_args.append(name)
    hwio = model._hwio_params() & frozenset(params) if params else frozenset()
    values = SubgraphValues(base, {n: model_params[n] for n in params}, hwio)
    return statics, outer_args, params, values


_CHUNK_ROWS = 128
"""The rows of a whole-Loop program whose trip count is unknown or larger than
``_MAX_ROWS`` (the INT64_MAX of a loop that its condition ends): it runs in chunks of this
many steps, each one call of the same program, until the condition ends it."""

_MAX_ROWS = 1 << 12
"""A known trip count up to this many steps runs in one call, with rows for all of them."""


def _rows(trips: int | None) -> int:
    """The rows of a whole-Loop program for ``trips`` steps: the next power of two, at least
    8, so that a trip count that varies compiles a program per bucket, not per value."""
    if trips is None or trips > _MAX_ROWS:
        return _CHUNK_ROWS
    return max(8, 1 << max(0, trips - 1).bit_length())


def _on_host(value: Any) -> bool:
    import jax

    return isinstance(value, jax.Array) and all(d.platform == "cpu" for d in value.devices())


def _rows_of(pieces: list[tuple[Any, int]]) -> Any:
    """The scan output made of the first rows of each chunk's buffer: numpy where the arrays
    are in host memory (no device op), else device slices."""
    if all(_on_host(b) for b, _ in pieces):
        parts = [np.asarray(b)[:n] for b, n in pieces]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    import jax.numpy as jnp

    parts = [b[:n] for b, n in pieces]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)


_BOUNDED = ops.OpDef("", "Loop", 1, loop_bounded, subgraphs=True)


class WholeLoop:
    """A ``Loop`` with scan outputs run as one program (``ops.control.loop_bounded``): a
    one-node graph whose node takes the steps left, the condition, the rows of the buffers
    (a static value: the key holds it), the first step's number and the carried values."""

    def __init__(self, node: Node, body: Graph, make: Callable[[Graph], SegmentBuilder]) -> None:
        self.node = node
        self.rows_name = f"{node.name} iterations at most"
        self.left_name = f"{node.name} iterations left"
        self.start_name = f"{node.name} first iteration"
        n_out = len(node.outputs)
        self.out_names = tuple(f"{node.name} output {k}" for k in range(n_out))
        self.count_name = f"{node.name} iterations"
        self.cond_name = f"{node.name} condition out"
        self.inputs = (
            self.left_name,
            node.inputs[1],
            self.rows_name,
            self.start_name,
            *node.inputs[2:],
        )
        loop = Node(
            name=node.name,
            op_type="Loop",
            domain="",
            inputs=self.inputs,
            outputs=(*self.out_names, self.count_name, self.cond_name),
            attrs={"body": body},
            opdef=_BOUNDED,
            position=0,
            outer_reads=node.outer_reads,
        )
        graph = Graph(
            name=f"{node.name} whole",
            nodes=[loop],
            initializers={},
            input_names=[n for n in loop.inputs if n],
            output_names=list(loop.outputs),
            opsets=body.opsets,
            outer_reads=node.outer_reads,
        )
        self.state = SubgraphState(make(graph), body)

    def run(
        self,
        env: Mapping[str, Any],
        model: ModelValues,
        plan: Plan,
        lock: threading.RLock,
        observe: bool,
    ) -> tuple[Any, ...] | None:
        """The Loop's outputs, or None where one program cannot run it (the body changes
        shapes or reads its iteration number on the host, a carried sequence): the caller
        then runs it body by body."""
        node, state = self.node, self.state
        if state.varying:
            return None
        trips: int | None = None
        if node.inputs[0]:
            value = np.asarray(to_host(env[node.inputs[0]])).reshape(-1)
            if value.size != 1:
                return None
            trips = int(value[0])
        carried = [env[n] if n else None for n in node.inputs[2:]]
        if any(v is None or isinstance(v, list) for v in carried):
            return None
        cond = node.inputs[1]
        statics, outer_args, params, values = split_outer(
            node.outer_reads - set(node.inputs),
            env,
            {self.rows_name: np.array(_rows(trips), np.int64)},
            model,
            plan.const,
            plan.host,
            state.on_host,
        )
        names = tuple(n for n in self.inputs if n and n != self.rows_name) + tuple(outer_args)
        outer_values = [env[n] for n in outer_args]
        left = (1 << 62) if trips is None else trips
        args = [np.int64(left), *([env[cond]] if cond else []), np.int64(0), *carried]
        args += outer_values
        seg = Segment(
            position=0,
            stop=None,
            args=names,
            statics=tuple(sorted(statics)),
            params=tuple(params),
            outputs=(*self.out_names, self.count_name, self.cond_name),
            compiled=True,
            reason=None,
        )
        builder = state.builder
        rows = int(statics[self.rows_name])
        n_carried = len(carried)
        pieces: list[list[tuple[Any, int]]] = [[] for _ in self.out_names[n_carried:]]
        done = 0
        while True:
            key = segment_key(builder.at, names, args, seg.statics, statics)
            with lock:
                entry = builder.lookup_or_build(seg, key, args, statics, values)
            if entry.exe is None:  # one program cannot run it (its compile span says why)
                state.varying = True
                return None
            got = self._chunk(entry, values, params, args, observe)
            count = int(np.asarray(got[self.count_name]))  # waits for the program
            finals = [got[n] for n in self.out_names[:n_carried]]
            for sink, name in zip(pieces, self.out_names[n_carried:], strict=True):
                sink.append((got[name], count))
            done += count
            if count < rows or done >= left or not bool(np.asarray(got[self.cond_name])):
                break
            # all rows used and the condition holds: the next chunk from there
            args = [np.int64(left - done), *([got[self.cond_name]] if cond else [])]
            args += [np.int64(done), *finals, *outer_values]
        return (*finals, *(_rows_of(p) for p in pieces))

    def _chunk(
        self,
        entry: Entry,
        values: SubgraphValues,
        params: list[str],
        args: Sequence[Any],
        observe: bool,
    ) -> dict[str, Any]:
        """One call of the program (in its ``ember.segment`` span when observed): its
        outputs by name."""
        param_values = tuple(values.params[n] for n in params)

        def call() -> dict[str, Any]:
            outs = entry.exe(param_values, *args) if param_values else entry.exe(*args)
            got = dict(entry.host_outputs)
            got.update(zip(entry.dynamic_outputs, outs, strict=True))
            return got

        if not observe:
            return call()
        return observed(self.state.builder.source, self.state.builder.at or 0, entry, call)
