"""Older traces are upgraded through migrations; newer ones are refused naming both versions."""

from __future__ import annotations

import json

import pytest

from ember.schemas import (
    SCHEMA_ID,
    SCHEMA_VERSION,
    Migrations,
    TraceVersionError,
    parse_schema_id,
    validate_file,
)


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def meta(schema=SCHEMA_ID):
    return {
        "kind": "meta",
        "schema": schema,
        "run_id": "r",
        "wall_time_ns": 0,
        "host": "h",
        "pid": 1,
    }


def synthetic_v0() -> Migrations:
    """A made-up version 0 in which a cache record said ``hit: true/false`` and ``pos``."""
    migrations = Migrations(current=SCHEMA_VERSION)

    @migrations.register(from_version=SCHEMA_VERSION - 1)
    def cache_hit_flag_to_action(record):
        if record.get("kind") == "cache":
            record = dict(record)
            record["action"] = "hit" if record.pop("hit") else "miss"
            record["position"] = record.pop("pos")
        return record

    return migrations


def test_older_version_is_upgraded(tmp_path):
    old = f"ember.trace/{SCHEMA_VERSION - 1}"
    path = write(
        tmp_path / "old.jsonl",
        [meta(old), {"kind": "cache", "ts_ns": 1, "hit": False, "pos": 3, "shapes": []}],
    )
    report = validate_file(path, synthetic_v0())
    assert report.ok, report.errors
    assert report.counts == {"meta": 1, "cache": 1}


def test_older_version_without_migration_is_a_clear_error(tmp_path):
    path = write(tmp_path / "old.jsonl", [meta("ember.trace/0")])
    report = validate_file(path)
    assert not report.ok
    assert "older than any version this Ember can upgrade" in report.errors[0].message


def test_newer_version_names_both_versions(tmp_path):
    newer = f"ember.trace/{SCHEMA_VERSION + 1}"
    path = write(tmp_path / "new.jsonl", [meta(newer), {"kind": "cache"}])
    report = validate_file(path)
    assert len(report.errors) == 1  # the file is refused once, not line by line
    message = str(report.errors[0])
    assert message.startswith(f"{path}:1: ")
    assert newer in message
    assert SCHEMA_ID in message
    assert "upgrade Ember" in message


@pytest.mark.parametrize("bad", ["candle-graph/trace/6", "ember.trace/x", 3, None])
def test_schema_id_must_be_ember(bad):
    with pytest.raises(TraceVersionError):
        parse_schema_id(bad)


def test_a_migration_registers_once():
    migrations = synthetic_v0()
    with pytest.raises(ValueError, match="already registered"):
        migrations.register(SCHEMA_VERSION - 1)(lambda r: r)


def test_validate_file_reports_each_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    good = {"kind": "edge", "ts_ns": 1, "from_span": "a", "to_span": "b", "duration_ns": 2}
    path.write_bytes(
        (json.dumps(meta()) + "\n" + json.dumps(good) + "\n").encode()
        + b"\xff\xfe not utf8\n"
        + b'{"kind": "edge", "ts_ns": "soon"}\n'
        + json.dumps(meta()).encode()
        + b"\n"
        + b'{"kind": "edge", "ts_ns": 1, "from'
    )
    report = validate_file(path)
    assert report.counts == {"meta": 1, "edge": 1}
    lines = [(e.line, e.message.split(":")[0]) for e in report.errors]
    assert lines == [
        (3, "not UTF-8"),
        (4, "ts_ns"),
        (5, "a second 'meta' record; one file is one run"),
        (6, "not valid JSON"),
    ]


def test_first_line_must_be_meta(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"kind": "edge"}])
    assert "first record must be 'meta'" in validate_file(path).errors[0].message


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.touch()
    assert "empty file" in validate_file(path).errors[0].message


def v1_call_trace() -> list[dict]:
    """A version 1 trace as Ember wrote it: a call span that ended at dispatch."""
    call = {"source": "m.onnx", "shapes": [{"name": "x", "shape": [1, 3], "dtype": "float32"}]}
    return [
        meta("ember.trace/1"),
        {
            "kind": "span_start",
            "ts_ns": 10,
            "span_id": 1,
            "name": "ember.call",
            "span_kind": "call",
            "attrs": call,
        },
        {
            "kind": "span_end",
            "ts_ns": 210,
            "span_id": 1,
            "duration_ns": 200,
            "span_kind": "call",
            "attrs": call,
        },
        {
            "kind": "span_start",
            "ts_ns": 250,
            "span_id": 2,
            "name": "ember.break",
            "span_kind": "break",
            "attrs": {"source": "m.onnx", "position": 5, "node": "nz", "op_type": "NonZero"},
        },
        {
            "kind": "span_end",
            "ts_ns": 300,
            "span_id": 2,
            "duration_ns": 50,
            "span_kind": "break",
            "attrs": {"source": "m.onnx", "position": 5, "node": "nz", "op_type": "NonZero"},
        },
    ]


