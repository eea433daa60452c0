"""Many files in one batch (one read, one check query, one transaction): the same results and
rows as one file at a time, into the DuckDB file and into the lake."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ember.analysis import FileResult, connect, ingest
from ember.analysis.lake.ingest import connect_lake, ingest_lake
from tests.analysis.lake_parity import COMPARED, bad_corpus, differences
from tests.analysis.traces import cache_line, meta_line, span_line, write_lines

ingest_module = importlib.import_module("ember.analysis.ingest.database")
lake_module = importlib.import_module("ember.analysis.lake.ingest")


def _memory(ts: int, action: str, size: int, tensor: str) -> str:
    return json.dumps(
        {
            "kind": "memory",
            "ts_ns": ts,
            "tensor_id": tensor,
            "action": action,
            "bytes": size,
            "device": "cpu:0",
            "dtype": "float32",
            "category": "activation",
        }
    )


def _corpus(folder: Path) -> list[Path]:
    """Small traces of every sort a batch must tell apart, in this order."""
    folder.mkdir()
    files = []
    for i in range(6):  # valid ones, with spans, cache order columns and memory sums
        lines = [meta_line(f"ok{i}"), span_line("span_start", 1, 1), cache_line(2, "miss")]
        lines += [cache_line(3, "hit"), cache_line(3, "hit", n=23), _memory(3, "alloc", 64, "x")]
        lines += [_memory(4, "alloc", 32, "y"), _memory(4, "free", 64, "x")]
        lines.append(span_line("span_end", 1, 5))
        files.append(write_lines(folder / f"a{i}.jsonl", lines))
    # whole, but DuckDB refuses it (garbage in the middle): read alone, on the slow path
    files.append(
        write_lines(
            folder / "b-garbage.jsonl",
            [meta_line("garbage"), cache_line(1, "miss"), b"\x00\x01 garbage", cache_line(2)],
        )
    )
    # rows the checks reject: a second meta, a span_end without start, a duplicate span
    files.append(
        write_lines(
            folder / "c-checks.jsonl",
            [
                meta_line("checks"),
                span_line("span_start", 7, 1),
                meta_line("again"),
                span_line("span_end", 8, 2),
                span_line("span_start", 7, 3),
                json.dumps({"kind": "cache", "ts_ns": 5, "action": "hit", "shapes": []}),
                "",
                cache_line(6, "bogus"),
                cache_line(7, "miss"),
            ],
        )
    )
    files.append(bad_corpus(folder / "d-partial.jsonl"))  # a truncated last line
    files.append(write_lines(folder / "e-nometa.jsonl", [cache_line(1)]))  # refused
    # the run of a0 again: refused as a copy, in the same batch as a0
    files.append(write_lines(folder / "f-copy.jsonl", [meta_line("ok0"), cache_line(1)]))
    files.append(write_lines(folder / "g-empty.jsonl", []))  # refused: empty
    for i in range(6, 9):
        files.append(write_lines(folder / f"h{i}.jsonl", [meta_line(f"ok{i}"), cache_line(i)]))
    return files


def _same(r: FileResult) -> dict:
    """A result without its timing."""
    return {k: v for k, v in dataclasses.asdict(r).items() if k != "seconds"}


@pytest.fixture(params=[256, 3], ids=["one-batch", "batches-of-3"])
def batch_files(request: pytest.FixtureRequest) -> int:
    """How many files a batch holds at the most (``BATCH_FILES``)."""
    return request.param


def _batched_as_one_at_a_time(
    corpus: Path, ingest_into: Callable[[list[Path], Path], Any], batched: Path, single: Path
) -> tuple[list[Path], list[FileResult]]:
    """The bad corpus written to ``corpus``, ingested as a folder into ``batched`` and file by
    file into ``single``: the results must be the same. The files and the batch's results."""
    files = _corpus(corpus)
    results = ingest_into([corpus], batched).files
    one_at_a_time = [_same(r) for path in files for r in ingest_into([path], single).files]
    assert [_same(r) for r in results] == one_at_a_time
    return files, results


