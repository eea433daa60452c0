"""One set of limits, in the schema, for ``ember validate`` and ``ember ingest`` alike.

Each case is checked both ways on the same file: the lines validate refuses are the lines
ingest rejects, for the same reason, and everything else goes in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ember.analysis import connect, ingest
from ember.cli.main import app
from ember.schemas import validate_file
from ember.schemas.records import INT64_MAX, MAX_LINE_BYTES, MAX_NESTING, MAX_RUN_NS
from tests.analysis.traces import cache_line, meta_line, write_lines


def _nested(levels: int) -> str:
    """A JSON array ``levels`` deep."""
    return "[" * levels + "1" + "]" * levels


def _cache_with_static(value_json: str, ts: int = 5) -> str:
    """A cache record whose one static value is ``value_json``; the record's object, the
    statics list and the static's object are 3 levels before the value."""
    head = json.dumps(json.loads(cache_line(ts, "hit")) | {"statics": []})[: -len("[]}")]
    return head + '[{"name": "x", "value": ' + value_json + "}]}"


def _both(tmp_path: Path, name: str, lines: list[str | bytes]):
    """``(validate's errors by line, ingest's rejected lines by line, the FileResult)``."""
    path = write_lines(tmp_path / name, lines)
    report = validate_file(path)
    db = tmp_path / f"{name}.duckdb"
    result = ingest([path], db).files[0]
    with connect(db, read_only=True) as con:
        rejected = dict(con.duck.execute("SELECT line, reason FROM rejected_lines").fetchall())
    return {e.line: e.message for e in report.errors}, rejected, result


def test_a_deeply_nested_line_is_rejected_and_every_other_line_and_file_goes_in(tmp_path):
    # 1,100 levels: json.loads raised RecursionError in validate and in ingest, which
    # aborted the whole command and left the database empty
    deep = write_lines(
        tmp_path / "deep.jsonl",
        [
            meta_line("deep"),
            cache_line(1, "miss"),
            _cache_with_static(_nested(1100)),
            cache_line(2),
        ],
    )
    good = write_lines(tmp_path / "good.jsonl", [meta_line("good"), cache_line(1, "miss")])
    db = tmp_path / "t.duckdb"
    first, second = ingest([deep, good], db).files
    assert (first.status, first.records, first.rejected) == ("ok", 3, 1)
    assert (second.status, second.records, second.rejected) == ("ok", 2, 0)
    with connect(db, read_only=True) as con:
        assert con.duck.execute("SELECT line, reason FROM rejected_lines").fetchall() == [
            (
                3,
                f"nested deeper than {MAX_NESTING} levels of arrays and objects (the limit for "
                f"one record); record deep values as text",
            )
        ]
        assert con.duck.execute(
            "SELECT run_id, count(*) FROM cache GROUP BY ALL ORDER BY 1"
        ).fetchall() == [("deep", 2), ("good", 1)]
    [error] = validate_file(deep).errors
    assert error.line == 3
    assert error.message.startswith(f"nested deeper than {MAX_NESTING}")
    out = CliRunner().invoke(app, ["validate", str(deep)])
    assert out.exit_code == 1
    assert f"{deep}:3: nested deeper" in out.output.replace("\n", "")


def test_a_deeply_nested_first_line_or_last_line_is_refused_or_rejected_not_a_crash(tmp_path):
    deep_meta = write_lines(tmp_path / "m.jsonl", [_nested(5000), cache_line(1)])
    r = ingest([deep_meta], tmp_path / "m.duckdb").files[0]
    assert r.status == "refused"
    assert r.message.startswith("line 1: nested deeper than")
    assert validate_file(deep_meta).errors[0].message.startswith("nested deeper than")
    # a deep last line without its newline: the check for a complete last record parsed it
    tail = write_lines(
        tmp_path / "tail.jsonl",
        [meta_line(), cache_line(1, "miss"), _cache_with_static(_nested(3000))],
        newline_at_end=False,
    )
    r = ingest([tail], tmp_path / "tail.duckdb").files[0]
    assert (r.status, r.records, r.rejected) == ("partial", 2, 1)


