"""The event bus: ``attach``, ``detach``, ``emit`` and ``span``, after Erlang's ``:telemetry``.

Event names are dotted strings (``"ember.cache.hit"``). A span ``"ember.call"`` emits
``"ember.call.start"``, then ``"ember.call.stop"`` or ``"ember.call.exception"``.

Handlers are called synchronously, in the emitting thread, as
``fn(event_name, measurements, metadata)``. A handler that raises is detached and the
error is logged once; the caller never sees it.

Cost: ``emit`` with no handler for the event is one dict lookup on a snapshot dict, and
``span`` with no handler for its three events is a flag check, because ``emit`` sits on
the call path of every model call.

Spans sent after they ended (``emit_span``: a whole-graph call and its segment) may go to a
*span handler* (``attach_spans``) as one call, ``fn(span, children)``, in place of their
start and stop events for the event handlers it names: the recorder writes a recorded
call's four records from one such call, where the events were four handler calls and
eight dicts a call. Only spans whose events no other handler listens to go that way: what
another handler does inside an event (``track_device_memory`` records a reading at a
call's stop) then keeps its place between the span's records.

Thread-safety: ``attach`` and ``detach`` take a lock and publish a new immutable
snapshot of the routing table; ``emit`` reads the current snapshot without locking, so
concurrent emits never block each other and never see a half-updated table.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

__all__ = [
    "SPANS_SENT",
    "CompletedSpan",
    "Handler",
    "SpanHandle",
    "SpanHandler",
    "attach",
    "attach_spans",
    "current_span_id",
    "detach",
    "emit",
    "emit_span",
    "emit_span_exception",
    "generation",
    "list_handlers",
    "listening",
    "release_sync",
    "request_sync",
    "span",
    "syncing",
]

log = logging.getLogger("ember.recorder")

Handler = Callable[[str, dict[str, Any], Mapping[str, Any]], None]
"""``fn(event_name, measurements, metadata)``."""

CompletedSpan = tuple[str, int, int | None, Mapping[str, Any], int, int, Mapping[str, Any] | None]
"""A span sent after it ended: ``(prefix, span_id, parent_id, metadata, start, end,
stop_metadata)``, the times ``time.monotonic_ns()``; ``metadata`` is the sender's (without
the ids), ``stop_metadata`` what its stop adds (None: nothing)."""

SpanHandler = Callable[[CompletedSpan, tuple[CompletedSpan, ...]], None]
"""``fn(span, children)``: a span ``emit_span`` sent and its children, in the order of
their events (``span`` starts first and stops last; each child starts and stops in turn)."""

_lock = threading.Lock()
# handler_id -> (event names, fn); the source of truth, changed under _lock.
_handlers: dict[str, tuple[frozenset[str], Handler]] = {}
# handler_id -> (span handler, the event handler ids it replaces), changed under _lock.
_span_handlers: dict[str, tuple[SpanHandler, frozenset[str]]] = {}
# event name -> tuple of (handler_id, fn); rebuilt on every attach/detach, read lock-free.
_routes: dict[str, tuple[tuple[str, Handler], ...]] = {}
# While a span handler is attached: the span handlers; the span prefixes whose sent spans
# go to them (those whose start and stop events only the handlers they replace listen to);
# and the prefixes whose events other handlers listen to (a sent span with a child of
# those is sent as events). Else None.
_SentRoutes = tuple[tuple[tuple[str, SpanHandler], ...], frozenset[str], frozenset[str]]
_completed: _SentRoutes | None = None

generation = 0
"""Changes whenever a handler is attached or detached. A hot path may remember what
``listening`` told it for as long as ``generation`` stays the same."""

sync = False
"""True while an open recording wants work spans (call, segment, break, step) to end when
their results are ready (``jax.block_until_ready``) rather than at dispatch. Read on the
call path: the runtime syncs only when someone listens to the span *and* this is set."""
_sync_requests = 0

_span_ids = itertools.count(1)
_current_span: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "ember_current_span", default=None
)


def _rebuild_routes() -> None:
    global _routes, _completed, generation
    routes: dict[str, list[tuple[str, Handler]]] = {}
    for handler_id, (names, fn) in _handlers.items():
        for name in names:
            routes.setdefault(name, []).append((handler_id, fn))
    _routes = {name: tuple(hs) for name, hs in routes.items()}
    _completed = _sent_spans_routes() if _span_handlers else None
    generation += 1


def _sent_spans_routes() -> _SentRoutes:
    """``_completed``: where spans sent after they ended go, from ``_routes``."""
    replaced = frozenset().union(*(ids for _, ids in _span_handlers.values()))
    theirs, shared = set(), set()
    for name, hs in _routes.items():
        prefix, _, phase = name.rpartition(".")
        if phase == "start" or phase == "stop":
            if all(handler_id in replaced for handler_id, _ in hs):
                theirs.add(prefix)
            else:
                shared.add(prefix)
    span_fns = tuple((handler_id, fn) for handler_id, (fn, _) in _span_handlers.items())
    return span_fns, frozenset(theirs - shared), frozenset(shared)


def listening(*event_names: str) -> bool:
    """True when a handler is attached to any of ``event_names``: one lookup per name."""
    routes = _routes  # the lock-free snapshot
    # a loop, not any(<generator>): the generator doubles the cost (230 -> 120 ns), and the
    # runtime asks this several times a call
    for name in event_names:  # noqa: SIM110 (see above)
        if name in routes:
            return True
    return False


def request_sync() -> None:
    """Ask that work spans end at their results (see ``sync``); pair with ``release_sync``."""
    global sync, _sync_requests
    with _lock:
        _sync_requests += 1
        sync = True


def release_sync() -> None:
    """Undo one ``request_sync``; spans end at dispatch again when none is left."""
    global sync, _sync_requests
    with _lock:
        _sync_requests = max(_sync_requests - 1, 0)
        sync = _sync_requests > 0


def syncing() -> bool:
    """Whether work spans end at their results now (see ``sync``)."""
    return sync


def attach(handler_id: str, event_names: Iterable[str], fn: Handler) -> None:
    """Call ``fn`` for each event in ``event_names``.

    Raises ``ValueError`` if ``handler_id`` is already attached: detach it first, or pick
    another id (ids are how handlers are found again, so they must be unique).
    """
    names = frozenset([event_names] if isinstance(event_names, str) else event_names)
    if not names:
        raise ValueError(f"attach({handler_id!r}): give at least one event name")
    with _lock:
        _check_free(handler_id)
        _handlers[handler_id] = (names, fn)
        _rebuild_routes()


def attach_spans(handler_id: str, fn: SpanHandler, *, replacing: Iterable[str] = ()) -> None:
    """Call ``fn(span, children)`` for each span ``emit_span`` sends (see ``SpanHandler``),
    in place of those spans' start and stop events for the event handlers ``replacing``
    names (the caller's own, which still get the events of ``span`` and ``emit``).

    A sent span goes to ``fn`` when only those handlers listen to its start and stop and
    to its children's; where another handler listens to any of them, every handler gets
    the span's events instead, as without ``fn`` (so what that handler does inside an
    event keeps its place among theirs).

    Raises ``ValueError`` if ``handler_id`` is already attached, as ``attach`` does.
    """
    with _lock:
        _check_free(handler_id)
        _span_handlers[handler_id] = (fn, frozenset(replacing))
        _rebuild_routes()


def _check_free(handler_id: str) -> None:
    if handler_id in _handlers or handler_id in _span_handlers:
        raise ValueError(
            f"handler {handler_id!r} is already attached; detach({handler_id!r}) first"
        )


def detach(handler_id: str) -> bool:
    """Remove a handler (an event or a span handler). Returns False if it was not attached."""
    with _lock:
        if _handlers.pop(handler_id, None) is None and _span_handlers.pop(handler_id, None) is None:
            return False
        _rebuild_routes()
        return True


SPANS_SENT = "emit_span"
"""What ``list_handlers`` says a span handler (``attach_spans``) listens to."""


def list_handlers() -> dict[str, frozenset[str]]:
    """The attached handler ids and the events each listens to (``SPANS_SENT`` for a span
    handler)."""
    with _lock:
        out = {hid: names for hid, (names, _) in _handlers.items()}
        out.update((hid, frozenset([SPANS_SENT])) for hid in _span_handlers)
        return out


def _failed(handler_id: str, event_name: str, exc: BaseException) -> None:
    if detach(handler_id):
        log.error(
            "ember handler %r raised on %s and was detached: %s",
            handler_id,
            event_name,
            "".join(traceback.format_exception_only(type(exc), exc)).strip(),
        )


def _dispatch(
    route: tuple[tuple[str, Handler], ...],
    event_name: str,
    measurements: dict[str, Any],
    metadata: dict[str, Any],
) -> None:
    for handler_id, fn in route:
        try:
            fn(event_name, measurements, metadata)
        except Exception as exc:  # a handler must never break the caller
            _failed(handler_id, event_name, exc)


def emit(
    event_name: str,
    measurements: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Send one event to the handlers attached to ``event_name``.

    ``measurements`` are numbers (``count``, ``bytes``, ``duration``); ``metadata`` is
    what the event is about. ``monotonic_time`` (ns) is added when missing. Handlers get
    ``metadata`` itself, not a copy: neither side may change it after the call.
    """
    route = _routes.get(event_name)
    if route is None:
        return
    # One new dict for the measurements (the time is added); the metadata is passed as
    # given, so handlers must treat both as read-only.
    if measurements is None:
        m = {"monotonic_time": time.monotonic_ns()}
    elif "monotonic_time" in measurements:
        m = dict(measurements)
    else:
        m = {**measurements, "monotonic_time": time.monotonic_ns()}
    md = metadata if metadata is not None else {}
    for handler_id, fn in route:  # _dispatch, inlined: this is the hot path
        try:
            fn(event_name, m, md)
        except Exception as exc:  # a handler must never break the caller
            _failed(handler_id, event_name, exc)


