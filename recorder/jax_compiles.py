"""The compile watcher: each JAX compile becomes a ``jit`` span on the bus.

One set of ``jax.monitoring`` listeners (``_Bridge``) serves every ``CompileWatcher`` of
the process. Per thread it collects the tracing and lowering spans JAX reports, the
persistent-cache events and the cache-miss explanations it logs (captured from JAX's
logger while ``jax_explain_cache_misses`` is switched on), and when the backend compile
ends it emits the span with all of them. The explanations and primitives are read in
``jax_explain.py``.

A compile is known only when the backend compile ends, so each ``jit`` span is emitted
then, as ``ember.jit.start`` and ``ember.jit.stop`` events carrying the timestamps JAX
measured (its start is the start of tracing). Its ``parent_id`` is the span open in the
compiling thread (a ``step`` span, a ``call``). JAX also compiles single primitives run
outside ``jit`` (``broadcast_in_dim`` for ``jnp.ones``); those are compiles too, under the
primitive's name with ``outside_jit: true``. JAX gives no cache-miss explanation for them, so
the bridge keeps what each primitive was compiled for (argument types and parameters, from
JAX's ``apply_primitive`` frame) and a second compile of the same primitive says what changed
(``primitive outside jit broadcast_in_dim: shape: (3,) -> (4,)``). A retrace of a jitted
function that JAX explained in words Ember cannot type carries JAX's text
(``jax_explanation``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax
from jax import monitoring

from . import bus, disk_keys, jax_explain, jax_names
from . import events as E

__all__ = [
    "CACHE_HIT_EVENT",
    "CACHE_MISS_EVENT",
    "CACHE_REQUEST_EVENT",
    "COMPILE_EVENT",
    "LOWER_EVENT",
    "TRACE_EVENT",
    "CompileWatcher",
    "watch_compiles",
]

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_MISS_EVENT = "/jax/compilation_cache/cache_misses"

# Where JAX logs its cache-miss explanations (partial_eval since 0.5, pjit before).
_EXPLAIN_LOGGERS = ("jax._src.interpreters.partial_eval", "jax._src.pjit")
_log = logging.getLogger("ember.recorder")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MODULE_NAME = re.compile(r"^(?:jit|pjit|pmap|xla_pmap|shard_map)\((?P<name>.*)\)$")


@dataclass
class _ThreadState:
    # fun_name -> (start_s, end_s) of the latest trace not yet matched to a compile
    traces: dict[str, tuple[float, float]] = field(default_factory=dict)
    # fun_name -> the latest explanation not yet matched to a compile
    explanations: dict[str, jax_explain.Explanation] = field(default_factory=dict)
    lowering: tuple[str, float, float] | None = None
    cache_requested: bool = False
    cache_result: Literal["hit", "miss"] | None = None


def _fun_name(module_name: str) -> str:
    m = _MODULE_NAME.match(module_name)
    return m.group("name") if m else module_name


class _ExplainCapture(logging.Handler):
    """Takes JAX's cache-miss explanations to the bridge.

    Installed as a filter on the loggers that emit them, where it also decides whether
    the message goes on to the program's own logging (only if the program had asked for
    explanations itself). Never as a handler: a handler on the ``jax`` logger stopped
    Python's last-resort handler, so ``JAX_LOG_COMPILES=1`` printed nothing under Ember.
    """

    def __init__(self, bridge: _Bridge, pass_through: bool) -> None:
        super().__init__(logging.DEBUG)
        self.bridge = bridge
        self.pass_through = pass_through

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_ember_seen", False):
            return True
        try:
            msg = record.getMessage()
        except Exception:
            return True
        if not msg.startswith(jax_explain.EXPLAIN_PREFIX):
            return True
        record._ember_seen = True
        self.bridge.on_explanation(msg)
        return self.pass_through

    def emit(self, record: logging.LogRecord) -> None:
        self.filter(record)


class _Bridge:
    """The one set of ``jax.monitoring`` listeners of the process, shared by all watchers.

    However many watchers are started (a ``ProfileSession`` inside a ``watch_compiles``
    block, say), each compile becomes one ``jit`` span, and ``jax_explain_cache_misses``
    is switched on when the first watcher that wants explanations starts and restored
    to the program's own value when the last one stops, whatever the order of stops.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watchers: list[CompileWatcher] = []
        self.local = threading.local()
        self.capture: _ExplainCapture | None = None
        self.saved_explain: bool | None = None
        # monotonic ns = wall ns + offset: JAX reports spans in time.time() seconds
        self.mono_offset = 0
        # primitive name -> what it was last compiled for outside jit
        self.primitives: dict[str, jax_explain.PrimitiveCall] = {}
        # a pmapped function's name -> what it was last compiled for
        self.pmaps: dict[str, jax_names.PmapCall] = {}

    def add(self, watcher: CompileWatcher) -> None:
        with self.lock:
            if not self.watchers:
                self.mono_offset = time.monotonic_ns() - time.time_ns()
                monitoring.register_event_time_span_listener(self.on_span)
                monitoring.register_event_listener(self.on_event)
            self.watchers.append(watcher)
            if watcher.explain and self.capture is None:
                self.saved_explain = bool(_jax_flag("jax_explain_cache_misses"))
                self.capture = _ExplainCapture(self, pass_through=self.saved_explain)
                for name in _EXPLAIN_LOGGERS:
                    logging.getLogger(name).addFilter(self.capture)
                jax.config.update("jax_explain_cache_misses", True)

    def remove(self, watcher: CompileWatcher) -> None:
        with self.lock:
            self.watchers.remove(watcher)
            if self.capture is not None and not any(w.explain for w in self.watchers):
                jax.config.update("jax_explain_cache_misses", self.saved_explain)
                for name in _EXPLAIN_LOGGERS:
                    logging.getLogger(name).removeFilter(self.capture)
                self.capture = None
            if not self.watchers:
                monitoring.unregister_event_time_span_listener(self.on_span)
                monitoring.unregister_event_listener(self.on_event)

    def state(self) -> _ThreadState:
        st = getattr(self.local, "state", None)
        if st is None:
            st = self.local.state = _ThreadState()
        return st

    def on_explanation(self, text: str) -> None:
        try:
            exp = jax_explain.parse_explanation(text)
        except Exception:
            _log.exception("ember: could not parse a JAX cache-miss explanation")
            return
        if exp is None:
            return
        try:  # the names as the program wrote them; JAX's own if that fails
            exp = jax_names.rename(exp, jax_names.call_context())
        except Exception:
            _log.exception("ember: could not name the arguments of a JAX cache miss")
        self.state().explanations[exp.fun_name] = exp

    def on_event(self, event: str, **kwargs: Any) -> None:
        if event == CACHE_REQUEST_EVENT:
            self.state().cache_requested = True
        elif event == CACHE_HIT_EVENT:
            self.state().cache_result = "hit"
        elif event == CACHE_MISS_EVENT:
            self.state().cache_result = "miss"

    def on_span(self, event: str, start_time: float, end_time: float, **kwargs: str | int) -> None:
        # Called inside JAX's compile path: a bug here must never fail the program's
        # compile, so it is logged and the span is lost. (The parameter names are those of
        # jax.monitoring's EventTimeSpanListenerWithMetadata.)
        try:
            self._on_span(event, start_time, end_time, **kwargs)
        except Exception:
            _log.exception("ember: could not record a JAX compile event %s", event)

    def _on_span(self, event: str, start: float, end: float, **kwargs: Any) -> None:
        if event == TRACE_EVENT:
            self.state().traces[str(kwargs.get("fun_name", ""))] = (start, end)
        elif event == LOWER_EVENT:
            st = self.state()
            st.lowering = (_fun_name(str(kwargs.get("fun_name", ""))), start, end)
            st.cache_requested = False
            st.cache_result = None
        elif event == COMPILE_EVENT:
            self.compiled(_fun_name(str(kwargs.get("fun_name", ""))), start, end)

    def compiled(self, name: str, start: float, end: float) -> None:
        st = self.state()
        trace = st.traces.pop(name, None)
        lowering = st.lowering if st.lowering and st.lowering[0] == name else None
        st.lowering = None
        exp = st.explanations.pop(name, None)
        cache = st.cache_result
        if cache is None and st.cache_requested and _persistent_cache_enabled():
            cache = "miss"  # JAX counts a miss only when it writes the entry
        st.cache_requested, st.cache_result = False, None
        first = min(t for t in (start, trace and trace[0], lowering and lowering[1]) if t)
        # traces of functions nested in this one never compile alone: forget them
        st.traces = {k: v for k, v in st.traces.items() if v[1] >= first}

        t0 = int(first * 1e9) + self.mono_offset
        t1 = int(end * 1e9) + self.mono_offset
        span_id = next(bus._span_ids)
        parent = bus.current_span_id()
        start_md = {"span_id": span_id, "parent_id": parent, "fun_name": name}
        reason, changes = (exp.reason, exp.changes) if exp else (None, [])
        # a retrace that JAX explained but Ember could not type: keep JAX's own words
        explanation = (
            jax_explain.DOC_LINK.sub("", exp.text).strip()
            if exp and not exp.first and not changes
            else None
        )
        sites = (exp.called_at, exp.defined_at) if exp else (None, None)
        if exp is None and name == "_fun":  # pmap's own function: the program's instead
            name, reason, changes, sites = self.pmapped(name, reason, changes)
            start_md["fun_name"] = name
        prim = jax_explain.primitive_call(name) if exp is None else None
        if prim is not None:
            before = self.primitives.get(name)
            self.primitives[name] = prim
            if before is not None:
                reason, changes = jax_explain.primitive_changes(before, prim)
        disk_key, disk_miss = _persistent_key(name, cache)
        stop_md: dict[str, Any] = {
            **start_md,
            "tracing_ns": _ns(trace),
            "lowering_ns": _ns(lowering[1:] if lowering else None),
            "backend_compile_ns": _ns((start, end)),
            "persistent_cache": cache,
            "retrace_reason": reason,
            "changes": changes,
            "outside_jit": prim is not None,
            "jax_explanation": explanation,
            "called_at": sites[0],
            "defined_at": sites[1],
        }
        if disk_key is not None:
            stop_md["disk_key"], stop_md["disk_miss"] = disk_key, disk_miss
        bus.emit(E.start(E.JIT), {"monotonic_time": t0, "system_time": int(first * 1e9)}, start_md)
        bus.emit(E.stop(E.JIT), {"monotonic_time": t1, "duration": max(t1 - t0, 0)}, stop_md)
        for w in list(self.watchers):
            w.compiles += 1

    def pmapped(
        self, name: str, reason: str | None, changes: list[dict[str, Any]]
    ) -> tuple[str, str | None, list[dict[str, Any]], tuple[str | None, str | None]]:
        """The ``jax.pmap``-ped function compiled now, what changed since its previous
        compile (JAX explains none of pmap's cache misses: see ``jax_names.PmapCall``), and
        where it was called and defined."""
        call = jax_names.pmap_call()
        if call is None:
            return name, reason, changes, (None, None)
        sites = (call.called_at, call.defined_at)
        before = self.pmaps.get(call.name)
        self.pmaps[call.name] = call
        if before is None:
            return call.name, reason, changes, sites
        return (call.name, *jax_names.pmap_changes(before, call), sites)


