"""The SQL views' typed headers: what each ``sql/<name>.sql`` says a row, its columns and
the views it reads are, and the view order that follows from them.

A view's file starts with a comment block (the way Perfetto's standard library documents
its tables)::

    -- run_summary: one row per run: the headline numbers, defined once.
    -- (more prose)
    --
    -- reads: compiles, latency_samples, peak_memory
    --
    -- run_id      VARCHAR   the run
    -- model       VARCHAR?  the model tag
    --                       (a meaning goes on below, indented)

``reads`` names the views it reads (``tables only`` when it reads none); each column line
is its name, its DuckDB type (``STRUCT`` / ``STRUCT[]`` stand for any struct type: their
fields are the schema's) and what it means. A ``?`` after the type says the column may be
NULL; it is written where Python reads the view as typed rows (``run_summary``:
``view_rows.RunSummaryRow``), and a test checks it there. A test checks the headers against
the views DuckDB builds (names, order, types) and ``reads`` against the SQL.

Views whose name starts with ``_`` are read only by other views; the rest are public (the
report, compare, the dashboard and the CLI read them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

__all__ = [
    "RETIRED_VIEWS",
    "VIEW_HEADERS",
    "VIEW_NAMES",
    "ViewColumn",
    "ViewHeader",
    "ViewHeaderError",
    "parse_header",
    "row_class_source",
    "view_rows_source",
    "views_read_by",
]


@dataclass(frozen=True)
class ViewColumn:
    """One column of a view, as its header declares it."""

    name: str
    type: str  # DuckDB's type name; 'STRUCT' / 'STRUCT[]' for any struct (list)
    nullable: bool  # declared with '?': may be NULL
    meaning: str


@dataclass(frozen=True)
class ViewHeader:
    """A view's header: what a row is, the views it reads and its columns."""

    name: str
    doc: str  # the first paragraph: '<name>: one row per ...'
    reads: tuple[str, ...]
    columns: tuple[ViewColumn, ...]


class ViewHeaderError(ValueError):
    """A view file whose header does not follow the form this module reads."""


_COLUMN = re.compile(
    r"^-- (?P<name>[a-z_][a-z0-9_]*)\s+"
    r"(?P<type>[A-Z][A-Z0-9_]*(?:\([^)]*\))?(?:\[\])?)(?P<null>\?)?(?:\s+(?P<meaning>.*))?$"
)
_CONTINUED = re.compile(r"^--\s{2,}(?P<text>\S.*)$")


def _comment_lines(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.rstrip())
    return lines


def _reads(name: str, lines: list[str]) -> tuple[int, tuple[str, ...]]:
    """The index of the ``reads:`` line and the views it names."""
    for i, line in enumerate(lines):
        if line.startswith("-- reads:"):
            value = line.removeprefix("-- reads:").strip()
            views = () if value == "tables only" else tuple(v.strip() for v in value.split(","))
            return i, views
    raise ViewHeaderError(
        f"sql/{name}.sql: no '-- reads:' line in its header (name the views it reads, "
        "or 'tables only')"
    )


def _columns(name: str, lines: list[str], start: int) -> tuple[ViewColumn, ...]:
    """The column lines from ``start`` to the next blank comment line."""
    columns: list[ViewColumn] = []
    for number, line in enumerate(lines[start:], start + 1):
        if line == "--":
            if columns:
                break
            continue
        if (more := _CONTINUED.match(line)) and columns:
            last = columns[-1]
            columns[-1] = ViewColumn(
                last.name, last.type, last.nullable, f"{last.meaning} {more['text']}".strip()
            )
            continue
        if not (m := _COLUMN.match(line)):
            raise ViewHeaderError(
                f"sql/{name}.sql line {number}: {line!r} is not a column line "
                "('-- name  TYPE  meaning', or its meaning continued after two spaces)"
            )
        columns.append(ViewColumn(m["name"], m["type"], bool(m["null"]), m["meaning"] or ""))
    if not columns:
        raise ViewHeaderError(f"sql/{name}.sql: its header lists no columns after '-- reads:'")
    return tuple(columns)


def parse_header(name: str, text: str) -> ViewHeader:
    """The header of the view ``name`` whose file is ``text``."""
    lines = _comment_lines(text)
    if not lines or not lines[0].startswith(f"-- {name}: one row per"):
        raise ViewHeaderError(
            f"sql/{name}.sql: the first line must be '-- {name}: one row per ...'"
        )
    doc_end = lines.index("--") if "--" in lines else len(lines)
    doc = " ".join(line.removeprefix("--").strip() for line in lines[:doc_end])
    at, reads = _reads(name, lines)
    return ViewHeader(name, doc, reads, _columns(name, lines, at + 1))