def test_version_1_is_upgraded_and_says_its_spans_ended_at_dispatch(tmp_path):
    from ember.schemas import MIGRATIONS, RECORD

    assert SCHEMA_VERSION == 5
    assert MIGRATIONS.oldest_readable() == 1
    path = write(tmp_path / "v1.jsonl", v1_call_trace())
    report = validate_file(path)
    assert report.ok, report.errors
    assert report.counts == {"meta": 1, "span_start": 2, "span_end": 2}
    records = [MIGRATIONS.upgrade(r, 1) for r in v1_call_trace()]
    meta_v2 = RECORD.validate_python(records[0])
    assert meta_v2.schema_id == SCHEMA_ID
    assert meta_v2.sync is False
    end = RECORD.validate_python(records[2])
    assert end.attrs.dispatch_ns is None
    assert end.duration_ns == 200
    # a version 2 meta without the field is synced (the default)
    assert RECORD.validate_python(meta()).sync is True


def test_version_2_reads_as_it_is_and_its_meta_is_upgraded():
    """2 -> 3 only added optional fields: a v2 trace's records are valid v3 records (ingest
    keeps its fast path for them), and the meta says version 3 once upgraded."""
    from ember.schemas import MIGRATIONS, RECORD

    assert [MIGRATIONS.reads_as_is(v) for v in (1, 2, 3, 4, 5, 6)] == [
        False,
        True,
        True,
        True,
        True,
        False,
    ]
    v2_meta = {**meta(), "schema": "ember.trace/2"}
    upgraded = MIGRATIONS.upgrade(dict(v2_meta), 2)
    assert RECORD.validate_python(upgraded).schema_id == SCHEMA_ID == "ember.trace/5"


def test_version_3_reads_as_it_is_and_belongs_to_no_job():
    """3 -> 4 only added the job fields and the ``process`` record: a v3 meta is a valid v4
    meta whose job, rank and world size are unknown; a ``process`` record is v4 only."""
    from ember.schemas import MIGRATIONS, RECORD

    v3_meta = {**meta(), "schema": "ember.trace/3"}
    upgraded = RECORD.validate_python(MIGRATIONS.upgrade(dict(v3_meta), 3))
    assert upgraded.schema_id == "ember.trace/5"
    assert (upgraded.job_id, upgraded.rank, upgraded.world_size) == (None, None, None)
    process = RECORD.validate_python(
        {
            "kind": "process",
            "ts_ns": 5,
            "backend": "cpu",
            "devices": ["cpu:0", "cpu:1"],
            "local_device_ids": [1],
            "job_id": "jax:127.0.0.1:9",
            "rank": 1,
            "world_size": 2,
        }
    )
    assert (process.rank, process.world_size, process.local_device_ids) == (1, 2, [1])
    with pytest.raises(ValueError, match="rank"):
        RECORD.validate_python({"kind": "process", "ts_ns": 5, "rank": -1})


def test_version_4_steps_read_as_they_are_and_name_no_function():
    """4 -> 5 only added a step's ``fun_name`` and the ``placement`` change: a v4 step span is
    a valid v5 one that names no function (its jitted calls' hits are not counted)."""
    from ember.schemas import MIGRATIONS, RECORD

    step = {
        "kind": "span_start",
        "ts_ns": 10,
        "span_id": 1,
        "name": "ember.step",
        "span_kind": "step",
        "attrs": {"step": "train", "index": 0},
    }
    assert MIGRATIONS.reads_as_is(4)
    assert RECORD.validate_python(MIGRATIONS.upgrade(dict(step), 4)).attrs.fun_name is None
    named = RECORD.validate_python({**step, "attrs": {**step["attrs"], "fun_name": "update"}})
    assert named.attrs.fun_name == "update"
    v4_meta = RECORD.validate_python(MIGRATIONS.upgrade({**meta(), "schema": "ember.trace/4"}, 4))
    assert v4_meta.schema_id == "ember.trace/5"