current_span_id: Callable[[], int | None] = _current_span.get
"""``current_span_id()``: the id of the innermost open span in this context, or None."""


# span prefix -> its start, stop and exception event names, made once per prefix
_span_names: dict[str, tuple[str, str, str]] = {}


def _name_span(prefix: str) -> tuple[str, str, str]:
    names = _span_names[prefix] = (prefix + ".start", prefix + ".stop", prefix + ".exception")
    return names


class SpanHandle:
    """What ``span`` returns and its ``with`` yields: add stop metadata or measurements
    before the span ends.

    It is the span's context manager too (a class, not ``@contextmanager``: a generator's
    enter and exit cost more than writing the records of a call's spans).
    """

    __slots__ = (
        "_prefix",
        "_token",
        "end",
        "metadata",
        "span_id",
        "start",
        "stop_measurements",
        "stop_metadata",
    )

    def __init__(self, event_prefix: str, metadata: Mapping[str, Any] | None = None) -> None:
        self._prefix = event_prefix
        self._token: contextvars.Token[int | None] | None = None
        self.span_id = 0  # 0 when nobody listens to the span
        self.metadata: dict[str, Any] = dict(metadata) if metadata else {}
        self.stop_metadata: dict[str, Any] = {}
        self.stop_measurements: dict[str, Any] = {}
        # time.monotonic_ns() at the span's start (0 when nobody listens to the span)
        self.start = 0
        # its end when the body knows it (its results were ready then); 0: when it exits
        self.end = 0

    def set(self, **metadata: Any) -> None:
        """Metadata for the stop (or exception) event, on top of the start metadata."""
        self.stop_metadata.update(metadata)

    def measure(self, **measurements: Any) -> None:
        """Extra measurements for the stop event, e.g. ``bytes``."""
        self.stop_measurements.update(measurements)

    def __enter__(self) -> SpanHandle:
        routes = _routes
        names = _span_names.get(self._prefix) or _name_span(self._prefix)
        start_name, stop_name, exc_name = names
        if start_name not in routes and stop_name not in routes and exc_name not in routes:
            return self  # nobody listens: no id, no events
        meta = self.metadata
        span_id = self.span_id = next(_span_ids)
        meta["span_id"] = span_id
        meta["parent_id"] = _current_span.get()
        self._token = _current_span.set(span_id)
        start = self.start = time.monotonic_ns()
        route = routes.get(start_name)
        if route:
            m = {"system_time": time.time_ns(), "monotonic_time": start}
            for handler_id, fn in route:  # _dispatch, inlined: a call's path
                try:
                    fn(start_name, m, meta)
                except Exception as exc:  # a handler must never break the caller
                    _failed(handler_id, start_name, exc)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._token
        if token is None:
            return  # nobody listened when the span started
        self._token = None
        _current_span.reset(token)
        if exc is None:
            name = _span_names[self._prefix][1]
            route = _routes.get(name)
            if route:
                now = self.end or time.monotonic_ns()
                m = {"duration": now - self.start, "monotonic_time": now}
                if self.stop_measurements:
                    m.update(self.stop_measurements)
                md = {**self.metadata, **self.stop_metadata}
                for handler_id, fn in route:  # _dispatch, inlined: a call's path
                    try:
                        fn(name, m, md)
                    except Exception as err:  # a handler must never break the caller
                        _failed(handler_id, name, err)
            return
        name = _span_names[self._prefix][2]
        route = _routes.get(name)
        if route:
            now = time.monotonic_ns()
            m = {"duration": now - self.start, "monotonic_time": now, **self.stop_measurements}
            _dispatch(
                route, name, m, _exception_metadata({**self.metadata, **self.stop_metadata}, exc)
            )