_BRIDGE = _Bridge()


class CompileWatcher:
    """Turns each JAX compile into a ``jit`` span on the bus while started.

    ``explain=True`` switches on ``jax_explain_cache_misses`` for as long as the watcher
    runs (restored on ``stop``) so retraces carry their reason; the explanations are
    captured from JAX's logger and are not printed unless the program had switched the
    option on itself. ``compiles`` counts the spans emitted while it ran. Watchers may
    overlap: each compile is still one span.
    """

    def __init__(self, *, explain: bool = True) -> None:
        self.explain = explain
        self.compiles = 0
        self._started = False

    def start(self) -> CompileWatcher:
        if self._started:
            raise RuntimeError("CompileWatcher already started; make a new one")
        self._started = True
        _BRIDGE.add(self)
        return self

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        _BRIDGE.remove(self)

    def __enter__(self) -> CompileWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@functools.cache
def _platform_parts() -> dict[str, str]:
    """The versions and the device a program in JAX's persistent cache depends on."""
    import jaxlib

    device = jax.devices()[0]
    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": device.platform,
        "device": device.device_kind,
    }


def _persistent_key(name: str, cache: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The parts of the key JAX's persistent cache looked up for ``name`` (JAX keeps them
    to itself: the versions, device and XLA flags it hashes in) and, on a miss, which of
    them changed since the cache stored ``name`` (kept in ``<dir>/ember-jit-keys/``)."""
    folder = _jax_flag("jax_compilation_cache_dir")
    if cache is None or not folder:
        return None, None
    parts = {**_platform_parts(), "xla_flags": os.environ.get("XLA_FLAGS", "")}
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    site = Path(folder) / "ember-jit-keys" / f"{_SAFE.sub('_', name)[:60]}-{digest}.json"
    if cache == "hit":
        return parts, None
    before = disk_keys.read_parts(site)
    try:
        disk_keys.write_parts(site, parts)
    except OSError:  # only the next miss's explanation is lost
        pass
    return parts, None if before is None else disk_keys.changed_parts(before, parts)


def _ns(span: tuple[float, float] | None) -> int | None:
    return None if span is None else max(int((span[1] - span[0]) * 1e9), 0)


def _persistent_cache_enabled() -> bool:
    return bool(_jax_flag("jax_compilation_cache_dir")) and bool(
        _jax_flag("jax_enable_compilation_cache")
    )


def _jax_flag(name: str) -> Any:
    """The current value of a JAX flag. Flags are dynamic attributes of ``jax.config``
    (``config.read`` refuses those with a context manager), which its type stubs omit."""
    return getattr(jax.config, name)


@contextmanager
def watch_compiles(*, explain: bool = True) -> Iterator[CompileWatcher]:
    """Emit a ``jit`` span for every JAX compile in the block (see ``CompileWatcher``)."""
    with CompileWatcher(explain=explain) as watcher:
        yield watcher
