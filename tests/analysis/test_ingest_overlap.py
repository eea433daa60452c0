"""The split read in segments (``ingest.kinds``): DuckDB reads segment k in a worker thread
while the next one is checked. With segments of a few kilobytes (many per file), it stores
what the ``_stage`` read stores; a bad line checked while an earlier segment is being read
rejects that line only, with the same file, line and reason; DuckDB refusing a later
segment after earlier ones were inserted rolls the batch back and takes the ``_stage`` read,
with no row twice."""

from __future__ import annotations

import importlib
import json
import threading
from pathlib import Path

import duckdb
import pytest

from ember.analysis import connect, ingest
from ember.analysis.ingest.plan import raw_text
from ember.analysis.synthetic import write_compile_trace, write_trace
from ember.schemas.validate import validate_file
from tests.analysis.test_ingest_split import _results, assert_same_tables, write_shapes
from tests.analysis.traces import cache_line, meta_line, span_line, write_lines

database = importlib.import_module("ember.analysis.ingest.database")
kinds = importlib.import_module("ember.analysis.ingest.kinds")


@pytest.fixture
def small_segments(monkeypatch):
    """Chunks of 4 KiB, each its own segment; the segments each read handed over, counted."""
    monkeypatch.setattr(kinds, "SPLIT_CHUNK_BYTES", 4096)
    monkeypatch.setattr(kinds, "SEGMENT_BYTES", 1)
    read: list[int] = []
    real = kinds.Segments._read

    def counted(self, segment):
        read.append(segment.segment)
        return real(self, segment)

    monkeypatch.setattr(kinds.Segments, "_read", counted)
    return read


def _stage_read(monkeypatch, paths, db):
    monkeypatch.setattr(database, "splittable", lambda *a: False)
    summary = ingest(paths, db)
    monkeypatch.undo()
    return summary


def test_many_segments_store_what_the_stage_read_stores(tmp_path, monkeypatch, small_segments):
    traces = tmp_path / "traces"
    write_shapes(traces, 2000)
    split = ingest([traces], tmp_path / "split.duckdb")
    assert len(small_segments) > 50  # not vacuous: many segments, read one after another
    assert small_segments == sorted(small_segments)
    staged = _stage_read(monkeypatch, [traces], tmp_path / "stage.duckdb")
    assert _results(split) == _results(staged)
    assert split.rejected > 5
    assert_same_tables(tmp_path / "split.duckdb", tmp_path / "stage.duckdb")


def _with_bad_line(path: Path, after: int) -> tuple[int, str]:
    """Replace the first line that starts past byte ``after`` of a trace with its record with
    ``ts_ns`` as text; returns its line number and text."""
    lines = path.read_bytes().split(b"\n")
    i = 0
    offset = 0
    while offset <= after:
        offset += len(lines[i]) + 1
        i += 1
    bad = json.dumps({**json.loads(lines[i]), "ts_ns": "soon"})
    lines[i] = bad.encode()
    path.write_bytes(b"\n".join(lines))
    return i + 1, bad


def test_a_bad_line_checked_while_an_earlier_segment_is_read_rejects_only_itself(
    tmp_path, monkeypatch, small_segments
):
    traces = tmp_path / "traces"
    traces.mkdir()
    first = traces / "a.jsonl"
    write_trace(first, 1500, run_id="a", seed=1)
    write_trace(traces / "b.jsonl", 1500, run_id="b", seed=2)
    total = sum(1 for line in first.read_bytes().split(b"\n") if line.strip())
    # a line of the second chunk (4 KiB each), so of segment 1: the check reaches it while
    # DuckDB reads segment 0, which here waits until the chunk with the bad line was judged
    line, bad = _with_bad_line(first, 4096 + 200)
    judged = threading.Event()
    judge = kinds._judge_chunk

    def judging(*a):
        out = judge(*a)
        judged.set()
        return out

    read_kind = kinds._read_kind
    waited: list[bool] = []

    def slow_first_read(con, out, kind, append=False):
        if out.segment == 0 and not waited:
            waited.append(judged.wait(60))
        return read_kind(con, out, kind, append)

    monkeypatch.setattr(kinds, "_judge_chunk", judging)
    monkeypatch.setattr(kinds, "_read_kind", slow_first_read)
    split = ingest([traces], tmp_path / "split.duckdb")
    assert waited == [True]  # the bad line was judged while segment 0 was being read
    assert len(small_segments) > 10
    by_file = {Path(f.path).name: f for f in split.files}
    a, b = by_file["a.jsonl"], by_file["b.jsonl"]
    assert (a.status, a.records, a.rejected) == ("ok", total - 1, 1)
    assert (b.status, b.rejected) == ("ok", 0)
    with connect(tmp_path / "split.duckdb", read_only=True) as con:
        rows = con.sql("SELECT file, line, raw, reason FROM rejected_lines").rows()
        assert [r[:3] for r in rows] == [(str(first), line, raw_text(bad.encode()))]
        assert "ts_ns" in rows[0][3]
    staged = _stage_read(monkeypatch, [traces], tmp_path / "stage.duckdb")
    assert _results(split) == _results(staged)
    assert_same_tables(tmp_path / "split.duckdb", tmp_path / "stage.duckdb")