def _dependency_order(headers: dict[str, ViewHeader]) -> tuple[str, ...]:
    """The views with each after the views it reads (by name where free to choose)."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ViewHeaderError(f"sql/{name}.sql: the views' reads make a cycle through it")
        if name not in headers:
            raise ViewHeaderError(f"a header reads {name!r}, which is not a view in sql/")
        visiting.add(name)
        for read in headers[name].reads:
            visit(read)
        visiting.discard(name)
        order.append(name)

    for name in sorted(headers):
        visit(name)
    return tuple(order)


def _read_headers() -> dict[str, ViewHeader]:
    folder = resources.files("ember.analysis").joinpath("sql")
    headers = {}
    for entry in folder.iterdir():
        name = entry.name.removesuffix(".sql")
        if entry.name.endswith(".sql") and name != "macros":
            headers[name] = parse_header(name, entry.read_text("utf-8"))
    return {name: headers[name] for name in _dependency_order(headers)}


VIEW_HEADERS: dict[str, ViewHeader] = _read_headers()
"""Each view's header, in dependency order (a view after the views it reads)."""

VIEW_NAMES: tuple[str, ...] = tuple(VIEW_HEADERS)
"""The views in dependency order: the order they are created in."""


def views_read_by(names: Iterable[str]) -> tuple[str, ...]:
    """The views ``names`` and every view they read, directly or through others, in
    dependency order: what must exist for them to be queried."""
    wanted: set[str] = set()

    def add(name: str) -> None:
        if name not in VIEW_HEADERS:
            raise ValueError(f"there is no view {name!r}; the views: {', '.join(VIEW_NAMES)}")
        if name not in wanted:
            wanted.add(name)
            for read in VIEW_HEADERS[name].reads:
                add(read)

    for name in names:
        add(name)
    return tuple(name for name in VIEW_NAMES if name in wanted)


RETIRED_VIEWS: tuple[str, ...] = tuple(
    f"_{name}"
    for name in [
        "break_nodes",
        "bucket_advice",
        "cache_positions",
        "call_errors",
        "call_windows",
        "compile_sizes",
        "compiles_by_where",
        "disk_cache_runs",
        "eviction_sites",
        "eviction_totals",
        "hub_checks",
        "hub_totals",
        "jit_functions",
        "jit_retraces",
        "latency_samples",
        "memory_peaks",
        "recompile_causes",
        "recompile_changes",
        "recompile_positions",
        "recompile_reasons",
        "rejected_files",
        "segment_memory",
        "slowest_shapes",
        "tensor_samples",
        "thrash_positions",
        "trend_points",
    ]
)
"""Views an older Ember made that a database upgrade drops (renamed: read outside the views,
they are public now, without the ``_``)."""

_PYTHON_TYPES = {
    "VARCHAR": "str",
    "BIGINT": "int",
    "INTEGER": "int",
    "DOUBLE": "float",
    "BOOLEAN": "bool",
    "TIMESTAMP_NS": "datetime",
}


def row_class_source(view: str, class_name: str) -> str:
    """Python source of a dataclass with one field per column of ``view`` (``view_rows.py``
    is made of these)."""
    header = VIEW_HEADERS[view]
    lines = ["@dataclass", f"class {class_name}:", f'    """A row of the ``{view}`` view."""', ""]
    for col in header.columns:
        if col.type not in _PYTHON_TYPES:
            raise ViewHeaderError(f"sql/{view}.sql: {col.name} {col.type} has no Python type here")
        kind = _PYTHON_TYPES[col.type] + (" | None" if col.nullable else "")
        lines.append(f"    {col.name}: {kind}")
    return "\n".join(lines) + "\n"


_ROW_CLASSES = {"run_summary": "RunSummaryRow"}


def view_rows_source() -> str:
    """The text of ``view_rows.py``."""
    head = (
        '"""Typed rows of the views Python reads field by field, generated from the views\' '
        "headers:\n``python -m ember.analysis.views > analysis/view_rows.py`` (a test checks "
        'it is current)."""\n\nfrom __future__ import annotations\n\n'
        "from dataclasses import dataclass\nfrom datetime import datetime\n\n"
        "__all__ = [" + ", ".join(f'"{c}"' for c in sorted(_ROW_CLASSES.values())) + "]\n"
    )
    classes = [row_class_source(view, cls) for view, cls in _ROW_CLASSES.items()]
    return head + "".join(f"\n\n{c}" for c in classes)


if __name__ == "__main__":
    print(view_rows_source(), end="")
