"""Tracing and compiling one segment: the cache entry it gives and the facts its
``segment_compile`` span reports.

``trace_segment`` traces the nodes of a segment into one ``jax.jit`` program and compiles
it (the segment's parameters first, as one pytree, then its arguments); a node that reads a
traced value on the host raises ``NeedsHost``, which the compiled model turns into a break
(found by tracing). ``Entry`` is what the segment cache keeps of the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.runtime import ops
from ember.runtime.breaks.plan import Segment
from ember.runtime.describe import key_hex
from ember.runtime.graph.channels_last import ChannelsLastEnv
from ember.runtime.graph.channels_last import run_node as run_channels_last
from ember.runtime.graph.ir import Graph, run_node
from ember.runtime.jit import speculate, xla_cpu
from ember.runtime.jit.diskcache import disk_cache

__all__ = [
    "CompileResult",
    "Entry",
    "NeedsHost",
    "cost_of",
    "memory_of",
    "segment_compile_attrs",
    "trace_segment",
]


@dataclass
class Entry:
    """One cached segment: a compiled program (or None: eager) and what its trace knew."""

    key: tuple[Any, ...]
    shapes: list[dict[str, Any]]
    statics: list[dict[str, Any]]
    exe: Any = None
    dynamic_outputs: tuple[str, ...] = ()
    host_outputs: dict[str, Any] = field(default_factory=dict)
    needs_x64: bool = True
    # per dynamic output, the argument it is (None: the program computes some output)
    forwards: tuple[int, ...] | None = None
    # set when the segment cache evicted it (a direct call must not register it again)
    evicted: bool = False
    _hex: tuple[Any, str] | None = field(default=None, repr=False, compare=False)

    def run(self, param_values: tuple[Any, ...], args: Sequence[Any]) -> Sequence[Any]:
        """The program's dynamic outputs for ``args`` (after ``param_values`` when the
        segment has parameters). A program that only passes arguments through (an ``If``
        specialised on its identity branch, say) is not run when those arguments are
        already device arrays the model computed: its outputs are them (jax arrays are
        immutable), without the ~5 us of a dispatch."""
        forwards = self.forwards
        if forwards is not None and _all_device_arrays(args, forwards):
            return [args[i] for i in forwards]
        return self.exe(param_values, *args) if param_values else self.exe(*args)

    @property
    def guarded(self) -> bool:
        """Whether the program speculated on shapes: its last output says if they held."""
        return self.dynamic_outputs[-1:] == (speculate.GUARDS,)

    @property
    def key_hex(self) -> str:
        # hashed once per key: a recorded call names its segments' keys on every call
        hexed = self._hex
        if hexed is None or hexed[0] is not self.key:
            hexed = self._hex = (self.key, key_hex(self.key))
        return hexed[1]


def _all_device_arrays(args: Sequence[Any], forwards: tuple[int, ...]) -> bool:
    import jax

    return all(isinstance(args[i], jax.Array) for i in forwards)


def forwarded(
    outs: Sequence[Any], args: Sequence[Any], names: Sequence[str], passable: frozenset[str]
) -> tuple[int, ...] | None:
    """Per traced output, the index of the traced argument it is, or None when some output
    is computed or is an argument not named in ``passable``."""
    index = {id(a): i for i, (a, n) in enumerate(zip(args, names, strict=True)) if n in passable}
    found = tuple(index.get(id(o), -1) for o in outs)
    return None if -1 in found else found


def memory_of(exe: Any) -> dict[str, int] | None:
    """The executable's memory analysis in bytes (None where the backend gives none)."""
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


def cost_of(exe: Any) -> dict[str, float | None] | None:
    """The executable's cost analysis: flops and bytes accessed (None where unknown)."""
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


def _has_64bit(values: Sequence[Any]) -> bool:
    for v in values:
        if isinstance(v, list):
            if _has_64bit(v):
                return True
        elif v is not None and np.dtype(getattr(v, "dtype", np.float32)).itemsize == 8:
            return True
    return False


class NeedsHost(Exception):
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


def trace_segment(
    graph: Graph,
    base_env: Mapping[str, Any],
    seg: Segment,
    statics: Mapping[str, Any],
    params: Mapping[str, Any],
    args: Sequence[Any],
    cache_dir: str | None,
    hwio: frozenset[str] = frozenset(),
    prelude: frozenset[int] = frozenset(),
    passable: frozenset[str] = frozenset(),
) -> CompileResult:
    """Trace and compile ``seg`` for ``args``: the entry (without key) and compile facts.

    ``passable`` names the arguments the entry may give back as its outputs without running
    its program (``Entry.run``): values the model computed, never a caller's own array.

    ``hwio`` names the convolution weights kept on the device as HWIO (see
    ``CompiledModel._hwio_params``); the program reads them back as ONNX's OIHW.
    ``prelude`` are the positions of nodes computed on the host before the call (their
    outputs arrive as statics or arguments).
    """
    import jax

    # which outputs the trace found to be host values, and which the program returns
    box: dict[str, Any] = {}

    # XLA:CPU: convolution outputs stay channels-last through the ops that can take them
    channels_last = jax.default_backend() == "cpu"

    def segment_fn(param_values: tuple[Any, ...], *arg_values: Any) -> tuple[Any, ...]:
        env: dict[str, Any] = ChannelsLastEnv(base_env) if channels_last else dict(base_env)
        env.update(statics)
        for name, value in zip(seg.params, param_values, strict=True):
            env[name] = xla_cpu.read_hwio(value) if name in hwio else value
        env.update(zip(seg.args, arg_values, strict=True))
        guards = _run_segment_nodes(graph, seg, env, base_env, prelude)
        box["host"], box["dynamic"] = _split_outputs(seg, env)
        outs = tuple(env[n] for n in box["dynamic"])
        if guards:  # shapes the program speculated on: whether they held, as one output
            import jax.numpy as jnp

            box["dynamic"] = (*box["dynamic"], speculate.GUARDS)
            outs = (*outs, jnp.all(jnp.stack([jnp.asarray(g) for g in guards])))
        box["forwards"] = forwarded(outs, arg_values, seg.args, passable)
        return outs

    param_values = tuple(params[n] for n in seg.params)
    exe, disk = _compile_segment(segment_fn, param_values, args, cache_dir)
    entry = Entry(
        key=(),
        shapes=[],
        statics=[],
        exe=exe,
        dynamic_outputs=box["dynamic"],
        host_outputs=box["host"],
        needs_x64=_has_64bit(args) or _has_64bit(param_values),
        forwards=box["forwards"],
    )
    return CompileResult(entry, disk, memory_of(exe), cost_of(exe))