def test_duckdb_refusing_a_later_segment_rolls_back_and_takes_the_stage_read(
    tmp_path, monkeypatch, small_segments
):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_compile_trace(traces / "compile.jsonl", 1500, run_id="compile", seed=1)
    write_trace(traces / "repetitive.jsonl", 1500, run_id="repetitive", seed=1)
    read_kind = kinds._read_kind
    refused: list[int] = []

    def refuse_segment_5(con, out, kind, append=False):
        if out.segment == 5:
            refused.append(out.segment)
            raise duckdb.ConversionException("injected: a value DuckDB cannot cast")
        return read_kind(con, out, kind, append)

    monkeypatch.setattr(kinds, "_read_kind", refuse_segment_5)
    split = ingest([traces], tmp_path / "split.duckdb")
    assert refused == [5]  # segments 0-4 were inserted (uncommitted) before
    assert all(f.status == "ok" for f in split.files)
    staged = _stage_read(monkeypatch, [traces], tmp_path / "stage.duckdb")
    assert _results(split) == _results(staged)
    # rolled back: no row of segments 0-4 twice
    assert_same_tables(tmp_path / "split.duckdb", tmp_path / "stage.duckdb")


def _grow_with_span_rules(path: Path) -> None:
    """Append to a trace (its first half ingested): a second span_start of an id its first
    half stored, then a second span_end of that id (both rejected: the file holds its start
    and its end already), a second meta (rejected), then a new span (kept)."""
    lines = [json.loads(x) for x in path.read_bytes().splitlines()]
    start = next(r for r in lines if r["kind"] == "span_start")
    end = next(r for r in lines if r["kind"] == "span_end" and r["span_id"] == start["span_id"])
    new_id = max(r["span_id"] for r in lines if r["kind"] == "span_start") + 1
    extra = [
        start,
        end,
        lines[0],
        {**start, "span_id": new_id},
        {**end, "span_id": new_id},
    ]
    with path.open("ab") as f:
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in extra))


def _both_reads(traces, split_db, stage_db, monkeypatch, small_segments):
    """``traces`` ingested into ``split_db`` by the split read (checked: it took it) and into
    ``stage_db`` by ``_stage``, with the same results; the split read's summary."""
    read = len(small_segments)
    split = ingest([traces], split_db)
    assert len(small_segments) > read  # it took the split read
    with monkeypatch.context() as m:  # (undoes its own patch only)
        m.setattr(database, "splittable", lambda *a: False)
        staged = ingest([traces], stage_db)
    assert _results(split) == _results(staged)
    return split


