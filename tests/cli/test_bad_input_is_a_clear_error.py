"""Input an adversarial pass found mishandled: each is a clear error (or works), never a
traceback, a misleading message or data said to be stored and lost."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ember.analysis import ingest
from ember.cli.main import app
from tests.analysis.traces import DATA

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_data_file_given_as_the_database_is_refused_not_ingested_into_memory(tmp_path):
    # DuckDB opens an existing .jsonl as an in-memory database with a view of the file:
    # the ingest said "67 records" and stored none, and readers said "Catalog Error"
    victim = tmp_path / "victim.jsonl"
    victim.write_bytes((DATA / "sweep.jsonl").read_bytes())
    before = victim.read_bytes()
    r = runner.invoke(app, ["ingest", str(DATA / "train.jsonl"), "--db", str(victim)])
    assert r.exit_code != 0
    assert "is a data file" in _flat(r.output)
    assert "records" not in _flat(r.output)
    assert victim.read_bytes() == before
    for args in (["query", "select 1"], ["report"], ["trends"]):
        r = runner.invoke(app, [*args, "--db", str(victim)])
        assert r.exit_code != 0, args
        assert "is a data file" in _flat(r.output), args
        assert "Catalog Error" not in r.output, args


def test_query_results_of_types_polars_cannot_take_come_as_text(tmp_path):
    db = tmp_path / "t.duckdb"
    ingest([DATA / "sweep.jsonl"], db)
    sql = (
        "SELECT max(started_at) - min(started_at) AS span, 'a'::BLOB AS b, "
        "map([1], [2]) AS m, union_value(k := 1) AS u, '101'::BIT AS bits, "
        'interval 3 day AS "odd ""name""" FROM runs'
    )
    for fmt in ("table", "line", "markdown", "csv", "json"):
        r = runner.invoke(app, ["query", "--db", str(db), sql, "-f", fmt])
        assert r.exit_code == 0, (fmt, r.output)
        assert "3 days" in r.output, fmt
        assert "101" in r.output, fmt
    r = runner.invoke(app, ["query", "--db", str(db), sql, "-f", "json"])
    (row,) = json.loads(r.output)
    assert row["span"] == "00:00:00"
    assert row["m"] == "{1=2}"
    assert row['odd "name"'] == "3 days"


def test_a_gate_config_that_is_not_utf8_or_whose_tool_is_not_a_table_is_bad_input(tmp_path):
    configs = {
        "garbage.toml": b"\xfc\xfd\x00 not text",
        "string.toml": b'tool = "x"\n',
        "number.toml": b"[tool]\nember = 5\n",
    }
    for name, body in configs.items():
        (tmp_path / name).write_bytes(body)
        r = runner.invoke(
            app,
            ["compare", str(DATA / "sweep.jsonl"), str(DATA / "sweep.jsonl")]
            + ["--config", str(tmp_path / name)],
        )
        assert r.exit_code == 2, (name, r.output)  # bad input, not a broken rule
        assert name in _flat(r.output), name
        assert r.exception is None or isinstance(r.exception, SystemExit), name


def test_a_candle_line_with_an_integer_beyond_64_bits_is_left_out_not_the_file(tmp_path):
    lines = (DATA / "candle" / "train.jsonl").read_text().splitlines()
    op = json.loads(lines[2])
    assert op["kind"] == "op"
    op["shape"] = [2**64, 3]
    lines[2] = json.dumps(op)
    src = tmp_path / "huge.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["import", "candle", str(src), "--out", str(out)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert f"{src.name}:3" in _flat(r.output)
    kept = out.read_text().splitlines()
    assert len(kept) == len(lines) - 1  # every other line converted
    assert "64-bit" in _flat(r.output)


def test_trends_says_the_filters_match_nothing_not_that_there_are_no_runs(tmp_path):
    db = tmp_path / "t.duckdb"
    ingest([DATA / "sweep.jsonl"], db)
    r = runner.invoke(app, ["trends", "--db", str(db), "--model", "nosuch"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "match --model nosuch" in _flat(r.output)
    assert "ingest traces" not in r.output


def test_out_of_range_row_counts_and_waits_are_refused(tmp_path):
    db = tmp_path / "t.duckdb"
    ingest([DATA / "sweep.jsonl"], db)
    for args in (["--max-rows", "0"], ["--max-rows", "-1"], ["--wait", "-5"]):
        r = runner.invoke(app, ["query", "--db", str(db), "select 1", *args])
        assert r.exit_code == 2, (args, r.output)
    r = runner.invoke(app, ["ingest", str(DATA / "sweep.jsonl"), "--db", str(db), "--wait", "-1"])
    assert r.exit_code == 2, r.output
    assert "--wait" in r.output  # the error names the option


def test_validate_reads_a_folder_as_its_traces_and_names_an_empty_one(tmp_path):
    folder = tmp_path / "traces"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.jsonl").write_bytes((DATA / "sweep.jsonl").read_bytes())
    (folder / "sub" / "b.jsonl").write_bytes((DATA / "train.jsonl").read_bytes())
    r = runner.invoke(app, ["validate", str(folder)], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert f"{folder / 'a.jsonl'}: ok" in r.output
    assert f"{folder / 'sub' / 'b.jsonl'}: ok" in r.output
    empty = tmp_path / "empty"
    empty.mkdir()
    r = runner.invoke(app, ["validate", str(empty)])
    assert r.exit_code == 1
    assert "a folder without .jsonl files" in _flat(r.output)


def test_a_chrome_export_makes_its_folder(tmp_path):
    db = tmp_path / "t.duckdb"
    ingest([DATA / "sweep.jsonl"], db)
    out = tmp_path / "new" / "dir" / "sweep.json"
    r = runner.invoke(app, ["export", "--db", str(db), "--chrome", str(out), "--run", "sweep"])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["traceEvents"]


def test_run_refuses_an_input_given_twice_naming_it(tmp_path):
    # the second --input x=... silently replaced the first
    trace = tmp_path / "t.jsonl"
    r = runner.invoke(
        app,
        ["run", "onnx:light/mlp", "--input", "x=2x4", "--input", "x=3x4", "--record", str(trace)],
    )
    assert r.exit_code != 0
    assert "--input x given twice" in _flat(r.output)
    assert "Traceback" not in r.output
    assert not trace.exists()


def test_run_refuses_a_folder_as_the_model_before_recording(tmp_path):
    trace = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["run", str(tmp_path), "--record", str(trace)])
    assert r.exit_code != 0
    assert "is a folder" in _flat(r.output)
    assert str(tmp_path) in _flat(r.output)
    assert not trace.exists()  # no failure trace for a model that was never loaded


def test_run_of_an_unknown_url_scheme_echoes_the_argument_as_given(tmp_path):
    trace = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["run", "ftp://x/y.onnx", "--record", str(trace)])
    assert r.exit_code != 0
    out = _flat(r.output)
    assert "ftp://x/y.onnx" in out  # not ftp:/x/y.onnx as Path() wrote it
    assert "unknown scheme" in out
    assert not trace.exists()


def test_compare_refuses_a_folder_as_a_run(tmp_path):
    # the folder was taken as a run id and looked up in --db
    r = runner.invoke(app, ["compare", str(tmp_path), "x", "--db", str(tmp_path / "e.duckdb")])
    assert r.exit_code == 2
    out = _flat(r.output)
    assert f"{tmp_path}: is a folder" in out
    assert "Traceback" not in r.output
