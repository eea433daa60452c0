"""Ingest: the bad-input corpus, idempotency, growth, migrations, and the typed read."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import shutil
from pathlib import Path

import pytest

from ember.analysis import ingest
from ember.analysis.ingest.database import MAX_LINE_BYTES
from ember.analysis.schema_types import TABLE_COLUMNS, duckdb_type
from ember.schemas import MIGRATIONS, SCHEMA_ID, validate_file
from tests.analysis.databases import query_rows
from tests.analysis.traces import cache_line, meta_line, run_span, write_lines


def _one(tmp_path: Path, name: str, lines: list, **kw):
    path = write_lines(tmp_path / name, lines, **kw)
    db = tmp_path / "t.duckdb"
    summary = ingest([path], db)
    return path, db, summary.files[0]


def _rejected(db: Path) -> list[tuple]:
    return query_rows(db, "SELECT line, reason, raw FROM rejected_lines ORDER BY line")


def _valid(n: int) -> list[str]:
    return [cache_line(1000 + i, "miss" if i == 0 else "hit") for i in range(n)]


# ---------------------------------------------------------------- the type mapping


def test_duckdb_types_come_from_the_pydantic_models():
    from ember.schemas.records import ArgShape, Cache

    assert duckdb_type(Cache.model_fields["ts_ns"].annotation) == "BIGINT"
    assert duckdb_type(Cache.model_fields["action"].annotation) == "VARCHAR"
    assert duckdb_type(ArgShape.model_fields["shape"].annotation) == ("list", "BIGINT")
    cache = TABLE_COLUMNS["cache"]
    assert cache["shapes"].startswith('STRUCT("name" VARCHAR, "shape" BIGINT[], "dtype" VARCHAR')
    assert cache["shapes"].endswith("[]")
    assert cache["statics"] == 'STRUCT("name" VARCHAR, "value" JSON)[]'
    assert TABLE_COLUMNS["meta"]["tags"] == "JSON"
    # a union of an int and a literal ("stop": 3 or "end") is text
    assert '"stop" VARCHAR' in TABLE_COLUMNS["span_end"]["attrs"]


def test_a_valid_file_goes_in_whole(tmp_path):
    path, db, r = _one(tmp_path, "ok.jsonl", [meta_line(), *_valid(3)])
    assert (r.status, r.records, r.rejected, r.slow_path) == ("ok", 4, 0, False)
    assert query_rows(db, "SELECT count(*) FROM cache") == [(3,)]
    assert query_rows(db, "SELECT run_id, host, file FROM runs") == [("r1", "test", str(path))]
    row = query_rows(db, "SELECT status, offset_bytes, lines, records FROM ingested_files")
    assert row == [("ok", path.stat().st_size, 4, 4)]


# ---------------------------------------------------------------- the bad-input corpus


def test_truncated_last_line_is_rejected_then_read_when_the_file_grows(tmp_path):
    whole = cache_line(2000, "hit")
    path, db, r = _one(
        tmp_path, "t.jsonl", [meta_line(), *_valid(2), whole[:25]], newline_at_end=False
    )
    assert (r.status, r.records, r.rejected) == ("partial", 3, 1)
    assert "truncated last line 4" in r.message
    [(line, reason, raw)] = _rejected(db)
    assert line == 4
    assert raw == whole[:25]
    assert "writer stopped mid-line" in reason
    # the writer finishes the line and writes one more: ingest continues from line 4
    with path.open("a") as f:
        f.write(whole[25:] + "\n" + cache_line(3000, "hit") + "\n")
    r2 = ingest([path], db).files[0]
    assert (r2.status, r2.continued, r2.records, r2.rejected) == ("ok", True, 2, 0)
    assert _rejected(db) == []
    assert query_rows(db, "SELECT count(*) FROM cache") == [(4,)]
    assert query_rows(db, "SELECT records, rejected, lines FROM ingested_files") == [(5, 0, 5)]


def test_an_over_long_partial_last_line_keeps_the_lines_before_it(tmp_path):
    partial = cache_line(9, "hit", key="y" * (MAX_LINE_BYTES + 10))[:-5]
    _path, db, r = _one(
        tmp_path, "lp.jsonl", [meta_line(), *_valid(2), partial], newline_at_end=False
    )
    assert (r.status, r.records, r.rejected) == ("partial", 3, 1)
    [(line, reason, raw)] = _rejected(db)
    assert line == 4
    assert reason.startswith("truncated last line 4")
    assert len(raw) == 200


def test_binary_garbage_line_is_rejected_and_the_rest_kept(tmp_path):
    garbage = b"\x00\x01\x02\xff\xfe\x80 PNG\x1a garbage"
    _path, db, r = _one(tmp_path, "g.jsonl", [meta_line(), *_valid(1), garbage, *_valid(2)])
    # the line check rejects it: the other lines are read as they are (no slow path)
    assert (r.status, r.records, r.rejected, r.slow_path) == ("ok", 4, 1, False)
    [(line, reason, raw)] = _rejected(db)
    assert line == 3
    assert reason.startswith(("not valid JSON", "not UTF-8"))
    assert raw.startswith("\\x00\\x01")  # undecodable bytes are escaped, not lost
    assert query_rows(db, "SELECT count(*) FROM cache") == [(3,)]


NON_UTF8 = b'{"kind":"cache","ts_ns":5,"action":"hit","position":0,"shapes":[],"key":"\xff\xfe"}'
WRONG_TYPE = cache_line(5, "hit").replace('"position": 0', '"position": "first"')


# one bad line among good ones: (the lines, the bad one's number, how its reason starts,
# and what the rejected row shows of it: in its reason or in its raw text)
@pytest.mark.parametrize(
    ("lines", "line", "reason_start", "shown"),
    [
        pytest.param(
            [meta_line(), NON_UTF8, *_valid(1)],
            2,
            "not UTF-8",
            ("raw", "\\xff\\xfe"),
            id="non-utf8-text",
        ),
        pytest.param(
            [meta_line(), *_valid(1), WRONG_TYPE],
            3,
            "position: Input should be a valid integer",
            ("reason", '"first"'),
            id="wrong-types-explained-by-pydantic",
        ),
    ],
)
def test_a_bad_line_is_rejected_saying_why(tmp_path, lines, line, reason_start, shown):
    _path, db, r = _one(tmp_path, "bad.jsonl", lines)
    assert (r.records, r.rejected) == (2, 1)
    [(at, reason, raw)] = _rejected(db)
    assert at == line
    assert reason.startswith(reason_start)
    where, text = shown
    assert text in {"reason": reason, "raw": raw}[where]


def test_a_missing_required_field_is_found_by_the_typed_read_checks(tmp_path):
    # valid JSON with the right types, so DuckDB reads it: the generated SQL checks catch it
    missing = json.dumps({"kind": "cache", "ts_ns": 5, "action": "hit", "shapes": []})
    bad_value = cache_line(6, "bogus")
    _path, db, r = _one(tmp_path, "m.jsonl", [meta_line(), missing, *_valid(1), bad_value])
    assert (r.records, r.rejected, r.slow_path) == (2, 2, False)
    assert _rejected(db) == [
        (2, "position: missing required field", missing[:200]),
        (
            4,
            "action: Input should be 'hit', 'miss' or 'evict' (got \"bogus\")",
            bad_value[:200],
        ),
    ]


def test_unknown_kind(tmp_path):
    unknown = json.dumps({"kind": "telemetry", "ts_ns": 1})
    _path, db, r = _one(tmp_path, "k.jsonl", [meta_line(), unknown, *_valid(1)])
    assert (r.records, r.rejected) == (2, 1)
    [(line, reason, _)] = _rejected(db)
    assert line == 2
    assert reason.startswith("record: unknown kind 'telemetry'; expected one of 'meta'")


def test_newer_schema_version_refuses_the_file_naming_both_versions(tmp_path):
    _path, db, r = _one(tmp_path, "n.jsonl", [meta_line(schema="ember.trace/9"), *_valid(2)])
    assert r.status == "refused"
    assert "ember.trace/9" in r.message
    assert SCHEMA_ID in r.message
    assert "upgrade Ember" in r.message
    assert query_rows(db, "SELECT count(*) FROM cache") == [(0,)]
    assert query_rows(db, "SELECT status, message FROM ingested_files") == [("refused", r.message)]


def test_missing_meta_refuses_the_file(tmp_path):
    _path, db, r = _one(tmp_path, "nm.jsonl", _valid(2))
    assert r.status == "refused"
    assert r.message.startswith("missing 'meta': the first record must be 'meta'")
    assert query_rows(db, "SELECT count(*) FROM runs") == [(0,)]


def test_two_meta_lines(tmp_path):
    _path, db, r = _one(tmp_path, "2m.jsonl", [meta_line(), *_valid(1), meta_line("r2")])
    assert (r.records, r.rejected) == (2, 1)
    assert _rejected(db)[0][:2] == (3, "a second 'meta' record; one file is one run")
    assert query_rows(db, "SELECT run_id FROM runs") == [("r1",)]


def test_span_end_without_start(tmp_path):
    start, end = run_span()
    orphan = {**end, "span_id": 99}
    lines = [meta_line(), json.dumps(start), json.dumps(end), json.dumps(orphan)]
    _path, db, r = _one(tmp_path, "s.jsonl", lines)
    assert (r.records, r.rejected) == (3, 1)
    assert _rejected(db)[0][:2] == (4, "span_end without a span_start (span_id 99)")
    assert query_rows(db, "SELECT span_id, status FROM spans") == [(1, "ok")]


def test_a_run_id_seen_in_another_file_is_refused(tmp_path):
    first = write_lines(tmp_path / "a.jsonl", [meta_line("same"), *_valid(2)])
    copy = tmp_path / "copy.jsonl"
    shutil.copy(first, copy)
    db = tmp_path / "t.duckdb"
    a, b = ingest([first, copy], db).files
    assert a.status == "ok"
    assert b.status == "refused"
    assert f"run same is already in the database from {first}" in b.message
    assert query_rows(db, "SELECT count(*) FROM cache") == [(2,)]


def test_a_line_over_16_mb_is_rejected(tmp_path):
    huge = cache_line(9, "hit", key="x" * (MAX_LINE_BYTES + 10))
    _path, db, r = _one(tmp_path, "big.jsonl", [meta_line(), *_valid(1), huge, *_valid(1)])
    assert (r.records, r.rejected) == (3, 1)
    [(line, reason, raw)] = _rejected(db)
    assert line == 3
    assert reason.startswith("line is over 16 MB")
    assert len(raw) == 200


def test_an_empty_file_is_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    r = ingest([path], tmp_path / "t.duckdb").files[0]
    assert r.status == "refused"
    assert r.message.startswith("empty file: no 'meta' record")


@pytest.mark.parametrize(
    ("compress", "says"),
    [
        (gzip.compress, "gzip-compressed"),
        (bz2.compress, "bzip2-compressed"),
        (lzma.compress, "xz-compressed"),
    ],
)
def test_a_compressed_trace_is_refused_saying_how_to_read_it(tmp_path, compress, says):
    # it was refused as "line 1: not UTF-8: ... byte 0x8b", and `ember validate` said
    # the same of four lines: neither named the compression nor the fix
    plain = write_lines(tmp_path / "t.jsonl", [meta_line(), *_valid(2)])
    packed = tmp_path / "t.jsonl.z"
    packed.write_bytes(compress(plain.read_bytes()))
    r = ingest([packed], tmp_path / "t.duckdb").files[0]
    assert r.status == "refused"
    assert r.message.startswith(f"the file is {says}: traces are read as plain JSONL")
    # the advice works on a name without the compressor's suffix (`gunzip -k` refused it)
    assert r.message.endswith(
        "decompress it first: "
        + {"gzip-compressed": "gzip", "bzip2-compressed": "bzip2", "xz-compressed": "xz"}[says]
        + " -dc FILE > FILE.jsonl"
    )
    report = validate_file(packed)
    assert [(e.line, e.message) for e in report.errors] == [(1, r.message)]
    assert report.records == 0


def test_an_unknown_field_of_another_kind_is_rejected(tmp_path):
    wrong = json.loads(cache_line(5, "hit"))
    wrong["op_name"] = "MatMul"  # a field of `op` records
    _path, db, r = _one(tmp_path, "f.jsonl", [meta_line(), json.dumps(wrong)])
    assert r.rejected == 1
    assert _rejected(db)[0][1].startswith("op_name: unknown field")


def test_default_and_strict_reject_what_the_typed_read_does_not_see(tmp_path):
    unknown = json.loads(cache_line(5, "hit"))
    unknown["colour"] = "red"  # a field no record kind has
    number_for_text = json.loads(cache_line(6, "hit"))
    number_for_text["source"] = 42
    lines = [meta_line(), json.dumps(unknown), json.dumps(number_for_text)]
    # the fast path let both through before each line was checked (ember.analysis.ingest.line_check)
    path, db, r = _one(tmp_path, "strict.jsonl", lines)
    assert (r.records, r.rejected, r.slow_path) == (1, 2, False)
    strict = ingest([path], tmp_path / "s.duckdb", strict=True).files[0]
    assert (strict.records, strict.rejected, strict.slow_path) == (1, 2, True)
    for d in (db, tmp_path / "s.duckdb"):
        reasons = query_rows(d, "SELECT line, reason FROM rejected_lines ORDER BY 1")
        assert reasons[0] == (
            2,
            "colour: unknown field (check the spelling, or the schema version)",
        )
        assert reasons[1][0] == 3
        assert reasons[1][1].startswith("source: Input should be a valid string")


# ---------------------------------------------------------------- idempotency


def test_the_same_file_twice_is_not_duplicated(tmp_path):
    path, db, _r = _one(tmp_path, "i.jsonl", [meta_line(), *_valid(3)])
    again = ingest([path, tmp_path], db).files  # the file, then its folder
    assert [f.status for f in again] == ["unchanged"]
    assert query_rows(db, "SELECT count(*) FROM cache") == [(3,)]


def test_a_replaced_file_replaces_its_rows(tmp_path):
    path, db, _r = _one(tmp_path, "rp.jsonl", [meta_line("old"), *_valid(3)])
    write_lines(path, [meta_line("new"), *_valid(1)])
    r2 = ingest([path], db).files[0]
    assert (r2.status, r2.replaced, r2.records) == ("ok", True, 2)
    assert query_rows(db, "SELECT run_id FROM runs") == [("new",)]
    assert query_rows(db, "SELECT run_id, count(*) FROM cache GROUP BY ALL") == [("new", 1)]


def test_folders_and_globs(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    write_lines(tmp_path / "runs" / "a" / "1.jsonl", [meta_line("g1"), *_valid(1)])
    write_lines(tmp_path / "runs" / "2.jsonl", [meta_line("g2"), *_valid(1)])
    write_lines(tmp_path / "runs" / "notes.txt", ["not a trace"])
    db = tmp_path / "t.duckdb"
    assert len(ingest([tmp_path / "runs"], db).files) == 2
    assert [f.status for f in ingest([str(tmp_path / "runs" / "*.jsonl")], db).files] == [
        "unchanged"
    ]
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        ingest([tmp_path / "nope.jsonl"], db)


# ---------------------------------------------------------------- migrations


def test_an_older_version_is_upgraded_by_a_registered_migration(tmp_path):
    migrations = MIGRATIONS.copy()  # the real 1 -> 2 step, and a made-up version 0

    @migrations.register(0)
    def rename_pos(record: dict) -> dict:  # version 0 called the position "pos"
        if record.get("kind") == "cache":
            record["position"] = record.pop("pos")
        return record

    old = json.loads(cache_line(5, "hit", position=7))
    old["pos"] = old.pop("position")
    path = write_lines(tmp_path / "old.jsonl", [meta_line(schema="ember.trace/0"), json.dumps(old)])
    db = tmp_path / "t.duckdb"
    r = ingest([path], db, migrations=migrations).files[0]
    assert (r.status, r.records, r.rejected) == ("ok", 2, 0)
    assert query_rows(db, "SELECT position FROM cache") == [(7,)]
    assert query_rows(db, "SELECT schema, schema_version, sync FROM runs, ingested_files") == [
        (SCHEMA_ID, 0, False)
    ]
    # without the migration the same file is refused with both versions named
    r2 = ingest([path], tmp_path / "t2.duckdb").files[0]
    assert r2.status == "refused"
    assert "ember.trace/0" in r2.message


def test_a_version_1_trace_is_ingested_as_dispatch_only(tmp_path):
    # version 1 call spans ended at dispatch: the run says sync = false; a version 2
    # trace that does not say is synced (the schema's default, filled in by ingest)
    v1 = write_lines(tmp_path / "v1.jsonl", [meta_line("old", "ember.trace/1"), cache_line(5)])
    v2 = write_lines(tmp_path / "v2.jsonl", [meta_line("new"), cache_line(5)])
    db = tmp_path / "t.duckdb"
    results = ingest([v1, v2], db).files
    assert [(r.status, r.records, r.rejected) for r in results] == [("ok", 2, 0)] * 2
    assert query_rows(db, "SELECT run_id, schema, sync FROM runs ORDER BY run_id") == [
        ("new", SCHEMA_ID, True),
        ("old", SCHEMA_ID, False),
    ]
