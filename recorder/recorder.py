"""``record(path)``: turn bus events into a trace file, and the instrumentation API.

While a recording is open it is attached to every Ember event on the bus. Each event
becomes one record built from the schema's field lists, so the records are valid by
construction (the tests check that with pydantic) without paying for pydantic on the
hot path.

Event names and the records they become:

==============================  ==========================================
``ember.<prefix>.start/stop``   ``span_start`` / ``span_end`` (see SPANS)
``ember.<prefix>.exception``    ``span_end`` with ``status: "error"``
``ember.cache.hit|miss|evict``  ``cache``
``ember.hub.hit``               ``hub``
``ember.profile.op``            ``op``
``ember.profile.tensor``        ``tensor``
``ember.profile.memory``        ``memory``
``ember.device_memory``         ``device_memory``
``ember.gradient``              ``gradient``
``ember.edge``                  ``edge``
==============================  ==========================================

Point events carry the record's fields as metadata; ``monotonic_time`` gives ``ts_ns``.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from importlib import metadata as _pkg_metadata
from pathlib import Path
from typing import Any, Literal

import orjson

from ember.schemas import SCHEMA_ID
from ember.schemas import records as R

from . import bus, job
from . import events as E
from .span_lines import SpanLines, encode_built
from .writer import (
    ENCODE_OPTIONS,
    TraceWriteError,
    TraceWriter,
    TraceWriteWarning,
    encode_default,
)

__all__ = [
    "EVENT_NAMES",
    "POINTS",
    "SPANS",
    "Recorder",
    "active_recorders",
    "check_step_label",
    "record",
]

log = logging.getLogger("ember.recorder")

# event prefix -> span kind
SPANS: dict[str, str] = E.SPANS
# The span kinds of a model call's own spans, whose records the call's end writes (see
# ``Recorder._span_handler``): their metadata is made by the runtime and never changed
# after the event, so keeping it until then is safe (a user's attributes may change).
DEFERRED = frozenset({"call", "segment"})
# Deferred events (and spans sent after they ended, a call and its segment each) are written
# in batches of about this many, at the end of a call (outside its span), and at least at
# each flush (every ``flush_interval``), as the file's buffer is.
DRAIN_AT = 256
# The span kinds at whose events JAX's backend may have just started (a compile needs it):
# the recorder then looks for it and writes the ``process`` record (``_note_process``).
_COMPILING = frozenset({"jit", "compile", "segment_compile"})

# point event -> (record model, fixed fields)
POINTS: dict[str, tuple[type[R.RecordModel], dict[str, Any]]] = {
    E.CACHE_HIT: (R.Cache, {"action": "hit"}),
    E.CACHE_MISS: (R.Cache, {"action": "miss"}),
    E.CACHE_EVICT: (R.Cache, {"action": "evict"}),
    E.HUB_HIT: (R.Hub, {"action": "hit"}),
    E.PROFILE_OP: (R.Op, {}),
    E.PROFILE_TENSOR: (R.Tensor, {}),
    E.PROFILE_MEMORY: (R.Memory, {}),
    E.DEVICE_MEMORY: (R.DeviceMemory, {}),
    E.GRADIENT: (R.Gradient, {}),
    E.EDGE: (R.Edge, {}),
}
assert set(POINTS) == set(E.POINTS)

_SPAN_EVENT_NAMES: tuple[str, ...] = tuple(
    f"{p}.{s}" for p in SPANS for s in ("start", "stop", "exception")
)
EVENT_NAMES: tuple[str, ...] = _SPAN_EVENT_NAMES + tuple(POINTS)


def _fields(model: type[R.RecordModel]) -> frozenset[str]:
    return frozenset(model.model_fields) - {"kind", "ts_ns"}


_SPAN_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    kind: (_fields(start), _fields(end)) for kind, (start, end) in R.SPAN_ATTRS.items()
}
# Measurements that are record fields rather than timing (the Hub hit's ``bytes``).
_MEASURED_FIELDS = ("bytes",)
# point event -> (record kind, the record's fields, fields taken from measurements, fixed)
_POINT_FIELDS = {
    name: (
        model.model_fields["kind"].default,
        _fields(model),
        tuple(k for k in _MEASURED_FIELDS if k in _fields(model)),
        fixed,
    )
    for name, (model, fixed) in POINTS.items()
}


_USER_SKIP = frozenset({"span_id", "parent_id", "name", "kind", "reason", "stacktrace"})


def _user_attrs(md: Mapping[str, Any]) -> dict[str, Any]:
    # a user span keeps whatever the user gave, under attrs
    return {"attrs": {k: v for k, v in md.items() if k not in _USER_SKIP}}


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("ember", "jax", "jaxlib", "onnx", "onnxruntime"):
        with suppress(_pkg_metadata.PackageNotFoundError):
            out[dist] = _pkg_metadata.version(dist)
    return out


def _backend_and_devices() -> tuple[str | None, list[str]]:
    # Only when the program already started JAX's backend: recording must not import JAX,
    # nor start its backend (``jax.distributed.initialize`` must come before that; the
    # ``process`` record says it later, see ``Recorder._note_process``).
    jax = sys.modules.get("jax")
    if jax is None or not job.backend_started():
        return None, []
    try:
        return jax.default_backend(), [str(d) for d in jax.devices()]
    except Exception:  # the backend failed: say nothing
        return None, []


class Recorder:
    """An open recording: one run, one file. Made by ``record()``.

    Besides the events of the runtime, any program can write its own records with
    ``span``, ``op``, ``tensor``, ``memory``, ``device_memory``, ``gradient`` and ``edge``
    (the ergonomics of candle-graph's ``TraceSession``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        phase: Literal["infer", "train"] = "infer",
        entrypoint: str | None = None,
        tags: dict[str, str] | None = None,
        run_id: str | None = None,
        flush_interval: float = 1.0,
        sync: bool = True,
    ) -> None:
        self.path = Path(path)
        self.sync = sync
        self.run_id = run_id or uuid.uuid4().hex
        self.phase = phase
        self._t0 = time.monotonic_ns()
        wall = time.time_ns()
        backend, devices = _backend_and_devices()
        self.meta = {
            "kind": "meta",
            "schema": SCHEMA_ID,
            "run_id": self.run_id,
            "wall_time_ns": wall,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "versions": _versions(),
            "backend": backend,
            "devices": devices,
            "entrypoint": entrypoint if entrypoint is not None else " ".join(sys.argv) or None,
            "phase": phase,
            "tags": {str(k): str(v) for k, v in (tags or {}).items()},
            "sync": sync,
        }
        # the job, rank and world size the launcher's environment says (``recorder.job``)
        self._launcher = job.launcher_identity()
        self.meta.update((k, v) for k, v in self._launcher.fields().items() if v is not None)
        # the ``process`` record: written once, when JAX's backend is found started
        self._process_lock = threading.Lock()
        self._process_written = False
        # the deferred events of the open call and the spans sent after they ended (see
        # ``_span_handler``, ``_on_spans``): ``(encode, a, b)``, whose line(s) are
        # ``encode(a, b)``; and who drains them
        self._pending: list[tuple[Callable[[Any, Any], bytes], Any, Any]] = []
        self._drain_lock = threading.Lock()
        self._writer = TraceWriter(
            self.path, flush_interval=flush_interval, before_flush=self._before_flush
        )
        self._writer.write(self.meta)
        self._note_process()
        self._handler_id = f"ember.recorder.{self.run_id}"
        # Each event gets a handler made for it (its record kind, span kind and fields),
        # so the hot path (a call's spans and cache events) does no lookups by name.
        for name in _SPAN_EVENT_NAMES:
            bus.attach(f"{self._handler_id}:{name}", [name], self._span_handler(name))
        for name, spec in _POINT_FIELDS.items():
            bus.attach(f"{self._handler_id}:{name}", [name], self._point_handler(*spec))
        # spans sent after they ended (a whole-graph call) come as one call, not as events,
        # while no other handler listens to their events (``bus.attach_spans``)
        self._span_lines = SpanLines(self._t0, SPANS, DEFERRED, _SPAN_FIELDS, self._span_builder)
        bus.attach_spans(
            f"{self._handler_id}:spans",
            self._on_spans,
            replacing=[f"{self._handler_id}:{name}" for name in _SPAN_EVENT_NAMES],
        )
        self._synced = False
        if sync:
            bus.request_sync()
            self._synced = True

    # ------------------------------------------------------------ bus -> records

    def ts(self, monotonic_ns: int | None = None) -> int:
        """Nanoseconds since the run started for a ``time.monotonic_ns()`` reading."""
        t = (time.monotonic_ns() if monotonic_ns is None else monotonic_ns) - self._t0
        return t if t > 0 else 0

    def _point_handler(
        self,
        kind: str,
        fields: frozenset[str],
        measured: tuple[str, ...],
        fixed: dict[str, Any],
    ) -> bus.Handler:
        t0 = self._t0
        # orjson and the file's write called straight from here: the writer's own frame
        # is a tenth of the cost of an event.
        append = self._writer.append
        dumps = orjson.dumps
        current_span = bus.current_span_id
        with_span = "span_id" in fields
        pending = self._pending
        drain = self._drain

        def on_point(name: str, measurements: dict[str, Any], md: Mapping[str, Any]) -> None:
            ts = measurements["monotonic_time"] - t0
            # Fast path: metadata that holds only record fields is taken whole.
            if fields.issuperset(md):
                rec = {"kind": kind, "ts_ns": ts if ts > 0 else 0, **fixed, **md}
            else:
                rec = {"kind": kind, "ts_ns": ts if ts > 0 else 0, **fixed}
                rec.update((k, v) for k, v in md.items() if k in fields)
            for k in measured:
                if k in measurements and k not in rec:
                    rec[k] = measurements[k]
            if with_span and "span_id" not in rec:
                rec["span_id"] = current_span()
            if pending:  # the deferred records of a call come first, in order
                drain()
            append(dumps(rec, default=encode_default, option=ENCODE_OPTIONS))

        return on_point

    def _span_handler(self, name: str) -> bus.Handler:
        """The handler of one span event (``ember.call.stop``): a ``span_start`` or
        ``span_end`` record; an ``.exception`` event ends the span with ``status: error``.

        The records of a call's own spans (call, segment: ``DEFERRED``) are not built where
        the event happens: the handler keeps the event (a tuple on ``_pending``) and the
        call's end writes them all (``_drain``), after the call span's end time was taken,
        so neither span's duration holds the cost of writing records. Any other record
        writes the pending ones first, so the file keeps the order of the events.
        """
        prefix, _, phase = name.rpartition(".")
        build = self._span_builder(prefix, phase)
        append = self._writer.append
        dumps = orjson.dumps
        pending = self._pending
        drain = self._drain
        if SPANS[prefix] in _COMPILING:  # a compile: JAX's backend may have started by now
            note_process = self._note_process

            def on_compile(name: str, measurements: dict[str, Any], md: Mapping[str, Any]) -> None:
                note_process()
                if pending:
                    drain()
                append(
                    dumps(build(measurements, md), default=encode_default, option=ENCODE_OPTIONS)
                )

            return on_compile
        if SPANS[prefix] not in DEFERRED:

            def on_span(name: str, measurements: dict[str, Any], md: Mapping[str, Any]) -> None:
                if pending:
                    drain()
                append(
                    dumps(build(measurements, md), default=encode_default, option=ENCODE_OPTIONS)
                )

            return on_span

        encode = functools.partial(encode_built, build)
        keep = pending.append
        if prefix != E.CALL or phase == "start":

            def on_deferred(name: str, measurements: dict[str, Any], md: Mapping[str, Any]) -> None:
                keep((encode, measurements, md))

            return on_deferred

        def on_call_end(name: str, measurements: dict[str, Any], md: Mapping[str, Any]) -> None:
            keep((encode, measurements, md))
            if len(pending) >= DRAIN_AT:
                drain()

        return on_call_end

    def _on_spans(self, span: bus.CompletedSpan, kids: tuple[bus.CompletedSpan, ...]) -> None:
        """A span sent after it ended, with its children (``bus.attach_spans``): kept, as a
        call's deferred events are, and written by ``_drain`` (``SpanLines``)."""
        pending = self._pending
        pending.append((self._span_lines, span, kids))
        if len(pending) >= DRAIN_AT:
            self._drain()

    def _span_builder(
        self, prefix: str, phase: str
    ) -> Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]]:
        """``build(measurements, metadata) -> record`` of one span event.

        ``attrs`` are the metadata (and, at the end, the measurements) that are fields of
        the span kind's attributes; a user span keeps all its metadata under ``attrs``.
        """
        span_kind = SPANS[prefix]
        user = span_kind == "user"
        start_fields, end_fields = _SPAN_FIELDS[span_kind]
        fields = start_fields if phase == "start" else end_fields
        # metadata holding only attribute fields and the ids (the usual case) is taken
        # whole, less the ids, as point events do: no loop in Python
        whole = fields | {"span_id", "parent_id"}
        t0 = self._t0
        started = phase == "start"
        error = phase == "exception"

        def build(measurements: dict[str, Any], md: Mapping[str, Any]) -> dict[str, Any]:
            ts = measurements["monotonic_time"] - t0
            if user:
                attrs = _user_attrs(md)
            else:
                if whole.issuperset(md):
                    attrs = dict(md)
                    attrs.pop("span_id", None)
                    attrs.pop("parent_id", None)
                else:
                    attrs = {k: v for k, v in md.items() if k in fields}
                if not started:  # the end's attributes may be measurements (bytes)
                    for k, v in measurements.items():
                        if k in fields and k not in attrs:
                            attrs[k] = v
            if started:
                return {
                    "kind": "span_start",
                    "ts_ns": ts if ts > 0 else 0,
                    "span_id": md["span_id"],
                    "parent_id": md.get("parent_id"),
                    "name": md.get("name", prefix) if user else prefix,
                    "span_kind": span_kind,
                    "attrs": attrs,
                }
            rec = {
                "kind": "span_end",
                "ts_ns": ts if ts > 0 else 0,
                "span_id": md["span_id"],
                "duration_ns": measurements.get("duration", 0),
                "status": "ok",
                "span_kind": span_kind,
                "attrs": attrs,
            }
            if error:
                rec["status"] = "error"
                rec["error"] = {
                    "kind": str(md.get("kind", "error")),
                    "reason": str(md.get("reason", "")),
                    "stack": str(md.get("stacktrace", "")),
                }
            return rec

        return build

    def _note_process(self) -> None:
        """Write the ``process`` record (this process's devices and its place in its job)
        once JAX's backend has started: at the recording's start if it already had, else
        at the first compile or flush after it started, else at the end; only when it adds
        to ``meta`` (the backend was not started when the meta was written, or JAX names a
        rank the launcher did not). Never starts the backend itself (``recorder.job``)."""
        if self._process_written:
            return
        with self._process_lock:
            if self._process_written or self._writer.closed:
                return
            fields = job.jax_process(self._launcher)
            if fields is None:
                return
            self._process_written = True
            said = self._launcher.fields()
            if self.meta["backend"] is not None and all(fields[k] == v for k, v in said.items()):
                return  # the meta said it all (one process, its devices read at the start)
        if self._pending:
            self._drain()
        self._writer.write({"kind": "process", "ts_ns": self.ts(), **fields})

    def _before_flush(self) -> None:
        self._note_process()
        self._drain()

    def _drain(self) -> None:
        """Write the deferred records (see ``_span_handler``), oldest first, as one write.

        Thread-safe: events that other threads add meanwhile stay for the next drain. A
        record that cannot be encoded is logged and skipped (a handler's error must never
        reach the caller, and the others must not be lost with it).
        """
        pending = self._pending
        with self._drain_lock:
            n = len(pending)
            if not n:
                return
            batch = pending[:n]
            del pending[:n]
            lines = []
            span_lines, sent = self._span_lines, []
            for encode, a, b in batch:
                if encode is span_lines:  # sent spans in a row are written together
                    sent.append((a, b))
                    continue
                if sent:
                    lines.append(span_lines.many(sent))
                    sent = []
                try:
                    lines.append(encode(a, b))
                except Exception as exc:
                    log.error("ember: a record could not be written (%r, %r): %s", a, b, exc)
            if sent:
                lines.append(span_lines.many(sent))
            if self._writer.closed:  # an event that came after the recording closed
                return
            self._writer.append(b"".join(lines))

    # ------------------------------------------------------------ instrumentation API

    @contextmanager
    def span(self, name: str, **attrs: Any) -> Iterator[bus.SpanHandle]:
        """A user span named ``name`` with free-form attributes (nested spans nest)."""
        with bus.span(E.USER, {"name": name, **attrs}) as handle:
            yield handle

    @contextmanager
    def step(self, step: str, index: int | None = None) -> Iterator[bus.SpanHandle]:
        """A step span named ``step``: any label (``train``, ``eval``, ``forward``...)."""
        check_step_label(step, "Recorder.step")
        with bus.span(E.STEP, {"step": step, "index": index}) as handle:
            yield handle

    def op(self, op_name: str, *, dtype: str, device: str, duration_ns: int, **fields: Any) -> None:
        """A timed operation (``inputs``, ``output``, ``shape``, ``storage_bytes``...)."""
        bus.emit(
            E.PROFILE_OP,
            None,
            {
                "op_name": op_name,
                "dtype": dtype,
                "device": device,
                "duration_ns": duration_ns,
                **fields,
            },
        )

    def tensor(self, tensor_id: str, *, dtype: str, device: str, **fields: Any) -> None:
        """A tensor seen while profiling (``shape``, ``category``, ``storage_bytes``...)."""
        bus.emit(
            E.PROFILE_TENSOR,
            None,
            {"tensor_id": tensor_id, "dtype": dtype, "device": device, **fields},
        )

    def memory(
        self,
        action: Literal["alloc", "free"],
        tensor_id: str,
        nbytes: int,
        *,
        dtype: str,
        device: str,
        **fields: Any,
    ) -> None:
        """A tensor allocation or free (``category``, ``shape``, ``op_name``...)."""
        bus.emit(
            E.PROFILE_MEMORY,
            None,
            {
                "action": action,
                "tensor_id": tensor_id,
                "bytes": nbytes,
                "dtype": dtype,
                "device": device,
                **fields,
            },
        )

    def device_memory(self, device: str, source: str, **fields: Any) -> None:
        """A device memory reading (``used_bytes``, ``peak_bytes``, ``rss_bytes``...)."""
        bus.emit(E.DEVICE_MEMORY, None, {"device": device, "source": source, **fields})

    def gradient(self, root: str, key: str, state: str, norm: float | None = None, **f: Any):
        """A parameter's gradient (``state``: present, missing, zero, non_finite)."""
        event_id = f.pop("event_id", None) or f"{self.phase}-grad-{uuid.uuid4().hex[:12]}"
        bus.emit(
            E.GRADIENT,
            None,
            {"event_id": event_id, "root": root, "key": key, "state": state, "norm": norm, **f},
        )

    def edge(self, from_span: str, to_span: str, duration_ns: int) -> None:
        """Data-flow timing between two spans."""
        bus.emit(
            E.EDGE,
            None,
            {"from_span": from_span, "to_span": to_span, "duration_ns": duration_ns},
        )

    def write_record(self, record: dict[str, Any]) -> None:
        """Write a record as it is (for bridges that build records themselves).

        The caller is responsible for its validity; ``ember validate`` checks it.
        """
        if self._pending:
            self._drain()
        self._writer.write(record)

    # ------------------------------------------------------------ lifecycle

    @property
    def lines(self) -> int:
        return self._writer.lines

    def flush(self) -> None:
        self._writer.flush()  # drains the deferred records first

    def close(self) -> None:
        """Stop recording and close the file; ``TraceWriteError`` if records were lost."""
        if self._synced:
            self._synced = False
            bus.release_sync()
        for name in EVENT_NAMES:
            bus.detach(f"{self._handler_id}:{name}")
        bus.detach(f"{self._handler_id}:spans")
        self._note_process()
        self._drain()
        self._writer.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_active: list[Recorder] = []


