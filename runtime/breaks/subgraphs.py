"""The subgraphs a break node runs, compiled and cached: a whole ``Loop``, its body, an ``If``
branch.

Most control flow never reaches a break (see ``ember.runtime.breaks.plan``: an ``If`` specialises
on its condition, a ``Loop`` on a traced trip count without scan outputs is a ``lax`` loop).
What still does is a ``Loop`` whose trip count is computed on the device and that has scan
outputs (their length is its data), a node whose subgraph changes shapes, and an ``If``
whose branch needs more host values than its condition. The break runs the node on the host;
``BreakSubgraphs.runner(node, ...)`` runs it with compiled programs instead of the
subgraph's nodes one by one:

- **A Loop with scan outputs is one program** where it can be (``WholeLoop``): a
  ``lax.while_loop`` (``ops.control.loop_bounded``) that writes each step's scan outputs into
  buffers of *rows* (the trip count's next power of two, at least 8; a static value of the
  key, "Loop_0 iterations at most"), returns how many steps ran, and the break keeps that
  many rows. One dispatch a call, one program per bucket of trip counts. A trip count that
  is unknown or over 4,096 (the INT64_MAX of a loop that its condition ends) runs in chunks
  of 128 steps: the same program called again from where it stopped (the steps left and the
  first step's number are arguments) while all rows were used and the condition holds.
- Otherwise (a body that changes shapes, reads its step number on the host, or holds an
  ``If`` on its condition whose branches differ in shape: the whole-Loop compile then ends
  with ``compiled: false`` and why) the op runs with **its body or branches compiled**
  (``bind``): each ``If`` branch and ``Loop`` body is a ``CompiledSubgraph``, whose calls
  run its program (``Scan`` keeps its ``Subgraph``: it is a ``lax.scan``, compiled by jax as
  a whole). A body's step number and carried values are arguments, its condition a static
  value (true whenever the body runs: one key, and a condition the body passes through is
  known on the host without waiting for the program); a branch's key holds its condition's
  value (statics ``If_0 condition: True``), so a flip of the condition is a miss that says so.
- Every such program is looked up in the model's segment cache at the *position of the
  break node* (no top-level segment starts there: the segment after a break starts after
  it), keyed like a segment by its arguments' shapes and dtypes and its static values, and
  built by the model's ``SegmentBuilder`` machinery (a builder per subgraph: the same trace,
  compile and program store). So a miss is an ``ember.cache.miss`` and an
  ``ember.segment.compile`` span, a hit an ``ember.cache.hit``, each run an ``ember.segment``
  span (``stop: "end"``), all inside the break's span.
- Outer values a program reads are arguments when on the device, static values when read on
  the host by the subgraph (a ``Reshape``'s shape computed outside) or host values of the
  model's plan, and constants of the model are baked in (large ones passed as the model's
  device parameters).
- A ``Slice``, ``Range`` or ``If`` whose output shape depends on a value of the program (a
  decoder's step counter) does not keep it eager: the first run is eager and notes those
  shapes, and the programs are compiled for them with a guard (``jit.speculate``); a step
  whose guard fails runs node by node, and a subgraph whose guards fail often stays eager.
  Outputs that are inputs as given (weights a Loop carries through) are not program outputs.
- A subgraph that cannot be one program (a node in it reads a traced value on the host, a
  ``NonZero``) is kept eager: its compile span says ``compiled: false`` with the reason, the
  cache keeps the eager entry, and it runs node by node as before; so does a body whose
  shapes change from one step to the next (a program per step would compile per step).
  Called under a trace (``lax.scan`` of a ``Scan`` inside it, say), a ``CompiledSubgraph``
  runs the subgraph's nodes into that trace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime.breaks.plan import Plan, Segment
from ember.runtime.breaks.programs import SubgraphState, WholeLoop, observed, split_outer
from ember.runtime.describe import segment_key, static_key
from ember.runtime.graph.ir import Graph, Node, Subgraph, run_node, to_host
from ember.runtime.jit import speculate, xla_cpu
from ember.runtime.jit.segment_build import ModelValues, SegmentBuilder
from ember.runtime.jit.segment_trace import Entry
from ember.runtime.ops.control import loop_scan_outputs

__all__ = ["BreakSubgraphs", "CompiledSubgraph"]

# ops whose subgraphs a break runs call by call (Scan's body is one lax.scan)
_COMPILED_OPS = frozenset({"If", "Loop"})
# a Loop body's formal inputs: (iteration number, condition, carried values...)
_LOOP_COND = 1


def _traced(values: Sequence[Any]) -> bool:
    import jax

    return any(isinstance(v, jax.core.Tracer) for v in values)


def _on_device(value: Any) -> Any:
    import jax

    return jax.device_put(value) if type(value) is np.ndarray else value


class CompiledSubgraph(Subgraph):
    """A subgraph bound to its enclosing scope, a ``graph.Subgraph`` (``body(*inputs) ->
    outputs``) whose calls run its compiled program (see the module docstring); run node by
    node (``Subgraph.__call__``) under a trace and while its shapes vary."""

    __slots__ = (
        "_arg_idx",
        "_fixed",
        "_fixed_keys",
        "_last",
        "_lock",
        "_observe",
        "_outer_args",
        "_param_values",
        "_quiet",
        "_seg",
        "_source",
        "_state",
        "_static_idx",
        "_switches",
        "_through",
        "_through_idx",
        "_values",
        "at",
        "builder",
    )

    def __init__(
        self,
        graph: Graph,
        outer: Mapping[str, Any],
        state: SubgraphState,
        *,
        fixed: Mapping[str, Any],
        static_inputs: frozenset[int],
        model: ModelValues,
        const: frozenset[str],
        host: frozenset[str],
        lock: threading.RLock,
        observe: bool,
    ) -> None:
        super().__init__(graph, outer)
        self._state = state
        self._last: Entry | None = None
        self._switches = 0
        builder = self.builder = state.builder
        self.at = builder.at if builder.at is not None else 0
        self._lock = lock
        self._observe = observe
        # nobody listens to cache hits: an iteration with the last one's key skips the lookup
        self._quiet = not bus.listening(E.CACHE_HIT)
        self._source = builder.source
        formal = graph.input_names
        self._static_idx = tuple((i, formal[i]) for i in sorted(static_inputs))
        self._arg_idx = tuple(i for i in range(len(formal)) if i not in static_inputs)
        statics, outer_args, params, self._values = split_outer(
            graph.outer_reads, outer, fixed, model, const, host, state.on_host
        )
        self._fixed = statics
        self._outer_args = [outer[n] for n in outer_args]
        self._param_values = tuple(self._values.params[n] for n in params)
        self._values.base.update(graph.initializers)
        # outputs that are inputs as given (a Loop's weights carried through each step):
        # not program outputs, which XLA would copy every step
        self._through = tuple(
            (name, formal.index(name))
            for name in dict.fromkeys(graph.output_names)
            if name in formal
        )
        self._through_idx = frozenset(i for _, i in self._through)
        args = tuple(formal[i] for i in self._arg_idx) + tuple(outer_args)
        if state.speculated is None:
            state.speculated = speculate.candidates(graph, (*args, *params))
        if state.seen is not None:
            statics.update(state.seen)
        self._seg = self._segment(args, tuple(params))

    def _segment(self, args: tuple[str, ...], params: tuple[str, ...]) -> Segment:
        """The segment its programs compile, with the statics in ``_fixed`` (keyed once)."""
        self._fixed_keys = {n: static_key(v) for n, v in self._fixed.items()}
        through = {name for name, _ in self._through}  # given back as they are (``_run``)
        return Segment(
            position=0,
            stop=None,
            args=args,
            statics=tuple(sorted({*self._fixed, *(n for _, n in self._static_idx)})),
            params=params,
            outputs=tuple(n for n in dict.fromkeys(self.graph.output_names) if n not in through),
            compiled=True,
            reason=None,
        )

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        if len(inputs) != len(self.graph.input_names) or _traced(inputs):
            # under a trace (or called wrongly: Subgraph says how) the nodes join the trace
            return super().__call__(*inputs)
        state = self._state
        if state.varying:
            return self._eager(inputs)
        if state.speculated and state.seen is None:
            # shapes to speculate on (``jit.speculate``): this run, eager, notes them
            return self._eager(inputs, note=True)
        seg = self._seg
        through = self._through_idx
        if through and any(type(inputs[i]) is np.ndarray for i in through):
            # values an eager step left on the host and passed on as they are (weights
            # carried through each step): on the device once, not copied there by the
            # program of every later step
            inputs = tuple(_on_device(v) if i in through else v for i, v in enumerate(inputs))
        args = [inputs[i] for i in self._arg_idx]
        args.extend(self._outer_args)
        statics = dict(self._fixed)
        for i, name in self._static_idx:
            statics[name] = to_host(inputs[i])
        key = segment_key(self.at, seg.args, args, seg.statics, statics, self._fixed_keys)
        last = self._last
        if last is not None and self._quiet and key == last.key:
            entry = last  # the next iteration of a body that keeps its shapes: no lookup
        else:
            with self._lock:
                entry = self.builder.lookup_or_build(seg, key, args, statics, self._values)
        self._last = entry
        if last is not None and entry is not last:
            # another program inside one run of the node: a carried value that took its
            # shape in the first step may (a scalar becomes [1]); a third one means its
            # shapes change per iteration
            self._switches += 1
            if self._switches > 1:
                state.varying = True
        if not self._observe:
            return self._run(entry, inputs, args, statics)
        return observed(
            self._source, self.at, entry, lambda: self._run(entry, inputs, args, statics)
        )

    def _eager(self, inputs: Sequence[Any], note: bool = False) -> tuple[Any, ...]:
        """The nodes one by one (a subgraph whose shapes vary per iteration, or a run that
        ``note``s the shapes to speculate on), in a segment span that says so."""
        if not self._observe:
            return self._nodes(inputs, {}, note)
        return observed(self._source, self.at, None, lambda: self._nodes(inputs, {}, note))

    def _nodes(
        self, inputs: Sequence[Any], statics: Mapping[str, Any], note: bool = False
    ) -> tuple[Any, ...]:
        """The subgraph's nodes one by one, ``statics`` over its outer values; with
        ``note``, the shapes of the nodes to speculate on become static values of its
        programs from the next call on.

        On the CPU they run on numpy (``xla_cpu.eager_on_numpy``): ~5x faster than JAX's
        eager ops on SLANet-plus's decoder body of ~300 nodes (now only its first step, and
        a step whose speculated shapes fail, run so)."""
        reads = {n: self.outer[n] for n in self.graph.outer_reads if n in self.outer}
        outer: Mapping[str, Any]
        if xla_cpu.eager_on_numpy([*reads.values(), *inputs]):
            outer = {**{n: to_host(v) for n, v in reads.items()}, **statics}
            inputs = [to_host(v) for v in inputs]
        else:
            outer = {**self.outer, **statics} if statics else self.outer
        env = Subgraph(self.graph, outer).values(inputs)
        state = self._state
        if note and state.speculated:
            with self._lock:
                state.seen = speculate.observe(state.speculated, env)
                self._fixed.update(state.seen)
                self._seg = self._segment(self._seg.args, self._seg.params)
        return tuple(env[n] for n in self.graph.output_names)

    def _run(
        self,
        entry: Entry,
        inputs: Sequence[Any],
        args: Sequence[Any],
        statics: Mapping[str, Any],
    ) -> tuple[Any, ...]:
        if entry.exe is None:  # kept eager: the nodes one by one, as a plain Subgraph
            return self._nodes(inputs, statics)
        outs = entry.run(self._param_values, args)
        got = dict(entry.host_outputs)
        got.update(zip(entry.dynamic_outputs, outs, strict=True))
        for name, i in self._through:
            got[name] = inputs[i]
        if entry.guarded:
            held = bool(np.asarray(got[speculate.GUARDS]))  # waits for the step
            self._state.guard_held(held)
            if not held:  # a shape it speculated on is not this step's: run it as written
                return self._nodes(inputs, statics)
        return tuple(got[n] for n in self.graph.output_names)


class BreakSubgraphs:
    """The compiled subgraphs of one plan's break nodes: a ``SegmentBuilder`` per subgraph
    (made on first use), all in the model's segment cache ``segments``."""

    def __init__(self, model: SegmentBuilder) -> None:
        # the model's builder: its cache (shared), source and program store
        self._segments = model.segments
        self._cache_size = model.segments.size
        self._source = model.source
        self._store = model.store
        self._cache_dir = model.cache_dir
        self._subgraphs: dict[tuple[int, str], SubgraphState] = {}
        self._loops: dict[int, WholeLoop] = {}

    @staticmethod
    def runs(node: Node) -> bool:
        """Whether the break node ``node`` runs subgraphs compiled here."""
        return node.op_type in _COMPILED_OPS and bool(node.opdef and node.opdef.subgraphs)

    def _new_builder(
        self, node: Node, attr: str, graph: Graph, labels: dict[str, str]
    ) -> SegmentBuilder:
        plan = Plan(
            breaks={},
            segments=[],
            host=frozenset(),
            needs_host=frozenset(),
            params=frozenset(),
            labels=labels,
        )
        return SegmentBuilder(
            graph,
            plan,
            cache_size=self._cache_size,
            source=self._source,
            store=self._store,
            cache_dir=self._cache_dir,
            at=node.position,
            segments=self._segments,
            scope=f"{node.name}/{attr}",
        )

    def _state(self, node: Node, attr: str, graph: Graph, label: tuple[str, str]) -> SubgraphState:
        found = self._subgraphs.get((node.position, attr))
        if found is None or found.builder.graph is not graph:
            builder = self._new_builder(node, attr, graph, dict([label]))
            formal = graph.input_names
            # a Loop body's condition is a static value of its programs (``bind``)
            static = (
                frozenset(formal[_LOOP_COND : _LOOP_COND + 1])
                if node.op_type == "Loop"
                else frozenset()
            )
            found = self._subgraphs[(node.position, attr)] = SubgraphState(builder, None, static)
        return found

    def runner(
        self,
        node: Node,
        model: ModelValues,
        plan: Plan,
        lock: threading.RLock,
        observe: bool,
    ) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
        """``run(env) -> outputs`` of the break node ``node`` of ``plan``: a ``Loop`` with
        scan outputs as one program when it can be, else the op with its branches or body
        compiled (``bind``); any other node as it is (``graph.run_node``)."""
        if not self.runs(node):
            return lambda env: run_node(node, env)
        whole = None
        body = node.attrs.get("body")
        if (
            node.op_type == "Loop"
            and isinstance(body, Graph)
            and len(node.inputs) >= 2
            and loop_scan_outputs(len(node.inputs), len(body.output_names)) > 0
        ):
            whole = self._loops.get(node.position)
            if whole is None or whole.node is not node:
                whole = self._loops[node.position] = WholeLoop(
                    node, body, lambda g: self._new_builder(node, "whole", g, {})
                )

        def run(env: Mapping[str, Any]) -> tuple[Any, ...]:
            if whole is not None:
                outs = whole.run(env, model, plan, lock, observe)
                if outs is not None:
                    return outs
            return run_node(node, env, self.bind(node, env, model, plan, lock, observe))

        return run

    def bind(
        self,
        node: Node,
        env: Mapping[str, Any],
        model: ModelValues,
        plan: Plan,
        lock: threading.RLock,
        observe: bool,
    ) -> dict[str, Any]:
        """The attributes to run the break node ``node`` of ``plan`` with
        (``graph.run_node``): its branches or body as ``CompiledSubgraph`` over ``env``."""
        attrs: dict[str, Any] = {}
        make: Callable[..., CompiledSubgraph] = CompiledSubgraph
        for name, value in node.attrs.items():
            if not isinstance(value, Graph):
                attrs[name] = value
                continue
            if node.op_type == "If":
                cond = node.inputs[0]
                # the key holds the branch taken (or the condition's value, when the branch
                # reads it itself)
                taken = (
                    to_host(env[cond])
                    if cond in value.outer_reads
                    else np.array(name == "then_branch")
                )
                fixed: dict[str, Any] = {cond: taken}
                static_inputs: frozenset[int] = frozenset()
            else:  # Loop's body: the condition is static, true whenever the body runs
                cond = value.input_names[_LOOP_COND] if len(value.input_names) > 1 else ""
                fixed = {}
                static_inputs = frozenset({_LOOP_COND}) if cond else frozenset()
            state = self._state(node, name, value, (cond, f"{node.name} condition"))
            attrs[name] = make(
                value,
                env,
                state,
                fixed=fixed,
                static_inputs=static_inputs,
                model=model,
                const=plan.const,
                host=plan.host,
                lock=lock,
                observe=observe,
            )
        return attrs
