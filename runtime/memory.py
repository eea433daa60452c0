"""Device memory probes: ``device_memory`` records from what each device can tell.

On devices with an allocator of their own (GPU, TPU) ``Device.memory_stats()`` gives the
bytes in use, the peak, the reserved pool and the limit; its keys are mapped onto the
record's fields (``STATS_FIELDS``). On the CPU JAX returns ``None``, so the record says
what can be known honestly, with ``source: "live_arrays"``: the bytes of the live JAX
arrays on that device in ``used_bytes``, and the process's resident set in ``rss_bytes``.

Readings are emitted on the bus as ``ember.device_memory`` events (a recording turns each
into a ``device_memory`` record):

- ``sample_device_memory()`` reads every device once, now;
- ``track_device_memory()`` reads them at the end of every model call
  (``ember.call.stop``), the way Transmuter's telemetry reads EMLX's memory;
- ``MemorySampler(interval_s)`` reads them from a thread at a fixed interval.

As Transmuter warns for EMLX, a call can return before the device has finished, so the
reading at ``call`` stop is not always that call's peak; ``peak_bytes`` (where the
device keeps one) is.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import psutil

from ember.recorder import bus
from ember.recorder import events as E
from ember.recorder.job import backend_started

__all__ = [
    "DEVICE_MEMORY_EVENT",
    "STATS_FIELDS",
    "DeviceMemoryTracker",
    "MemorySampler",
    "device_label",
    "read_device_memory",
    "sample_device_memory",
    "stats_to_fields",
    "track_device_memory",
]

DEVICE_MEMORY_EVENT = E.DEVICE_MEMORY

# record field <- memory_stats() keys, first present wins. XLA's GPU and TPU allocators
# report ``bytes_in_use``/``peak_bytes_in_use``/``bytes_limit``; the BFC allocator's pool
# is ``bytes_reserved`` on newer jaxlibs and ``pool_bytes`` on older ones.
STATS_FIELDS: dict[str, tuple[str, ...]] = {
    "used_bytes": ("bytes_in_use",),
    "peak_bytes": ("peak_bytes_in_use",),
    "reserved_bytes": ("bytes_reserved", "pool_bytes"),
    "limit_bytes": ("bytes_limit", "bytes_reservable_limit"),
}


class _Device(Protocol):
    platform: str
    id: int

    def memory_stats(self) -> Mapping[str, Any] | None: ...


def device_label(device: Any) -> str:
    """``"cpu:0"``, ``"gpu:1"``, ``"tpu:0"``: the platform and the device id."""
    return f"{device.platform}:{device.id}"


def stats_to_fields(stats: Mapping[str, Any]) -> dict[str, int]:
    """Map a ``memory_stats()`` dict onto ``device_memory`` fields (bytes).

    ``free_bytes`` is the limit less the bytes in use, when the device reports both.
    Keys the device does not report stay absent (the record's fields are optional).
    """
    out: dict[str, int] = {}
    for field, keys in STATS_FIELDS.items():
        for key in keys:
            value = stats.get(key)
            if value is not None:
                out[field] = int(value)
                break
    if "limit_bytes" in out and "used_bytes" in out:
        out["free_bytes"] = max(out["limit_bytes"] - out["used_bytes"], 0)
    return out


def _live_array_bytes() -> dict[str, int]:
    # Bytes of live jax arrays per device; a sharded or replicated array counts its
    # shard on each device that holds one (that is the memory it occupies there).
    import jax

    per_device: dict[str, int] = {}
    for arr in jax.live_arrays():
        try:
            devices = arr.sharding.device_set
            shard = arr.sharding.shard_shape(arr.shape)
            nbytes = math.prod(shard) * arr.dtype.itemsize
        except Exception:  # deleted meanwhile, or an exotic sharding: skip it
            continue
        for d in devices:
            label = device_label(d)
            per_device[label] = per_device.get(label, 0) + nbytes
    return per_device


def read_device_memory(devices: Iterable[_Device] | None = None) -> list[dict[str, Any]]:
    """One ``device_memory`` field dict per device (without ``kind``/``ts_ns``).

    ``devices`` defaults to ``jax.local_devices()`` once the program has started JAX's
    backend; before that there is nothing to read (none: reading the devices would start
    the backend, which ``jax.distributed.initialize`` and ``XLA_FLAGS`` must precede). Each
    dict has ``device`` and ``source``; ``rss_bytes`` (this process's resident set) is on
    every reading.
    """
    if devices is None:
        if not backend_started():
            return []
        import jax

        devices = jax.local_devices()
    rss = psutil.Process().memory_info().rss
    live: dict[str, int] | None = None
    out = []
    for d in devices:
        label = device_label(d)
        try:
            stats = d.memory_stats()
        except Exception:  # some backends raise instead of returning None
            stats = None
        if stats:
            rec = {"device": label, "source": "memory_stats", **stats_to_fields(stats)}
        else:
            if live is None:
                live = _live_array_bytes()
            rec = {"device": label, "source": "live_arrays", "used_bytes": live.get(label, 0)}
        rec["rss_bytes"] = rss
        out.append(rec)
    return out


def sample_device_memory(
    devices: Iterable[_Device] | None = None, *, span_id: int | None = None
) -> list[dict[str, Any]]:
    """Read every device now and emit one ``ember.device_memory`` event each.

    ``span_id`` ties the readings to a span (default: the innermost open one).
    Returns the readings.
    """
    readings = read_device_memory(devices)
    sid = bus.current_span_id() if span_id is None else span_id
    for r in readings:
        bus.emit(DEVICE_MEMORY_EVENT, None, {**r, "span_id": sid})
    return readings


_tracker_ids = itertools.count(1)


class DeviceMemoryTracker:
    """Reads device memory at each ``event`` (default: the end of every model call).

    ``with track_device_memory(): ...`` or ``t = track_device_memory(); ...; t.stop()``.
    Each reading carries the ``span_id`` of the span that ended (the call).
    """

    def __init__(
        self,
        events: Sequence[str] = (E.CALL_STOP, E.CALL_EXCEPTION),
        devices: Sequence[_Device] | None = None,
    ) -> None:
        self.events = tuple(events)
        self.devices = devices
        self.readings = 0
        self._handler_id = f"ember.runtime.memory.tracker.{next(_tracker_ids)}"
        bus.attach(self._handler_id, self.events, self._on_event)

    def _on_event(self, name: str, measurements: dict[str, Any], md: Mapping[str, Any]) -> None:
        sample_device_memory(self.devices, span_id=md.get("span_id"))
        self.readings += 1

    def stop(self) -> None:
        bus.detach(self._handler_id)

    def __enter__(self) -> DeviceMemoryTracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def track_device_memory(
    events: Sequence[str] = (E.CALL_STOP, E.CALL_EXCEPTION),
    devices: Sequence[_Device] | None = None,
) -> DeviceMemoryTracker:
    """Read device memory at the end of every model call until ``stop()`` (or ``with``)."""
    return DeviceMemoryTracker(events, devices)


class MemorySampler:
    """Reads device memory every ``interval_s`` seconds from a daemon thread.

    ``with MemorySampler(0.05): train()``; one reading at start and one at stop, so even
    a short block has two points on the timeline. ``samples`` counts the readings.
    """

    def __init__(self, interval_s: float = 0.1, devices: Sequence[_Device] | None = None):
        if not interval_s > 0:
            raise ValueError(f"MemorySampler: interval_s must be > 0 seconds, got {interval_s}")
        self.interval_s = float(interval_s)
        self.devices = devices
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        sample_device_memory(self.devices, span_id=None)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> MemorySampler:
        if self._thread is not None:
            raise RuntimeError("MemorySampler already started; make a new one")
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="ember-memory", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
