"""The JAX bridge: record any JAX program's compiles, steps and gradients.

``ember.recorder.jax`` is imported on first use (``ember.recorder`` itself never imports
JAX). It has three parts:

- ``CompileWatcher`` (``watch_compiles()``) listens to ``jax.monitoring`` and turns each
  compile into a ``jit`` span: the function's name, its tracing, lowering
  (``jaxpr_to_mlir_module``) and backend-compile durations, the persistent-cache result,
  and why JAX traced it again. The reason comes from JAX's own cache-miss explanations
  (the ``jax_explain_cache_misses`` option, switched on while watching and restored
  after), parsed into typed ``ArgChange`` records: which argument, what changed (shape,
  dtype, weak type, structure), old and new type.
- ``record_gradients(step, grads)`` writes one ``gradient`` record per leaf of a pytree
  of gradients: its key (the pytree path), its state (present, zero, non_finite,
  missing) and its L2 norm.
- ``ProfileSession(path, phase="train")`` opens a recording with both, and ``step()``
  spans for the forward, backward and optimizer parts of a training step.

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

import logging
import math
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Literal

import jax
import numpy as np
from jax import monitoring

from . import bus
from . import events as E
from .recorder import Recorder, record

__all__ = [
    "PRIMITIVE_REASON",
    "CompileWatcher",
    "Explanation",
    "PrimitiveCall",
    "ProfileSession",
    "StepHandle",
    "gradient_records",
    "parse_explanation",
    "primitive_call",
    "primitive_changes",
    "record_gradients",
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
_EXPLAIN_PREFIX = "TRACING CACHE MISS"
_log = logging.getLogger("ember.recorder")

# ---------------------------------------------------------------- cache-miss explanations

_NEVER_SEEN = re.compile(r"never seen function:\s*\n\s*(?P<name>.+?) id=\d+")
_FOR_FUN = re.compile(r"^\s*for (?P<name>.+?)(?: defined at .*)?$", re.M)
_TYPE_DIFF = re.compile(r"^\s*\* at (?P<arg>.+?), now (?P<new>.+) and before (?P<old>.+)$")
_TREE_DIFF = re.compile(
    r"^\s*\* at input path (?P<arg>.*?), now (?P<new>.+) and before (?P<old>.+?)"
    r"(?:, so (?P<why>.+))?$"
)
_CTX_DIFF = re.compile(r"^\s*\* (?P<arg>.+?) differs: now (?P<new>.+) and before (?P<old>.+)$")
_JAX_TYPE = re.compile(r"^(?P<dtype>[a-z]+[0-9a-z_]*)\[(?P<dims>[^\]]*)\]")
_SHORT_DTYPE = re.compile(r"^(bf|f|i|u|c)(\d+)$")
_DTYPE_PREFIX = {"bf": "bfloat", "f": "float", "i": "int", "u": "uint", "c": "complex"}
_WEAK = re.compile(r"\{weak_type=(True|False)\}")
# JAX appends a link to its weak-type docs to the last line of the explanation
_DOC_LINK = re.compile(r"https?://\S+$", re.M)
_MODULE_NAME = re.compile(r"^(?:jit|pjit|pmap|xla_pmap|shard_map)\((?P<name>.*)\)$")


def _numpy_dtype(short: str) -> str:
    m = _SHORT_DTYPE.match(short)
    return _DTYPE_PREFIX[m.group(1)] + m.group(2) if m else short


def _split_type(text: str) -> tuple[str, list[str]] | None:
    m = _JAX_TYPE.match(text.strip())
    if m is None:
        return None
    dims = [d.strip() for d in m.group("dims").split(",") if d.strip()]
    return _numpy_dtype(m.group("dtype")), dims


def _type_change(arg: str, new: str, old: str) -> tuple[dict[str, Any], str]:
    """An ``ArgChange`` dict and a phrase such as ``x dim 0: 32 -> 16``."""
    change = {"arg": arg, "what": "other", "old": old, "new": new}
    weak = _WEAK.search(new), _WEAK.search(old)
    if weak[0] and weak[1]:
        change["what"] = "weak_type"
        return change, f"{arg} weak_type: {weak[1].group(1)} -> {weak[0].group(1)}"
    n, o = _split_type(new), _split_type(old)
    if n is None or o is None:
        return change, f"{arg}: {old} -> {new}"
    (n_dtype, n_dims), (o_dtype, o_dims) = n, o
    phrases = []
    if n_dtype != o_dtype:
        change["what"] = "dtype"
        phrases.append(f"{arg} dtype: {o_dtype} -> {n_dtype}")
    if n_dims != o_dims:
        change["what"] = "shape" if n_dtype == o_dtype else change["what"]
        if len(n_dims) != len(o_dims):
            phrases.append(f"{arg} shape: [{','.join(o_dims)}] -> [{','.join(n_dims)}]")
        else:
            for i, (a, b) in enumerate(zip(o_dims, n_dims, strict=True)):
                if a != b:
                    phrases.append(f"{arg} dim {i}: {a} -> {b}")
    if not phrases:  # same dtype and dims: sharding or memory kind differ
        phrases.append(f"{arg}: {old} -> {new}")
    return change, "; ".join(phrases)


@dataclass
class Explanation:
    """JAX's explanation of one tracing-cache miss, parsed.

    ``first`` is True when JAX had never traced the function (not a retrace); then
    ``reason`` is None. Otherwise ``reason`` is one line for a person and ``changes``
    are the typed differences from the closest key JAX had seen.
    """

    fun_name: str
    first: bool
    reason: str | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""


def parse_explanation(text: str) -> Explanation | None:
    """Parse a ``TRACING CACHE MISS`` log message; None for any other message."""
    if not text.startswith(_EXPLAIN_PREFIX):
        return None
    m = _NEVER_SEEN.search(text)
    if m:
        return Explanation(m.group("name").strip(), True, None, [], text)
    m = _FOR_FUN.search(text)
    name = m.group("name").strip() if m else "<unknown>"
    _, sep, diff = text.partition("For the closest previous key:")
    diff = _DOC_LINK.sub("", diff.strip() if sep else text)
    changes: list[dict[str, Any]] = []
    phrases: list[str] = []
    lines = diff.splitlines()
    head = lines[0].strip() if lines else ""
    for line in lines[1:]:
        if head.startswith("different input types"):
            t = _TYPE_DIFF.match(line)
            if t:
                change, phrase = _type_change(t.group("arg"), t.group("new"), t.group("old"))
                changes.append(change)
                phrases.append(phrase)
        elif head.startswith("different input pytree"):
            t = _TREE_DIFF.match(line)
            if t:
                arg = t.group("arg") or "<args>"
                changes.append(
                    {"arg": arg, "what": "structure", "old": t.group("old"), "new": t.group("new")}
                )
                phrases.append(f"{arg} structure: {t.group('why') or 'differs'}")
        elif head.startswith("Tracing context"):
            t = _CTX_DIFF.match(line)
            if t:
                arg = f"context:{t.group('arg')}"
                changes.append(
                    {"arg": arg, "what": "other", "old": t.group("old"), "new": t.group("new")}
                )
                phrases.append(f"{t.group('arg')}: {t.group('old')} -> {t.group('new')}")
    reason = "; ".join(phrases) if phrases else head.rstrip(":") or diff
    return Explanation(name, False, reason, changes, text)


# ---------------------------------------------------------------- primitives outside jit

PRIMITIVE_REASON = "primitive outside jit"
"""The start of a ``retrace_reason`` of a JAX primitive compiled again outside ``jit``."""

_PARAM_TEXT_MAX = 80


@dataclass
class PrimitiveCall:
    """A JAX primitive being compiled because it ran outside ``jit`` (op by op).

    JAX compiles such a primitive once per argument types and parameters
    (``jax._src.dispatch.xla_primitive_callable``), and its tracing-cache explanations do
    not cover it; ``args`` (``f32[3]``) and ``params`` (their text) are what it was
    compiled for, taken from JAX's ``apply_primitive`` frame.
    """

    name: str
    args: list[str]
    params: dict[str, str]


def _short_text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _PARAM_TEXT_MAX else text[: _PARAM_TEXT_MAX - 3] + "..."


def _arg_type(value: Any) -> str:
    try:
        return jax.typeof(value).str_short(short_dtypes=True)
    except Exception:  # not an array-like: its Python type
        return type(value).__name__


def primitive_call(name: str) -> PrimitiveCall | None:
    """The primitive ``name`` being run outside jit on this thread's stack, else None."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "apply_primitive" and code.co_filename.endswith("dispatch.py"):
            local = frame.f_locals
            prim = local.get("prim")
            if getattr(prim, "name", None) == name:
                return PrimitiveCall(
                    name,
                    [_arg_type(a) for a in local.get("args", ())],
                    {str(k): _short_text(v) for k, v in (local.get("params") or {}).items()},
                )
        frame = frame.f_back
    return None


