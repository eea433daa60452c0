"""Helpers of the lake tests: a trace with every kind of bad line, and table comparisons."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ember.analysis import VIEW_NAMES, connect, ingest
from ember.analysis.lake.ingest import LAKE_TABLES, connect_lake
from tests.analysis.traces import cache_line, meta_line, run_span, span_line, write_lines

# what every engine must agree on: the tables, the manifest's view of the files, the views
COMPARED = (*LAKE_TABLES, "ingested_files", *VIEW_NAMES)
# columns that say when, not what
VOLATILE = {"ingested_files": ["ingested_at"], "rejected_lines": ["ingested_at"]}


def require_spark() -> ModuleType:
    """At the top of a Spark test module: skip it without PySpark, fail it (saying how to
    install it) without Java. Returns ``pyspark``."""
    pyspark = pytest.importorskip("pyspark", reason="pip install -e '.[test]' installs PySpark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail(
            "the Spark tests need Java 17+: apt-get install -y openjdk-17-jre-headless",
            pytrace=False,
        )
    return pyspark


def bad_corpus(path: Path, run_id: str = "bad-run") -> Path:
    """A trace with a blank line, garbage, a wrong type, a missing field, an unknown kind,
    a second meta, an orphan span_end and a truncated last line among valid records."""
    start, end = run_span()
    lines: list[str | bytes] = [
        meta_line(run_id),
        cache_line(10, "miss"),
        "",
        json.dumps(start),
        cache_line(11, "hit").replace('"position": 0', '"position": "first"'),
        json.dumps({"kind": "cache", "ts_ns": 5, "action": "hit", "shapes": []}),
        cache_line(12, "bogus"),
        json.dumps({"kind": "telemetry", "ts_ns": 1}),
        json.dumps(end),
        json.dumps({**end, "span_id": 99}),
        meta_line("r2"),
        b"\x00\x01\x02\xff garbage",
        cache_line(13, "hit"),
        cache_line(13, "hit", n=23),
        '{"kind": "cache", "ts_ns": 14, "act',
    ]
    return write_lines(path, lines, newline_at_end=False)


def spans_and_depth_corpus(path: Path, run_id: str = "spans-run") -> Path:
    """A trace with span ids given twice (two traces concatenated), a span_end without its
    start, a line nested too deeply, and a line with many brackets that is not too deep."""

    def span(kind: str, span_id: int, ts: int) -> str:
        rec = {"kind": kind, "ts_ns": ts, "span_id": span_id, "span_kind": "run", "attrs": {}}
        rec |= {"name": "ember.run"} if kind == "span_start" else {"duration_ns": 1}
        return json.dumps(rec)

    def static(value: str, ts: int) -> str:
        head = json.dumps(json.loads(cache_line(ts, "hit")) | {"statics": []})[: -len("[]}")]
        return head + '[{"name": "x", "value": ' + value + "}]}"

    lines: list[str | bytes] = [
        meta_line(run_id),
        span("span_start", 1, 1),
        cache_line(2, "miss"),
        span("span_end", 1, 3),
        span("span_start", 1, 4),  # a second start
        span("span_end", 1, 5),  # a second end
        span("span_end", 7, 6),  # no start
        span("span_end", 8, 7),  # no start, twice
        span("span_end", 8, 8),
        static("[" * 80 + "1" + "]" * 80, 9),  # too deep
        static("[" + ", ".join(["[1]"] * 80) + "]", 10),  # many brackets, 5 deep: kept
        cache_line(11, "hit"),
    ]
    return write_lines(path, lines)


def jax_steps_corpus(path: Path, run_id: str = "jax-steps") -> Path:
    """``ember record``'s automatic steps of a jitted ``update`` (ember.trace/5: each step
    names its function): a compile, a retrace for a ragged batch (128 -> 104), then a hit.
    The rows of ``jit_calls`` and ``jit_shape_buckets``."""
    lines: list[str | bytes] = [meta_line(run_id)]
    ts, span_ids = 10, iter(range(1, 100))
    change = {"arg": "x", "what": "shape", "old": "f32[128,784]", "new": "f32[104,784]"}
    for index, compile_changes in enumerate([[], [change], None]):
        step_id = next(span_ids)
        attrs = {"step": "update", "index": index, "fun_name": "update"}
        step = {"span_id": step_id, "span_kind": "step", "attrs": attrs}
        lines.append(json.dumps({"kind": "span_start", "ts_ns": ts, "name": "ember.step"} | step))
        if compile_changes is not None:  # the call traced and compiled: a jit span inside
            jit = {"span_id": next(span_ids), "span_kind": "jit"}
            start = {"kind": "span_start", "ts_ns": ts + 1, "parent_id": step_id}
            lines.append(
                json.dumps(start | jit | {"name": "ember.jit", "attrs": {"fun_name": "update"}})
            )
            end_attrs = {"fun_name": "update", "changes": compile_changes}
            end = {"kind": "span_end", "ts_ns": ts + 5, "duration_ns": 4, "attrs": end_attrs}
            lines.append(json.dumps(end | {k: v for k, v in jit.items() if k != "attrs"}))
        lines.append(json.dumps({"kind": "span_end", "ts_ns": ts + 8, "duration_ns": 8} | step))
        ts += 10
    return write_lines(path, lines)


def table(con, name: str) -> tuple[dict[str, str], list[str]]:
    """(column -> type, sorted rows as text) of a table or view, without volatile columns."""
    df = con.sql(f"SELECT * FROM {name}")
    df = df.drop(VOLATILE.get(name, []))
    return {k: str(v) for k, v in df.schema.items()}, sorted(map(repr, df.rows()))


def _difference(name: str, a: tuple, b: tuple) -> list[str]:
    """What differs between two (columns, sorted rows) of ``name``: nothing, the columns,
    or the row counts and the first row that differs."""
    (ca, ra), (cb, rb) = a, b
    if ca != cb:
        return [f"{name}: columns {ca} != {cb}"]
    if ra != rb:
        first = next((x, y) for x, y in zip([*ra, ""], [*rb, ""], strict=False) if x != y)
        return [f"{name}: {len(ra)} vs {len(rb)} rows; first difference {first}"]
    return []


def differences(a, b, names=COMPARED) -> list[str]:
    """What differs between two connections, table by table (empty when nothing)."""
    return [d for name in names for d in _difference(name, table(a, name), table(b, name))]


def _norm(v):
    """A value as plain Python, the same from polars (DuckDB) and from Spark rows."""
    if hasattr(v, "asDict"):
        v = v.asDict(recursive=True)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    if isinstance(v, float):
        return float(f"{v:.9g}")
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    return _norm(float(v)) if hasattr(v, "__float__") else str(v)


def duck_rows(con, name: str) -> tuple[list[str], list[str]]:
    """(columns, sorted normalized rows) of a view on a DuckDB connection."""
    df = con.sql(f"SELECT * FROM {name}")
    return df.columns, sorted(repr(tuple(_norm(x) for x in r.values())) for r in df.to_dicts())


def spark_rows(spark, name: str) -> tuple[list[str], list[str]]:
    """(columns, sorted normalized rows) of a view on a Spark session."""
    df = spark.sql(f"SELECT * FROM {name}")
    rows = df.collect()
    return df.columns, sorted(repr(tuple(_norm(x) for x in r)) for r in rows)


def view_differences(con, spark, names) -> list[str]:
    """What differs between each view on DuckDB and on Spark (empty when nothing)."""
    return [
        d
        for name in names
        for d in _difference(name, duck_rows(con, name), spark_rows(spark, name))
    ]


def check_a_grown_file_rejects_a_second_stored_end(
    tmp_path: Path, ingest_into: Callable[[list[Path], Path], Any]
) -> None:
    """A file ingested into a lake by ``ingest_into(paths, lake)``, with an end of a span
    that has no start (rejected), grows by a second end of a span whose end the lake holds
    (rejected), a second start of another (rejected) and that one's first end (stored), and
    by the start and end of the span that had no start (stored): the lake then holds what
    one ingest of the whole file into a DuckDB file stores."""
    lines = [
        meta_line("r1"),
        span_line("span_start", 1, 10),
        span_line("span_end", 1, 20),
        span_line("span_start", 5, 30),
        span_line("span_end", 9, 35),
    ]
    path = write_lines(tmp_path / "t.jsonl", lines)
    lake = tmp_path / "lake"
    ingest_into([path], lake)
    # line 6 ends span 1 again (its end is in the lake), line 7 starts span 5 again, line 8
    # ends span 5 (the first end), lines 9-10 start and end span 9
    more = [span_line("span_end", 1, 40), span_line("span_start", 5, 45)]
    more += [span_line("span_end", 5, 50), span_line("span_start", 9, 52)]
    write_lines(path, [*lines, *more, span_line("span_end", 9, 54)])
    grown = ingest_into([path], lake).files[0]
    assert (grown.status, grown.continued, grown.records, grown.rejected) == ("ok", True, 3, 2)
    whole = tmp_path / "whole.duckdb"
    ingest([path], whole)
    with connect(whole, read_only=True) as a, connect_lake(lake) as b:
        assert differences(a, b) == []  # what one ingest of the whole file stores
        ends = b.sql("SELECT span_id FROM span_end ORDER BY ts_ns").rows()
        assert ends == [(1,), (5,), (9,)]
        again = " (span ids are unique in a run; were two traces concatenated?)"
        assert b.sql("SELECT line, reason FROM rejected_lines ORDER BY line").rows() == [
            (5, "span_end without a span_start (span_id 9)"),
            (6, f"a second span_end of span_id 1{again}"),
            (7, f"a second span_start of span_id 5{again}"),
        ]
