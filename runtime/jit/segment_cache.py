"""The segment cache: per segment position, the compiled segments of one model, least
recently used first, and the cache events it emits.

In the shape of JAX's ``lru_cache.py``: ``get`` (a hit moves the entry to the end and emits
``ember.cache.hit``), ``missed`` (emits ``ember.cache.miss``) and ``put`` (when the position
is full, the least recently used entry is evicted first: the caller's ``on_evict`` is told,
then ``ember.cache.evict`` emitted). The driver that compiles on a miss is
``segment_build.SegmentBuilder.lookup_or_build``. Each position holds at most ``size``
entries; the owner holds its lock around every call.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

from ember.recorder import bus
from ember.recorder import events as E


class CachedSegment(Protocol):
    """What the cache's events say about an entry."""

    shapes: list[dict[str, Any]]
    statics: list[dict[str, Any]]

    @property
    def key_hex(self) -> str: ...


T = TypeVar("T", bound=CachedSegment)


class SegmentCache(Generic[T]):
    """Per position, an LRU of at most ``size`` entries (see the module docstring)."""

    def __init__(self, size: int, source: str | None) -> None:
        self.size = size
        self.source = source
        self._positions: dict[int, collections.OrderedDict[Hashable, T]] = {}

    def get(self, position: int, key: Hashable) -> T | None:
        """The entry of ``key`` at ``position`` (now the most recently used), or None."""
        cache = self._positions.get(position)
        if cache is None:
            return None
        entry = cache.get(key)
        if entry is None:
            return None
        cache.move_to_end(key)
        if bus.listening(E.CACHE_HIT):
            bus.emit(
                E.CACHE_HIT,
                {"count": 1},
                {
                    "source": self.source,
                    "position": position,
                    "shapes": entry.shapes,
                    "key": entry.key_hex,
                    "statics": entry.statics,
                },
            )
        return entry

    def missed(
        self,
        position: int,
        shapes: list[dict[str, Any]],
        key_hex: str,
        statics: list[dict[str, Any]],
    ) -> None:
        """Say that ``position`` had no entry for these shapes and statics."""
        bus.emit(
            E.CACHE_MISS,
            {"count": 1},
            {
                "source": self.source,
                "position": position,
                "shapes": shapes,
                "key": key_hex,
                "statics": statics,
            },
        )

    def put(
        self,
        position: int,
        key: Hashable,
        entry: T,
        on_evict: Callable[[T], None] | None = None,
    ) -> None:
        """Insert ``entry`` as the most recently used, evicting the least recently used
        ones while the position is full (more than one after ``size`` was made smaller).
        (``on_evict`` is given per call, not kept: the cache holds no reference to its
        owner, so a dropped model is freed at once.)"""
        cache = self._positions.setdefault(position, collections.OrderedDict())
        while cache and len(cache) >= self.size:
            _, removed = cache.popitem(last=False)
            if on_evict is not None:
                on_evict(removed)
            bus.emit(
                E.CACHE_EVICT,
                {"count": 1},
                {
                    "source": self.source,
                    "position": position,
                    "shapes": removed.shapes,
                    "key": removed.key_hex,
                    "statics": removed.statics,
                    "cache_size": self.size,
                },
            )
        cache[key] = entry

    def info(self) -> dict[int, list[list[dict[str, Any]]]]:
        """The cached entries' shapes per position, least recently used first."""
        return {pos: [e.shapes for e in od.values()] for pos, od in self._positions.items()}
