"""Fuzzing ingest and validate with hypothesis: mutations of a trace the real recorder wrote.

Each example cuts, duplicates, reorders, nests, retypes lines of the trace or injects bytes
into it, then checks that

- neither ``ember validate`` nor ``ember ingest`` raises;
- nothing is lost: every non-blank line is either stored or in ``rejected_lines``, and
  a line validate accepts is stored unless a rule across lines rejects it (a second
  span id, a span_end without its start, a second meta);
- ``ingest --strict`` (pydantic on every line) rejects exactly the lines validate rejects,
  plus those cross-line ones;
- ingesting the file again changes nothing, and a fresh database gets the same tables.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.analysis import connect, ingest
from ember.analysis.db import RECORD_TABLES
from ember.schemas import validate_file

CROSS_LINE = ("a second ", "span_end without a span_start")


@pytest.fixture(scope="module")
def base_lines(bus_trace: Path) -> list[bytes]:
    lines = bus_trace.read_bytes().splitlines()
    assert len(lines) > 20
    return lines


def _record_and_key(line: bytes, data: st.DataObject) -> tuple[dict, str] | None:
    """The line's record and one of its keys, drawn; None when the line is no object."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict) or not rec:
        return None
    return rec, data.draw(st.sampled_from(sorted(rec)))


def _retype(line: bytes, data: st.DataObject) -> bytes:
    if (picked := _record_and_key(line, data)) is None:
        return line
    rec, key = picked
    rec[key] = data.draw(
        st.one_of(
            st.booleans(),
            st.none(),
            st.integers(min_value=-(2**70), max_value=2**70),
            st.floats(allow_nan=False),
            st.text(max_size=5),
            st.lists(st.integers(), max_size=3),
            st.just({}),
        )
    )
    return json.dumps(rec).encode()


def _nest(line: bytes, data: st.DataObject) -> bytes:
    depth = data.draw(st.sampled_from([2, 63, 64, 65, 200, 1100]))
    if (picked := _record_and_key(line, data)) is None:
        return line
    rec, key = picked
    return (
        json.dumps({k: v for k, v in rec.items() if k != key})[:-1]
        + f', "{key}": '
        + "[" * depth
        + json.dumps(rec[key])
        + "]" * depth
        + "}"
    ).encode()


@st.composite
def mutated(draw: st.DrawFn, lines: list[bytes]) -> bytes:
    data = draw(st.data())
    body = list(lines[1:])
    for _ in range(draw(st.integers(1, 4))):
        what = draw(
            st.sampled_from(["cut", "duplicate", "reorder", "nest", "retype", "inject", "drop"])
        )
        i = draw(st.integers(0, len(body) - 1))
        if what == "cut":
            body[i] = body[i][: draw(st.integers(0, len(body[i])))]
        elif what == "duplicate":
            body.insert(draw(st.integers(0, len(body))), body[i])
        elif what == "reorder":
            j = draw(st.integers(0, len(body) - 1))
            body[i], body[j] = body[j], body[i]
        elif what == "nest":
            body[i] = _nest(body[i], data)
        elif what == "retype":
            body[i] = _retype(body[i], data)
        elif what == "inject":
            at = draw(st.integers(0, len(body[i])))
            junk = draw(
                st.binary(min_size=1, max_size=6) | st.sampled_from([b"\n", b"\x00", b"\xff"])
            )
            body[i] = body[i][:at] + junk + body[i][at:]
        else:
            del body[i]
            if not body:
                body = [lines[1]]
    text = b"\n".join([lines[0], *body])
    return text + (b"\n" if draw(st.booleans()) else b"")


def _tables(db: Path) -> dict[str, list[tuple]]:
    with connect(db, read_only=True) as con:
        out = {
            t: sorted(map(repr, con.duck.execute(f"SELECT * FROM {t}").fetchall()))
            for t in (*RECORD_TABLES, "runs")
        }
        out["rejected_lines"] = sorted(
            map(repr, con.duck.execute("SELECT line, reason, raw FROM rejected_lines").fetchall())
        )
        out["ingested_files"] = con.duck.execute(
            "SELECT status, offset_bytes, lines, records, rejected FROM ingested_files"
        ).fetchall()
    return out


def _rejected(db: Path) -> dict[int, str]:
    with connect(db, read_only=True) as con:
        return dict(con.duck.execute("SELECT line, reason FROM rejected_lines").fetchall())


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_mutated_traces_never_crash_and_lose_no_valid_line(base_lines, data):
    text = data.draw(mutated(base_lines))
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        path = folder / "trace.jsonl"
        path.write_bytes(text)
        report = validate_file(path)  # must not raise
        invalid = {e.line for e in report.errors}

        db = folder / "a.duckdb"
        first = ingest([path], db).files[0]
        assert first.status in ("ok", "partial"), first.message
        lines = text.split(b"\n")
        if not text.endswith(b"\n"):
            pass  # the last line has no newline: ingest rejects it as cut short, or reads it
        else:
            lines = lines[:-1]
        non_blank = {n for n, raw in enumerate(lines, start=1) if raw.strip()}
        rejected = _rejected(db)
        # nothing lost: every non-blank line is stored or rejected
        assert first.records + first.rejected == len(non_blank)
        assert set(rejected) <= non_blank
        # a line validate accepts is stored, unless a rule across lines rejects it
        for n in non_blank - invalid:
            if n in rejected:
                assert rejected[n].startswith(CROSS_LINE) or rejected[n].startswith(
                    "truncated last line"
                ), (n, rejected[n])

        # strict: the lines validate rejects, plus the cross-line ones
        strict_db = folder / "s.duckdb"
        ingest([path], strict_db, strict=True)
        strict = _rejected(strict_db)
        assert invalid <= set(strict), (invalid - set(strict), report.errors)
        for n in set(strict) - invalid:
            assert strict[n].startswith(CROSS_LINE) or strict[n].startswith(
                "truncated last line"
            ), (n, strict[n])

        # again: nothing changes, a file whose last line is cut short included (its size is
        # the size read; it is read again from that line once it grows); a fresh database
        # gets the same tables.
        before = _tables(db)
        again = ingest([path], db).files[0].status
        assert again == "unchanged"
        assert _tables(db) == before
        fresh = folder / "b.duckdb"
        ingest([path], fresh)
        assert _tables(fresh) == before


def test_a_span_start_rejected_for_a_field_leaves_its_id_to_the_valid_one_after_it(
    base_lines, tmp_path
):
    """Found by the fuzz above: a span_start whose attrs are no object is rejected, and the
    valid span_start of the same id after it is the span's start. ``validate`` counted the
    rejected one, calling the valid one a second start, while every ingest path (which
    applies the span-id rules to the lines it stores) stored it."""
    start = next(json.loads(x) for x in base_lines if json.loads(x)["kind"] == "span_start")
    end = next(
        json.loads(x)
        for x in base_lines
        if json.loads(x)["kind"] == "span_end" and json.loads(x)["span_id"] == start["span_id"]
    )
    bad = {**start, "attrs": [[start["attrs"]]]}
    lines = [base_lines[0], *(json.dumps(r).encode() for r in (bad, start, end))]
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    report = validate_file(path)
    assert [e.line for e in report.errors] == [2]
    assert "attrs" in report.errors[0].message
    for strict in (False, True):
        db = tmp_path / f"strict-{strict}.duckdb"
        result = ingest([path], db, strict=strict).files[0]
        assert (result.records, result.rejected) == (3, 1)
        assert list(_rejected(db)) == [2]