def test_a_batch_gives_the_results_and_rows_of_one_file_at_a_time(
    tmp_path, monkeypatch, batch_files
):
    monkeypatch.setattr(ingest_module, "BATCH_FILES", batch_files)
    _, batched = _batched_as_one_at_a_time(
        tmp_path / "traces", ingest, tmp_path / "batched.duckdb", tmp_path / "single.duckdb"
    )
    statuses = {Path(r.path).name: r.status for r in batched}
    assert statuses["d-partial.jsonl"] == "partial"
    assert [statuses[n] for n in ("e-nometa.jsonl", "f-copy.jsonl", "g-empty.jsonl")] == [
        "refused"
    ] * 3
    # the bad file went alone; its batch-mates were read together and lost nothing
    by_name = {Path(r.path).name: r for r in batched}
    assert by_name["b-garbage.jsonl"].slow_path
    assert (by_name["b-garbage.jsonl"].records, by_name["b-garbage.jsonl"].rejected) == (3, 1)
    assert not any(by_name[f"a{i}.jsonl"].slow_path for i in range(6))
    assert all(by_name[f"a{i}.jsonl"].records == 9 for i in range(6))
    assert (by_name["c-checks.jsonl"].records, by_name["c-checks.jsonl"].rejected) == (3, 5)
    with (
        connect(tmp_path / "batched.duckdb", read_only=True) as a,
        connect(tmp_path / "single.duckdb", read_only=True) as b,
    ):
        assert differences(a, b) == []
        # not vacuous: the order columns and running sums are per run
        assert a.sql("SELECT count(DISTINCT run_id) AS n FROM cache")["n"][0] == 12
        assert a.sql("SELECT max(ord) AS m FROM cache")["m"][0] == 3
        peaks = a.sql("SELECT max(device_live_bytes) AS m FROM memory GROUP BY run_id")
        assert peaks["m"].to_list() == [96] * 6
    # again: every file as it was (the partial one too), nothing new
    again = ingest([tmp_path / "traces"], tmp_path / "batched.duckdb").files
    assert {r.status for r in again} == {"unchanged", "refused"}


def test_a_lake_batch_gives_the_results_and_rows_of_one_file_at_a_time(
    tmp_path, monkeypatch, batch_files
):
    monkeypatch.setattr(lake_module, "BATCH_FILES", batch_files)
    files, _ = _batched_as_one_at_a_time(
        tmp_path / "traces", ingest_lake, tmp_path / "batched", tmp_path / "single"
    )
    ingest(files, tmp_path / "file.duckdb")
    with (
        connect_lake(tmp_path / "batched") as a,
        connect_lake(tmp_path / "single") as b,
        connect(tmp_path / "file.duckdb", read_only=True) as c,
    ):
        assert differences(a, b) == []
        # the DuckDB file's too, but for the refusal of the copy ('already in the lake')
        assert differences(a, c, names=[n for n in COMPARED if n != "ingested_files"]) == []
        assert a.sql("SELECT count(*) AS n FROM runs")["n"][0] == 12