def _run_segment_nodes(
    graph: Graph,
    seg: Segment,
    env: dict[str, Any],
    base_env: Mapping[str, Any],
    prelude: frozenset[int],
) -> list[Any]:
    """Run the segment's nodes on ``env`` (while tracing); a node that reads a traced
    value on the host raises ``NeedsHost`` (it becomes a break). A node whose output shapes
    a static value gives (``speculate.seen_name``) is computed for them: returns the traced
    guards that say whether they held."""
    guards: list[Any] = []
    for node in graph.nodes[seg.position : seg.stop]:
        if node.position in prelude or (
            node.outputs and all(o in base_env for o in node.outputs if o)
        ):
            continue  # folded once per model (constants), or computed by the prelude
        seen = env.get(speculate.seen_name(node)) if node.op_type in speculate.OPS else None
        try:
            if seen is not None:
                outs, ok = speculate.run(node, env, seen)
                if ok is not True:
                    guards.append(ok)
            elif isinstance(env, ChannelsLastEnv):
                run_channels_last(node, env)
                continue
            else:
                outs = run_node(node, env)
        except Exception as exc:
            if _needs_concrete(exc):
                raise NeedsHost(
                    node.position,
                    f"a value that {node.op_type} {node.name!r} reads on the host",
                ) from exc
            raise
        for name, value in zip(node.outputs, outs, strict=False):
            if name:
                env[name] = value
    return guards


def _split_outputs(seg: Segment, env: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The segment's outputs that are host values (kept by the entry), and the names of
    those the program returns."""
    host: dict[str, Any] = {}
    dynamic: list[str] = []
    for name in seg.outputs:
        v = env[name]
        if ops.all_on_host(v):
            host[name] = v
        else:
            dynamic.append(name)
    return host, tuple(dynamic)


def _compile_segment(
    segment_fn: Any, param_values: tuple[Any, ...], args: Sequence[Any], cache_dir: str | None
) -> tuple[Any, str | None]:
    """Lower and compile ``segment_fn`` with the disk cache at ``cache_dir``: the
    executable, and whether the disk cache hit (None without a cache_dir)."""
    import jax

    with disk_cache(cache_dir) as probe:
        if param_values:
            lowered = jax.jit(segment_fn).lower(param_values, *args)
        else:  # no parameter pytree: the cheapest call

            def no_params_fn(*arg_values: Any) -> tuple[Any, ...]:
                return segment_fn((), *arg_values)

            lowered = jax.jit(no_params_fn).lower(*args)
        exe = lowered.compile(compiler_options=xla_cpu.compiler_options())
    return exe, probe.result if cache_dir is not None else None


@dataclass
class CompileResult:
    """What compiling one segment gave: its cache entry (without key) and the facts that its
    ``segment_compile`` span reports."""

    entry: Entry
    disk_cache: str | None = None  # "hit" | "miss" in a cache_dir, else None
    memory: dict[str, Any] | None = None  # the executable's memory analysis
    cost: dict[str, Any] | None = None  # its cost analysis
    disk_key: dict[str, Any] | None = None  # the parts of its disk-cache key, with a cache_dir
    disk_miss: str | None = None  # the key parts that changed since the cache stored it


def segment_compile_attrs(
    result: CompileResult,
    found: NeedsHost | None,
    *,
    shapes: list[dict[str, Any]],
    stop: int | str,
    compiled: bool,
    reason: str | None,
    host_values: list[str],
) -> dict[str, Any]:
    """The attributes a ``segment_compile`` span ends with. A value the trace found it needs
    on the host (``found``) ends the segment there instead, uncompiled, with its reason."""
    attrs = {
        "shapes": shapes,
        "stop": stop if found is None else found.position,
        "compiled": compiled and found is None,
        "disk_cache": result.disk_cache,
        "reason": reason if found is None else found.reason,
        "host_values": host_values,
        "memory": result.memory,
        "cost": result.cost,
    }
    # only with a cache_dir: a run without one keeps its records as they were
    if result.disk_key is not None:
        attrs["disk_key"] = result.disk_key
        attrs["disk_miss"] = result.disk_miss
    return attrs