def primitive_changes(old: PrimitiveCall, new: PrimitiveCall) -> tuple[str, list[dict[str, Any]]]:
    """Why a primitive outside jit compiled again: a reason and typed ``ArgChange`` dicts."""
    changes: list[dict[str, Any]] = []
    phrases: list[str] = []
    if len(old.args) != len(new.args):
        changes.append(
            {
                "arg": "<args>",
                "what": "structure",
                "old": ", ".join(old.args),
                "new": ", ".join(new.args),
            }
        )
        phrases.append(f"{len(old.args)} -> {len(new.args)} arguments")
    else:
        for i, (o, n) in enumerate(zip(old.args, new.args, strict=True)):
            if o != n:
                change, phrase = _type_change(f"arg{i}", n, o)
                changes.append(change)
                phrases.append(phrase)
    for k in sorted(set(old.params) | set(new.params)):
        before, after = old.params.get(k), new.params.get(k)
        if before != after:
            changes.append({"arg": k, "what": "static", "old": before, "new": after})
            phrases.append(f"{k}: {before} -> {after}")
    detail = (
        "; ".join(phrases)
        if phrases
        else "the same arguments and parameters (JAX's tracing context changed, or its "
        "caches were cleared)"
    )
    return f"{PRIMITIVE_REASON} {new.name}: {detail}", changes


