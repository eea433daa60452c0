"""Fixtures of the runtime tests: event capture, and freeing by reference counting alone.
Helpers that build models and run the reference are in ``tests/runtime/models.py``."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ember.recorder import bus

RUNTIME_EVENTS = [
    f"ember.{name}.{phase}"
    for name in ("load", "compile", "call", "run", "segment.compile", "break")
    for phase in ("start", "stop", "exception")
] + ["ember.cache.hit", "ember.cache.miss", "ember.cache.evict"]

_ids = itertools.count()


class Events(list):
    """Captured ``(name, measurements, metadata)`` of the runtime's events."""

    def names(self, prefix: str = "ember.") -> list[str]:
        return [n for n, _, _ in self if n.startswith(prefix)]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [md for n, _, md in self if n == name]

    def clear_all(self) -> None:
        del self[:]


@pytest.fixture
def ember_events() -> Iterator[Events]:
    got = Events()
    handler_id = f"test-runtime-{next(_ids)}"
    bus.attach(handler_id, RUNTIME_EVENTS, lambda n, m, md: got.append((n, m, md)))
    try:
        yield got
    finally:
        bus.detach(handler_id)


@contextmanager
def no_cycle_collector() -> Iterator[None]:
    """The cycle collector off inside the block: what is freed there is freed by reference
    counting, at once, not by a collection of cycles."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
