"""``compile`` and ``run``: ONNX graphs as ``jax.jit`` segments with a per-position cache.

This module is the call driver; its parts live next to it: ``segment_build`` builds the
programs (ahead of time, or on a cache miss, from the store on disk or traced),
``segment_trace`` traces and compiles one segment, ``segment_cache`` keeps them (LRU per
position, cache events), ``fastpath`` is the direct call of the steady state, ``describe``
the shapes, statics and keys the events carry, ``xla_cpu`` the XLA:CPU tuning (compiler
options, kernel layouts), ``inputs`` the checks of a call's inputs and of ``input_specs``.

**int64 and float64.** JAX keeps 32-bit types unless x64 is enabled, but ONNX models use
int64 (shapes, indices) and sometimes float64. Every trace, compile and eager run of the
runtime happens inside ``jax.enable_x64(True)``, a context manager that changes the setting
only for the current thread and only for that block, so a model keeps its ONNX dtypes and
the caller's global JAX setting is never touched. Compiled programs whose arguments are all
32-bit are called without the context; the others are called inside it.

**Without graph breaks** the whole graph is one ``jax.jit`` program, compiled by
``compile()`` for the input shapes it is given (``input_specs``, or the model's own input
shapes when they are all static). A call with exactly those shapes and dtypes goes
straight to that program and emits no cache events; a call with other shapes goes through
the segment cache at position 0.

**With graph breaks** (see ``ember.runtime.breaks.plan``) each call runs the sorted graph as
segments. For each segment the cache of its position is looked up with the key (position,
argument shapes and dtypes, static values the segment reads). A hit runs the cached
program; a miss traces and compiles the segment (or, for a segment of fewer than 20 nodes
after a break, keeps it eager) and inserts it, evicting the least recently used segment
of a full position. Then the break node runs eagerly, and its outputs that later nodes read
on the host become static values of the next segments.

**Control flow specialises** (see ``ember.runtime.breaks.plan``). An ``If`` whose condition
comes from small inputs has it computed on the host at the start of the call (the
*prelude*); the condition is a static value of the segment holding the ``If``, so the key
holds it and the program has the taken branch inline (statics name it ``If_0 condition``).
A condition computed on the device is brought to the host by a short *sync* break, and the
``If`` starts the next segment. A break node that runs a subgraph runs it compiled, cached at
the node's position (``break_subgraphs``). A graph without breaks that ``compile()`` could
not compile ahead of time (unknown input shapes, or such conditions) gets a direct call after
its first checked call: the prelude's conditions (memoised by the inputs it reads) pick the
program, called straight through jax's C++ call while nobody listens
(``fastpath.SpecializedCalls``).

**Constants and breaks found by tracing.** Values computed from initializers and
``Constant`` nodes alone are folded once per model and baked into the programs. A node
that reads a traced value on the host although the op registry did not say so (a missing
``host_inputs``) is turned into a break when its trace fails, and the call is retried, so
such a model still runs (its segments are re-planned and the cache starts afresh).

**Order of events on a call** (each ``span`` is a ``.start`` and a ``.stop`` event)::

    ember.call.start
      for each non-empty segment, in graph order:
        ember.cache.hit
        | ember.cache.miss, ember.segment.compile.start, ember.segment.compile.stop,
          [ember.cache.evict]                    (only when the position was full)
        ember.segment.start, ember.segment.stop  (the segment's run)
        then, when the segment stops at a break node:
        ember.break.start, [cache and segment events of the programs that an If or
        Loop break runs, at its position: see ``break_subgraphs``], ember.break.stop
    ember.call.stop

A call at the compile-time shapes of a graph without breaks emits only the call span and,
inside it, one segment span for the whole-graph program.

**Time to results.** While ``bus.sync`` is set (an open ``record()`` asks for it) a recorded
segment, break and call span waits for its outputs (``jax.block_until_ready``) before it
ends, and the call's end carries ``dispatch_ns``; a break's end carries
``host_transfer_ns`` and, for If/Loop/Scan, ``subgraph_ns``. Nothing waits when nobody
listens to those spans: the fast path is the same.
``compile()`` emits ``ember.compile`` and, inside it, one ``ember.segment.compile`` span
for the whole-graph program when it has shapes to compile for.

**Thread-safety.** A ``CompiledModel`` may be called from several threads. The fast path
takes no lock. The segment cache is guarded by one lock per model, held while looking up,
compiling and inserting, so two threads that miss the same key compile it once; programs
run outside the lock. Events are emitted in the calling thread.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime.breaks.plan import PARAM_MIN_SIZE, Plan, Segment, analyse
from ember.runtime.breaks.subgraphs import BreakSubgraphs
from ember.runtime.describe import describe_shapes, segment_key
from ember.runtime.graph.ir import Node, run_node, run_nodes, to_host
from ember.runtime.inputs import as_model, check_inputs, resolve_specs, to_device
from ember.runtime.jit import xla_cpu
from ember.runtime.jit.chained import ChainCalls, Link
from ember.runtime.jit.diskcache import ProgramStore
from ember.runtime.jit.fastpath import Program, SpecializedCalls, WholeGraphCall, block, run_prelude
from ember.runtime.jit.segment_build import SegmentBuilder
from ember.runtime.jit.segment_trace import Entry, NeedsHost
from ember.runtime.model import Model, TensorSpec

__all__ = ["CompiledModel", "compile", "describe_shapes", "run"]

_END = "end"


# ---------------------------------------------------------------------------------------------
# the compiled model


class CompiledModel:
    """A model compiled to JAX; call it with a dict of arrays or keyword arguments.

    ``compiled({"x": x})`` or ``compiled(x=x)`` returns ``{output name: array}``.
    Outputs are jax arrays, or numpy arrays for outputs known on the host.
    """

    def __init__(
        self,
        model: Model,
        *,
        cache_size: int = 8,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {cache_size}")
        self.model = model
        self.graph = model.graph
        self._cache_size = cache_size
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self._programs = (
            ProgramStore(self.cache_dir, model.proto.SerializeToString(deterministic=True))
            if self.cache_dir is not None
            else None
        )
        self._input_names = tuple(model.input_names)
        self._input_specs = {s.name: s for s in model.inputs}
        self._output_names = tuple(model.output_names)
        self._n_inputs = len(self._input_names)
        # input signatures check_inputs passed as given (see there)
        self._accepted: set[Hashable] = set()
        self._lock = threading.RLock()
        self._params: dict[str, Any] = {}
        self._forced: dict[int, str] = {}
        self._consts: dict[str, Any] | None = None
        self._const_sizes: dict[str, int] = {}
        self._plan(analyse(model.graph))
        # Large values folded from constants (weights made by ConstantOfShape, say) are
        # passed to the programs as device arrays like large initializers: XLA:CPU runs a
        # dot against a large constant several times slower than against an argument.
        sizes = {
            n: int(np.size(v))
            for n, v in self._base_env().items()
            if n in self.plan.const and n not in self.graph.initializers and not isinstance(v, list)
        }
        if any(size >= PARAM_MIN_SIZE for size in sizes.values()):
            self._const_sizes = sizes
            self._plan(analyse(model.graph, self._forced, sizes))

    def _plan(self, plan: Plan) -> None:
        """Adopt ``plan``: the steps of a call, an empty cache, no whole-graph program."""
        self.plan = plan
        self._prelude = [self.graph.nodes[p] for p in plan.prelude]
        # what the prelude reads of the inputs: values, or only shapes (Shape, Size)
        inputs = set(self._input_names)
        read = {n for node in self._prelude for n in node.inputs if n in inputs}
        values = {
            n
            for node in self._prelude
            if node.op_type not in ("Shape", "Size")
            for n in node.inputs
            if n in inputs
        }
        self._builder = SegmentBuilder(
            self.graph,
            plan,
            cache_size=self._cache_size,
            source=self.model.source,
            store=self._programs,
            cache_dir=self.cache_dir,
        )
        self._subgraphs = BreakSubgraphs(self._builder)  # the Loops and Ifs breaks run
        self._main: Entry | None = None
        self._hwio: frozenset[str] | None = None
        # The direct calls (see ``fastpath``): of the program compiled ahead (set by
        # _precompile), or of one program per value of the prelude's conditions (a graph
        # without breaks), registered after checked calls; None: every call is checked.
        self._fast: WholeGraphCall | SpecializedCalls | ChainCalls | None = None
        seg0 = plan.segments[0] if len(plan.segments) == 1 else None
        whole = not plan.breaks and seg0 is not None and seg0.position == 0 and seg0.stop is None
        self._spec_seg = seg0 if whole else None
        # the program depends on values computed from the inputs (If conditions): no
        # ahead-of-time compile, one program per value
        self._specialises = bool(whole and seg0 is not None and seg0.statics)
        if seg0 is not None and whole:
            self._fast = SpecializedCalls(
                arg_names=seg0.args,
                statics=seg0.statics,
                output_names=self._output_names,
                n_inputs=self._n_inputs,
                prelude=self._prelude,
                prelude_values=tuple(sorted(values)),
                prelude_shapes=tuple(sorted(read - values)),
                unchecked=self._unchecked(seg0),
            )
        # per sync break, the values it brings to the host (an If's condition)
        sync_reads: dict[int, tuple[str, ...]] = {}
        for at, info in plan.breaks.items():
            node = self.graph.nodes[at]
            if info.sync:
                host_inputs = node.opdef.host_inputs if node.opdef else ()
                sync_reads[at] = tuple(
                    node.inputs[i] for i in host_inputs if i < len(node.inputs) and node.inputs[i]
                )
        self._sync_reads = sync_reads
        # The call as a list of steps: a Segment, or the position of a break node; built
        # aside and set once, after the sync reads it names (a call running meanwhile reads
        # the old list or the new one)
        steps: list[Segment | int] = []
        by_start = {s.position: s for s in plan.segments}
        for pos in [*sorted(plan.breaks), None]:
            for start in list(by_start):
                if pos is None or start < pos:
                    steps.append(by_start.pop(start))
            if pos is not None:
                steps.append(pos)
        self._steps = steps
        # a graph whose breaks only bring If conditions to the host: the direct call runs
        # its segments' programs in a row (``chained``), registered after checked calls
        links = _chain_links(steps, sync_reads) if plan.breaks and not plan.prelude else None
        # every input an argument of a program: jax's call checks what the checked path would
        if links is not None and set(self._input_names) <= {a for link in links for a in link.args}:
            self._fast = ChainCalls(links, self._output_names, tuple(self._input_names))

    def _unchecked(self, seg: Segment) -> tuple[TensorSpec, ...]:
        """The model's inputs that are not arguments of ``seg``'s program."""
        return tuple(self._input_specs[n] for n in self._input_names if n not in seg.args)

    def _add_break(self, found: NeedsHost) -> None:
        """A trace found a node that reads a traced value on the host: make it a break."""
        if found.position in self._forced:  # the node fails even as a break: give up
            raise RuntimeError(f"node at position {found.position} failed as a break too")
        self._forced[found.position] = found.reason
        self._plan(analyse(self.graph, self._forced, self._const_sizes))

    # -- properties ---------------------------------------------------------------------------

    @property
    def graph_break(self) -> bool:
        """True when the graph has nodes that need runtime values (see ``breaks``)."""
        return self.plan.graph_break

    @property
    def breaks(self) -> list[dict[str, Any]]:
        """The break nodes: position, node name, op type and the value each needs."""
        return [
            {"position": b.position, "node": b.node, "op_type": b.op_type, "reason": b.reason}
            for b in sorted(self.plan.breaks.values(), key=lambda b: b.position)
        ]

    @property
    def source(self) -> str | None:
        return self.model.source

    @property
    def cache_size(self) -> int:
        """How many compiled segments each position keeps; the least recently used goes."""
        return self._cache_size

    @cache_size.setter
    def cache_size(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"cache_size must be at least 1, got {size}")
        self._cache_size = self._builder.segments.size = size

    def cache_info(self) -> dict[int, list[list[dict[str, Any]]]]:
        """The cached segments per position, least recently used first (their shapes)."""
        with self._lock:
            return self._builder.segments.info()

    def __repr__(self) -> str:
        return (
            f"<CompiledModel {self.model.source or '<memory>'} graph_break={self.graph_break} "
            f"segments={len(self.plan.segments)} cache_size={self.cache_size}>"
        )

    # -- compile ------------------------------------------------------------------------------

    def _base_env(self) -> dict[str, Any]:
        """Initializers and the values folded from constants alone (computed once)."""
        if self._consts is None:
            import jax

            env: dict[str, Any] = dict(self.graph.initializers)
            with jax.enable_x64(True):
                for node in self.graph.nodes:
                    outs = [o for o in node.outputs if o]
                    if outs and all(o in self.plan.const for o in outs):
                        values = run_node(node, env)
                        for name, value in zip(node.outputs, values, strict=False):
                            if name:
                                env[name] = to_host(value)
            self._consts = env
        return self._consts

    def _device_params(self) -> dict[str, Any]:
        if self.plan.params and not self._params:
            import jax

            with jax.enable_x64(True):
                base = self._base_env()
                relaid = self._relaid_weights(base, self._hwio_params())
                host = {n: relaid.get(n, base[n]) for n in self.plan.params}
                # device_put, not jnp.asarray: asarray compiles a small conversion
                # program for each new shape (~20 ms each, most of a warm compile).
                self._params = {n: jax.device_put(v) for n, v in host.items()}
        return self._params

    def _relaid_weights(self, base: Mapping[str, Any], hwio: frozenset[str]) -> dict[str, Any]:
        """The weights kept as HWIO, in that layout (``xla_cpu.oihw_to_hwio``): with a
        ``cache_dir``, from the program store (mapped, not copied: a warm load of light
        resnet50 spent most of its time relaying out its 100 MB), else laid out and stored."""
        names = tuple(sorted(hwio))
        if not names:
            return {}
        store = self._programs
        digest = store.digest("hwio-weights", names) if store is not None else ""
        if store is not None:
            stored = store.load_weights(digest)
            if stored is not None and sorted(stored) == list(names):
                return stored
        relaid = {n: xla_cpu.oihw_to_hwio(base[n]) for n in names}
        if store is not None:
            store.save_weights(digest, relaid)
        return relaid

    def _hwio_params(self) -> frozenset[str]:
        """Parameters kept on the device as HWIO (``xla_cpu.hwio_params``), found once per
        plan."""
        if self._hwio is None:
            self._hwio = xla_cpu.hwio_params(self.graph.nodes, self.plan.params, self._base_env())
        return self._hwio

    def _precompile(self, specs: Mapping[str, Any]) -> None:
        """Compile the whole graph (no breaks) for the given input specs; its direct call."""
        seg = self.plan.segments[0] if self.plan.segments else None
        if seg is None:
            return
        entry = self._builder.precompile(seg, specs, self)
        self._main = entry
        signature = tuple((n, tuple(specs[n].shape), np.dtype(specs[n].dtype)) for n in seg.args)
        self._fast = WholeGraphCall(
            entry,
            signature,
            self._params_for(seg),
            self._output_names,
            n_inputs=self._n_inputs,
            source=self.model.source,
            unchecked=self._unchecked(seg),
        )

    # -- calls --------------------------------------------------------------------------------

    def __call__(self, inputs: Mapping[str, Any] | None = None, /, **kwargs: Any) -> dict[str, Any]:
        if inputs is None:
            inputs = kwargs
        elif kwargs:
            inputs = {**inputs, **kwargs}
        fast = self._fast
        if fast is not None:
            # The direct call (see ``fastpath``): no lock, no cache events.
            result = fast.try_call(inputs)
            if result is not None:
                return result
        meta: dict[str, Any] = {"source": self.model.source}
        if bus.listening(_CALL_START, _CALL_STOP, _CALL_EXCEPTION):
            meta["shapes"] = describe_shapes(dict(inputs)) if isinstance(inputs, Mapping) else []
        with bus.span(E.CALL, meta) as span:
            values = check_inputs(self.model, inputs, self._accepted)
            for _ in range(len(self.graph.nodes) + 1):
                try:
                    result = self._run_segments(values)
                except NeedsHost as found:
                    with self._lock:
                        self._add_break(found)
                    continue
                if span.start and bus.sync:
                    # the span ends at the results; the dispatch time goes with it
                    span.set(dispatch_ns=time.monotonic_ns() - span.start)
                    block(result)
                return result
            raise AssertionError("unreachable: each retry adds a break")

    def program_for(self, inputs: Mapping[str, Any]) -> Program | None:
        """The program a call with ``inputs`` runs straight through jax's C++ call (see
        ``fastpath``), with its parameters bound; None when no such program fits them
        (other shapes or dtypes, a graph with breaks, or, for a model not compiled ahead,
        before the checked call that registers one for these conditions)."""
        fast = self._fast
        return fast.program_for(inputs) if fast is not None else None

    def _params_for(self, seg: Segment) -> tuple[Any, ...]:
        if not seg.params:
            return ()
        params = self._device_params()
        return tuple(params[n] for n in seg.params)

    def _run_segments(self, inputs: dict[str, Any]) -> dict[str, Any]:
        import jax

        env: dict[str, Any] = dict(self._base_env())
        env.update(inputs)
        source = self.model.source
        generation = bus.generation  # read before ``listening`` (see ChainCalls.register)
        # segment and break spans, when someone listens: one look per call
        segments = bus.listening(_SEGMENT_START, _SEGMENT_STOP, _SEGMENT_EXCEPTION)
        breaks = bus.listening(_BREAK_START, _BREAK_STOP, _BREAK_EXCEPTION)
        chain = self._fast if isinstance(self._fast, ChainCalls) else None
        used: list[tuple[Entry, dict[str, Any], list[Any]]] = []
        with jax.enable_x64(True):
            if self._prelude:
                run_prelude(self._prelude, env)
            for step in self._steps:
                if isinstance(step, Segment):
                    used.append(self._run_segment(step, env, segments))
                    continue
                node = self.graph.nodes[step]
                conditions = self._sync_reads.get(step)
                if conditions is not None and not breaks:
                    # only the condition comes to the host; the If runs in the next segment
                    for name in conditions:
                        env[name] = to_host(env[name])
                    continue
                meta = {
                    "source": source,
                    "position": step,
                    "node": node.name,
                    "op_type": node.op_type,
                }
                if conditions is not None:
                    with bus.span(E.BREAK, meta) as span:
                        t0 = time.monotonic_ns()
                        for name in conditions:
                            env[name] = to_host(env[name])
                        span.set(host_transfer_ns=time.monotonic_ns() - t0)
                    continue
                needs_host = self.plan.needs_host
                with bus.span(E.BREAK, meta) as span:
                    run = self._subgraphs.runner(node, self, self.plan, self._lock, segments)
                    outs = _run_break(node, env, span, needs_host, run) if breaks else run(env)
                    for name, value in zip(node.outputs, outs, strict=False):
                        if name:
                            # values read on the host later come to the host; data stays put
                            env[name] = to_host(value) if name in needs_host else value
        if chain is not None and not (segments or breaks):
            params = [self._params_for(s) for s in self._steps if isinstance(s, Segment)]
            with self._lock:  # as the cache evicts (``Entry.evicted``)
                chain.register(used, params, self._base_env(), generation)
        return {n: env[n] for n in self._output_names}

    def _segment_key(
        self, seg: Segment, env: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], list[Any], dict[str, Any]]:
        args = [env[n] for n in seg.args]
        statics = {n: to_host(env[n]) for n in seg.statics}
        key = segment_key(seg.position, seg.args, args, seg.statics, statics)
        return key, args, statics

    def _run_segment(
        self, seg: Segment, env: dict[str, Any], observe: bool = False
    ) -> tuple[Entry, dict[str, Any], list[Any]]:
        """Run ``seg`` into ``env``; its cache entry, statics and arguments."""
        key, args, statics = self._segment_key(seg, env)
        with self._lock:
            entry = self._builder.lookup_or_build(seg, key, args, statics, self, self._evicted)
        if not observe:
            self._exec_segment(seg, entry, env, args, statics)
            return entry, statics, args
        # The segment span covers the run only: a compile is its own span before it.
        meta = {
            "source": self.model.source,
            "position": seg.position,
            "stop": _END if seg.stop is None else seg.stop,
            "compiled": entry.exe is not None,
            "key": entry.key_hex,
        }
        with bus.span(E.SEGMENT, meta):
            produced = self._exec_segment(seg, entry, env, args, statics)
            if bus.sync:
                block(produced)
        return entry, statics, args

    def _exec_segment(
        self,
        seg: Segment,
        entry: Entry,
        env: dict[str, Any],
        args: list[Any],
        statics: dict[str, Any],
    ) -> Any:
        """Run one segment into ``env``; returns what it computed (to wait for)."""
        if entry.exe is None:  # eager segment
            local = env
            local.update(statics)
            if xla_cpu.eager_on_numpy([env[n] for n in seg.args]):
                for name in seg.args:  # its nodes compute on numpy (see xla_cpu)
                    env[name] = to_host(env[name])
            run_nodes(self.graph, local, seg.position, seg.stop)
            return [env.get(n) for n in seg.outputs]
        outs = entry.run(self._params_for(seg), args)
        fast = self._fast
        if seg is self._spec_seg and isinstance(fast, SpecializedCalls):
            with self._lock:  # as the cache evicts: an entry evicted meanwhile is not registered
                fast.register(
                    entry, statics, args, lambda: self._params_for(seg), self._consts or {}
                )
        env.update(entry.host_outputs)
        env.update(zip(entry.dynamic_outputs, outs, strict=True))
        return outs

    def _evicted(self, removed: Entry) -> None:
        removed.evicted = True
        if isinstance(self._fast, (SpecializedCalls, ChainCalls)):
            self._fast.forget(removed)


_CALL_START = E.CALL_START
_CALL_STOP = E.CALL_STOP
_CALL_EXCEPTION = E.CALL_EXCEPTION
_SEGMENT_START = E.start(E.SEGMENT)
_SEGMENT_STOP = E.stop(E.SEGMENT)
_SEGMENT_EXCEPTION = E.exception(E.SEGMENT)
_BREAK_START = E.start(E.BREAK)
_BREAK_STOP = E.stop(E.BREAK)
_BREAK_EXCEPTION = E.exception(E.BREAK)


def _run_break(
    node: Node,
    env: dict[str, Any],
    span: bus.SpanHandle,
    needs_host: frozenset[str],
    run: Callable[[Mapping[str, Any]], tuple[Any, ...]],
) -> tuple[Any, ...]:
    """Run a break node while its span is recorded, timing its parts.

    ``host_transfer_ns``: moving the inputs the op reads on the host (its ``host_inputs``)
    to the host before the op runs (when spans are not synced this includes waiting for
    the segment that computed them), and its outputs that later nodes read on the host
    after it. ``subgraph_ns``: for an op with subgraphs (If, Loop, Scan), the op's run,
    which is the subgraph's. With ``bus.sync`` the outputs are waited for, so both are
    times to results.
    """
    opdef = node.opdef
    sync = bus.sync
    t0 = time.monotonic_ns()
    overrides: dict[str, Any] = {}
    if opdef is not None and (opdef.host_inputs or opdef.value_shaped):
        idx = range(len(node.inputs)) if opdef.value_shaped else opdef.host_inputs
        for i in idx:
            name = node.inputs[i] if i < len(node.inputs) else ""
            if name and name not in overrides:
                overrides[name] = to_host(env[name])
    t1 = time.monotonic_ns()
    outs = run(collections.ChainMap(overrides, env) if overrides else env)
    if sync:
        block(outs)
    t2 = time.monotonic_ns()
    outs = tuple(
        to_host(v) if name and name in needs_host else v
        for name, v in zip(node.outputs, outs, strict=False)
    ) + tuple(outs[len(node.outputs) :])
    t3 = time.monotonic_ns()
    span.set(
        host_transfer_ns=(t1 - t0) + (t3 - t2),
        subgraph_ns=t2 - t1 if opdef is not None and opdef.subgraphs else None,
    )
    return outs


# ---------------------------------------------------------------------------------------------
# public API


def compile(
    model: Model | Any,
    input_specs: Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    cache_size: int = 8,
    cache_dir: str | os.PathLike[str] | None = None,
) -> CompiledModel:
    """Analyse ``model`` for graph breaks and compile it with ``jax.jit``.

    ``input_specs`` maps input names (or lists in input order) to shapes, ``(shape,
    dtype)``, arrays or ``jax.ShapeDtypeStruct``; without it the model's own input shapes
    are used when they are all static. A graph without breaks is compiled here for those
    shapes; otherwise segments compile on the calls that need them. ``cache_size`` is the
    number of segments kept per position; ``cache_dir`` keeps compiled programs on disk.
    """
    xla_cpu.run_inline()  # before anything starts JAX's CPU client (``xla_cpu``)
    model = as_model(model)
    meta = {"source": model.source, "compiler": "jax.jit"}
    with bus.span(E.COMPILE, meta) as span:
        compiled = CompiledModel(model, cache_size=cache_size, cache_dir=cache_dir)
        specs = resolve_specs(model, input_specs)
        # a model whose control flow specialises on its inputs compiles on its first calls
        while not compiled.graph_break and not compiled._specialises and specs is not None:
            try:
                compiled._precompile(specs)
                break
            except NeedsHost as found:
                compiled._add_break(found)
        span.set(graph_break=compiled.graph_break)
    return compiled


def run(model: Model | Any, inputs: Mapping[str, Any] | None = None, /, **kwargs: Any) -> dict:
    """Interpret ``model`` eagerly, one op at a time; outputs by name. Emits ``ember.run``."""
    import jax

    xla_cpu.run_inline()
    model = as_model(model)
    if inputs is None:
        inputs = kwargs
    elif kwargs:
        inputs = {**inputs, **kwargs}
    with bus.span(E.RUN, {"source": model.source}):
        values = check_inputs(model, inputs)
        with jax.enable_x64(True):
            env: dict[str, Any] = dict(model.graph.initializers)
            for name, value in values.items():
                env[name] = to_device(value)
            run_nodes(model.graph, env)
            return {n: env[n] for n in model.output_names}


def _chain_links(
    steps: Sequence[Segment | int], sync_reads: Mapping[int, tuple[str, ...]]
) -> list[Link] | None:
    """The links of ``ChainCalls`` for a call of ``steps``: compiled segments between breaks
    that only bring If conditions to the host, each segment's statics among the conditions
    read before it; None when the call is not such a chain."""
    links: list[Link] = []
    read: set[str] = set()
    for i, step in enumerate(steps):
        if isinstance(step, Segment):
            if not step.compiled or not set(step.statics) <= read:
                return None
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if nxt is not None and (isinstance(nxt, Segment) or nxt not in sync_reads):
                return None
            reads = sync_reads[nxt] if nxt is not None else ()
            links.append(Link(tuple(step.args), tuple(step.statics), tuple(reads)))
            read.update(reads)
        elif i == 0 or not isinstance(steps[i - 1], Segment):
            return None  # a break that starts the call, or two in a row
    return links or None
