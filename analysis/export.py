"""Exports: Chrome/Perfetto trace JSON of one run, and Parquet of everything.

Chrome trace (``export_chrome``): the JSON object format of the Trace Event Format, which
ui.perfetto.dev and chrome://tracing open. Spans become complete events (``"ph": "X"``,
microseconds), cache lookups and evictions instant events (``"i"``), memory counters
(``"C"``: live tensor bytes per category, and each device reading). Times are relative
to the start of the run; ``otherData`` carries the wall-clock anchor.

Parquet (``export_parquet``): every table and view as a Hive-partitioned dataset,
``DIR/<name>/run_date=YYYY-MM-DD/run_key=<key>/*.parquet`` (the run's id when short and
plain; ``run_id`` is a column of the files), which DuckDB, polars, Spark, pandas/pyarrow
read with partition discovery.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .db import RECORD_TABLES, VIEW_NAMES, Connection
from .runs import resolve_run

if TYPE_CHECKING:
    import polars as pl

__all__ = ["csv_text", "export_chrome", "export_parquet"]

# a spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV injection")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(frame: pl.DataFrame) -> str:
    """``frame`` as CSV for a person's spreadsheet: list and struct cells become JSON text
    (CSV has no nesting), and a text cell a spreadsheet would run as a formula (it starts
    with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) gets a leading ``'``.
    Number columns are written as they are: ``-3`` stays the number -3."""
    import polars as pl

    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    frame = frame.with_columns(
        pl.col(name).map_elements(
            lambda v: json.dumps(v.to_list() if isinstance(v, pl.Series) else v, default=str),
            return_dtype=pl.String,
        )
        for name in nested
    )
    text = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    frame = frame.with_columns(
        pl.when(_risky(name)).then(pl.lit("'") + pl.col(name)).otherwise(pl.col(name)).alias(name)
        for name in text
    )
    return frame.write_csv()


def _risky(name: str) -> pl.Expr:
    import polars as pl

    return pl.any_horizontal(pl.col(name).str.starts_with(s) for s in _FORMULA_START)


def _us(ns: int | None) -> float | None:
    return None if ns is None else ns / 1000.0


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None and v != []}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _metadata_events(pid: int, entrypoint: str | None, run_id: str) -> list[dict[str, Any]]:
    """The process and thread names Perfetto shows."""
    return [
        {
            "ph": "M",
            "name": "process_name",
            "pid": pid,
            "args": {"name": f"{entrypoint or 'run'} ({run_id})"},
        },
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "spans"}},
    ]


def _span_events(con: Connection, run_id: str, pid: int) -> list[dict[str, Any]]:
    """Each span as a complete event; an open span lasts to the run's last span."""
    last = con.duck.execute(
        "SELECT max(coalesce(end_ns, start_ns)) FROM spans WHERE run_id = ?", [run_id]
    ).fetchall()[0][0]
    spans = con.duck.execute(
        """
        SELECT span_id, parent_id, name, span_kind, start_ns, duration_ns, status, error_reason,
            to_json(start_attrs), to_json(end_attrs)
        FROM spans WHERE run_id = ? ORDER BY start_ns, span_id
        """,
        [run_id],
    ).fetchall()
    events = []
    for sid, parent, name, kind, start, dur, status, err, sa, ea in spans:
        attrs = _clean({**json.loads(sa or "{}"), **json.loads(ea or "{}")})
        args = {"span_id": sid, "parent_id": parent, "status": status, **attrs}
        if err:
            args["error"] = err
        label = name
        if kind in ("segment_compile", "break") and attrs.get("position") is not None:
            label = f"{name} @{attrs['position']}"
        events.append(
            {
                "ph": "X",
                "name": label,
                "cat": kind,
                "pid": pid,
                "tid": 1,
                "ts": _us(start),
                "dur": _us(dur if dur is not None else max((last or start) - start, 0)),
                "args": _clean(args),
            }
        )
    return events


