"""``compile`` and ``run``: ONNX graphs as ``jax.jit`` segments with a per-position cache.

**int64 and float64.** JAX keeps 32-bit types unless x64 is enabled, but ONNX models use
int64 (shapes, indices) and sometimes float64. Every trace, compile and eager run of the
runtime happens inside ``jax.enable_x64(True)``, a context manager that changes the setting
only for the current thread and only for that block, so a model keeps its ONNX dtypes and
the caller's global JAX setting is never touched. Compiled programs whose arguments are all
32-bit are called without the context (the fast path); the others are called inside it.

**Without graph breaks** the whole graph is one ``jax.jit`` program, compiled by
``compile()`` for the input shapes it is given (``input_specs``, or the model's own input
shapes when they are all static). A call with exactly those shapes and dtypes goes
straight to that program and emits no cache events; a call with other shapes goes through
the segment cache at position 0.

**With graph breaks** (see ``ember.runtime.analysis``) each call runs the sorted graph as
segments. For each segment the cache of its position is looked up with the key (position,
argument shapes and dtypes, static values the segment reads). A hit runs the cached
program; a miss traces and compiles the segment (or, for a segment of fewer than 20 nodes
after a break, keeps it eager) and inserts it, evicting the least recently used segment
of a full position. Then the break node runs eagerly, and its outputs that later nodes read
on the host become static values of the next segments.

**Control flow specialises** (see ``ember.runtime.analysis``). An ``If`` whose condition
comes from small inputs has it computed on the host at the start of the call (the
*prelude*); the condition is a static value of the segment holding the ``If``, so the key
holds it and the program has the taken branch inline (statics name it ``If_0 condition``).
A condition computed on the device is brought to the host by a short *sync* break, and the
``If`` starts the next segment. A graph without breaks that ``compile()`` could not compile
ahead of time (unknown input shapes, or such conditions) gets a direct call after its first
checked call: the prelude's conditions (memoised by the inputs it reads) pick the program,
called straight through jax's C++ call while nobody listens.

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
        ember.break.start, ember.break.stop
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
import functools
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.recorder import bus
from ember.recorder import events as E

from . import ops, xla_cpu
from .analysis import PARAM_MIN_SIZE, Plan, Segment, analyse
from .diskcache import ProgramStore, StoredProgram, disk_cache
from .errors import InputError
from .graph import Graph, Node, run_node, run_nodes, to_host
from .inputs import as_model, check_inputs, expected, to_device
from .model import Model, TensorSpec
from .segment_cache import SegmentCache

__all__ = ["CompiledModel", "compile", "describe_shapes", "run"]

_END = "end"


# ---------------------------------------------------------------------------------------------
# event helpers


def _describe_value(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, list):
        return {
            "name": name,
            "sequence": [
                {"shape": [int(d) for d in np.shape(v)], "dtype": _dtype_name(v)} for v in value
            ],
        }
    if value is None:
        return {"name": name, "shape": None, "dtype": None}
    return {"name": name, "shape": [int(d) for d in np.shape(value)], "dtype": _dtype_name(value)}


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(value: Any) -> str:
    dt = getattr(value, "dtype", None)
    if dt is None:
        return type(value).__name__
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = np.dtype(dt).name
    return name


def describe_shapes(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``shapes`` metadata: sorted by name, ``{name, shape, dtype}`` or a sequence."""
    return [_describe_value(n, values[n]) for n in sorted(values)]