def emit_span(
    event_prefix: str,
    metadata: Mapping[str, Any],
    start: int,
    end: int,
    *,
    stop_metadata: Mapping[str, Any] | None = None,
    children: Iterable[tuple[str, Mapping[str, Any], int, int]] = (),
) -> None:
    """Emit ``<prefix>.start`` and ``<prefix>.stop`` of a span that ran from ``start`` to
    ``end`` (``time.monotonic_ns()``), a child of the current span, once it has ended.

    For a span whose body emits nothing (a whole-graph call and its one segment): its
    events then cost nothing inside it, and no span object, context variable or handler
    runs around the work. ``stop_metadata`` is added to the stop's metadata (as
    ``SpanHandle.stop_metadata``); ``children`` are spans that ran inside it, ``(prefix,
    metadata, start, end)`` each, sent between its start and its stop as its children. The
    events are those of ``span`` (the same measurements, metadata and order; the start's
    ``system_time`` taken now). A span handler (``attach_spans``) gets ``metadata`` and each
    child's itself: neither side may change them after the call (a recorder keeps what it
    encoded of them by their identity).
    """
    completed = _completed
    parent = _current_span.get()
    if (
        completed is not None
        and type(children) is tuple
        and event_prefix in completed[1]
        # a recorded call's path, one call less deep (``_emit_span`` sends it alike)
        and _send_whole(
            completed, event_prefix, metadata, start, end, parent, stop_metadata, children
        )
    ):
        return
    _emit_span(event_prefix, metadata, start, end, parent, stop_metadata, children)