@pytest.mark.parametrize("extra", [0, 1])
def test_the_nesting_limit_is_the_same_for_validate_and_the_fast_path(tmp_path, extra):
    # MAX_NESTING levels in all (record, statics list, static, then the value): validate
    # accepts the line and ingest's fast path reads it; one more level: both refuse it
    value = _nested(MAX_NESTING - 3 + extra)
    user = {"kind": "span_start", "ts_ns": 9, "span_id": 1, "name": "mine", "span_kind": "user"}
    # record, attrs, attrs.attrs, then the value
    user_line = json.dumps(user)[:-1] + ', "attrs": {"attrs": {"v": ' + value + "}}}"
    wide = _cache_with_static("[" + ", ".join(["[[1]]"] * 200) + "]")  # many brackets, 3 deep
    errors, rejected, r = _both(
        tmp_path,
        "n.jsonl",
        [meta_line(), cache_line(1, "miss"), _cache_with_static(value), user_line, wide],
    )
    assert not r.slow_path
    if extra == 0:
        assert (errors, rejected, r.records) == ({}, {}, 5)
    else:
        assert set(errors) == set(rejected) == {3, 4}
        assert errors == rejected
        assert rejected[3].startswith("nested deeper than")
        assert r.records == 3


BAD_TS = [
    "true",
    "false",
    "1.5",
    "7.0",
    '"7"',
    str(2**70),
    str(INT64_MAX + 1),
    "-1",
    "null",
    str(INT64_MAX),
    str(MAX_RUN_NS + 1),
]


def test_ts_ns_must_be_a_json_integer_in_range_for_validate_and_ingest(tmp_path):
    # before: true, 7.0 and "7" went in as 1 and 7 both ways, 1.5 went into the database
    # as 2, and 2**70 passed validate but not ingest
    good = cache_line(MAX_RUN_NS, "hit")
    bad = [cache_line(12345, "hit").replace('"ts_ns": 12345', f'"ts_ns": {v}') for v in BAD_TS]
    errors, rejected, r = _both(
        tmp_path, "ts.jsonl", [meta_line(), cache_line(1, "miss"), *bad, good]
    )
    bad_lines = set(range(3, 3 + len(BAD_TS)))
    assert set(errors) == bad_lines, errors
    assert set(rejected) == bad_lines, rejected
    assert all(m.startswith("ts_ns: ") for m in [*errors.values(), *rejected.values()])
    assert r.records == 3
    assert not r.slow_path
    with connect(tmp_path / "ts.jsonl.duckdb", read_only=True) as con:
        assert con.duck.execute("SELECT ts_ns FROM cache ORDER BY ts_ns").fetchall() == [
            (1,),
            (MAX_RUN_NS,),
        ]


def test_other_integers_must_fit_64_bits_for_both(tmp_path):
    # position 2**70 passed validate and was rejected by ingest
    over = cache_line(5, "hit").replace('"position": 0', f'"position": {2**70}')
    shape = cache_line(6, "hit").replace('"shape": [1, 17]', f'"shape": [1, {2**64}]')
    errors, rejected, r = _both(tmp_path, "i.jsonl", [meta_line(), over, shape, cache_line(7)])
    assert set(errors) == set(rejected) == {2, 3}
    assert "less than or equal to 9223372036854775807" in errors[2]
    assert r.records == 2


def test_a_line_over_the_size_limit_fails_validate_too(tmp_path):
    # a 17 MB line passed validate and was rejected by ingest
    huge = cache_line(9, "hit", key="x" * (MAX_LINE_BYTES + 1024))
    errors, rejected, r = _both(tmp_path, "big.jsonl", [meta_line(), huge, cache_line(10)])
    assert set(errors) == set(rejected) == {2}
    assert errors[2] == rejected[2]
    assert errors[2].startswith("line is over 16 MB")
    assert r.records == 2


def _span_line(kind: str, span_id: int, ts: int, span_kind: str, attrs: dict, **extra) -> str:
    rec = {"kind": kind, "ts_ns": ts, "span_id": span_id, "span_kind": span_kind, "attrs": attrs}
    if kind == "span_start":
        rec["name"] = "ember.break"
    else:
        rec |= {"duration_ns": 5, "status": "ok"}
    return json.dumps(rec | extra)


