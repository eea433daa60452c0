"""Compile budgets: ``ember.expect`` fails a test (or a script) that compiles more than it
should, and says why.

::

    with ember.expect(compiles=1, recompiles=0, evictions=0, peak_memory="200MiB") as seen:
        for batch in batches:
            step(params, batch)

While the block runs, Ember's events are collected in memory (no file; ``record=PATH`` also
writes a trace): every compile of a ``jax.jit`` function (the JAX bridge, with JAX's own
reason for a retrace: ``x dim 0: 32 -> 16``, dtype, weak type, static value, pytree
structure) and of an Ember model's segments (with what changed in the segment's key since
the previous compile at its position, and whether the key had been evicted), the segment
cache's evictions, the programs loaded from a disk cache (which are not compiles) and, with
a ``peak_memory`` budget, the device memory (read when the block starts and ends and every
5 ms in between: a peak shorter than that can be missed). On exit, a budget that does not
hold raises ``CompileBudgetExceeded`` (an ``AssertionError``: pytest shows it as a failed
assertion) listing each extra compile with its function, where it was called and why.

A budget is an ``int`` (exactly that many), or a string ``"<=N"``, ``"<N"``, ``">=N"``,
``">N"``, ``"==N"``; ``peak_memory`` is a size (``"200MiB"``, ``"1.5GB"``, bytes as an int)
that the peak must not exceed. ``warmup=K``: the first K compiles of each function (or
segment position) are warm-up and count towards neither ``compiles`` nor ``recompiles``
("none after warm-up" is ``recompiles=0, warmup=1``). Without warm-up, a recompile is a
compile of a function (or position) already compiled in the block, or one JAX says it
traced before the block began. JAX primitives run outside ``jit`` (``jnp.ones``) and
segments run eagerly are not counted as compiles; they are listed in ``seen``.

The JAX bridge watches the whole process, so compiles in other threads count too.

What a budget counts: by default, the compiles this block made. A program the process had
compiled before the block (an earlier test compiled both batch sizes) comes from JAX's
memory and is not counted, so a budget can pass because of what ran before it.
``fresh=True`` clears JAX's in-memory caches (``jax.clear_caches()``) when the block starts:
the block then counts what its code needs from a clean cache, whatever ran before. The
failure message says which of the two was counted.
"""

from __future__ import annotations

import itertools
import re
import sys
import threading
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ember.recorder import bus
from ember.recorder import events as E

__all__ = [
    "Budget",
    "Compile",
    "CompileBudgetExceeded",
    "Eviction",
    "Seen",
    "Watch",
    "expect",
    "parse_size",
]

Limit = int | str | None
"""A budget: an exact count, ``"<=N"`` (and ``<``, ``>=``, ``>``, ``==``), or None (none)."""

_LIMIT = re.compile(r"^\s*(?P<op><=|>=|==|<|>)?\s*(?P<n>\d+)\s*$")
_SIZE = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B|B)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})
_OPS = {
    "==": (lambda a, b: a == b),
    "<=": (lambda a, b: a <= b),
    "<": (lambda a, b: a < b),
    ">=": (lambda a, b: a >= b),
    ">": (lambda a, b: a > b),
}


class CompileBudgetExceeded(AssertionError):
    """A compile budget that did not hold; the message lists each extra compile and why.

    ``seen`` is what the block did; ``broken`` one line per budget that did not hold.
    """

    def __init__(self, message: str, seen: Seen, broken: list[str]) -> None:
        super().__init__(message)
        self.seen = seen
        self.broken = broken


def parse_size(size: int | str) -> int:
    """``"200MiB"`` -> 209715200; an int is bytes. ``ValueError`` says what is accepted."""
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    m = _SIZE.match(str(size))
    if m is None:
        raise ValueError(
            f"peak_memory={size!r}: give bytes as an int or a size such as '200MiB', "
            "'1.5GB' (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
        )
    return int(float(m.group("n")) * _UNITS[(m.group("unit") or "").lower()])


