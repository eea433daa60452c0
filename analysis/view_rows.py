"""Typed rows of the views Python reads field by field, generated from the views' headers:
``python -m ember.analysis.views > analysis/view_rows.py`` (a test checks it is current)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["RunSummaryRow"]


@dataclass
class RunSummaryRow:
    """A row of the ``run_summary`` view."""

    run_id: str
    name: str
    started_at: datetime | None
    model: str | None
    phase: str | None
    host: str | None
    backend: str | None
    tags: str | None
    entrypoint: str | None
    file: str | None
    sync: bool | None
    calls: int
    failed_calls: int
    steps: int
    compiles: int
    compile_ns: int
    loads: int
    load_ns: int
    eager_compiles: int
    eager_compile_ns: int
    recompiles: int
    recompiled_after_eviction: int
    jax_compiles: int
    jax_loads: int
    jax_primitives: int
    jax_compile_ns: int
    compiled_keys: int
    hits: int
    misses: int
    evictions: int
    hit_rate: float | None
    disk_hits: int
    disk_misses: int
    breaks: int
    graph_break: bool | None
    latency_of: str | None
    latency_kind: str | None
    latency_step: str | None
    latency_spans: int
    p50_ns: float | None
    p90_ns: float | None
    p99_ns: float | None
    mean_ns: float | None
    compiling_calls: int
    loaded_calls: int
    warm_calls: int
    warm_p50_ns: float | None
    warm_p99_ns: float | None
    total_call_ns: int | None
    wall_ns: int | None
    peak_tensor_bytes: int | None
    peak_device_bytes: int | None
    peak_live_arrays_bytes: int | None
    peak_rss_bytes: int | None
    planned_peak_bytes: int | None
    peak_bytes: int | None
    peak_source: str | None
