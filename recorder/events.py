"""The names of Ember's events, in one place: the runtime emits them, the recorder turns
them into records and ``log_compiles`` formats them.

A span event prefix (``CALL = "ember.call"``) is emitted as ``<prefix>.start``, then
``<prefix>.stop`` or ``<prefix>.exception`` (see ``ember.recorder.bus.span``); ``start``,
``stop`` and ``exception`` give those names. ``SPANS`` maps each prefix to the span kind of
its records (``schemas.records.SPAN_ATTRS``), ``POINTS`` lists the point events.

No imports: the runtime's hot path reads these as module constants.
"""

from __future__ import annotations

__all__ = [
    "BREAK",
    "CACHE_EVICT",
    "CACHE_HIT",
    "CACHE_MISS",
    "CALL",
    "CALL_EXCEPTION",
    "CALL_START",
    "CALL_STOP",
    "COMPILE",
    "DEVICE_MEMORY",
    "EDGE",
    "GRADIENT",
    "HUB_DOWNLOAD",
    "HUB_HIT",
    "HUB_INFO",
    "JIT",
    "LOAD",
    "OP",
    "POINTS",
    "PROFILE_MEMORY",
    "PROFILE_OP",
    "PROFILE_TENSOR",
    "RUN",
    "SEGMENT",
    "SEGMENT_COMPILE",
    "SPANS",
    "STEP",
    "USER",
    "exception",
    "start",
    "stop",
]

# ---------------------------------------------------------------- span prefixes

LOAD = "ember.load"
COMPILE = "ember.compile"
CALL = "ember.call"
RUN = "ember.run"
SEGMENT = "ember.segment"
"""One execution of one segment inside a call."""
SEGMENT_COMPILE = "ember.segment.compile"
BREAK = "ember.break"
HUB_DOWNLOAD = "ember.hub.download"
HUB_INFO = "ember.hub.info"
OP = "ember.op"
STEP = "ember.step"
USER = "ember.user"
JIT = "ember.jit"

SPANS: dict[str, str] = {
    LOAD: "load",
    COMPILE: "compile",
    CALL: "call",
    RUN: "run",
    SEGMENT: "segment",
    SEGMENT_COMPILE: "segment_compile",
    BREAK: "break",
    HUB_DOWNLOAD: "hub_download",
    HUB_INFO: "hub_info",
    OP: "op",
    STEP: "step",
    USER: "user",
    JIT: "jit",
}
"""Span event prefix -> the span kind of its records."""

# ---------------------------------------------------------------- point events

CACHE_HIT = "ember.cache.hit"
CACHE_MISS = "ember.cache.miss"
CACHE_EVICT = "ember.cache.evict"
HUB_HIT = "ember.hub.hit"
PROFILE_OP = "ember.profile.op"
PROFILE_TENSOR = "ember.profile.tensor"
PROFILE_MEMORY = "ember.profile.memory"
DEVICE_MEMORY = "ember.device_memory"
GRADIENT = "ember.gradient"
EDGE = "ember.edge"

POINTS: tuple[str, ...] = (
    CACHE_HIT,
    CACHE_MISS,
    CACHE_EVICT,
    HUB_HIT,
    PROFILE_OP,
    PROFILE_TENSOR,
    PROFILE_MEMORY,
    DEVICE_MEMORY,
    GRADIENT,
    EDGE,
)


def start(prefix: str) -> str:
    """``"ember.call"`` -> ``"ember.call.start"``."""
    return prefix + ".start"


def stop(prefix: str) -> str:
    """``"ember.call"`` -> ``"ember.call.stop"``."""
    return prefix + ".stop"


def exception(prefix: str) -> str:
    """``"ember.call"`` -> ``"ember.call.exception"``."""
    return prefix + ".exception"


CALL_START = start(CALL)
CALL_STOP = stop(CALL)
CALL_EXCEPTION = exception(CALL)
