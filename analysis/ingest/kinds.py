"""The split read: a batch of trace files checked line by line and read by DuckDB kind by kind.

The DuckDB-file ingest's fast path for files read from their start (``ingest.database``;
continued files, older schema versions, ``strict`` and lines over the size limit take the
``_stage`` path of ``ingest.read``, and so does a batch DuckDB refuses here):

1. One pass in Python over each file's bytes, a chunk of whole lines at a time: the checks
   compiled from the pydantic models (``ingest.line_check``, msgspec) accept a chunk in
   a few C calls; a chunk with a line they refuse is judged line by line, and pydantic
   explains (and rejects) the lines it refuses too. The span ids are checked in the same
   pass (a second span_start or span_end of an id, a span_end before its span_start: the
   rules of ``checks.span_problems_sql``). The accepted lines go, as they are, to one
   JSONL file per record kind (``KindFiles``).
2. DuckDB reads each kind's file with that kind's own table types (``TABLE_COLUMNS``:
   objects as their STRUCTs, integers as BIGINT) as ``_stage_<kind>`` (a view its insert
   reads once; a table for cache and memory, whose inserts number rows by their order),
   which the inserts (``database.TYPED_INSERTS``) take as they are. Reading every line with the
   union of every kind's columns cost more than DuckDB's whole read into one table; a
   kind's own columns are a few, and no JSON is parsed twice by DuckDB.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import duckdb

from ember.analysis.ingest.line_check import KIND_OF, decode_chunk, decode_line
from ember.analysis.ingest.plan import FilePlan, Rejected, locate_lines, raw_text
from ember.analysis.ingest.read import (
    FileIngest,
    explain_line,
    files_table,
    find_long_line,
    line_chunks,
    no_gc,
    read_json_sql,
)
from ember.analysis.schema_types import TABLE_COLUMNS
from ember.schemas import Migrations
from ember.schemas.validate import parse_line

__all__ = ["KindFiles", "splittable", "stage_kinds"]

_AGAIN = " (span ids are unique in a run; were two traces concatenated?)"


class SpanIds:
    """The span-id rules of one file read from its start, line by line, as
    ``checks.span_problems_sql`` has them (and ``ember validate``): a second span_start of
    an id, a second span_end of an id, a span_end before any span_start of its id."""

    def __init__(self) -> None:
        self.started: set[int] = set()
        self.ended: set[int] = set()

    def start(self, span_id: int) -> str | None:
        if span_id in self.started:
            return f"a second span_start of span_id {span_id}{_AGAIN}"
        self.started.add(span_id)
        return None

    def end(self, span_id: int) -> str | None:
        if span_id in self.ended:
            return f"a second span_end of span_id {span_id}{_AGAIN}"
        self.ended.add(span_id)
        if span_id not in self.started:
            return f"span_end without a span_start (span_id {span_id})"
        return None


class _Accepted:
    """A line the compiled checks refused and pydantic accepted: its kind and span id."""

    __slots__ = ("kind", "span_id")

    def __init__(self, data: dict[str, Any]) -> None:
        self.kind = data["kind"]
        self.span_id = data.get("span_id")


class KindFiles:
    """The accepted lines of a batch, one JSONL file per record kind in ``tmp``, and how many
    rows of each file (``f``) each holds. With more than one file in the batch each line
    gets its file's number (``"_f"``) in front: a kind's rows are read in one go."""

    def __init__(self, tmp: Path, files: int) -> None:
        self.tmp = tmp
        self.files = files
        self.counts: dict[str, list[int]] = {}
        self._out: dict[str, IO[bytes]] = {}

    def path(self, kind: str) -> Path:
        return self.tmp / f"kind-{kind}.jsonl"

    def add(self, kind: str, f: int, lines: list[bytes]) -> None:
        out = self._out.get(kind)
        if out is None:
            out = self._out[kind] = self.path(kind).open("wb")
            self.counts[kind] = [0] * self.files
        if self.files > 1:
            head = b'{"_f":%d,' % f
            lines = [head + line.lstrip()[1:] for line in lines]
        out.write(b"\n".join(lines))
        out.write(b"\n")
        self.counts[kind][f] += len(lines)

    def close(self) -> None:
        for out in self._out.values():
            out.close()


def splittable(plans: list[FilePlan], migrations: Migrations, strict: bool) -> bool:
    """Whether a batch can take the split read: every file read from its start (the span
    ids of a continued file's run are in the database), of this schema version, and not
    ``strict``."""
    return not strict and all(p.start == 0 and migrations.reads_as_is(p.version) for p in plans)


def split_file(w: FileIngest, out: KindFiles) -> None:
    """Check the lines of one planned file and add the accepted ones to ``out``; the
    rejected ones (with pydantic's reason, or a span-id rule's) to ``w.rejected``."""
    plan = w.plan
    spans = SpanIds()
    late: dict[int, str] = {}  # ordinal -> a span-id rule's reason
    ordinal = 0  # non-blank lines before the chunk
    number = plan.base_line
    offset = plan.start
    for chunk in line_chunks(plan.path, plan.start, w.end):
        decoded = decode_chunk(chunk, meta_ok=ordinal == 0)
        kept: list[int] | None = None  # the ordinals in the chunk of ``lines``, when not all
        if decoded is None:
            lines, records, kept = _judge_chunk(w, chunk, offset, number, ordinal)
        else:
            lines, records = decoded
        groups, problems = _group(lines, records, spans)
        for i, why in problems:
            late[ordinal + (i if kept is None else kept[i])] = why
        for kind, group in groups.items():
            out.add(kind, w.f, group)
        ordinal += len(lines) if kept is None else _count_records(chunk)
        number += chunk.count(b"\n")
        offset += len(chunk)
    if late:
        for o, (line_no, at, raw) in locate_lines(plan, w.end, sorted(late)).items():
            w.rejected.append(Rejected(line_no, at, late[o], raw_text(raw)))
    w.rejected.sort(key=lambda r: r.line)


def _group(
    lines: list[bytes], records: list[Any], spans: SpanIds
) -> tuple[dict[str, list[bytes]], list[tuple[int, str]]]:
    """The lines by record kind, but those a span-id rule rejects: ``(index, reason)``.
    (The hot loop of ingest: one pass, the span-id rules inlined where a line keeps them.)"""
    groups: dict[str, list[bytes]] = {}
    problems: list[tuple[int, str]] = []
    started, ended = spans.started, spans.ended
    for i, r in enumerate(records):
        kind = KIND_OF.get(type(r)) or r.kind
        if kind == "span_start":
            sid = r.span_id
            if sid in started:
                problems.append((i, spans.start(sid) or ""))
                continue
            started.add(sid)
        elif kind == "span_end":
            sid = r.span_id
            if sid in ended or sid not in started:
                problems.append((i, spans.end(sid) or ""))
                continue
            ended.add(sid)
        group = groups.get(kind)
        if group is None:
            group = groups[kind] = []
        group.append(lines[i])
    return groups, problems


def _count_records(chunk: bytes) -> int:
    return sum(1 for line in chunk.split(b"\n") if line.strip())


def _judge_chunk(
    w: FileIngest, chunk: bytes, offset: int, number: int, ordinal: int
) -> tuple[list[bytes], list[Any], list[int]]:
    """A chunk the compiled checks refused, line by line: the lines accepted (by them, or by
    pydantic), their records (``_Accepted`` for those pydantic accepted) and their ordinals
    among the chunk's non-blank lines; the others rejected with pydantic's reason."""
    lines: list[bytes] = []
    records: list[Any] = []
    kept: list[int] = []
    i = -1
    for line in chunk.split(b"\n"):
        number += 1
        at = offset
        offset += len(line) + 1
        if not line.strip():
            continue
        i += 1
        first = w.plan.start == 0 and ordinal + i == 0
        record = decode_line(line, meta_ok=first)
        if record is None:
            raw = line.rstrip(b"\r")
            reason = explain_line(raw, expect_meta=first)
            if reason is not None:
                w.rejected.append(Rejected(number, at, reason, raw_text(raw)))
                continue
            record = _Accepted(parse_line(raw))
        lines.append(line)
        records.append(record)
        kept.append(i)
    return lines, records, kept


class SplitRefused(Exception):
    """DuckDB refused a kind's lines that the checks accepted: the batch goes the other way."""


def stage_kinds(
    con: duckdb.DuckDBPyConnection,
    plans: list[FilePlan],
    migrations: Migrations,
    tmp: Path,
) -> tuple[list[FileIngest], dict[str, list[int]]] | None:
    """Stage a batch by kind (the module doc): ``_stage_<kind>`` for each kind it holds
    (``_f`` and the kind's table columns, in file order), and ``_files`` as
    ``ingest.read.stage`` makes it. Returns the files and the rows of each file in each
    kind's table; None (nothing staged) when a file has a line over the size limit."""
    works = [FileIngest(con, plan, migrations, tmp, False, f) for f, plan in enumerate(plans)]
    for w in works:
        w.extent()
        if find_long_line(w.plan.path, w.plan.start, w.end) is not None:
            return None
    out = KindFiles(tmp, len(works))
    try:
        with no_gc():
            for w in works:
                if w.end > w.plan.start:
                    split_file(w, out)
    finally:
        out.close()
    try:
        for kind in out.counts:
            _read_kind(con, out, kind)
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        drop_kinds(con)
        raise SplitRefused(str(exc)) from None
    files_table(con, works, [-1] * len(works))
    return works, out.counts


# the kinds whose inserts number rows by their order (``rowid``): staged in a table; the others
# in a view, which their insert reads once
_ORDERED = frozenset({"cache", "memory"})


def _read_kind(con: duckdb.DuckDBPyConnection, out: KindFiles, kind: str) -> None:
    columns = dict(TABLE_COLUMNS[kind])
    f_sql = "_f"
    if out.files > 1:
        columns = {"_f": "INTEGER", **columns}
    else:
        f_sql = "0::INTEGER AS _f"
    names = ", ".join(f'"{c}"' for c in TABLE_COLUMNS[kind])
    what = "TABLE" if kind in _ORDERED else "VIEW"
    con.execute(
        f"CREATE OR REPLACE TEMP {what} _stage_{kind} AS SELECT {f_sql}, {names} "
        f"FROM ({read_json_sql(out.path(kind), columns)})"
    )


def drop_kinds(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the kinds' staging tables and views."""
    for kind in TABLE_COLUMNS:
        what = "TABLE" if kind in _ORDERED else "VIEW"
        con.execute(f"DROP {what} IF EXISTS _stage_{kind}")