def test_a_grown_file_in_a_batch_continues(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    grows = write_lines(folder / "grows.jsonl", [meta_line("g"), span_line("span_start", 1, 1)])
    write_lines(folder / "other.jsonl", [meta_line("o"), cache_line(1)])
    db, lake = tmp_path / "t.duckdb", tmp_path / "lake"
    ingest([folder], db)
    ingest_lake([folder], lake)
    with grows.open("a") as f:
        f.write(span_line("span_end", 1, 2) + "\n" + span_line("span_end", 1, 3) + "\n")
    write_lines(folder / "new.jsonl", [meta_line("n"), cache_line(1)])
    for summary in (ingest([folder], db), ingest_lake([folder], lake)):
        by_name = {Path(r.path).name: r for r in summary.files}
        assert (by_name["grows.jsonl"].continued, by_name["grows.jsonl"].records) == (True, 1)
        assert by_name["grows.jsonl"].rejected == 1  # the second span_end of span 1
        assert by_name["other.jsonl"].status == "unchanged"
        assert by_name["new.jsonl"].records == 2
    with connect(db, read_only=True) as a, connect_lake(lake) as b:
        assert differences(a, b, names=COMPARED) == []


def test_a_replaced_file_with_the_same_run_keeps_its_spans(tmp_path):
    # the spans of the run it replaces were taken for those of an earlier part of the file:
    # every span was rejected as 'a second span_start of span_id 1'
    path = write_lines(
        tmp_path / "t.jsonl",
        [meta_line("r1"), span_line("span_start", 1, 1), span_line("span_end", 1, 2)],
    )
    db = tmp_path / "t.duckdb"
    assert ingest([path], db).files[0].records == 3
    meta = json.loads(meta_line("r1"))
    meta["pid"] = 2  # another first line: the file was replaced
    lines = [json.dumps(meta), span_line("span_start", 1, 1), span_line("span_end", 1, 2)]
    write_lines(path, [*lines, span_line("span_start", 2, 3)])
    result = ingest([path], db).files[0]
    assert (result.replaced, result.records, result.rejected) == (True, 4, 0)
    with connect(db, read_only=True) as con:
        assert con.duck.execute("SELECT count(*) FROM rejected_lines").fetchall() == [(0,)]
        assert con.duck.execute("SELECT count(*) FROM span_start").fetchall() == [(2,)]


def test_a_cut_short_last_line_is_unchanged_until_the_file_grows(tmp_path):
    # it was read again (and reported 'partial', rewritten) on every ingest: the size kept was
    # where the complete lines end, which a file with a partial last line never has
    whole = cache_line(9, "hit")
    path = write_lines(
        tmp_path / "t.jsonl", [meta_line(), cache_line(1), whole[:20]], newline_at_end=False
    )
    mtime = path.stat().st_mtime_ns
    db, lake = tmp_path / "t.duckdb", tmp_path / "lake"
    assert ingest([path], db).files[0].status == "partial"
    assert ingest_lake([path], lake).files[0].status == "partial"
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))  # touched: only the size tells
    assert ingest([path], db).files[0].status == "unchanged"
    assert ingest_lake([path], lake).files[0].status == "unchanged"
    with path.open("a") as f:
        f.write(whole[20:] + "\n")
    for r in (ingest([path], db).files[0], ingest_lake([path], lake).files[0]):
        assert (r.status, r.continued, r.records, r.rejected) == ("ok", True, 1, 0)
    with connect(db, read_only=True) as a, connect_lake(lake) as b:
        assert differences(a, b) == []
        assert a.sql("SELECT size_bytes FROM ingested_files")["size_bytes"].to_list() == [
            path.stat().st_size
        ]


def test_a_database_without_size_bytes_gets_it(tmp_path):
    path = write_lines(
        tmp_path / "t.jsonl", [meta_line(), cache_line(1), '{"kind": "ca'], newline_at_end=False
    )
    db = tmp_path / "old.duckdb"
    ingest([path], db)
    con = duckdb.connect(str(db))  # what an older Ember left: no size_bytes
    con.execute("ALTER TABLE ingested_files DROP COLUMN size_bytes")
    con.execute("UPDATE ember_schema SET hash = 'older'")
    con.close()
    # the size read is not known: read once more from the partial line, then known
    assert [ingest([path], db).files[0].status for _ in range(2)] == ["partial", "unchanged"]
    with connect(db, read_only=True) as c:
        assert c.sql("SELECT records, rejected FROM ingested_files").rows() == [(2, 1)]