def _emit_span(
    event_prefix: str,
    metadata: Mapping[str, Any],
    start: int,
    end: int,
    parent: int | None,
    stop_metadata: Mapping[str, Any] | None = None,
    children: Iterable[tuple[str, Mapping[str, Any], int, int]] = (),
) -> None:
    """``emit_span`` with its parent span's id given (``parent``)."""
    completed = _completed
    if completed is not None and event_prefix in completed[1]:
        kids = children if type(children) is tuple else tuple(children)
        if _send_whole(completed, event_prefix, metadata, start, end, parent, stop_metadata, kids):
            return
        children = kids
    routes = _routes
    names = _span_names.get(event_prefix) or _name_span(event_prefix)
    start_route, stop_route = routes.get(names[0]), routes.get(names[1])
    if not start_route and not stop_route:
        for prefix, md, t0, t1 in children:  # nobody listens to it: its children are its parent's
            _emit_span(prefix, md, t0, t1, parent)
        return
    span_id = next(_span_ids)
    meta = {**metadata, "span_id": span_id, "parent_id": parent}
    if start_route:
        m = {"system_time": time.time_ns(), "monotonic_time": start}
        for handler_id, fn in start_route:  # _dispatch, inlined: a call's path
            try:
                fn(names[0], m, meta)
            except Exception as exc:  # a handler must never break the caller
                _failed(handler_id, names[0], exc)
    for prefix, md, t0, t1 in children:
        _emit_span(prefix, md, t0, t1, span_id)
    if stop_route:
        stop_md = {**meta, **stop_metadata} if stop_metadata else meta
        m = {"duration": end - start, "monotonic_time": end}
        for handler_id, fn in stop_route:
            try:
                fn(names[1], m, stop_md)
            except Exception as exc:
                _failed(handler_id, names[1], exc)


