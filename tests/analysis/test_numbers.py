"""Extreme numbers in every numeric field: ``ember validate``, ``ember ingest`` and ``ember
ingest --strict`` accept and reject the same lines, and no view raises afterwards.

Before: ``duration_ns: 1.5`` went into the database as 2 and ``-0.4`` as 0 (validate refused
both); a ``ts_ns`` near 2**63 passed validate and ingest, after which ``wall_time_ns + ts_ns``
overflowed and every view over every run (``run_summary``, ``report``, ``compare``) failed;
``wall_time_ns = 2**63 - 1`` in a meta line stopped ``ingest`` with a ConversionException.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.analysis import connect, ingest
from ember.analysis.db import VIEW_NAMES
from ember.schemas import validate_file
from ember.schemas.records import INT64_MAX, INT64_MIN, MAX_RUN_NS, MAX_WALL_TIME_NS
from tests.analysis.traces import cache_line, meta_line, write_lines
from tests.schemas.test_records import ALL_EXAMPLES

# JSON number texts: integers at and past every bound, fractions, exponents, huge ones
EXTREMES = [
    "0",
    "-1",
    "1.5",
    "-0.4",
    "2.0",
    "1e3",
    "true",
    str(MAX_RUN_NS),
    str(MAX_RUN_NS + 1),
    str(MAX_WALL_TIME_NS),
    str(INT64_MAX),
    str(INT64_MAX + 1),
    str(INT64_MIN),
    str(INT64_MIN - 1),
    str(2**64),
    "1" + "0" * 40,
    "1e308",
    "-1e308",
    "1.7976931348623157e309",
]


def _numeric_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every number (not a boolean) in a record."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _numeric_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _numeric_paths(v, (*path, i))]
    return []


_MARK = 918_273_645_546_372_819  # a number no example holds, replaced by the extreme's text


def _with(record: dict, path: tuple[Any, ...], text: str) -> str:
    """The record as a JSON line with the number at ``path`` written as ``text``."""
    data = json.loads(json.dumps(record))
    inner = data
    for p in path[:-1]:
        inner = inner[p]
    inner[path[-1]] = _MARK
    return json.dumps(data).replace(str(_MARK), text)


def _examples() -> dict[str, dict]:
    """``ALL_EXAMPLES`` with the optional numeric fields they leave out filled in."""
    out = {name: json.loads(json.dumps(r)) for name, r in ALL_EXAMPLES.items()}
    out["device_memory"]["rss_bytes"] = 7
    out["span_start/load"]["parent_id"] = 3
    memory = out["span_end/segment_compile"]["attrs"].setdefault("memory", {})
    memory |= {"alias_bytes": 1, "generated_code_bytes": 2}
    return out


EXAMPLES = _examples()


def _cases() -> list[tuple[str, dict, tuple[Any, ...]]]:
    out = []
    for name, record in EXAMPLES.items():
        for path in _numeric_paths(record):
            # a span's own id is given a unique one in each line (``_numbered_lines``)
            if path and not (path[0] == "span_id" and record["kind"].startswith("span_")):
                out.append((name, record, path))
    return out


CASES = _cases()


def _lines_for(cases: list[tuple[str, dict, tuple[Any, ...]]], texts: list[str]) -> list[str]:
    """A trace: meta, then each case with each text; a span record with a span id of its own
    (a span_end after a valid span_start of its id), so that only the number decides."""
    return _numbered_lines([(c, t) for c in cases for t in texts])[0]


def _numbered_lines(
    picks: list[tuple[tuple[str, dict, tuple[Any, ...]], str]],
) -> tuple[list[str], dict[int, tuple[tuple[Any, ...], str]]]:
    """The trace of ``(case, text)`` pairs, and for each changed line its number: (the
    path, the text)."""
    lines = [meta_line("numbers")]
    changed = {}
    span_id = 1000
    for (_, record, path), text in picks:
        span_id += 1
        rec = dict(record)
        if rec["kind"] in ("span_start", "span_end"):
            rec["span_id"] = span_id
        if rec["kind"] == "span_end":
            start = EXAMPLES[f"span_start/{rec['span_kind']}"] | {"span_id": span_id}
            lines.append(json.dumps(start))
        lines.append(_with(rec, path, text))
        changed[len(lines)] = (path, text)
    return lines, changed


def _agree(tmp_path: Path, lines: list[str]) -> tuple[set[int], Path]:
    """Check that validate, ingest and ingest --strict reject the same lines; those lines
    and the database."""
    path = write_lines(tmp_path / "numbers.jsonl", lines)
    report = validate_file(path)
    by_validate = {e.line for e in report.errors}
    rejected = {}
    for strict in (False, True):
        db = tmp_path / f"numbers-{strict}.duckdb"
        (result,) = ingest([path], db, strict=strict).files
        assert result.status == "ok", result
        with connect(db, read_only=True) as con:
            rejected[strict] = dict(
                con.duck.execute("SELECT line, reason FROM rejected_lines").fetchall()
            )
    wrong = {
        n: (
            lines[n - 1][:160],
            [e.message for e in report.errors if e.line == n],
            rejected[False].get(n),
        )
        for n in by_validate ^ set(rejected[False])
    }
    assert not wrong, wrong
    assert set(rejected[True]) == by_validate
    return by_validate, tmp_path / "numbers-False.duckdb"


def _every_view_reads(db: Path) -> None:
    with connect(db, read_only=True) as con:
        for view in VIEW_NAMES:
            con.duck.execute(f"SELECT * FROM {view}").fetchall()


def test_the_cases_cover_every_kind_and_many_fields():
    kinds = {name.split("/")[0] for name, _, _ in CASES}
    assert {"meta", "span_start", "span_end", "cache", "op", "memory", "device_memory"} <= kinds
    assert len(CASES) >= 40


def test_every_numeric_field_with_every_extreme_is_judged_alike_and_no_view_raises(tmp_path):
    lines, changed = _numbered_lines([(c, t) for c in CASES for t in EXTREMES])
    rejected, db = _agree(tmp_path, lines)
    # in an integer field: a fraction, a boolean, an integer past 64 bits, a time past its
    # bound; never stored
    floats = ("norm", "flops", "bytes_accessed")
    times = ("ts_ns", "duration_ns", "wall_time_ns")
    for n, (path, text) in changed.items():
        if path[-1] in floats or "value" in path or path[:2] == ("attrs", "attrs"):
            continue  # a float field, or any JSON value (a static value, a user attribute)
        if text in ("1.5", "-0.4", "true", str(2**64)) or (
            path[-1] in times and text == str(MAX_RUN_NS + 1)
        ):
            assert n in rejected, lines[n - 1]
    # another run in the same database: every view reads both
    other = write_lines(tmp_path / "other.jsonl", [meta_line("other"), cache_line(5, "miss")])
    ingest([other], db)
    _every_view_reads(db)
    with connect(db, read_only=True) as con:
        runs = dict(con.duck.execute("SELECT run_id, misses FROM run_summary").fetchall())
    assert runs["other"] == 1


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    picks=st.lists(
        st.tuples(
            st.sampled_from(CASES),
            st.one_of(
                st.sampled_from(EXTREMES),
                st.integers(min_value=-(2**70), max_value=2**70).map(str),
                st.floats(allow_nan=False, allow_infinity=False).map(repr),
            ),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_drawn_numbers_are_judged_alike_and_no_view_raises(tmp_path_factory, picks):
    tmp_path = tmp_path_factory.mktemp("drawn")
    lines, _ = _numbered_lines(picks)
    _, db = _agree(tmp_path, lines)
    _every_view_reads(db)


@pytest.mark.parametrize("ts", [INT64_MAX, INT64_MAX - 10**9, MAX_RUN_NS + 1])
def test_a_time_near_int64_max_is_refused_and_other_runs_still_summarised(tmp_path, ts):
    # a device_memory reading at ts_ns near 2**63 passed validate and ingest; after it,
    # wall_time_ns + ts_ns overflowed and run_summary failed for every run in the database
    reading = {
        "kind": "device_memory",
        "ts_ns": ts,
        "device": "cpu:0",
        "source": "live_arrays",
        "used_bytes": 10,
    }
    bad = write_lines(tmp_path / "bad.jsonl", [meta_line("bad"), json.dumps(reading)])
    good = write_lines(tmp_path / "good.jsonl", [meta_line("good"), cache_line(5, "miss")])
    report = validate_file(bad)
    assert [e.line for e in report.errors] == [2]
    assert "ts_ns" in report.errors[0].message
    db = tmp_path / "t.duckdb"
    ingest([bad, good], db)
    with connect(db, read_only=True) as con:
        (reason,) = con.duck.execute("SELECT reason FROM rejected_lines").fetchone()
        rows = con.duck.execute("SELECT run_id, misses FROM run_summary ORDER BY 1").fetchall()
    assert reason.startswith("ts_ns: ")
    assert rows == [("bad", 0), ("good", 1)]
    _every_view_reads(db)


def test_a_meta_with_wall_time_at_int64_max_is_refused_and_the_next_file_goes_in(tmp_path):
    # ingest --db died with a ConversionException (make_timestamp_ns) and never read the
    # files sorted after it
    meta = json.loads(meta_line("absurd")) | {"wall_time_ns": INT64_MAX}
    absurd = write_lines(tmp_path / "a.jsonl", [json.dumps(meta), cache_line(1, "miss")])
    after = write_lines(tmp_path / "b.jsonl", [meta_line("after"), cache_line(1, "miss")])
    assert "wall_time_ns" in validate_file(absurd).errors[0].message
    first, second = ingest([absurd, after], tmp_path / "t.duckdb").files
    assert first.status == "refused"
    assert "wall_time_ns" in first.message
    assert "less than" in first.message
    assert (second.status, second.records) == ("ok", 2)


@pytest.mark.parametrize(
    ("field", "text"),
    [("duration_ns", "1.5"), ("duration_ns", "-0.4"), ("bytes", "1.5"), ("shape", "[1.5, 2]")],
)
def test_a_fraction_in_an_integer_field_is_refused_by_validate_and_both_ingests(
    tmp_path, field, text
):
    # default ingest stored 1.5 as 2 and -0.4 as 0 (past the check of >= 0)
    if field == "duration_ns":
        start = ALL_EXAMPLES["span_start/call"] | {"span_id": 7}
        end = ALL_EXAMPLES["span_end/call"] | {"span_id": 7, "duration_ns": 12345}
        lines = [meta_line(), json.dumps(start), json.dumps(end).replace("12345", text)]
    else:
        memory = ALL_EXAMPLES["memory"] | {"bytes": 12345, "shape": [12345]}
        line = json.dumps(memory)
        line = line.replace("[12345]", text) if field == "shape" else line.replace("12345", text)
        lines = [meta_line(), line]
    rejected, _ = _agree(tmp_path, lines)
    assert rejected == {len(lines)}


def test_validate_refuses_a_span_end_before_its_span_start_as_ingest_does(tmp_path):
    # validate said ok to a span_end before its span_start, which ingest rejects
    start = ALL_EXAMPLES["span_start/call"] | {"span_id": 7}
    end = ALL_EXAMPLES["span_end/call"] | {"span_id": 7}
    again = ALL_EXAMPLES["span_start/call"] | {"span_id": 8}
    lines = [meta_line(), json.dumps(end), json.dumps(start), json.dumps(again), json.dumps(again)]
    rejected, _ = _agree(tmp_path, lines)
    assert rejected == {2, 5}
    errors = {e.line: e.message for e in validate_file(tmp_path / "numbers.jsonl").errors}
    assert errors[2] == "span_end without a span_start (span_id 7)"
    assert errors[5].startswith("a second span_start of span_id 8")


def test_a_byte_order_mark_is_named_by_validate_and_ingest(tmp_path):
    # both said "expected value at line 1 column 1"
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (meta_line() + "\n" + cache_line(1) + "\n").encode())
    (first, *_) = validate_file(path).errors
    assert first.line == 1
    assert "byte order mark (BOM" in first.message
    (result,) = ingest([path], tmp_path / "t.duckdb").files
    assert result.status == "refused"
    assert "byte order mark (BOM" in result.message


def test_an_absurd_run_written_before_the_bounds_does_not_break_the_views_of_others(tmp_path):
    # a database ingested before the schema bounded times can hold a run at wall_time_ns
    # near 2**63: wall_time_ns + ts_ns overflowed and every view over every run failed
    files = [
        write_lines(tmp_path / f"{r}.jsonl", [meta_line(r), cache_line(5, "miss"), cache_line(9)])
        for r in ("absurd", "good")
    ]
    db = tmp_path / "t.duckdb"
    ingest(files, db)
    with connect(db) as con:  # as an older ingest stored it
        con.duck.execute(f"UPDATE runs SET wall_time_ns = {INT64_MAX - 3} WHERE run_id = 'absurd'")
        con.duck.execute(f"UPDATE cache SET ts_ns = {INT64_MAX - 1} WHERE run_id = 'absurd'")
    _every_view_reads(db)
    with connect(db, read_only=True) as con:
        rows = con.duck.execute(
            "SELECT run_id, hits, misses FROM run_summary ORDER BY run_id"
        ).fetchall()
        times = con.duck.execute(
            "SELECT run_id, count(ts) FROM cache_lookups GROUP BY run_id ORDER BY run_id"
        ).fetchall()
    assert rows == [("absurd", 1, 1), ("good", 1, 1)]
    assert times == [("absurd", 0), ("good", 2)]  # no time for the absurd run, not an error
    # ember report and ember compare of the other runs read them too
    from ember.analysis.compare import compare_refs
    from ember.analysis.gate import GateConfig, parse_rules
    from ember.analysis.report import report

    with connect(db, read_only=True) as con:
        assert {r.run.run_id for r in report(con)} == {"absurd", "good"}
    config = GateConfig(parse_rules("misses>+0"), "--fail-on")
    assert compare_refs("good", "good", config, db=db).rules[-1].status == "pass"