def _big_trace(path: Path) -> Path:
    """A compile-heavy run, then a profiled run's memory and op records, with a line DuckDB
    refuses and a span_end without its start in the middle (``synthetic``'s shapes)."""
    from ember.analysis.synthetic import write_compile_trace, write_memory_trace

    write_compile_trace(path, 3000, run_id="big")
    write_memory_trace(path.with_suffix(".m"), 3000)
    # its span ids after the first run's (one file is one run: span ids are unique in it)
    memory = [
        re.sub(rb'"span_id":(\d+)', lambda m: b'"span_id":%d' % (int(m[1]) + 10**6), line)
        for line in path.with_suffix(".m").read_bytes().splitlines(keepends=True)[1:]
    ]
    lines = path.read_bytes().splitlines(keepends=True)
    bad = [b"\x00 not json\n", span_line("span_end", 10**9, 5).encode() + b"\n"]
    path.write_bytes(b"".join(lines[:1500] + bad + lines[1500:] + memory))
    path.with_suffix(".m").unlink()
    return path


def test_a_big_file_in_pieces_gives_the_result_and_rows_of_one_read(tmp_path, monkeypatch):
    # PIECE_BYTES bounds what is staged at once; the pieces are read as a grown file is
    trace = _big_trace(tmp_path / "big.jsonl")
    whole = ingest([trace], tmp_path / "whole.duckdb").files
    monkeypatch.setattr(ingest_module, "PIECE_BYTES", 64 << 10)
    seen = []
    pieces = ingest([trace], tmp_path / "pieces.duckdb", on_file=seen.append).files
    assert trace.stat().st_size > 10 * (64 << 10)  # not vacuous: many pieces
    assert len(pieces) == len(seen) == 1
    assert [_same(r) for r in pieces] == [_same(r) for r in whole]
    assert (whole[0].rejected, whole[0].slow_path) == (2, True)
    with (
        connect(tmp_path / "whole.duckdb", read_only=True) as a,
        connect(tmp_path / "pieces.duckdb", read_only=True) as b,
    ):
        assert differences(a, b) == []
        assert a.sql("SELECT count(*) AS n FROM cache WHERE action = 'evict'")["n"][0] > 100
        lines = a.sql("SELECT line FROM rejected_lines ORDER BY line")["line"].to_list()
        assert lines == [1501, 1502]
    again = ingest([trace], tmp_path / "pieces.duckdb").files
    assert [r.status for r in again] == ["unchanged"]
    # ingest_file goes piece by piece too
    with connect(tmp_path / "one.duckdb") as con:
        assert _same(ingest_module.ingest_file(con, trace)) == _same(whole[0])


def test_the_synthetic_shapes_are_valid_traces_of_what_they_say(tmp_path):
    from ember.analysis.synthetic import write_compile_trace, write_memory_trace
    from ember.schemas import validate_file

    compile_trace, memory_trace = tmp_path / "c.jsonl", tmp_path / "m.jsonl"
    counts = {}
    for write, path in ((write_compile_trace, compile_trace), (write_memory_trace, memory_trace)):
        n = write(path, 3000)
        report = validate_file(path)  # pydantic on every line
        assert report.ok, report.errors[:3]
        assert sum(report.counts.values()) == n == len(path.read_bytes().splitlines())
        counts[path.name] = report.counts
    recs = [json.loads(line) for line in compile_trace.read_text().splitlines()]
    calls = sum(r["kind"] == "span_start" and r["span_kind"] == "call" for r in recs)
    actions = [r["action"] for r in recs if r["kind"] == "cache"]
    # every call misses at both positions, and evicts once each cache of 2 is full
    assert actions.count("miss") == 2 * calls
    assert actions.count("evict") == 2 * calls - 4
    assert actions.count("hit") == 0
    assert counts["m.jsonl"]["memory"] == 2 * counts["m.jsonl"]["op"]
    memory = [json.loads(line) for line in memory_trace.read_text().splitlines()]
    alloc = {r["tensor_id"] for r in memory if r["kind"] == "memory" and r["action"] == "alloc"}
    freed = [r["tensor_id"] for r in memory if r["kind"] == "memory" and r["action"] == "free"]
    assert sorted(freed) == sorted(alloc)  # each tensor freed once