# ---------------------------------------------------------------- the compile watcher


@dataclass
class _ThreadState:
    # fun_name -> (start_s, end_s) of the latest trace not yet matched to a compile
    traces: dict[str, tuple[float, float]] = field(default_factory=dict)
    # fun_name -> the latest explanation not yet matched to a compile
    explanations: dict[str, Explanation] = field(default_factory=dict)
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
    explanations itself), and as a handler on the ``jax`` logger in case a JAX version
    logs them from another module.
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
        if not msg.startswith(_EXPLAIN_PREFIX):
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
        self.primitives: dict[str, PrimitiveCall] = {}

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
                logging.getLogger("jax").addHandler(self.capture)
                jax.config.update("jax_explain_cache_misses", True)

    def remove(self, watcher: CompileWatcher) -> None:
        with self.lock:
            self.watchers.remove(watcher)
            if self.capture is not None and not any(w.explain for w in self.watchers):
                jax.config.update("jax_explain_cache_misses", self.saved_explain)
                for name in _EXPLAIN_LOGGERS:
                    logging.getLogger(name).removeFilter(self.capture)
                logging.getLogger("jax").removeHandler(self.capture)
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
            exp = parse_explanation(text)
        except Exception:
            _log.exception("ember: could not parse a JAX cache-miss explanation")
            return
        if exp is not None:
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
            _DOC_LINK.sub("", exp.text).strip() if exp and not exp.first and not changes else None
        )
        prim = primitive_call(name) if exp is None else None
        if prim is not None:
            before = self.primitives.get(name)
            self.primitives[name] = prim
            if before is not None:
                reason, changes = primitive_changes(before, prim)
        stop_md = {
            **start_md,
            "tracing_ns": _ns(trace),
            "lowering_ns": _ns(lowering[1:] if lowering else None),
            "backend_compile_ns": _ns((start, end)),
            "persistent_cache": cache,
            "retrace_reason": reason,
            "changes": changes,
            "outside_jit": prim is not None,
            "jax_explanation": explanation,
        }
        bus.emit(E.start(E.JIT), {"monotonic_time": t0, "system_time": int(first * 1e9)}, start_md)
        bus.emit(E.stop(E.JIT), {"monotonic_time": t1, "duration": max(t1 - t0, 0)}, stop_md)
        for w in list(self.watchers):
            w.compiles += 1


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


# ---------------------------------------------------------------- gradients