def active_recorders() -> list[Recorder]:
    """The recordings open in this process, oldest first."""
    return list(_active)


def check_step_label(step: Any, where: str) -> None:
    """A step label is a non-empty string (``train``, ``forward``); else a ``ValueError``."""
    if not isinstance(step, str) or not step.strip():
        raise ValueError(
            f"{where}: step must be a non-empty label such as 'train' or 'forward', got {step!r}"
        )


@contextmanager
def record(
    path: str | os.PathLike[str],
    *,
    phase: Literal["infer", "train"] = "infer",
    entrypoint: str | None = None,
    run_id: str | None = None,
    flush_interval: float = 1.0,
    sync: bool = True,
    tags: Mapping[str, Any] | None = None,
    **more_tags: Any,
) -> Iterator[Recorder]:
    """Record every Ember event of this process into a new JSONL trace at ``path``.

    Keyword arguments other than the named ones become the run's ``tags`` (model,
    git sha, team...), and so does the ``tags`` mapping, whose names may also be those of
    this function's parameters (``ember run --tag sync=1`` is a tag, not the option). The
    file is flushed at least every ``flush_interval`` seconds and on exit.

    ``sync=True`` (the default): while the recording is open, a model call's span ends
    when its outputs are ready (``jax.block_until_ready``), and so do segment and break
    spans, so durations are latencies; the call span also carries ``dispatch_ns``. This
    makes each call wait for its results, as a caller that reads them would.
    ``sync=False`` keeps JAX's asynchronous dispatch (for pipelines that overlap calls);
    spans then end at dispatch and the trace's ``meta.sync`` is false ("dispatch only").
    Spans are synced while any open recording asks for it.

    A path that cannot be written (its parent is a file, ``/proc/...``) is a
    ``TraceWriteError`` here. If writing fails later (a full disk) the program goes on with
    one ``TraceWriteWarning``, and leaving the block raises ``TraceWriteError`` with the
    number of records that were not written.
    """
    rec = Recorder(
        path,
        phase=phase,
        entrypoint=entrypoint,
        tags={k: str(v) for k, v in {**(tags or {}), **more_tags}.items()},
        run_id=run_id,
        flush_interval=flush_interval,
        sync=sync,
    )
    _active.append(rec)
    try:
        yield rec
    except BaseException:
        _active.remove(rec)
        try:
            rec.close()
        except TraceWriteError as exc:  # the body's own error is the one to see
            warnings.warn(str(exc), TraceWriteWarning, stacklevel=3)
        raise
    _active.remove(rec)
    rec.close()