def test_a_continued_file_takes_the_split_read_and_stores_what_the_stage_read_stores(
    tmp_path, monkeypatch, small_segments
):
    traces = tmp_path / "traces"
    write_shapes(traces, 1500)
    # (bad.jsonl's second half has a line over the size limit: that batch takes ``_stage``)
    (traces / "bad.jsonl").unlink()
    rest = {}
    for path in traces.iterdir():  # the first half, whole lines; the rest after
        data = path.read_bytes()
        cut = data.index(b"\n", len(data) // 2) + 1
        path.write_bytes(data[:cut])
        rest[path] = data[cut:]
    split_db, stage_db = tmp_path / "split.duckdb", tmp_path / "stage.duckdb"
    results = []
    for step in ("first half", "grown"):
        if step == "grown":
            for path, data in rest.items():
                with path.open("ab") as f:
                    f.write(data)
            _grow_with_span_rules(traces / "compile.jsonl")
        split = _both_reads(traces, split_db, stage_db, monkeypatch, small_segments)
        results.append(split)
    assert [f.continued for f in results[1].files] == [True] * 4
    grown = next(f for f in results[1].files if f.path.endswith("compile.jsonl"))
    assert (grown.status, grown.records, grown.rejected) == ("ok", 750, 3)
    with connect(split_db, read_only=True) as con:
        reasons = [
            r[0]
            for r in con.duck.execute(
                "SELECT reason FROM rejected_lines WHERE file LIKE '%compile.jsonl' ORDER BY line"
            ).fetchall()
        ]
    assert [r.split(" of span_id")[0] for r in reasons] == [
        "a second span_start",
        "a second span_end",
        "a second 'meta' record; one file is one run",
    ]
    assert_same_tables(split_db, stage_db)


_AGAIN = " (span ids are unique in a run; were two traces concatenated?)"


def _span_ends_and_rejections(db: Path) -> tuple[list[int], list[tuple[int, str]]]:
    with connect(db, read_only=True) as con:
        ends = con.duck.execute("SELECT span_id FROM span_end ORDER BY rowid").fetchall()
        rejected = con.duck.execute("SELECT line, reason FROM rejected_lines ORDER BY line")
        return [e for (e,) in ends], rejected.fetchall()


def test_a_span_end_of_a_span_whose_end_its_run_stored_is_a_second_one_on_both_reads(
    tmp_path, monkeypatch, small_segments
):
    traces = tmp_path / "traces"
    traces.mkdir()
    path = traces / "t.jsonl"
    lines = [
        meta_line("r1"),
        span_line("span_start", 1, 10),
        span_line("span_end", 1, 20),
        span_line("span_start", 5, 30),
        span_line("span_end", 9, 35),  # no start (rejected): it counts for nothing after
    ]
    growths = [
        # line 6: an end of span 1, whose end is stored (rejected); line 7: span 5's start
        # again (rejected); line 8: span 5's first end (kept, as one ingest of the whole
        # file keeps it: the second start is rejected, not taken as a span of its own);
        # lines 9-10: span 9, its first end after its start (kept)
        [
            span_line("span_end", 1, 40),
            span_line("span_start", 5, 45),
            span_line("span_end", 5, 50),
            span_line("span_start", 9, 52),
            span_line("span_end", 9, 54),
        ],
        # line 11: an end of span 5, whose end the growth before stored (rejected)
        [
            span_line("span_end", 5, 60),
            span_line("span_start", 6, 70),
            span_line("span_end", 6, 80),
        ],
    ]
    split_db, stage_db = tmp_path / "split.duckdb", tmp_path / "stage.duckdb"
    counts = []
    for more in [[], *growths]:
        lines += more
        write_lines(path, lines)
        split = _both_reads(traces, split_db, stage_db, monkeypatch, small_segments)
        counts += [(f.status, f.continued, f.records, f.rejected) for f in split.files]
    assert counts == [("ok", False, 4, 1), ("ok", True, 3, 2), ("ok", True, 2, 1)]
    whole = tmp_path / "whole.duckdb"
    ingest([traces], whole)
    for db in (split_db, stage_db, whole):  # what one ingest of the whole file stores
        assert _span_ends_and_rejections(db) == (
            [1, 5, 9, 6],
            [
                (5, "span_end without a span_start (span_id 9)"),
                (6, f"a second span_end of span_id 1{_AGAIN}"),
                (7, f"a second span_start of span_id 5{_AGAIN}"),
                (11, f"a second span_end of span_id 5{_AGAIN}"),
            ],
        )
    # and ember validate says the same of each line
    assert [(e.line, e.message) for e in validate_file(path).errors] == (
        _span_ends_and_rejections(whole)[1]
    )
    assert_same_tables(split_db, stage_db)


def _spans_across_pieces(path: Path) -> Path:
    """A trace whose spans 1 and 2 start (and 1 ends) in its first 64 KiB, and whose last
    lines end 1 again (rejected), end 2 (kept) and start 1 again (rejected)."""
    lines = [
        meta_line("big"),
        span_line("span_start", 1, 1),
        span_line("span_end", 1, 2),
        span_line("span_start", 2, 3),
        *(cache_line(10 + i, "hit") for i in range(2000)),
        span_line("span_end", 1, 5000),
        span_line("span_end", 2, 5001),
        span_line("span_start", 1, 5002),
    ]
    return write_lines(path, lines)


@pytest.mark.parametrize("read", ["split", "stage"])
def test_a_big_files_later_piece_knows_the_span_ends_its_first_piece_stored(
    tmp_path, monkeypatch, read
):
    trace = _spans_across_pieces(tmp_path / "big.jsonl")
    whole = ingest([trace], tmp_path / "whole.duckdb")
    monkeypatch.setattr(database, "PIECE_BYTES", 64 << 10)
    if read == "stage":
        monkeypatch.setattr(database, "splittable", lambda *a: False)
    later: list[int] = []  # the starts of the pieces the split read took after the first
    split_file = kinds.split_file
    monkeypatch.setattr(
        kinds, "split_file", lambda w, *a: later.append(w.plan.start) or split_file(w, *a)
    )
    pieces = ingest([trace], tmp_path / "pieces.duckdb")
    assert trace.stat().st_size > 2 * (64 << 10)  # not vacuous: the last lines in a later piece
    # every piece took the read asked for
    assert len(later) > 2 if read == "split" else later == []
    assert _results(pieces) == _results(whole)
    assert [(f.records, f.rejected) for f in whole.files] == [(2005, 2)]
    assert _span_ends_and_rejections(tmp_path / "pieces.duckdb") == (
        [1, 2],
        [
            (2005, f"a second span_end of span_id 1{_AGAIN}"),
            (2007, f"a second span_start of span_id 1{_AGAIN}"),
        ],
    )
    assert_same_tables(tmp_path / "whole.duckdb", tmp_path / "pieces.duckdb")


def _memory_line(ts: int, action: str, nbytes: int, tensor: str) -> str:
    rec = {"kind": "memory", "ts_ns": ts, "tensor_id": tensor, "device": "cpu:0"}
    rec |= {"bytes": nbytes, "action": action, "dtype": "float32", "category": "activation"}
    return json.dumps(rec)


@pytest.mark.parametrize("read", ["split", "stage"])
def test_a_growth_with_earlier_timestamps_than_stored_rows_is_numbered_as_one_ingest(
    tmp_path, monkeypatch, read
):
    # rows a run stored, then rows of its growth that happened between them (another
    # thread's records, written late): the cache order columns and the memory running
    # sums of every row of the run are those one ingest of the whole file gives
    if read == "stage":
        monkeypatch.setattr(database, "splittable", lambda *a: False)
    lines = [meta_line("r1"), cache_line(10, "miss"), cache_line(30, "hit")]
    lines += [_memory_line(10, "alloc", 100, "a"), _memory_line(30, "alloc", 1000, "b")]
    path = write_lines(tmp_path / "t.jsonl", lines)
    grown_db, whole_db = tmp_path / "grown.duckdb", tmp_path / "whole.duckdb"
    ingest([path], grown_db)
    more = [cache_line(20, "miss", n=5), cache_line(40, "hit", n=5)]
    more += [_memory_line(20, "alloc", 10, "c"), _memory_line(25, "free", 100, "a")]
    write_lines(path, [*lines, *more])
    grown = ingest([path], grown_db).files[0]
    assert (grown.status, grown.continued, grown.records) == ("ok", True, 4)
    ingest([path], whole_db)
    assert_same_tables(grown_db, whole_db)
    with connect(grown_db, read_only=True) as con:
        live = con.duck.execute(
            "SELECT ts_ns, device_live_bytes FROM memory ORDER BY ts_ns"
        ).fetchall()
        order = con.duck.execute("SELECT ts_ns, ord, seq, life FROM cache ORDER BY ts_ns")
        assert live == [(10, 100), (20, 110), (25, 10), (30, 1010)]
        assert order.fetchall() == [(10, 1, 1, 1), (20, 2, 2, 1), (30, 3, 3, 1), (40, 4, 4, 1)]


@pytest.mark.parametrize("read", ["split", "stage"])
def test_a_growth_back_in_time_past_64_bit_live_bytes_stores_null_sums_as_one_ingest(
    tmp_path, monkeypatch, read
):
    # the running sums computed again over the run (above) are NULL past 2**63 - 1, as
    # ingest stores them: they raised a ConversionException out of ingest()
    if read == "stage":
        monkeypatch.setattr(database, "splittable", lambda *a: False)
    lines = [meta_line("r1"), _memory_line(50, "alloc", 2**62, "a")]
    lines.append(_memory_line(60, "alloc", 2**62, "b"))
    path = write_lines(tmp_path / "t.jsonl", lines)
    grown_db, whole_db = tmp_path / "grown.duckdb", tmp_path / "whole.duckdb"
    ingest([path], grown_db)
    write_lines(path, [*lines, _memory_line(20, "alloc", 5, "c")])
    grown = ingest([path], grown_db).files[0]
    assert (grown.status, grown.continued, grown.records) == ("ok", True, 1)
    ingest([path], whole_db)
    assert_same_tables(grown_db, whole_db)
    with connect(grown_db, read_only=True) as con:
        live = con.duck.execute("SELECT ts_ns, device_live_bytes FROM memory ORDER BY ts_ns")
        assert live.fetchall() == [(20, 5), (50, 2**62 + 5), (60, None)]
