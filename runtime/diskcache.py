"""Compiled segments on disk through JAX's persistent compilation cache.

JAX keeps one global persistent cache. ``disk_cache(path)`` points it at ``path`` for the
duration of one compile (writing every program, whatever its compile time or size) and
puts the caller's own setting back afterwards, so a ``CompiledModel`` with a ``cache_dir``
does not change the cache of the rest of the program. Compiles with a directory are
serialized by a module lock; other threads that compile plain ``jax.jit`` functions at the
same moment may see the directory too.

Whether a program came from the directory is read from JAX's own monitoring events
(``/jax/compilation_cache/cache_hits`` and ``cache_misses``), counted per thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

__all__ = ["disk_cache", "DiskCacheProbe"]

_lock = threading.RLock()
_local = threading.local()
_listener_installed = False

_HIT = "/jax/compilation_cache/cache_hits"
_MISS = "/jax/compilation_cache/cache_misses"
_REQUEST = "/jax/compilation_cache/compile_requests_use_cache"


class DiskCacheProbe:
    """Counts JAX's cache events in this thread while the probe is open."""

    __slots__ = ("hits", "misses", "requests")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.requests = 0

    @property
    def result(self) -> str | None:
        """``"hit"``, ``"miss"`` or None when the persistent cache was not asked."""
        if self.hits:
            return "hit"
        if self.misses or self.requests:
            return "miss"
        return None


def _on_event(event: str, **_: object) -> None:
    probe = getattr(_local, "probe", None)
    if probe is None:
        return
    if event == _HIT:
        probe.hits += 1
    elif event == _MISS:
        probe.misses += 1
    elif event == _REQUEST:
        probe.requests += 1


def _install_listener() -> None:
    global _listener_installed
    if _listener_installed:
        return
    from jax import monitoring

    monitoring.register_event_listener(_on_event)
    _listener_installed = True


@contextmanager
def disk_cache(path: str | os.PathLike[str] | None) -> Iterator[DiskCacheProbe]:
    """Compile inside with JAX's persistent cache at ``path`` (None: no disk cache)."""
    probe = DiskCacheProbe()
    if path is None:
        yield probe
        return
    from jax._src import compilation_cache
    from jax._src import config as jax_config

    os.makedirs(path, exist_ok=True)
    with _lock:
        _install_listener()
        with ExitStack() as stack:
            stack.enter_context(jax_config.enable_compilation_cache(True))
            stack.enter_context(jax_config.compilation_cache_dir(os.fspath(path)))
            stack.enter_context(jax_config.persistent_cache_min_compile_time_secs(0.0))
            stack.enter_context(jax_config.persistent_cache_min_entry_size_bytes(-1))
            compilation_cache.reset_cache()
            previous = getattr(_local, "probe", None)
            _local.probe = probe
            try:
                yield probe
            finally:
                _local.probe = previous
                compilation_cache.reset_cache()
