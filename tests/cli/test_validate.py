"""`ember validate`: ok with counts, or file:line errors and exit status 1."""

from __future__ import annotations

from typer.testing import CliRunner

from ember.cli.main import app
from ember.recorder import record

runner = CliRunner()


def test_valid_trace_prints_ok_with_counts(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path) as rec:
        rec.edge("a", "b", 1)
        rec.edge("b", "c", 2)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: ok, 3 records (2 edge, 1 meta)" in result.output.replace("\n", "")


def test_invalid_lines_are_listed_with_file_and_line(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path) as rec:
        rec.edge("a", "b", 1)
    with path.open("a") as f:
        f.write('{"kind": "edge", "ts_ns": 1, "from_span": "a", "to_span": "b"}\n')
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:3: duration_ns: missing required field" in result.output.replace("\n", "")


def test_missing_file(tmp_path):
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 1
    assert "no such file" in " ".join(result.output.split())