def _key_part(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def gradient_records(grads: Any) -> list[dict[str, Any]]:
    """``{key, state, norm}`` for each leaf of a gradient pytree, in pytree order.

    ``key`` is the pytree path joined by ``/`` (``layers/0/w``); ``state`` is
    ``non_finite`` (a NaN or inf anywhere; then ``norm`` is None), ``zero`` (all zeros),
    ``present``, or ``missing`` for a ``None`` leaf. ``norm`` is the L2 norm, computed on
    the host in float64.
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(grads, is_leaf=lambda x: x is None)
    values = jax.device_get([leaf for _, leaf in leaves])
    out: list[dict[str, Any]] = []
    for (path, _), value in zip(leaves, values, strict=True):
        key = "/".join(_key_part(p) for p in path) or "<root>"
        if value is None:
            out.append({"key": key, "state": "missing", "norm": None})
            continue
        arr = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            out.append({"key": key, "state": "non_finite", "norm": None})
            continue
        norm = math.sqrt(float(np.sum(np.square(arr))))
        out.append({"key": key, "state": "zero" if norm == 0.0 else "present", "norm": norm})
    return out


def record_gradients(
    step: int | None, grads: Any, *, root: str = "params", phase: str = "train"
) -> list[dict[str, Any]]:
    """Emit one ``gradient`` record per leaf of ``grads`` (see ``gradient_records``).

    ``root`` names the pytree (``params``); ``step`` is the training step's index.
    Returns the records' fields.
    """
    recs = gradient_records(grads)
    for i, r in enumerate(recs):
        bus.emit(
            E.GRADIENT,
            None,
            {
                "event_id": f"{phase}-grad-{root}-{step if step is not None else 'x'}-{i}",
                "step": step,
                "root": root,
                **r,
            },
        )
    return recs


# ---------------------------------------------------------------- a session


class StepHandle:
    """What ``ProfileSession.step`` yields: say which values the step computes."""

    __slots__ = ("results", "span")

    def __init__(self, span: bus.SpanHandle) -> None:
        self.span = span
        self.results: list[Any] | None = None

    def wait_for(self, *values: Any) -> None:
        """The step's results (pytrees): a synced step ends when these are ready."""
        self.results = [*(self.results or []), *values]

    @property
    def span_id(self) -> int:
        return self.span.span_id

    def set(self, **metadata: Any) -> None:
        """Stop metadata of the span (see ``bus.SpanHandle.set``)."""
        self.span.set(**metadata)

    def measure(self, **measurements: Any) -> None:
        """Stop measurements of the span (see ``bus.SpanHandle.measure``)."""
        self.span.measure(**measurements)


class ProfileSession:
    """A recording of a JAX program: compiles, steps, gradients, in one trace file.

    ::

        with ProfileSession("train.jsonl", phase="train", model="mlp") as session:
            for i, batch in enumerate(data):
                with session.step("forward", i):
                    loss, grads = grad_fn(params, batch)
                session.record_gradients(i, grads)
                with session.step("optimizer", i):
                    params, opt_state = update(params, opt_state, grads)

    Keyword arguments other than the named ones become the run's tags. Device memory is
    the runtime's business (the recorder does not import it): add
    ``ember.runtime.memory.MemorySampler(0.1)`` around the loop for a memory timeline.
    """

    def __init__(
        self,
        path: Any,
        *,
        phase: Literal["infer", "train"] = "train",
        entrypoint: str | None = None,
        explain: bool = True,
        sync: bool = True,
        **tags: Any,
    ) -> None:
        if phase not in ("infer", "train"):
            raise ValueError(f"ProfileSession: phase must be 'train' or 'infer', got {phase!r}")
        self.phase = phase
        self.sync = sync
        self._record = record(path, phase=phase, entrypoint=entrypoint, sync=sync, **tags)
        self.recorder: Recorder = self._record.__enter__()
        try:
            self.compiles = CompileWatcher(explain=explain).start()
        except BaseException:
            self._record.__exit__(None, None, None)
            raise
        self._closed = False

    @property
    def path(self) -> Any:
        return self.recorder.path

    def step(
        self,
        step: Literal["forward", "backward", "optimizer"],
        index: int | None = None,
        *,
        sync: bool | None = None,
    ) -> AbstractContextManager[StepHandle]:
        """A ``step`` span (forward, backward or optimizer) around the block.

        With ``sync`` (default: the session's) the span ends when the step's results are
        ready: the values given to ``handle.wait_for(...)``, or, when none were given,
        every live JAX array (``jax.live_arrays()``). The end then carries ``dispatch_ns``,
        the time until the block's work was dispatched. Without it the span ends when the
        block returns, which for JAX's asynchronous dispatch is dispatch time.
        """
        if step not in ("forward", "backward", "optimizer"):
            raise ValueError(
                f"ProfileSession.step: step must be 'forward', 'backward' or 'optimizer', "
                f"got {step!r}"
            )
        return self._step(step, index, self.sync if sync is None else sync)

    @contextmanager
    def _step(self, step: str, index: int | None, sync: bool) -> Iterator[StepHandle]:
        with bus.span(E.STEP, {"step": step, "index": index}) as span:
            handle = StepHandle(span)
            yield handle
            if sync:
                dispatched = time.monotonic_ns()
                jax.block_until_ready(
                    handle.results if handle.results is not None else jax.live_arrays()
                )
                if span.start:
                    span.set(dispatch_ns=dispatched - span.start)

    def record_gradients(
        self, step: int | None, grads: Any, *, root: str = "params"
    ) -> list[dict[str, Any]]:
        """One ``gradient`` record per parameter (see ``record_gradients``)."""
        return record_gradients(step, grads, root=root, phase=self.phase)

    def close(self) -> None:
        """Stop recording; ``TraceWriteError`` if records could not be written."""
        self._close(None, None, None)

    def _close(self, *exc: Any) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.compiles.stop()
        finally:
            # with the block's exception, so that a failed trace does not hide it
            self._record.__exit__(*exc)

    def __enter__(self) -> ProfileSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close(*exc)
