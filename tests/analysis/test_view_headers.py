"""The views' typed headers (analysis/views.py) against what DuckDB builds and the SQL reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from ember.analysis import connect
from ember.analysis.db import view_sql
from ember.analysis.views import (
    RETIRED_VIEWS,
    VIEW_HEADERS,
    VIEW_NAMES,
    ViewHeaderError,
    parse_header,
    view_rows_source,
    views_read_by,
)

ROOT = Path(__file__).resolve().parents[2]


def _declared_type(duckdb_type: str) -> str:
    """A DuckDB type as a header writes it: any struct as STRUCT, no spaces."""
    if duckdb_type.startswith("STRUCT("):
        return "STRUCT[]" if duckdb_type.endswith("[]") else "STRUCT"
    return duckdb_type.replace(" ", "")


def test_each_header_lists_the_views_columns_in_order_with_their_types(con):
    for name, header in VIEW_HEADERS.items():
        built = [(r[0], _declared_type(r[1])) for r in con.execute(f"DESCRIBE {name}").fetchall()]
        declared = [(c.name, c.type) for c in header.columns]
        assert declared == built, f"sql/{name}.sql header"
        assert all(c.meaning for c in header.columns), f"sql/{name}.sql: a column without meaning"


def test_no_two_columns_of_a_view_share_a_meaning():
    # each column says what it holds; a group's words given to each member ('the run and
    # the model source' on run_id and source) tell a reader neither
    shared: dict[tuple[str, str], list[str]] = {}
    for name, header in VIEW_HEADERS.items():
        by_meaning: dict[str, list[str]] = {}
        for col in header.columns:
            by_meaning.setdefault(col.meaning, []).append(col.name)
        shared.update({(name, m): cols for m, cols in by_meaning.items() if len(cols) > 1})
    assert not shared, "\n".join(
        f"sql/{v}.sql: {cols} all say {m!r}" for (v, m), cols in shared.items()
    )


def test_each_header_names_the_views_its_sql_reads():
    for name, header in VIEW_HEADERS.items():
        tree = sqlglot.parse_one(view_sql(name), read="duckdb")
        ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
        read = {t.name for t in tree.find_all(exp.Table)} - ctes
        assert set(header.reads) == read & set(VIEW_NAMES), f"sql/{name}.sql reads"


def test_a_view_comes_after_the_views_it_reads():
    seen: set[str] = set()
    for name in VIEW_NAMES:
        assert set(VIEW_HEADERS[name].reads) <= seen, name
        seen.add(name)


def test_the_views_a_view_reads_are_found_through_the_views_between():
    # what must exist to query run_summary: the views it names and theirs, in order
    needed = views_read_by(["run_summary"])
    assert needed[-1] == "run_summary"
    assert set(VIEW_HEADERS["run_summary"].reads) < set(needed)  # more than the direct reads
    for i, name in enumerate(needed):
        assert set(VIEW_HEADERS[name].reads) <= set(needed[:i]), name
    assert len(needed) < len(VIEW_NAMES)
    # and no other: each is read by a view after it
    for i, name in enumerate(needed[:-1]):
        assert any(name in VIEW_HEADERS[later].reads for later in needed[i + 1 :]), name
    assert views_read_by(["run_summary", "run_summary"]) == needed
    assert views_read_by([]) == ()
    with pytest.raises(ValueError, match="there is no view 'nope'; the views: "):
        views_read_by(["nope"])


def test_run_summary_columns_not_marked_nullable_are_never_null(con):
    for col in VIEW_HEADERS["run_summary"].columns:
        if not col.nullable:
            nulls = con.sql(f'SELECT count(*) AS n FROM run_summary WHERE "{col.name}" IS NULL')
            assert nulls["n"][0] == 0, col.name
    assert con.sql("SELECT count(*) AS n FROM run_summary")["n"][0] >= 2


def test_underscore_views_are_read_by_views_only():
    # a `_` view is the views' own helper; the report, compare, the dashboard and the CLI
    # read public views (a `_` view they need is made public)
    private = [v for v in VIEW_NAMES if v.startswith("_")]
    assert private  # _compiling_spans today
    for folder in ("analysis", "dashboard", "cli", "runtime", "recorder"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text("utf-8")
            used = [v for v in private if re.search(rf"\b{v}\b", text)]
            assert not used, f"{path.relative_to(ROOT)} reads {used}"


def test_view_rows_py_is_generated_from_the_headers():
    current = (ROOT / "analysis" / "view_rows.py").read_text("utf-8")
    assert current == view_rows_source(), (
        "run `python -m ember.analysis.views > analysis/view_rows.py`"
    )


def test_a_malformed_column_line_names_the_file_and_line():
    text = (
        "-- v: one row per thing.\n--\n-- reads: tables only\n--\n-- a  BIGINT  ok\n-- b\nSELECT 1"
    )
    with pytest.raises(ViewHeaderError, match=r"sql/v\.sql line 6: '-- b' is not a column line"):
        parse_header("v", text)
    with pytest.raises(ViewHeaderError, match="no '-- reads:' line"):
        parse_header("v", "-- v: one row per thing.\n--\n-- a  BIGINT  ok\nSELECT 1")
    header = parse_header("v", text.replace("-- b\n", "-- b  VARCHAR?  two\n--    lines\n"))
    assert [(c.name, c.type, c.nullable, c.meaning) for c in header.columns] == [
        ("a", "BIGINT", False, "ok"),
        ("b", "VARCHAR", True, "two lines"),
    ]


def test_an_upgrade_drops_the_views_that_were_renamed(tmp_path):
    db = tmp_path / "old.duckdb"
    with connect(db) as con:
        con.execute("CREATE VIEW _memory_peaks AS SELECT 1 AS x")
        con.execute("UPDATE ember_schema SET hash = 'older'")
    with connect(db, read_only=False) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    assert "_memory_peaks" in RETIRED_VIEWS
    assert "_memory_peaks" not in views
    assert {"memory_peaks", "run_summary"} <= views
