"""`ember query` for a person at a terminal: a table that fits, --format line and markdown."""

from __future__ import annotations

from pathlib import Path

import duckdb
from typer.testing import CliRunner

from ember.cli.main import app

runner = CliRunner()
BREAKS = "SELECT * FROM breaks ORDER BY run_id"


def _query(db: Path, sql: str, *args: str, columns: int = 80):
    result = runner.invoke(
        app, ["query", sql, "--db", str(db), *args], env={"COLUMNS": str(columns)}
    )
    assert result.exit_code == 0, result.output
    return result.output


def _columns(db: Path, sql: str) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [d[0] for d in con.execute(sql).description]


def test_a_wide_result_on_an_80_column_terminal_leaves_columns_out_and_says_so(views_db):
    names = _columns(views_db, BREAKS)
    assert len(names) > 10  # wide enough to need cutting at 80 columns
    out = _query(views_db, BREAKS)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    header = next(line for line in lines if line.startswith("┃"))
    shown = [h.strip() for h in header.strip("┃").split("┃")]
    # the first columns, in the query's order, each header whole on one line (never folded)
    assert shown == names[: len(shown)]
    assert 3 <= len(shown) < len(names)
    assert sum(line.startswith("┃") for line in lines) == 1
    assert f"{len(names)} columns, {len(shown)} shown; --format line or csv for all" in out
    assert "left out: " + ", ".join(names[len(shown) :]) in " ".join(out.split())
    # one line per row; a value longer than its column is cut with an ellipsis
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 1  # the sweep's one break position
    with duckdb.connect(str(views_db), read_only=True) as con:
        values = ["NULL" if v is None else str(v) for v in con.execute(BREAKS).fetchone()]
    cells = [c.strip() for c in rows[0].strip("│").split("│")]
    cut = [(c, v) for c, v in zip(cells, values, strict=False) if c != v]
    assert cut
    assert all(c.endswith("…") and v.startswith(c[:-1]) for c, v in cut), cut


def test_a_narrow_result_is_shown_whole(views_db):
    sql = "SELECT run_id, op_type, reason FROM breaks"
    out = _query(views_db, sql, columns=120)
    with duckdb.connect(str(views_db), read_only=True) as con:
        run_id, _op_type, reason = con.execute(sql).fetchone()
    assert run_id in out
    assert reason in out
    assert "…" not in out
    assert "columns," not in out
    assert "1 row(s)" in out
    # the same query at 40 columns keeps each value on one line, cut, not wrapped
    narrow = _query(views_db, sql, columns=40)
    assert max(len(line) for line in narrow.splitlines()) <= 40
    assert sum(line.startswith("│") for line in narrow.splitlines()) == 1
    assert "…" in narrow


def test_format_line_shows_every_column_in_full(views_db):
    names = _columns(views_db, BREAKS)
    out = _query(views_db, BREAKS, "--format", "line")
    with duckdb.connect(str(views_db), read_only=True) as con:
        row = con.execute(BREAKS).fetchone()
    pad = max(map(len, names))
    body = out.splitlines()[: len(names)]
    assert body == [
        f"{n:>{pad}} = {'NULL' if v is None else v}" for n, v in zip(names, row, strict=True)
    ]
    assert "1 row(s)" in out


def test_format_markdown_is_a_table_to_paste(views_db, tmp_path):
    sql = "SELECT 'a|b' AS text, 2 AS n, NULL AS missing UNION ALL SELECT 'c', 10, 'x'"
    out = _query(views_db, sql + " ORDER BY n", "--format", "markdown")
    assert out.splitlines() == [
        "| text | n | missing |",
        "|---|---:|---|",
        "| a\\|b | 2 | NULL |",
        "| c | 10 | x |",
    ]
    forged = "SELECT '<!--' AS \"# h\", e'x\n## PASS [a](http://e.x)' AS t"
    out = _query(views_db, forged, "--format", "markdown")
    assert out.splitlines() == [
        "| \\# h | t |",
        "|---|---|",
        "| \\<\\!\\-\\- | x\\\\n\\#\\# PASS \\[a\\]\\(http\\:\\/\\/e\\.x\\) |",
    ]
    target = tmp_path / "q.md"
    _query(views_db, sql, "-f", "markdown", "-o", str(target))
    assert target.read_text().startswith("| text | n | missing |\n")
