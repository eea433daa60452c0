"""What a trace, a model or a path controls is text in the terminal too: never rich markup
(which crashed commands and made links), never a control sequence (colours, cursor moves,
hyperlinks), never a bidirectional override; and never a folder's name in an export."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from ember.analysis import connect, ingest
from ember.analysis.escape import md_text, terminal_text, visible, xml_text
from ember.cli.main import app
from tests.analysis.traces import DATA

runner = CliRunner()

ESC = "\x1b[31mred\x1b[0m\x1b]8;;http://evil.example\x07link\x1b]8;;\x07"


def _with_run_id(run_id: str, path: Path) -> Path:
    """The checked-in sweep trace with another run id."""
    lines = [json.loads(line) for line in (DATA / "sweep.jsonl").read_text().splitlines()]
    for r in lines:
        if r["kind"] == "meta":
            r["run_id"] = run_id
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_a_run_id_that_is_rich_markup_is_printed_as_it_is_by_the_gate(tmp_path):
    # '[/i]' closed no tag: rich raised a MarkupError, exit 1 (a broken rule's code)
    cand = _with_run_id("[/i]abcd-rest", tmp_path / "c.jsonl")
    r = runner.invoke(app, ["compare", str(DATA / "sweep.jsonl"), str(cand), "--fail-on", "none"])
    assert r.exit_code == 0, r.output
    assert "[/i]abcd" in r.output
    blink = _with_run_id("[blink]a-rest", tmp_path / "b.jsonl")
    r = runner.invoke(app, ["compare", str(DATA / "sweep.jsonl"), str(blink), "--fail-on", "none"])
    assert r.exit_code == 0, r.output
    assert "[blink]a" in r.output


def test_a_path_that_is_rich_markup_is_the_path_validate_names(tmp_path):
    for folder in ("[red]x", "[/i]"):
        path = tmp_path / folder / "t.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes((DATA / "sweep.jsonl").read_bytes())
        r = runner.invoke(app, ["validate", str(path)], env={"COLUMNS": "400"})
        assert r.exit_code == 0, r.output
        assert f"{path}: ok" in r.output


def test_the_run_table_shows_a_models_dimension_names_as_text(tmp_path):
    # a dimension name is the model publisher's: '[/i]n' crashed the summary after the run
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "[/i]n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "[/i]n"])],
    )
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    r = runner.invoke(
        app,
        ["run", str(model), "--calls", "1", "--record", str(tmp_path / "t.jsonl")],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 0, r.output
    assert "[/i]n=" in r.output


def test_control_sequences_from_a_trace_reach_no_terminal(tmp_path):
    db = tmp_path / "t.duckdb"
    ingest([_with_run_id(f"esc-{ESC}", tmp_path / "e.jsonl")], db)
    for args in (
        ["query", "--db", str(db), "select run_id from runs", "-f", "line"],
        ["query", "--db", str(db), "select run_id from runs"],
        ["report", "--db", str(db)],
        ["compare", str(DATA / "sweep.jsonl"), str(tmp_path / "e.jsonl"), "--fail-on", "none"],
    ):
        r = runner.invoke(app, args, env={"COLUMNS": "400"})
        assert r.exit_code == 0, (args, r.output)
        assert "\x1b" not in r.output, args
        assert "\x07" not in r.output, args
        assert "\\x1b" in r.output, args  # shown, as its escape


@pytest.mark.parametrize("show", [visible, terminal_text, md_text, xml_text])
def test_bidirectional_overrides_are_written_as_escapes(show):
    # U+202E reverses the rest of a line as shown ("Trojan Source"); U+2066 opens an isolate
    text = show("tag \u202eLIAF\u202c and \u2066x\u2069")
    assert not any(c in text for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    assert "u202e" in text
    assert "u2066" in text
    assert "LIAF" in text  # the text itself stays


def test_terminal_text_keeps_the_layout_and_shows_the_rest():
    assert terminal_text("a\tb\nc") == "a\tb\nc"
    assert terminal_text("a\x1b[2Jb\rc\x9b") == "a\\x1b[2Jb\\rc\\x9b"


def test_a_long_or_odd_run_id_is_exported_and_read_back_whole(tmp_path):
    long_id, odd_id = "x" * 300, "/".join(["..", ".."] * 60) + "/x"
    db = tmp_path / "t.duckdb"
    ingest(
        [
            _with_run_id(long_id, tmp_path / "long.jsonl"),
            _with_run_id(odd_id, tmp_path / "odd.jsonl"),
            DATA / "sweep.jsonl",
        ],
        db,
    )
    out = tmp_path / "pq"
    r = runner.invoke(app, ["export", "--db", str(db), "--parquet", str(out)])
    assert r.exit_code == 0, r.output
    # every file under out, each partition folder a short name
    files = list(out.rglob("*.parquet"))
    assert files
    assert all(p.resolve().is_relative_to(out.resolve()) for p in files)
    assert max(len(part) for p in files for part in p.relative_to(out).parts) < 100
    with connect(db, read_only=True) as con:
        want = con.sql("SELECT run_id, count(*) AS n FROM cache GROUP BY run_id ORDER BY run_id")
    got = duckdb.sql(
        f"SELECT run_id, count(*) AS n FROM read_parquet('{out}/cache/**/*.parquet', "
        "hive_partitioning = true) GROUP BY run_id ORDER BY run_id"
    ).fetchall()
    assert got == list(want.iter_rows())
    assert {long_id, odd_id, "sweep"} == {row[0] for row in got}
    # the dashboard opens the export, with the run ids whole
    from ember.dashboard.db import _open_export

    con = _open_export(out, {})
    try:
        ids = {row[0] for row in con.execute("SELECT run_id FROM runs").fetchall()}
        assert ids == {long_id, odd_id, "sweep"}
        assert con.execute("SELECT count(*) FROM cache").fetchall()[0][0] == sum(n for _, n in got)
    finally:
        con.close()
