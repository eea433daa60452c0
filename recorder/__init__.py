"""Ember's recorder: the event bus, the JSONL trace writer and the instrumentation API.

``with ember.recorder.record("run.jsonl", model="bert"):`` records every Ember event of
the process into one trace file. ``ember.recorder.jax`` (imported on first use, so that
importing the recorder never imports JAX) records any JAX program's compiles.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import bus
from .bus import attach, detach, emit, span
from .recorder import EVENT_NAMES, Recorder, active_recorders, record
from .writer import TraceWriteError, TraceWriter, TraceWriteWarning

__all__ = [
    "EVENT_NAMES",
    "Recorder",
    "TraceWriteError",
    "TraceWriteWarning",
    "TraceWriter",
    "active_recorders",
    "attach",
    "bus",
    "detach",
    "emit",
    "log_compiles",
    "record",
    "span",
]


def log_compiles(*args: Any, **kwargs: Any) -> Any:
    """Log the events that show compile work through ``logging`` (see ``ember.recorder.log``)."""
    from .log import log_compiles as _log_compiles

    return _log_compiles(*args, **kwargs)


def __getattr__(name: str) -> Any:
    # ``ember.recorder.jax`` is imported lazily: it imports JAX itself.
    if name == "jax":
        return importlib.import_module(f"{__name__}.jax")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