def test_an_unknown_field_inside_a_known_struct_is_rejected_by_validate_and_ingest(tmp_path):
    # the typed read skipped keys it was not asked for inside a struct: ingest kept these
    # lines (without the field) where validate refused them
    brk = {"source": "m.onnx", "position": 12, "node": "n", "op_type": "NonZero"}
    shape = json.loads(cache_line(1))["shapes"][0]
    seg = {"source": "m", "position": 0, "shapes": [shape | {"layout": "nhwc"}]}
    lines = [
        meta_line(),
        cache_line(1, "miss"),
        _span_line("span_start", 1, 2, "break", brk | {"colour": "red"}),  # in attrs
        _span_line("span_start", 2, 3, "break", brk),
        _span_line("span_end", 2, 4, "break", brk, error={"kind": "E", "reason": "r", "x": 1}),
        cache_line(5, shapes=[shape | {"strides": [1]}]),  # in a list's item
        cache_line(6, statics=[{"name": "s", "value": 1, "hash": "h"}]),
        _span_line("span_start", 3, 7, "segment_compile", seg),  # a list's item in attrs
        _span_line("span_start", 5, 10, "user", {"attrs": {"any": {"key": 1}}}),  # free-form
        cache_line(11, statics=[{"name": "s", "value": {"free": "form"}}]),
        _span_line("span_start", 6, 12, "break", brk | {"memory": {"temp_bytes": 1}}),
    ]
    errors, rejected, r = _both(tmp_path, "unknown.jsonl", lines)
    assert set(errors) == {3, 5, 6, 7, 8, 11}, errors
    assert rejected == errors
    assert "colour" in errors[3]
    assert "strides" in errors[6]
    assert r.records == len(lines) - len(errors)
    assert not r.slow_path


def test_a_wrong_value_inside_a_struct_is_rejected_by_validate_and_ingest_alike(tmp_path):
    # objects are staged as JSON text and judged by their structure: each kind of wrong
    # value inside one, the same verdict and reason as validate, on the fast path
    brk = {"source": "m.onnx", "position": 12, "node": "n", "op_type": "NonZero"}
    shape = json.loads(cache_line(1))["shapes"][0]
    seg_end = {"source": "m", "position": 0, "compiled": True}
    bad = [
        cache_line(2, shapes=[shape | {"shape": [1, 2**63]}]),  # over int64, in a list
        _span_line("span_start", 1, 3, "break", brk | {"position": "twelve"}),
        _span_line("span_start", 2, 4, "break", brk | {"position": 2**63}),
        _span_line("span_start", 3, 5, "break", brk | {"position": 12.5}),
        cache_line(6, shapes=[shape | {"dtype": 3}]),  # a number for a text field
        _span_line("span_end", 4, 8, "break", brk, error={"kind": "E", "reason": ["r"]}),
        cache_line(9, shapes=[None, shape]),  # a null item
        cache_line(10, shapes=[shape | {"shape": [1, -5]}]),  # negative
        _span_line("span_start", 5, 11, "break", {"source": "m", "position": 1}),  # no node
        _span_line("span_end", 6, 12, "break", brk, error={"kind": "E"}),  # no reason
        _span_line("span_end", 7, 13, "segment", seg_end | {"stop": "begin"}),  # not 'end'
        _span_line("span_start", 8, 14, "break", brk | {"tracing_ns": None}),  # a jit field
        _span_line(
            "span_end", 9, 15, "jit", {"fun_name": "f", "changes": [{"arg": "x", "what": "colour"}]}
        ),  # a value not allowed in a list's item
        _span_line("span_start", 10, 16, "op", {"op_kind": "kernel"}),
    ]
    good = [
        meta_line(),
        cache_line(1, "miss"),
        _span_line("span_start", 4, 7, "break", brk),
        _span_line("span_start", 6, 7, "break", brk),
        _span_line("span_start", 7, 7, "segment", seg_end),
        _span_line("span_start", 9, 7, "jit", {"fun_name": "f"}),
        _span_line("span_start", 12, 7, "segment", seg_end),
        _span_line("span_start", 13, 7, "segment", seg_end),
        _span_line("span_end", 12, 17, "segment", seg_end | {"stop": "end"}),
        _span_line("span_end", 13, 18, "segment", seg_end | {"stop": 3}),
        cache_line(19, statics=[]),
        _span_line("span_start", 11, 20, "op", {"op_kind": "module"}),
    ]
    errors, rejected, r = _both(tmp_path, "values.jsonl", good + bad)
    assert set(errors) == set(range(len(good) + 1, len(good) + len(bad) + 1)), errors
    assert rejected == errors
    assert r.records == len(good)
    assert not r.slow_path