def _describe_statics(
    statics: Mapping[str, Any], labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """``{name, value}`` per static value; a condition is named for its node (``If_0
    condition``) and given as one bool."""
    out = []
    for name in sorted(statics):
        v = statics[name]
        label = labels.get(name) if labels else None
        if label is not None and not isinstance(v, list) and np.size(v) == 1:
            out.append({"name": label, "value": bool(np.asarray(v).reshape(-1)[0])})
            continue
        if isinstance(v, list):
            value: Any = [np.asarray(x).tolist() for x in v]
        else:
            value = np.asarray(v).tolist()
        out.append({"name": name, "value": value})
    return out


def _shape_key(value: Any) -> Any:
    if isinstance(value, list):
        return ("seq", tuple(_shape_key(v) for v in value))
    if value is None:
        return None
    return (tuple(np.shape(value)), _dtype_name(value))


def _static_key(value: Any) -> Any:
    if isinstance(value, list):
        return ("seq", tuple(_static_key(v) for v in value))
    if value is None:
        return None
    a = np.asarray(value)
    if a.dtype == object:
        return (a.shape, "object", tuple(a.reshape(-1).tolist()))
    return (a.shape, a.dtype.str, a.tobytes())


def _key_hex(key: tuple[Any, ...]) -> str:
    return hashlib.blake2b(repr(key).encode(), digest_size=8).hexdigest()


def _memory_of(exe: Any) -> dict[str, int] | None:
    try:
        m = exe.memory_analysis()
    except Exception:
        return None
    if m is None:
        return None
    return {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
        "alias_bytes": int(m.alias_size_in_bytes),
        "generated_code_bytes": int(m.generated_code_size_in_bytes),
    }


def _cost_of(exe: Any) -> dict[str, float | None] | None:
    try:
        c = exe.cost_analysis()
    except Exception:
        return None
    if isinstance(c, (list, tuple)):
        c = c[0] if c else None
    if not c:
        return None
    flops = c.get("flops")
    accessed = c.get("bytes accessed")
    return {
        "flops": float(flops) if flops is not None else None,
        "bytes_accessed": float(accessed) if accessed is not None else None,
    }


# ---------------------------------------------------------------------------------------------
# segments


@dataclass
class _Entry:
    """One cached segment: a compiled program (or None: eager) and what its trace knew."""

    key: tuple[Any, ...]
    shapes: list[dict[str, Any]]
    statics: list[dict[str, Any]]
    exe: Any = None
    dynamic_outputs: tuple[str, ...] = ()
    host_outputs: dict[str, Any] = field(default_factory=dict)
    needs_x64: bool = True
    _hex: tuple[Any, str] | None = field(default=None, repr=False, compare=False)

    @property
    def key_hex(self) -> str:
        # hashed once per key: a recorded call names its segments' keys on every call
        hexed = self._hex
        if hexed is None or hexed[0] is not self.key:
            hexed = self._hex = (self.key, _key_hex(self.key))
        return hexed[1]


def _block(values: Any) -> None:
    """Wait until ``values`` (a pytree; numpy and None leaves pass) are computed."""
    import jax

    jax.block_until_ready(values)


def _is_host_value(v: Any) -> bool:
    if isinstance(v, list):
        return all(_is_host_value(x) for x in v)
    return v is None or ops.is_host(v)


def _has_64bit(values: Sequence[Any]) -> bool:
    for v in values:
        if isinstance(v, list):
            if _has_64bit(v):
                return True
        elif v is not None and np.dtype(getattr(v, "dtype", np.float32)).itemsize == 8:
            return True
    return False


class _NeedsHost(Exception):
    """A node read a traced value on the host: it becomes a break (found by tracing)."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


def _needs_concrete(exc: BaseException | None) -> bool:
    import jax

    kinds = (
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerArrayConversionError,
        jax.errors.TracerIntegerConversionError,
        jax.errors.TracerBoolConversionError,
        jax.errors.NonConcreteBooleanIndexError,
    )
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, kinds) or getattr(exc, "needs_host", False):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _trace_segment(
    graph: Graph,
    base_env: Mapping[str, Any],
    seg: Segment,
    statics: Mapping[str, Any],
    params: Mapping[str, Any],
    args: Sequence[Any],
    cache_dir: str | None,
    hwio: frozenset[str] = frozenset(),
    prelude: frozenset[int] = frozenset(),
) -> CompileResult:
    """Trace and compile ``seg`` for ``args``: the entry (without key) and compile facts.

    ``hwio`` names the convolution weights kept on the device as HWIO (see
    ``CompiledModel._hwio_params``); the program reads them back as ONNX's OIHW.
    ``prelude`` are the positions of nodes computed on the host before the call (their
    outputs arrive as statics or arguments).
    """
    import jax

    box: dict[str, Any] = {}

    def segment_fn(param_values: tuple[Any, ...], *arg_values: Any) -> tuple[Any, ...]:
        env: dict[str, Any] = dict(base_env)
        env.update(statics)
        for name, value in zip(seg.params, param_values, strict=True):
            env[name] = xla_cpu.read_hwio(value) if name in hwio else value
        env.update(zip(seg.args, arg_values, strict=True))
        for node in graph.nodes[seg.position : seg.stop]:
            if node.position in prelude or (
                node.outputs and all(o in base_env for o in node.outputs if o)
            ):
                continue  # folded once per model (constants), or computed by the prelude
            try:
                outs = run_node(node, env)
            except Exception as exc:
                if _needs_concrete(exc):
                    raise _NeedsHost(
                        node.position,
                        f"a value that {node.op_type} {node.name!r} reads on the host",
                    ) from exc
                raise
            for name, value in zip(node.outputs, outs, strict=False):
                if name:
                    env[name] = value
        host: dict[str, Any] = {}
        dynamic: list[str] = []
        for name in seg.outputs:
            v = env[name]
            if _is_host_value(v):
                host[name] = v
            else:
                dynamic.append(name)
        box["host"] = host
        box["dynamic"] = tuple(dynamic)
        return tuple(env[n] for n in dynamic)

    param_values = tuple(params[n] for n in seg.params)
    with disk_cache(cache_dir) as probe:
        if param_values:
            lowered = jax.jit(segment_fn).lower(param_values, *args)
        else:  # no parameter pytree: the cheapest call

            def no_params_fn(*arg_values: Any) -> tuple[Any, ...]:
                return segment_fn((), *arg_values)

            lowered = jax.jit(no_params_fn).lower(*args)
        exe = lowered.compile(compiler_options=xla_cpu.compiler_options())
    entry = _Entry(
        key=(),
        shapes=[],
        statics=[],
        exe=exe,
        dynamic_outputs=box["dynamic"],
        host_outputs=box["host"],
        needs_x64=_has_64bit(args) or _has_64bit(param_values),
    )
    disk = probe.result if cache_dir is not None else None
    return CompileResult(entry, disk, _memory_of(exe), _cost_of(exe))


@dataclass
class CompileResult:
    """What compiling one segment gave: its cache entry (without key) and the facts that its
    ``segment_compile`` span reports."""

    entry: _Entry
    disk_cache: str | None = None  # "hit" | "miss" in a cache_dir, else None
    memory: dict[str, Any] | None = None  # the executable's memory analysis
    cost: dict[str, Any] | None = None  # its cost analysis


def _segment_compile_attrs(
    result: CompileResult,
    found: _NeedsHost | None,
    *,
    shapes: list[dict[str, Any]],
    stop: int | str,
    compiled: bool,
    reason: str | None,
    host_values: list[str],
) -> dict[str, Any]:
    """The attributes a ``segment_compile`` span ends with. A value the trace found it needs
    on the host (``found``) ends the segment there instead, uncompiled, with its reason."""
    return {
        "shapes": shapes,
        "stop": stop if found is None else found.position,
        "compiled": compiled and found is None,
        "disk_cache": result.disk_cache,
        "reason": reason if found is None else found.reason,
        "host_values": host_values,
        "memory": result.memory,
        "cost": result.cost,
    }


# ---------------------------------------------------------------------------------------------
# the compiled model


def _spec_value(spec: Any, tspec: TensorSpec) -> Any:
    """An input spec as something ``jax.jit(...).lower`` accepts (ShapeDtypeStruct)."""
    import jax

    if isinstance(spec, jax.ShapeDtypeStruct):
        return spec
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):
        return jax.ShapeDtypeStruct(tuple(spec.shape), np.dtype(spec.dtype))
    if isinstance(spec, tuple) and len(spec) == 2 and not isinstance(spec[1], int):
        return jax.ShapeDtypeStruct(tuple(spec[0]), np.dtype(spec[1]))
    if isinstance(spec, (tuple, list)):
        if tspec.dtype is None:
            raise InputError(
                f"input_specs[{tspec.name!r}]: give (shape, dtype); the model "
                "does not say the dtype of this input"
            )
        return jax.ShapeDtypeStruct(tuple(int(d) for d in spec), tspec.dtype)
    raise InputError(
        f"input_specs[{tspec.name!r}] = {spec!r}: give a shape tuple, (shape, dtype), "
        "an array or a jax.ShapeDtypeStruct"
    )


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
        self._prelude_set = frozenset(plan.prelude)
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
        self._prelude_values = tuple(sorted(values))
        self._prelude_shapes = tuple(sorted(read - values))
        # the conditions' static key by the inputs the prelude reads (a sample rate: one)
        self._prelude_memo: dict[Any, Any] = {}
        self._segments: SegmentCache[_Entry] = SegmentCache(self._cache_size, self.model.source)
        self._known_host_values: dict[int, set[str]] = {}
        self._main: _Entry | None = None
        self._main_sig: tuple[Any, ...] | None = None
        self._main_arg_names: tuple[str, ...] = ()
        self._fast: _FastPath | None = None
        self._hwio: frozenset[str] | None = None
        # the fast path's current entry point (see _FastPath), None without one
        self._try_call: Callable[[Mapping[str, Any]], dict[str, Any] | None] | None = None
        self._checked_call: Callable[[Mapping[str, Any]], dict[str, Any] | None] | None = None
        # One program per value of the prelude's conditions (no breaks): the direct call of
        # each, by the conditions' static key, while nobody listens (see _spec_call).
        seg0 = plan.segments[0] if len(plan.segments) == 1 else None
        whole = not plan.breaks and seg0 is not None and seg0.position == 0 and seg0.stop is None
        self._spec_seg = seg0 if whole else None
        # the program depends on values computed from the inputs (If conditions): no
        # ahead-of-time compile, one program per value
        self._specialises = bool(whole and seg0 is not None and seg0.statics)
        self._spec: dict[Any, tuple[_Entry, Callable[[Mapping[str, Any]], Any]]] = {}
        self._spec_generation = -1
        if self._spec_seg is not None:
            model_ref = weakref.ref(self)

            def spec_call(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
                owner = model_ref()
                return owner._spec_call(inputs) if owner is not None else None

            self._try_call = spec_call
        # The call as a list of steps: a Segment, or the position of a break node.
        self._steps: list[Segment | int] = []
        by_start = {s.position: s for s in plan.segments}
        for pos in [*sorted(plan.breaks), None]:
            for start in list(by_start):
                if pos is None or start < pos:
                    self._steps.append(by_start.pop(start))
            if pos is not None:
                self._steps.append(pos)

    def _add_break(self, found: _NeedsHost) -> None:
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
        self._cache_size = self._segments.size = size

    def cache_info(self) -> dict[int, list[list[dict[str, Any]]]]:
        """The cached segments per position, least recently used first (their shapes)."""
        with self._lock:
            return self._segments.info()

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
                hwio = self._hwio_params()
                host = {
                    n: xla_cpu.oihw_to_hwio(base[n]) if n in hwio else base[n]
                    for n in self.plan.params
                }
                # device_put, not jnp.asarray: asarray compiles a small conversion
                # program for each new shape (~20 ms each, most of a warm compile).
                self._params = {n: jax.device_put(v) for n, v in host.items()}
        return self._params

    def _hwio_params(self) -> frozenset[str]:
        """Parameters kept on the device as HWIO (``xla_cpu.hwio_params``), found once per
        plan."""
        if self._hwio is None:
            self._hwio = xla_cpu.hwio_params(self.graph.nodes, self.plan.params, self._base_env())
        return self._hwio

    def _precompile(self, specs: Mapping[str, Any]) -> None:
        """Compile the whole graph (no breaks) for the given input specs."""
        import jax

        seg = self.plan.segments[0] if self.plan.segments else None
        if seg is None:
            return
        args = [specs[n] for n in seg.args]
        source = self.model.source
        shapes = [
            {"name": n, "shape": list(specs[n].shape), "dtype": np.dtype(specs[n].dtype).name}
            for n in seg.args
        ]
        # the same key the segment cache would give these shapes at position 0
        key = (
            0,
            tuple(
                (n, (tuple(s.shape), np.dtype(s.dtype).name))
                for n, s in zip(seg.args, args, strict=True)
            ),
            (),
        )
        meta = {"source": source, "position": 0, "shapes": shapes, "key": _key_hex(key)}
        found: _NeedsHost | None = None
        with bus.span(E.SEGMENT_COMPILE, meta) as span, jax.enable_x64(True):
            try:
                result = self._compile_segment(seg, key, {}, args)
            except _NeedsHost as exc:
                found = exc
                result = CompileResult(_Entry(key=(), shapes=[], statics=[]))
            span.set(
                **_segment_compile_attrs(
                    result,
                    found,
                    shapes=shapes,
                    stop=_END,
                    compiled=True,
                    reason=None,
                    host_values=[],
                )
            )
        if found is not None:
            raise found
        entry = result.entry
        entry.key = key
        entry.shapes = shapes
        self._main = entry
        self._main_sig = tuple((tuple(specs[n].shape), np.dtype(specs[n].dtype)) for n in seg.args)
        self._main_arg_names = seg.args
        self._fast = _FastPath(self, entry, seg)
        self._fast.bind(self)

    def _compile_segment(
        self, seg: Segment, key: tuple[Any, ...], statics: dict[str, Any], args: Sequence[Any]
    ) -> CompileResult:
        """``_trace_segment``, or the program store's copy when ``cache_dir`` has one."""
        store = self._programs
        # The segment's bounds, arguments and statics; the model, runtime and device are
        # added by the store.
        digest = store.digest(repr(seg), key[1], key[2]) if store is not None else ""
        stored = store.load(digest) if store is not None else None
        if stored is not None:
            entry = _Entry(
                key=(),
                shapes=[],
                statics=[],
                exe=stored.exe,
                dynamic_outputs=stored.dynamic_outputs,
                host_outputs=stored.host_outputs,
                needs_x64=stored.needs_x64,
            )
            return CompileResult(entry, "hit", _memory_of(stored.exe), _cost_of(stored.exe))
        result = _trace_segment(
            self.graph,
            self._base_env(),
            seg,
            statics,
            self._device_params(),
            args,
            self.cache_dir,
            self._hwio_params(),
            self._prelude_set,
        )
        # A program that JAX's persistent cache gave back is not stored: serialized again it
        # does not run (XLA:CPU: "Function ... not found"); the next process reads it from
        # JAX's cache again.
        if store is not None and result.disk_cache != "hit":
            entry = result.entry
            store.save(
                digest,
                StoredProgram(
                    entry.exe, entry.dynamic_outputs, entry.host_outputs, entry.needs_x64
                ),
            )
        return result

    # -- calls --------------------------------------------------------------------------------

    def __call__(self, inputs: Mapping[str, Any] | None = None, /, **kwargs: Any) -> dict[str, Any]:
        if inputs is None:
            inputs = kwargs
        elif kwargs:
            inputs = {**inputs, **kwargs}
        try_call = self._try_call
        if try_call is not None:
            # The whole-graph program at its compile-time shapes: no lock, no cache events.
            result = try_call(inputs)
            if result is not None:
                return result
        meta = {"source": self.model.source}
        if bus.listening(_CALL_START, _CALL_STOP, _CALL_EXCEPTION):
            meta["shapes"] = describe_shapes(dict(inputs))
        with bus.span(E.CALL, meta) as span:
            values = check_inputs(self.model, inputs)
            for _ in range(len(self.graph.nodes) + 1):
                try:
                    result = self._run_segments(values)
                except _NeedsHost as found:
                    with self._lock:
                        self._add_break(found)
                    continue
                if span.start and bus.sync:
                    # the span ends at the results; the dispatch time goes with it
                    span.set(dispatch_ns=time.monotonic_ns() - span.start)
                    _block(result)
                return result
            raise AssertionError("unreachable: each retry adds a break")

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
        # segment and break spans, when someone listens: one look per call
        segments = bus.listening(_SEGMENT_START, _SEGMENT_STOP, _SEGMENT_EXCEPTION)
        breaks = bus.listening(_BREAK_START, _BREAK_STOP, _BREAK_EXCEPTION)
        with jax.enable_x64(True):
            if self._prelude:
                self._run_prelude(env)
            for step in self._steps:
                if isinstance(step, Segment):
                    self._run_segment(step, env, segments)
                    continue
                node = self.graph.nodes[step]
                meta = {
                    "source": source,
                    "position": step,
                    "node": node.name,
                    "op_type": node.op_type,
                }
                if self.plan.breaks[step].sync:
                    # only the condition comes to the host; the If runs in the next segment
                    with bus.span(E.BREAK, meta) as span:
                        t0 = time.monotonic_ns()
                        for i in node.opdef.host_inputs if node.opdef else ():
                            if i < len(node.inputs) and node.inputs[i]:
                                env[node.inputs[i]] = to_host(env[node.inputs[i]])
                        if breaks:
                            span.set(host_transfer_ns=time.monotonic_ns() - t0)
                    continue
                needs_host = self.plan.needs_host
                with bus.span(E.BREAK, meta) as span:
                    if breaks:
                        outs = _run_break(node, env, span, needs_host)
                    else:
                        outs = run_node(node, env)
                    for name, value in zip(node.outputs, outs, strict=False):
                        if name:
                            # values read on the host later come to the host; data stays put
                            env[name] = to_host(value) if name in needs_host else value
        return {n: env[n] for n in self._output_names}

    def _spec_call(self, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The steady-state call of a graph without breaks not compiled ahead of time.

        For a model whose inputs' shapes were not known at ``compile`` time, or that
        specialises on conditions computed from its inputs (computed here on the host): the
        program the last checked call ran for these condition values, straight through
        jax's C++ call; None (the checked path) when nobody has registered one since the
        last attach or detach, or the inputs do not fit it (other shapes or dtypes).
        """
        if bus.generation != self._spec_generation or len(inputs) != self._n_inputs:
            return None
        seg = self._spec_seg
        assert seg is not None
        if seg.statics:
            try:
                # the prelude is a function of the small inputs it reads: run once per value
                memo_key = (
                    tuple(_static_key(inputs[n]) for n in self._prelude_values),
                    tuple(np.shape(inputs[n]) for n in self._prelude_shapes),
                )
                key = self._prelude_memo.get(memo_key)
                if key is None:
                    env = dict(inputs)
                    if self._prelude:
                        self._run_prelude(env, self._consts or {})
                    key = tuple(_static_key(env[n]) for n in seg.statics)
                    if len(self._prelude_memo) >= 64:
                        self._prelude_memo.clear()
                    self._prelude_memo[memo_key] = key
            except Exception:
                return None  # the checked path says what is wrong with the inputs
        else:
            key = ()
        hit = self._spec.get(key)
        return hit[1](inputs) if hit is not None else None

    def _register_spec(
        self, seg: Segment, entry: _Entry, statics: Mapping[str, Any], args: Sequence[Any]
    ) -> None:
        """After a checked call: the direct call of ``entry`` for these condition values."""
        if (
            entry.exe is None
            or entry.host_outputs
            or tuple(entry.dynamic_outputs) != self._output_names
            or bus.listening(*_CALL_EVENTS)
        ):
            return
        if bus.generation != self._spec_generation:
            self._spec = {}
            self._spec_generation = bus.generation
        cpp = getattr(entry.exe, "_call", None) or entry.exe
        call = functools.partial(cpp, self._params_for(seg)) if seg.params else cpp
        arg_names = seg.args
        dtypes = tuple(np.dtype(getattr(a, "dtype", np.float32)) for a in args)
        names = self._output_names
        array = _jax_array_type()
        x64 = entry.needs_x64
        if x64:
            import jax

            enable_x64 = jax.enable_x64

        def direct(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
            try:
                values = [inputs[n] for n in arg_names]
                for a, dtype in zip(values, dtypes, strict=True):
                    if type(a) is not array and a.dtype != dtype:
                        return None  # jax's C++ call would narrow it: the checked path
                if x64:  # 64-bit arguments: called as they were traced
                    with enable_x64(True):
                        outs = call(*values)
                else:
                    outs = call(*values)
            except (KeyError, TypeError, AttributeError):
                return None  # other shapes or dtypes: the checked path
            return dict(zip(names, outs, strict=True))

        self._spec[tuple(_static_key(statics[n]) for n in seg.statics)] = (entry, direct)

    def _run_prelude(self, env: dict[str, Any], base: Mapping[str, Any] | None = None) -> None:
        """Compute on the host what decides control flow (If conditions from small inputs)."""
        local: dict[str, Any] = {}
        for node in self._prelude:
            shape_only = node.op_type in ("Shape", "Size")
            for name in node.inputs:
                if name and name not in local:
                    value = env[name] if base is None or name in env else base[name]
                    local[name] = value if shape_only else to_host(value)
            outs = run_node(node, local)
            for name, value in zip(node.outputs, outs, strict=False):
                if name:
                    env[name] = local[name] = to_host(value)

    def _segment_key(
        self, seg: Segment, env: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], list[Any], dict[str, Any]]:
        args = [env[n] for n in seg.args]
        statics = {n: to_host(env[n]) for n in seg.statics}
        key = (
            seg.position,
            tuple((n, _shape_key(a)) for n, a in zip(seg.args, args, strict=True)),
            tuple((n, _static_key(statics[n])) for n in seg.statics),
        )
        return key, args, statics

    def _run_segment(self, seg: Segment, env: dict[str, Any], observe: bool = False) -> None:
        key, args, statics = self._segment_key(seg, env)
        with self._lock:
            entry = self._lookup_or_build(seg, key, args, statics)
        if not observe:
            self._exec_segment(seg, entry, env, args, statics)
            return
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
                _block(produced)

    def _exec_segment(
        self,
        seg: Segment,
        entry: _Entry,
        env: dict[str, Any],
        args: list[Any],
        statics: dict[str, Any],
    ) -> Any:
        """Run one segment into ``env``; returns what it computed (to wait for)."""
        if entry.exe is None:  # eager segment
            local = env
            local.update(statics)
            run_nodes(self.graph, local, seg.position, seg.stop)
            return [env.get(n) for n in seg.outputs]
        if seg.params:
            outs = entry.exe(self._params_for(seg), *args)
        else:
            outs = entry.exe(*args)
        if seg is self._spec_seg:
            self._register_spec(seg, entry, statics, args)
        env.update(entry.host_outputs)
        env.update(zip(entry.dynamic_outputs, outs, strict=True))
        return outs

    def _lookup_or_build(
        self, seg: Segment, key: tuple[Any, ...], args: list[Any], statics: dict[str, Any]
    ) -> _Entry:
        """The segment cache's entry for ``key``, or a new one compiled (or run eagerly) and
        inserted: the driver around ``SegmentCache``."""
        entry = self._segments.get(seg.position, key)
        if entry is not None:
            return entry
        source = self.model.source
        shapes = [_describe_value(n, a) for n, a in zip(seg.args, args, strict=True)]
        statics_meta = _describe_statics(statics, self.plan.labels)
        key_hex = _key_hex(key)
        self._segments.missed(seg.position, shapes, key_hex, statics_meta)
        known = self._known_host_values.setdefault(seg.position, set())
        new_host = sorted(set(seg.statics) - known)
        known.update(seg.statics)
        meta = {"source": source, "position": seg.position, "shapes": shapes, "key": key_hex}
        found: _NeedsHost | None = None
        with bus.span(E.SEGMENT_COMPILE, meta) as span:
            result = CompileResult(_Entry(key=(), shapes=[], statics=[]))
            if seg.compiled:
                try:
                    result = self._compile_segment(seg, key, statics, args)
                except _NeedsHost as exc:
                    found = exc
            span.set(
                **_segment_compile_attrs(
                    result,
                    found,
                    shapes=shapes,
                    stop=_END if seg.stop is None else seg.stop,
                    compiled=seg.compiled,
                    reason=seg.reason,
                    host_values=new_host,
                )
            )
        if found is not None:
            raise found
        entry = result.entry
        entry.key = key
        entry.shapes = shapes
        entry.statics = statics_meta
        self._segments.put(seg.position, key, entry, self._evicted)
        return entry

    def _evicted(self, removed: _Entry) -> None:
        if self._spec:
            self._forget_spec(removed)

    def _forget_spec(self, removed: _Entry) -> None:
        self._spec = {k: v for k, v in self._spec.items() if v[0] is not removed}


_CALL_START = E.CALL_START
_CALL_STOP = E.CALL_STOP
_CALL_EXCEPTION = E.CALL_EXCEPTION
_SEGMENT_START = E.start(E.SEGMENT)
_SEGMENT_STOP = E.stop(E.SEGMENT)
_SEGMENT_EXCEPTION = E.exception(E.SEGMENT)
_BREAK_START = E.start(E.BREAK)
_BREAK_STOP = E.stop(E.BREAK)
_BREAK_EXCEPTION = E.exception(E.BREAK)
# what a checked call emits at a cache hit: while any is listened to, no direct call
_CALL_EVENTS = (
    E.CALL_START,
    E.CALL_STOP,
    E.CALL_EXCEPTION,
    E.CACHE_HIT,
    _SEGMENT_START,
    _SEGMENT_STOP,
    _BREAK_START,
)


def _run_break(
    node: Node, env: Mapping[str, Any], span: bus.SpanHandle, needs_host: frozenset[str]
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
    outs = run_node(node, collections.ChainMap(overrides, env) if overrides else env)
    if sync:
        _block(outs)
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


@functools.cache
def _jax_array_type() -> type:
    """The concrete type of jax's arrays (not ``jax.Array``, whose isinstance is slower)."""
    import jax

    return type(jax.device_put(np.zeros((), np.float32)))


def _direct_call(
    state: _FastPath,
    model_ref: weakref.ReferenceType[CompiledModel],
    generation: int,
    arg_names: tuple[str, ...],
    n_inputs: int,
) -> Callable[[Mapping[str, Any]], dict[str, Any] | None]:
    """The call straight into jax's C++ call, valid while ``bus.generation`` stays."""
    call = state.call  # jax's C++ call, after the first run
    names = state.names
    only = names[0] if len(names) == 1 else None
    single = arg_names[0] if len(arg_names) == 1 else None
    dtypes = tuple(dtype for _, _, dtype in state.signature)
    dtype0 = dtypes[0] if dtypes else None
    # jax's arrays: its C++ call refuses other shapes and dtypes itself. Anything else (numpy
    # arrays, lists, scalars) it converts, and without x64 it narrows int64 and float64 to
    # the program's 32-bit types, so their dtype is compared here (one type check for a
    # jax array, ~15 ns for a numpy array).
    array = _jax_array_type()

    def direct(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        if bus.generation != generation or len(inputs) != n_inputs:
            owner = model_ref()
            return owner._checked_call(inputs) if owner is not None else None
        try:
            if single:
                x = inputs[single]
                if type(x) is not array and x.dtype != dtype0:
                    return None
                outs = call(x)
            else:
                args = [inputs[n] for n in arg_names]
                for a, dtype in zip(args, dtypes, strict=True):
                    if type(a) is not array and a.dtype != dtype:
                        return None
                outs = call(*args)
        except (KeyError, TypeError, AttributeError):
            # a missing input, an input without a dtype, or jax's C++ call refusing other
            # shapes or dtypes: the checked path (cache at position 0, or the input error)
            return None
        if only is not None:
            return {only: outs[0]}
        return dict(zip(names, outs, strict=False))

    return direct


class _FastPath:
    """The call of the whole-graph program, with as little Python around it as possible.

    The model's ``_try_call`` starts as the checked call: it compares shapes and dtypes,
    opens the ``ember.call`` span when someone listens, and calls the program. Once the
    program has been called (jax has then built its C++ call) and nobody listens to calls,
    ``_try_call`` becomes a direct call: the inputs go straight to the C++ call, which checks
    shapes and dtypes itself. It is valid for one ``bus.generation``; after an attach or
    detach it hands the call back to the checked path, which decides again.

    The closures reach the model through a weak reference, so nothing here makes a
    reference cycle: a dropped model frees its device parameters at once, not at the next
    garbage collection.
    """

    __slots__ = ("call", "entry", "exe", "names", "signature", "simple", "x64")

    def __init__(self, model: CompiledModel, entry: _Entry, seg: Segment) -> None:
        # (name, shape, dtype) per program argument
        self.signature = tuple(
            (n, shape, dtype)
            for n, (shape, dtype) in zip(seg.args, model._main_sig or (), strict=False)
        )
        self.exe = entry.exe
        params = model._params_for(seg)
        self.call = functools.partial(entry.exe, params) if params else entry.exe
        self.x64 = entry.needs_x64
        self.entry = entry
        self.names = model._output_names
        # Outputs straight from the program, in the model's order: build the dict by zip.
        self.simple = not entry.host_outputs and tuple(entry.dynamic_outputs) == self.names

    def bind(self, model: CompiledModel) -> None:
        """Set ``model._try_call`` to the checked call (closures over locals: cheap)."""
        signature = self.signature
        n_inputs = model._n_inputs
        source = model.model.source
        run = self.run
        state = self
        model_ref = weakref.ref(model)

        arg_names = tuple(name for name, _, _ in signature)
        single = arg_names[0] if len(arg_names) == 1 else None

        def check(args: list[Any]) -> bool:
            for a, (_, shape, dtype) in zip(args, signature, strict=True):
                try:
                    if a.shape != shape or a.dtype != dtype:
                        return False
                except AttributeError:
                    return False
            return True

        def checked(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
            if len(inputs) != n_inputs:
                return None
            try:
                args = [inputs[single]] if single else [inputs[n] for n in arg_names]
            except KeyError:
                return None
            if not check(args):
                return None
            if bus.listening(_CALL_START, _CALL_STOP, _CALL_EXCEPTION):
                meta = {"source": source, "shapes": describe_shapes(inputs)}
                with bus.span(E.CALL, meta) as span:
                    if bus.listening(_SEGMENT_START, _SEGMENT_STOP, _SEGMENT_EXCEPTION):
                        # the whole graph is one segment: its run, as on the segmented path
                        seg_meta = {
                            "source": source,
                            "position": 0,
                            "stop": _END,
                            "compiled": True,
                            "key": state.entry.key_hex,
                        }
                        with bus.span(E.SEGMENT, seg_meta):
                            result = run(args)
                            dispatched = time.monotonic_ns()
                            if bus.sync:
                                _block(result)  # the segment's results are the call's
                    else:
                        result = run(args)
                        dispatched = time.monotonic_ns()
                        if bus.sync:
                            _block(result)
                    if bus.sync:
                        # the span ends at the results; the dispatch time goes with it
                        span.set(dispatch_ns=dispatched - span.start)
                    return result
            generation = bus.generation
            result = run(args)
            owner = model_ref()
            if (
                owner is not None
                and state.simple
                and not state.x64
                and generation == bus.generation
            ):
                owner._try_call = _direct_call(state, model_ref, generation, arg_names, n_inputs)
            return result

        model._checked_call = model._try_call = checked

    def run(self, args: list[Any]) -> dict[str, Any]:
        if self.x64:
            import jax

            with jax.enable_x64(True):
                outs = self.call(*args)
        else:
            outs = self.call(*args)
        if self.call is self.exe or (
            isinstance(self.call, functools.partial) and self.call.func is self.exe
        ):
            # jax makes the C++ call of a compiled program on its first call; use it directly
            cpp = getattr(self.exe, "_call", None)
            if callable(cpp):
                call = self.call
                self.call = (
                    functools.partial(cpp, *call.args)
                    if isinstance(call, functools.partial)
                    else cpp
                )
        if self.simple:
            return dict(zip(self.names, outs, strict=False))
        result = dict(self.entry.host_outputs)
        result.update(zip(self.entry.dynamic_outputs, outs, strict=True))
        return {n: result[n] for n in self.names}


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
    model = as_model(model)
    meta = {"source": model.source, "compiler": "jax.jit"}
    with bus.span(E.COMPILE, meta) as span:
        compiled = CompiledModel(model, cache_size=cache_size, cache_dir=cache_dir)
        specs = _resolve_specs(model, input_specs)
        # a model whose control flow specialises on its inputs compiles on its first calls
        while not compiled.graph_break and not compiled._specialises and specs is not None:
            try:
                compiled._precompile(specs)
                break
            except _NeedsHost as found:
                compiled._add_break(found)
        span.set(graph_break=compiled.graph_break)
    return compiled


def _resolve_specs(model: Model, input_specs: Any) -> dict[str, Any] | None:
    tensor_inputs = [s for s in model.inputs]
    if input_specs is None:
        if all(s.kind == "tensor" and s.static and s.dtype is not None for s in tensor_inputs):
            return {s.name: _spec_value(s.shape, s) for s in tensor_inputs}
        return None
    if not isinstance(input_specs, Mapping):
        input_specs = dict(zip(model.input_names, input_specs, strict=False))
    unknown = [n for n in input_specs if n not in model.input_names]
    if unknown:
        raise InputError(f"input_specs names unknown input(s) {unknown}; {expected(model)}")
    specs = {}
    for s in tensor_inputs:
        if s.name not in input_specs:
            if s.kind == "tensor" and s.static and s.dtype is not None:
                specs[s.name] = _spec_value(s.shape, s)
                continue
            return None
        if s.kind != "tensor":
            return None
        specs[s.name] = _spec_value(input_specs[s.name], s)
    return specs


def run(model: Model | Any, inputs: Mapping[str, Any] | None = None, /, **kwargs: Any) -> dict:
    """Interpret ``model`` eagerly, one op at a time; outputs by name. Emits ``ember.run``."""
    import jax

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
