"""``log_compiles()``: one readable log line for each event that shows compile work.

Like Transmuter's ``Transmuter.Telemetry.Logger``: the compile of a model, cache misses and
evictions, each segment compile with its reason and duration, and graph breaks, through
Python ``logging`` (logger ``ember.compile`` unless another is given)::

    from ember.recorder.log import log_compiles
    log_compiles()            # attach; returns the handler id
    ...
    log_compiles(False)       # detach

No jax import: this module only formats event metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from . import bus
from . import events as E

__all__ = ["COMPILE_EVENTS", "format_event", "log_compiles"]

HANDLER_ID = "ember.recorder.log_compiles"

COMPILE_EVENTS = (
    E.stop(E.COMPILE),
    E.exception(E.COMPILE),
    E.CACHE_MISS,
    E.CACHE_EVICT,
    E.stop(E.SEGMENT_COMPILE),
    E.exception(E.SEGMENT_COMPILE),
    E.stop(E.BREAK),
)
_COMPILE_STOP, _COMPILE_EXCEPTION = E.stop(E.COMPILE), E.exception(E.COMPILE)
_SEGMENT_COMPILE_STOP = E.stop(E.SEGMENT_COMPILE)
_SEGMENT_COMPILE_EXCEPTION = E.exception(E.SEGMENT_COMPILE)
_BREAK_STOP = E.stop(E.BREAK)


def _ms(measurements: dict[str, Any]) -> str:
    duration = measurements.get("duration")
    return f"{duration / 1e6:.1f} ms" if isinstance(duration, (int, float)) else "? ms"


def _source(metadata: Mapping[str, Any]) -> str:
    return str(metadata.get("source") or "<memory>")


def _shapes(shapes: Any) -> str:
    if not shapes:
        return "no arguments"
    parts = []
    for s in shapes:
        if "sequence" in s:
            inner = ", ".join(f"{e['dtype']}{e['shape']}" for e in s["sequence"])
            parts.append(f"{s['name']}: sequence[{inner}]")
        else:
            parts.append(f"{s['name']}: {s.get('dtype')}{s.get('shape')}")
    return ", ".join(parts)


def _statics(statics: Any) -> str:
    if not statics:
        return ""
    shown = []
    for s in statics:
        text = repr(s["value"])
        shown.append(f"{s['name']}={text if len(text) <= 40 else text[:37] + '...'}")
    return "; static " + ", ".join(shown)


def format_event(name: str, measurements: dict[str, Any], metadata: Mapping[str, Any]) -> str:
    """The log line of one compile event."""
    src = _source(metadata)
    if name == _COMPILE_STOP:
        breaks = "with graph breaks" if metadata.get("graph_break") else "without graph breaks"
        return f"compiled {src} in {_ms(measurements)} ({breaks})"
    if name == _COMPILE_EXCEPTION:
        return f"compile of {src} failed after {_ms(measurements)}: {metadata.get('reason')}"
    if name == E.CACHE_MISS:
        return (
            f"cache miss {src} at position {metadata.get('position')} for "
            f"{_shapes(metadata.get('shapes'))}{_statics(metadata.get('statics'))}"
        )
    if name == E.CACHE_EVICT:
        return (
            f"cache evict {src} at position {metadata.get('position')} (cache_size "
            f"{metadata.get('cache_size')}): removed {_shapes(metadata.get('shapes'))}"
            f"{_statics(metadata.get('statics'))}"
        )
    if name == _SEGMENT_COMPILE_STOP:
        what = "compiled" if metadata.get("compiled") else "kept eager (not compiled)"
        stop = metadata.get("stop")
        span = f"[{metadata.get('position')}..{stop})"
        line = f"segment {src} {span} {what} in {_ms(measurements)}"
        if metadata.get("disk_cache"):
            line += f", disk cache {metadata['disk_cache']}"
        if metadata.get("reason"):
            line += f"; stops for {metadata['reason']}"
        if metadata.get("host_values"):
            line += f"; new host values {', '.join(metadata['host_values'])}"
        return line
    if name == _SEGMENT_COMPILE_EXCEPTION:
        return (
            f"segment {src} at position {metadata.get('position')} failed after "
            f"{_ms(measurements)}: {metadata.get('reason')}"
        )
    if name == _BREAK_STOP:
        return (
            f"break {src} at position {metadata.get('position')}: node "
            f"{metadata.get('node')!r} ({metadata.get('op_type')}) ran eagerly in "
            f"{_ms(measurements)}"
        )
    return f"{name} {metadata}"


def log_compiles(
    enable: bool = True,
    *,
    level: int = logging.INFO,
    logger: logging.Logger | str = "ember.compile",
) -> str:
    """Log compile work (``enable=False`` detaches). Returns the handler id.

    Calling it again replaces the earlier handler, so the level or logger can be changed.
    """
    bus.detach(HANDLER_ID)
    if not enable:
        return HANDLER_ID
    log = logging.getLogger(logger) if isinstance(logger, str) else logger

    def handle(name: str, measurements: dict[str, Any], metadata: Mapping[str, Any]) -> None:
        if log.isEnabledFor(level):
            log.log(level, "%s", format_event(name, measurements, metadata))

    bus.attach(HANDLER_ID, COMPILE_EVENTS, handle)
    return HANDLER_ID
