"""Building a compiled model's programs, each inside its ``ember.segment.compile`` span.

``SegmentBuilder`` is the driver around ``SegmentCache`` (in the shape of JAX's compilation
cache: ``segment_cache`` is the LRU, ``diskcache`` the store on disk, this the driver):

- ``lookup_or_build``, on each segment of a checked call: the cache's entry for the key, or on
  a miss (``ember.cache.miss``) the segment compiled, or kept eager, and inserted;
- ``precompile``, from ``compile()``: the whole graph of a model without breaks, for the
  input specs it is given, under the key the cache would give those shapes at position 0.

Either way a program comes from the program store on disk when ``cache_dir`` has it, else it
is traced and compiled (``segment_trace``) and stored. A node found by the trace to read a
traced value on the host raises ``NeedsHost`` after the span has ended with ``needs_host``;
the compiled model then makes it a break and plans again (with a new builder: one builder
per plan, its cache starting empty).

The builder holds no reference to its model: what it reads of the model (constants folded
once, parameters on the device) comes with each call as ``values``, so a dropped model is
freed at once.

A *subgraph's* builder (``at`` set: an ``If`` branch or ``Loop`` body that a break node runs,
see ``break_subgraphs``) builds the subgraph as one segment, position 0 to its end, but
names it in its events and cache by ``at``, the break node's position, and shares the model's
segment cache (``segments``). A subgraph that cannot be one program (a node in it reads a
traced value on the host) is kept eager instead of raising ``NeedsHost``: its compile span
ends with ``compiled: false``, ``stop: "end"`` and the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime.breaks.plan import Plan, Segment
from ember.runtime.describe import describe_statics, describe_value, key_hex
from ember.runtime.graph.ir import Graph
from ember.runtime.jit import xla_cpu
from ember.runtime.jit.diskcache import ProgramStore, StoredProgram
from ember.runtime.jit.segment_cache import SegmentCache
from ember.runtime.jit.segment_trace import (
    CompileResult,
    Entry,
    NeedsHost,
    cost_of,
    memory_of,
    segment_compile_attrs,
    trace_segment,
)

__all__ = ["ModelValues", "SegmentBuilder"]

_END = "end"


class ModelValues(Protocol):
    """What tracing a segment reads of its model (``CompiledModel`` gives itself)."""

    def _base_env(self) -> dict[str, Any]:
        """Initializers and the values folded from constants alone."""
        ...

    def _device_params(self) -> dict[str, Any]:
        """The program parameters, on the device (conv weights in their kernel layout)."""
        ...

    def _hwio_params(self) -> frozenset[str]:
        """The parameters kept on the device as HWIO."""
        ...


class SegmentBuilder:
    """The segment cache of one plan and the compiles that fill it (see the module docstring).
    The owner holds its lock around ``lookup_or_build``."""

    def __init__(
        self,
        graph: Graph,
        plan: Plan,
        *,
        cache_size: int,
        source: str | None,
        store: ProgramStore | None,
        cache_dir: str | None,
        at: int | None = None,
        segments: SegmentCache[Entry] | None = None,
        scope: str = "",
    ) -> None:
        self.graph = graph
        self.plan = plan
        self.source = source
        self.store = store
        self.cache_dir = cache_dir
        # a subgraph's builder: the position its events and cache name, and what tells its
        # programs apart on disk ("Loop_0/body")
        self.at = at
        self.scope = scope
        self.segments: SegmentCache[Entry] = (
            segments if segments is not None else SegmentCache(cache_size, source)
        )
        self._prelude_set = frozenset(plan.prelude)
        # per position, the host values its segments have been compiled for so far: a
        # compile's span names those that are new (``host_values``)
        self._known_host_values: dict[int, set[str]] = {}

    def lookup_or_build(
        self,
        seg: Segment,
        key: tuple[Any, ...],
        args: list[Any],
        statics: dict[str, Any],
        values: ModelValues,
        on_evict: Callable[[Entry], None] | None = None,
    ) -> Entry:
        """The segment cache's entry for ``key``, or a new one compiled (or run eagerly) and
        inserted; ``on_evict(entry)`` is told of the entry a full position evicts."""
        position = seg.position if self.at is None else self.at
        entry = self.segments.get(position, key)
        if entry is not None:
            return entry
        shapes = [describe_value(n, a) for n, a in zip(seg.args, args, strict=True)]
        statics_meta = describe_statics(statics, self.plan.labels)
        hexed = key_hex(key)
        self.segments.missed(position, shapes, hexed, statics_meta)
        known = self._known_host_values.setdefault(seg.position, set())
        new_host = sorted(set(seg.statics) - known)
        known.update(seg.statics)
        entry = self._build_in_span(seg, key, hexed, shapes, statics, args, values, new_host)
        entry.statics = statics_meta
        self.segments.put(position, key, entry, on_evict)
        return entry

    def precompile(self, seg: Segment, specs: Mapping[str, Any], values: ModelValues) -> Entry:
        """The whole graph's program (``seg``, at position 0 to the end) for ``specs``
        (``jax.ShapeDtypeStruct`` by input name); not inserted in the cache."""
        import jax

        args = [specs[n] for n in seg.args]
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
        with jax.enable_x64(True):
            return self._build_in_span(seg, key, key_hex(key), shapes, {}, args, values, [])

    def _build_in_span(
        self,
        seg: Segment,
        key: tuple[Any, ...],
        hexed: str,
        shapes: list[dict[str, Any]],
        statics: dict[str, Any],
        args: Sequence[Any],
        values: ModelValues,
        host_values: list[str],
    ) -> Entry:
        """The segment's entry (compiled, or eager when the plan says so) built inside its
        ``ember.segment.compile`` span; ``NeedsHost`` is raised after the span ends."""
        position = seg.position if self.at is None else self.at
        meta = {"source": self.source, "position": position, "shapes": shapes, "key": hexed}
        found: NeedsHost | None = None
        with bus.span(E.SEGMENT_COMPILE, meta) as span:
            result = CompileResult(Entry(key=(), shapes=[], statics=[]))
            if seg.compiled:
                try:
                    result = self._build(seg, key, statics, args, values)
                    xla_cpu.keep_buffers(result.memory, _largest(args))
                except NeedsHost as exc:
                    found = exc
                except Exception as exc:
                    if self.at is None:
                        raise
                    # a subgraph that does not trace runs eagerly, where a real error shows
                    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                    found = NeedsHost(0, f"{type(exc).__name__}: {first}")
            attrs = segment_compile_attrs(
                result,
                found,
                shapes=shapes,
                stop=_END if seg.stop is None else seg.stop,
                compiled=seg.compiled,
                reason=seg.reason,
                host_values=host_values,
            )
            if found is not None and self.at is not None:
                # a subgraph stays whole, eager: its stop is its end, not a node in it
                attrs["stop"] = _END
                found = None
            span.set(**attrs)
        if found is not None:
            raise found
        entry = result.entry
        entry.key = key
        entry.shapes = shapes
        for value in entry.host_outputs.values():
            if isinstance(value, np.ndarray):
                # every call returns this array: a caller's in-place change must not reach
                # the next call's outputs (or the values later segments read)
                value.setflags(write=False)
        return entry

    def _build(
        self,
        seg: Segment,
        key: tuple[Any, ...],
        statics: dict[str, Any],
        args: Sequence[Any],
        values: ModelValues,
    ) -> CompileResult:
        """``trace_segment``, or the program store's copy when ``cache_dir`` has one."""
        store = self.store
        # The segment's bounds, arguments and statics; the model, runtime and device are
        # added by the store.
        digest = site = ""
        if store is not None:
            parts = (repr(seg), key[1], key[2])
            segment_key = (self.scope, *parts) if self.scope else parts
            digest = store.digest(*segment_key)
            site = store.site(*segment_key)
        stored = store.load(digest) if store is not None else None
        if stored is not None:
            entry = Entry(
                key=(),
                shapes=[],
                statics=[],
                exe=stored.exe,
                dynamic_outputs=stored.dynamic_outputs,
                host_outputs=stored.host_outputs,
                needs_x64=stored.needs_x64,
                forwards=stored.forwards,
            )
            return CompileResult(
                entry,
                "hit",
                memory_of(stored.exe),
                cost_of(stored.exe),
                disk_key=store.key_parts() if store is not None else None,
            )
        result = trace_segment(
            self.graph,
            values._base_env(),
            seg,
            statics,
            values._device_params(),
            args,
            self.cache_dir,
            values._hwio_params(),
            self._prelude_set,
            # a top-level segment may hand back what the model computed, not the caller's
            # inputs; a subgraph's arguments may be either, so its programs always run
            frozenset(seg.args) - set(self.graph.input_names) if self.at is None else frozenset(),
        )
        # A program that JAX's persistent cache gave back is not stored: serialized again it
        # does not run (XLA:CPU: "Function ... not found"); the next process reads it from
        # JAX's cache again.
        if store is not None:
            result.disk_key = store.key_parts()
        if store is not None and result.disk_cache != "hit":
            # the cache held this segment under another key: say which part changed
            result.disk_miss = store.explain_miss(site)
            entry = result.entry
            saved = store.save(
                digest,
                StoredProgram(
                    entry.exe,
                    entry.dynamic_outputs,
                    entry.host_outputs,
                    entry.needs_x64,
                    entry.forwards,
                ),
            )
            if saved:
                store.note_key(site)
        return result


def _largest(values: Sequence[Any]) -> int:
    """The bytes of the largest of ``values`` (arrays, or anything with a shape and dtype)."""
    sizes = [0]
    for v in values:
        try:
            sizes.append(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize)
        except (AttributeError, TypeError):
            pass
    return max(sizes)