def _send_whole(
    completed: _SentRoutes,
    event_prefix: str,
    metadata: Mapping[str, Any],
    start: int,
    end: int,
    parent: int | None,
    stop_metadata: Mapping[str, Any] | None,
    children: tuple[tuple[str, Mapping[str, Any], int, int], ...],
) -> bool:
    """Send a span whose events only the span handlers' own listen to, and its children,
    to the span handlers (``_completed``); False where another handler listens to a
    child, which then gets the events of them all (``_emit_span``)."""
    shared = completed[2]
    for child in children:
        if child[0] in shared:
            return False
    span_id = next(_span_ids)
    span = (event_prefix, span_id, parent, metadata, start, end, stop_metadata)
    if len(children) == 1:  # a call's one segment: no comprehension (its frame costs 0.1 us)
        ((p, md, t0, t1),) = children
        kids: tuple[CompletedSpan, ...] = ((p, next(_span_ids), span_id, md, t0, t1, None),)
    else:
        kids = tuple(
            [(p, next(_span_ids), span_id, md, t0, t1, None) for p, md, t0, t1 in children]
        )
    for handler_id, fn in completed[0]:
        try:
            fn(span, kids)
        except Exception as exc:  # a handler must never break the caller
            _failed(handler_id, event_prefix, exc)
    return True


def emit_span_exception(
    event_prefix: str, metadata: Mapping[str, Any], start: int, exc: BaseException
) -> None:
    """Emit ``<prefix>.start`` and ``<prefix>.exception`` of a span that ran from ``start``
    until it raised ``exc`` (now), a child of the current span: ``emit_span``'s events for a
    body that failed, as ``span`` sends them."""
    routes = _routes
    names = _span_names.get(event_prefix) or _name_span(event_prefix)
    start_route, exc_route = routes.get(names[0]), routes.get(names[2])
    if not start_route and not exc_route:
        return
    meta = {**metadata, "span_id": next(_span_ids), "parent_id": _current_span.get()}
    if start_route:
        _dispatch(
            start_route, names[0], {"system_time": time.time_ns(), "monotonic_time": start}, meta
        )
    if exc_route:
        now = time.monotonic_ns()
        m = {"duration": now - start, "monotonic_time": now}
        _dispatch(exc_route, names[2], m, _exception_metadata(meta, exc))


def _exception_metadata(metadata: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
    """An exception event's metadata: the span's, with ``kind``, ``reason``, ``stacktrace``."""
    return {
        **metadata,
        "kind": "throw" if isinstance(exc, Exception) else "exit",
        "reason": f"{type(exc).__name__}: {exc}",
        "stacktrace": "".join(traceback.format_exception(exc)),
    }


def span(event_prefix: str, metadata: Mapping[str, Any] | None = None) -> SpanHandle:
    """Emit ``<prefix>.start``, run the body, then ``<prefix>.stop`` or ``.exception``.

    Start measurements: ``system_time`` (ns since the epoch), ``monotonic_time`` (ns).
    Stop and exception measurements: ``duration`` (ns), ``monotonic_time`` (ns), plus what
    the body gave to ``handle.measure``. Stop metadata is the start metadata updated with
    ``handle.set(...)``; exception metadata adds ``kind``, ``reason`` and ``stacktrace``.
    Every event of one span carries the same ``span_id`` and the ``parent_id`` of the
    enclosing span in its metadata, so records can be paired and nested. The exception
    is re-raised. Use the handle in one ``with`` statement.
    """
    return SpanHandle(event_prefix, metadata)