def _size_text(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover (the loop returns)


def _parse_limit(name: str, limit: Limit) -> tuple[str, int] | None:
    if limit is None:
        return None
    if isinstance(limit, int) and not isinstance(limit, bool):
        if limit < 0:
            raise ValueError(f"{name}={limit}: a count cannot be negative")
        return "==", limit
    m = _LIMIT.match(str(limit))
    if m is None:
        raise ValueError(
            f"{name}={limit!r}: give a count (0, 3) or a bound such as '<=3', '<3', '>=1'"
        )
    return m.group("op") or "==", int(m.group("n"))


# ---------------------------------------------------------------- what a block did


@dataclass(frozen=True)
class Compile:
    """One compile seen in the block (or a program loaded from a disk cache)."""

    kind: Literal["jit", "segment", "primitive"]
    name: str
    """The jitted function, ``model.onnx position 3`` for a segment, or the primitive."""
    index: int
    """1 for the first compile of this function (or at this position) in the block, 2..."""
    reason: str | None
    """Why it compiled again: ``x dim 0: 32 -> 16``; None for a first compile."""
    where: str | None = None
    """Where: the call JAX traced (``test_x.py:12:8 (test_step)``) or the definition."""
    traced_before: bool = False
    """JAX had traced the function before the block began (its explanation said so)."""
    after_eviction: bool = False
    """A segment whose key the cache had evicted earlier in the block."""
    loaded: bool = False
    """The program came from a disk cache (loaded, not compiled)."""
    disk_miss: str | None = None
    """The disk cache held the segment under another key: the parts that changed."""
    duration_ns: int = 0

    def line(self) -> str:
        """One line for a person: what compiled, where, and why."""
        head = self.name if self.where is None else f"{self.name} at {self.where}"
        why = self.reason or ("traced before the block" if self.traced_before else "first compile")
        if self.after_eviction:
            why += " (its key had been evicted)"
        if self.disk_miss:
            why += f"; disk cache: {self.disk_miss}"
        return f"{head}: compile {self.index}: {why}"


@dataclass(frozen=True)
class Eviction:
    """A segment the model's cache threw away."""

    source: str | None
    position: int | None
    shapes: str
    cache_size: int | None

    def line(self) -> str:
        size = f" (cache of {self.cache_size})" if self.cache_size is not None else ""
        return f"{self.source or 'model'} position {self.position}: evicted {self.shapes}{size}"


@dataclass
class Seen:
    """What a block did: compiles (loads from disk apart), evictions, peak memory."""

    compiles: list[Compile] = field(default_factory=list)
    """Programs compiled: jitted functions and compiled segments, in order."""
    loads: list[Compile] = field(default_factory=list)
    """Segments whose program came from a disk cache (not compiles)."""
    primitives: list[Compile] = field(default_factory=list)
    """JAX primitives compiled outside ``jit`` (``jnp.ones``)."""
    eager: int = 0
    """Segments built to run eagerly (node by node): a cache miss that compiled nothing."""
    evictions: list[Eviction] = field(default_factory=list)
    peak_memory: int | None = None
    """The highest device memory read (bytes), with a ``peak_memory`` budget."""
    path: Path | None = None
    """The trace written with ``record=``."""
    warmup: int = 0

    def counted(self) -> list[Compile]:
        """The compiles past the warm-up (all of them without one)."""
        return [c for c in self.compiles if c.index > self.warmup]

    @property
    def recompiles(self) -> list[Compile]:
        """Compiles of something compiled before: in the block (past the warm-up), or,
        without a warm-up, traced before the block began."""
        return [
            c
            for c in self.compiles
            if c.index > max(self.warmup, 1) or (self.warmup == 0 and c.traced_before)
        ]


# ---------------------------------------------------------------- watching a block


def _shape_text(shapes: list[Mapping[str, Any]] | None) -> str:
    parts = []
    for s in shapes or []:
        if s.get("sequence") is not None:
            parts.append(f"{s.get('name')}[seq of {len(s['sequence'])}]")
        else:
            dims = ",".join(str(d) for d in s.get("shape") or [])
            parts.append(f"{s.get('name')}[{dims}]:{s.get('dtype')}")
    return " ".join(parts) or "()"


def _shape_changes(before: list[Mapping[str, Any]], now: list[Mapping[str, Any]]) -> list[str]:
    """``input_ids dim 1: 8 -> 9`` for each argument that changed between two keys."""
    old = {s.get("name"): s for s in before}
    out = []
    for s in now:
        name = s.get("name")
        o = old.get(name)
        if o is None:
            out.append(f"{name}: new argument")
            continue
        if o.get("dtype") != s.get("dtype"):
            out.append(f"{name} dtype: {o.get('dtype')} -> {s.get('dtype')}")
        a, b = o.get("shape") or [], s.get("shape") or []
        if len(a) != len(b):
            out.append(f"{name} shape: {list(a)} -> {list(b)}")
        else:
            dims = enumerate(zip(a, b, strict=True))
            out += [f"{name} dim {i}: {x} -> {y}" for i, (x, y) in dims if x != y]
    return out


def _static_changes(before: list[Mapping[str, Any]], now: list[Mapping[str, Any]]) -> list[str]:
    old = {s.get("name"): s.get("value") for s in before}
    return [
        f"static {s.get('name')}: {old.get(s.get('name'))!r} -> {s.get('value')!r}"
        for s in now
        if old.get(s.get("name")) != s.get("value")
    ]


_watch_ids = itertools.count(1)


class Watch:
    """Collects a block's compiles, loads, evictions and memory in memory (``Seen``).

    ``start()`` attaches to the bus and starts the JAX compile watcher; ``stop()`` detaches
    and returns ``seen``. ``peak_memory=True`` reads the devices' memory every 5 ms.
    """

    def __init__(self, *, warmup: int = 0, peak_memory: bool = False) -> None:
        self.seen = Seen(warmup=warmup)
        self._id = f"ember.budget.{next(_watch_ids)}"
        self._peak = peak_memory
        self._index: dict[tuple[str, Any], int] = {}
        # (source, position) -> (shapes, statics) of the last compile there
        self._last: dict[tuple[Any, Any], tuple[list[Any], list[Any]]] = {}
        # (source, position, key) -> statics of its latest miss; keys evicted so far
        self._statics: dict[tuple[Any, Any, Any], list[Any]] = {}
        self._evicted: set[tuple[Any, Any, Any]] = set()
        self._ember_spans: set[Any] = set()  # the Ember spans open now (segment compiles...)
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self._stop_sampling = threading.Event()

    # -------------------------------------------------------- lifecycle

    def start(self) -> Watch:
        from ember.recorder.jax import CompileWatcher

        handlers = {
            E.stop(E.JIT): self._on_jit,
            E.stop(E.SEGMENT_COMPILE): self._on_segment,
            E.CACHE_MISS: self._on_miss,
            E.CACHE_EVICT: self._on_evict,
        }
        # Ember's own programs (a segment's, a break's) are compiled through jax.jit inside
        # these spans: counted as segments, not again as jitted functions
        for prefix in (E.SEGMENT_COMPILE, E.BREAK, E.COMPILE):
            handlers[E.start(prefix)] = self._on_ember_start
            handlers[E.exception(prefix)] = self._on_ember_end
        handlers[E.stop(E.BREAK)] = handlers[E.stop(E.COMPILE)] = self._on_ember_end
        for name, fn in handlers.items():
            bus.attach(f"{self._id}:{name}", [name], fn)
            self._stack.callback(bus.detach, f"{self._id}:{name}")
        watcher = CompileWatcher(explain=True).start()
        self._stack.callback(watcher.stop)
        if self._peak:
            self._sample()
            thread = threading.Thread(target=self._sample_loop, name="ember-budget", daemon=True)
            thread.start()
            self._stack.callback(self._sample)
            self._stack.callback(thread.join)
            self._stack.callback(self._stop_sampling.set)
        return self

    def stop(self) -> Seen:
        self._stack.close()
        return self.seen

    # -------------------------------------------------------- memory

    def sample_memory(self) -> None:
        """Read the devices' memory now (with ``peak_memory``): a check made while the
        watch still runs (the pytest fixture stops it after the test) sees the end too."""
        if self._peak:
            self._sample()

    def _sample(self) -> None:
        from ember.runtime.memory import read_device_memory

        for r in read_device_memory():
            value = r.get("peak_bytes") or r.get("used_bytes")
            if value is not None:
                with self._lock:
                    best = self.seen.peak_memory
                    self.seen.peak_memory = value if best is None else max(best, value)

    def _sample_loop(self) -> None:
        while not self._stop_sampling.wait(0.005):
            self._sample()

    # -------------------------------------------------------- events

    def _next_index(self, key: tuple[str, Any]) -> int:
        n = self._index[key] = self._index.get(key, 0) + 1
        return n

    def _on_ember_start(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        with self._lock:
            self._ember_spans.add(md.get("span_id"))

    def _on_ember_end(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        with self._lock:
            self._ember_spans.discard(md.get("span_id"))

    def _on_jit(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        if md.get("parent_id") in self._ember_spans:
            return  # Ember's own program (see start)
        fun = str(md.get("fun_name"))
        primitive = bool(md.get("outside_jit"))
        reason = md.get("retrace_reason") or md.get("jax_explanation")
        with self._lock:
            c = Compile(
                kind="primitive" if primitive else "jit",
                name=fun,
                index=self._next_index(("jit", fun)),
                reason=reason,
                where=md.get("called_at") or md.get("defined_at"),
                traced_before=bool(reason) and not primitive,
                loaded=md.get("persistent_cache") == "hit",
                duration_ns=int(m.get("duration", 0)),
            )
            seen = self.seen
            (seen.primitives if primitive else seen.loads if c.loaded else seen.compiles).append(c)

    def _on_miss(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        where = (md.get("source"), md.get("position"), md.get("key"))
        with self._lock:
            self._statics[where] = list(md.get("statics") or [])

    def _on_evict(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        with self._lock:
            self._evicted.add((md.get("source"), md.get("position"), md.get("key")))
            self.seen.evictions.append(
                Eviction(
                    md.get("source"),
                    md.get("position"),
                    _shape_text(md.get("shapes")),
                    md.get("cache_size"),
                )
            )

    def _on_segment(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        self._on_ember_end(name, m, md)
        if md.get("compiled") is False:
            with self._lock:
                self.seen.eager += 1
            return
        source, position, key = md.get("source"), md.get("position"), md.get("key")
        shapes = list(md.get("shapes") or [])
        with self._lock:
            statics = self._statics.get((source, position, key), [])
            loaded = md.get("disk_cache") == "hit"
            before = self._last.get((source, position))
            reason = None
            if before is not None:
                changes = _shape_changes(before[0], shapes) + _static_changes(before[1], statics)
                reason = "; ".join(changes) or "the same key again"
            c = Compile(
                kind="segment",
                name=f"{source or 'model'} position {position}",
                index=0 if loaded else self._next_index(("segment", (source, position))),
                reason=reason,
                after_eviction=(source, position, key) in self._evicted,
                loaded=loaded,
                disk_miss=md.get("disk_miss"),
                duration_ns=int(m.get("duration", 0)),
            )
            self._last[(source, position)] = (shapes, statics)
            (self.seen.loads if loaded else self.seen.compiles).append(c)


# ---------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Budget:
    """What a block may do. See the module's docstring for the forms of a limit."""

    compiles: Limit = None
    recompiles: Limit = None
    evictions: Limit = None
    peak_memory: int | str | None = None
    warmup: int = 0
    fresh: bool = False

    def __post_init__(self) -> None:
        for name in ("compiles", "recompiles", "evictions"):
            _parse_limit(name, getattr(self, name))
        if self.peak_memory is not None:
            parse_size(self.peak_memory)
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup={self.warmup!r}: give how many compiles (0, 1, 2...)")
        if not isinstance(self.fresh, bool):
            raise ValueError(f"fresh={self.fresh!r}: give True (count from a clean cache) or False")

    def prepare(self) -> None:
        """Before the block: with ``fresh``, clear JAX's in-memory caches (a process that has
        not imported JAX has nothing cached: JAX is not imported for it)."""
        jax = sys.modules.get("jax")
        if self.fresh and jax is not None:
            jax.clear_caches()

    def broken(self, seen: Seen) -> list[tuple[str, list[str]]]:
        """Each budget that does not hold: its headline and the lines that explain it."""
        out: list[tuple[str, list[str]]] = []
        counts: dict[str, tuple[int, list[str]]] = {
            "compiles": (len(seen.counted()), [c.line() for c in seen.counted()]),
            "recompiles": (len(seen.recompiles), [c.line() for c in seen.recompiles]),
            "evictions": (len(seen.evictions), [e.line() for e in seen.evictions]),
        }
        for name, (n, lines) in counts.items():
            limit = _parse_limit(name, getattr(self, name))
            if limit is None or _OPS[limit[0]](n, limit[1]):
                continue
            op, want = limit
            expected = f"{want}" if op == "==" else f"{op} {want}"
            out.append((f"{name}: {n}, expected {expected}", lines))
        if self.peak_memory is not None:
            cap = parse_size(self.peak_memory)
            peak = seen.peak_memory
            if peak is not None and peak > cap:
                out.append((f"peak_memory: {_size_text(peak)}, expected <= {_size_text(cap)}", []))
        return out

    def check(self, seen: Seen) -> None:
        """Raise ``CompileBudgetExceeded`` when a budget does not hold."""
        broken = self.broken(seen)
        if broken:
            raise CompileBudgetExceeded(self.message(seen, broken), seen, [b for b, _ in broken])

    def message(self, seen: Seen, broken: list[tuple[str, list[str]]]) -> str:
        warm = f" (after {self.warmup} warm-up compile(s) of each function)" if self.warmup else ""
        lines = [f"compile budget exceeded{warm}:"]
        for headline, why in broken:
            lines.append(f"  {headline}")
            lines += [f"    - {w}" for w in why]
        if seen.loads:
            lines.append(f"  ({len(seen.loads)} program(s) loaded from a disk cache: not compiles)")
        # what was counted matters for compile counts, not for evictions or memory
        if any(h.startswith(("compiles:", "recompiles:")) for h, _ in broken):
            lines.append(
                "  (counted from a clean cache: fresh=True cleared JAX's caches first)"
                if self.fresh
                else "  (counted in this block only: programs this process compiled before it "
                "are not; fresh=True counts from a clean cache)"
            )
        if seen.path is not None:
            lines.append(f"  trace: {seen.path}")
        return "\n".join(lines)


class expect:
    """``with ember.expect(recompiles=0) as seen:`` fails the block that breaks a budget.

    ``compiles``, ``recompiles``, ``evictions``: a count or a bound (``"<=2"``);
    ``peak_memory``: a size (``"200MiB"``); ``warmup``: compiles of each function allowed
    first; ``fresh``: clear JAX's in-memory caches first, so the block counts what it needs
    from a clean cache (not only what this process had not compiled yet); ``record``: also
    write the block's trace to this path. ``seen`` (a ``Seen``) is
    filled when the block ends. Raises ``CompileBudgetExceeded`` (an ``AssertionError``).
    """

    def __init__(
        self,
        *,
        compiles: Limit = None,
        recompiles: Limit = None,
        evictions: Limit = None,
        peak_memory: int | str | None = None,
        warmup: int = 0,
        fresh: bool = False,
        record: str | Path | None = None,
    ) -> None:
        self.budget = Budget(compiles, recompiles, evictions, peak_memory, warmup, fresh)
        self.record = Path(record) if record is not None else None
        self._stack = ExitStack()
        self._watch: Watch | None = None

    def __enter__(self) -> Seen:
        from ember.recorder import record

        if self.record is not None:
            self._stack.enter_context(record(self.record))
        try:
            self.budget.prepare()
            self._watch = Watch(
                warmup=self.budget.warmup, peak_memory=self.budget.peak_memory is not None
            ).start()
        except BaseException:
            self._stack.close()
            raise
        self._watch.seen.path = self.record
        return self._watch.seen

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._watch is not None
        seen = self._watch.stop()
        self._stack.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self.budget.check(seen)