def _cache_events(con: Connection, run_id: str, pid: int) -> list[dict[str, Any]]:
    """Each cache hit, miss and evict as an instant event."""
    rows = con.duck.execute(
        """
        SELECT ts_ns, action, position, ember_shapes_text(shapes), key
        FROM cache WHERE run_id = ? ORDER BY ts_ns
        """,
        [run_id],
    ).fetchall()
    return [
        {
            "ph": "i",
            "s": "t",
            "name": f"cache {action} @{position}",
            "cat": "cache",
            "pid": pid,
            "tid": 1,
            "ts": _us(ts),
            "args": {"shapes": shapes_text, "key": key},
        }
        for ts, action, position, shapes_text, key in rows
    ]


def _memory_events(con: Connection, run_id: str, pid: int) -> list[dict[str, Any]]:
    """Live tensor bytes per category and each device reading, as counters."""
    rows = con.duck.execute(
        """
        SELECT device, series, category, ts_ns, bytes
        FROM memory_timeline WHERE run_id = ? ORDER BY ts_ns
        """,
        [run_id],
    ).fetchall()
    events = []
    for device, series, category, ts, value in rows:
        name = f"{device} tensor bytes" if series == "tensors" else f"{device} {series} bytes"
        key = category if series == "tensors" else series
        events.append({"ph": "C", "name": name, "pid": pid, "ts": _us(ts), "args": {key: value}})
    return events


def export_chrome(con: Connection, run: str, path: str | os.PathLike[str]) -> int:
    """Write one run as Chrome trace JSON to ``path``; returns the event count.

    ``run`` is the run id or a unique start of it, as ``ember report --run`` takes it
    (``resolve_run``: ``LookupError`` for no such run, ``ValueError`` for an ambiguous start).
    """
    run_id = resolve_run(con, run)
    row = con.duck.execute(
        "SELECT pid, entrypoint, wall_time_ns, host, tags FROM runs WHERE run_id = ?", [run_id]
    ).fetchall()
    pid, entrypoint, wall, host, tags = row[0]
    events = [
        *_metadata_events(pid, entrypoint, run_id),
        *_span_events(con, run_id, pid),
        *_cache_events(con, run_id, pid),
        *_memory_events(con, run_id, pid),
    ]
    doc = {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run_id": run_id,
            "host": host,
            "wall_time_ns": wall,
            "tags": json.loads(tags) if isinstance(tags, str) else tags,
        },
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)  # as --junit and --parquet do
    target.write_bytes(orjson.dumps(doc))
    return len(events)


def export_parquet(
    con: Connection, directory: str | os.PathLike[str], *, views: bool = True
) -> dict[str, int]:
    """Write every table (and view) as Parquet partitioned by run date and run key.

    The run key is the lake's (``run_key``): the run id when it is short and plain, else a
    cleaned prefix and a hash of it. A run id is text a trace controls, not a folder's
    name: one of 300 characters (or ~90 ``/``, which DuckDB writes as ``%2F``) made the
    whole export fail with "File name too long". The ``run_id`` column stays in the files.
    Returns rows written per dataset. Existing partitions of the same runs are replaced.
    """
    import pyarrow as pa

    from .lake.table import run_key

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ids = [r[0] for r in con.duck.execute("SELECT run_id FROM runs").fetchall()]
    keys = pa.table({"run_id": ids, "run_key": [run_key(i) for i in ids]})
    con.duck.register("_export_keys", keys)
    names = ["runs", *RECORD_TABLES, "rejected_lines"] + (list(VIEW_NAMES) if views else [])
    written: dict[str, int] = {}
    try:
        for name in names:
            n = con.duck.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]
            if n == 0:
                continue
            target = str(out / name).replace("'", "''")
            if name == "runs":
                select = (
                    "SELECT t.*, CAST(t.started_at AS DATE) AS run_date, k.run_key "
                    "FROM runs t JOIN _export_keys k ON k.run_id = t.run_id"
                )
            else:
                select = (
                    f"SELECT t.*, CAST(r.started_at AS DATE) AS run_date, k.run_key "
                    f"FROM {name} t JOIN runs r ON r.run_id = t.run_id "
                    "JOIN _export_keys k ON k.run_id = t.run_id"
                )
            con.duck.execute(
                f"COPY ({select}) TO '{target}' "
                f"(FORMAT parquet, PARTITION_BY (run_date, run_key), OVERWRITE_OR_IGNORE)"
            )
            written[name] = n
    finally:
        con.duck.unregister("_export_keys")
    return written
