"""The split read: a batch of trace files checked line by line and read by DuckDB kind by kind,
the check of one segment of the batch overlapping DuckDB's read of the segment before.

The DuckDB-file ingest's fast path (``ingest.database``; older schema versions, ``strict``
and lines over the size limit take the ``_stage`` path of ``ingest.read``, and so does a
batch DuckDB refuses here). A continued file (one that grew, or a big file's later piece)
takes it too: its span-id rules know the span_start and span_end ids its run already
stored (``StoredSpans``), as ``_stage``'s ``_prior_spans`` do:

1. One pass in Python over each file's bytes, a chunk of whole lines at a time: the checks
   compiled from the pydantic models (``ingest.line_check``, msgspec) accept a chunk in
   a few C calls; a chunk with a line they refuse is judged line by line, and pydantic
   explains (and rejects) the lines it refuses too. The span ids are checked in the same
   pass (a second span_start or span_end of an id, a span_end before its span_start: the
   rules of ``checks.span_problems_sql``). The accepted lines go, as they are, to one
   JSONL file per record kind of the current *segment* (``KindFiles``: about
   ``SEGMENT_BYTES`` of accepted lines, cut between chunks).
2. DuckDB reads each kind's file of a segment with that kind's own table types
   (``TABLE_COLUMNS``: objects as their STRUCTs, integers as BIGINT) as ``_stage_<kind>``
   (a view over the segment's file, which the caller's ``take`` inserts at once, in the
   batch's open transaction; for cache and memory, whose inserts number the rows of the
   whole batch by their order, rows appended to a table the caller inserts at the end).
   Reading every line with the union of every kind's columns cost more than DuckDB's whole
   read into one table; a kind's own columns are a few, and no JSON is parsed twice.

Steps 1 and 2 overlap: while DuckDB reads segment k (in a worker thread,
``concurrent.futures``; DuckDB releases the GIL while it runs a statement but for a moment
between its tasks, msgspec holds it while it decodes a chunk), this thread checks segment
k + 1. Run first, the check was ~1 s of one core on a 90 MB compile-heavy trace while the
other core idled, and DuckDB's own ``read_json``, the yardstick, uses both. Nothing is
weakened: what a line's check rejects never reaches a segment (a bad line in segment k + 1
rejects only itself, as before), the segments' rows go into an open transaction that is
committed only after every line of the batch was checked (``ingest.database``), and an
error of DuckDB's read of any segment sends the whole batch to the ``_stage`` path after a
rollback (``SplitRefused``).

Memory: the check holds one chunk (``SPLIT_CHUNK_BYTES``) and its decoded records; at most
two segments' kind files exist on disk (the one DuckDB reads and the one being written: a
segment is deleted once read), so the temporary disk is ~2 x ``SEGMENT_BYTES``, not the
batch; DuckDB holds the batch's uncommitted rows, as its one-statement read did.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import duckdb
import numpy as np

from ember.analysis.db import ORDERED_TABLES
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

__all__ = [
    "ORDERED_KINDS",
    "SEGMENT_BYTES",
    "SPLIT_CHUNK_BYTES",
    "KindFiles",
    "SplitRefused",
    "drop_kinds",
    "split_works",
    "splittable",
    "stage_kinds",
]

SEGMENT_BYTES = 16 << 20
"""The accepted lines of a batch go to DuckDB in segments of about this many bytes (whole
chunks of ``SPLIT_CHUNK_BYTES``): DuckDB reads one while the next is checked. Smaller
segments overlap more of the check (the first segment's check and the last one's read are
not overlapped); larger ones make fewer statements."""

SPLIT_CHUNK_BYTES = 1 << 20
"""The check decodes this many bytes of lines in one call (``line_check.decode_chunk``),
holding the GIL: DuckDB's thread takes the GIL between the tasks of a statement, so a
long call stalls the read it overlaps (an 8 MiB chunk was ~90 ms in one call, 1 MiB ~5-10 ms;
1 MiB chunks also decoded the compile-heavy trace in less CPU time than 8 MiB ones, their
records staying in the CPU's caches)."""

_AGAIN = " (span ids are unique in a run; were two traces concatenated?)"


class SpanIds:
    """The span-id rules of one file, line by line, as ``checks.span_problems_sql`` has them
    (and ``ember validate``): a second span_start of an id, a second span_end of an id, a
    span_end before any span_start of its id (which makes no later end a second one). For
    a continued file, the span ids its run stored are added as the file names them
    (``StoredSpans``): a span_start of an id whose start is stored is a second one, and a
    span_end of an id whose end is stored is a second one. So a file ingested as it grows
    stores what one ingest of the whole file stores."""

    def __init__(self) -> None:
        self.started: set[int] = set()
        self.ended: set[int] = set()

    def stored(self, span_ids: list[int]) -> None:
        """Span ids whose span_start the run stored (a continued file)."""
        self.started.update(span_ids)

    def stored_ends(self, span_ids: list[int]) -> None:
        """Span ids whose span_end the run stored (a continued file): ended already."""
        self.ended.update(span_ids)

    def start(self, span_id: int) -> str | None:
        if span_id in self.started:
            return f"a second span_start of span_id {span_id}{_AGAIN}"
        self.started.add(span_id)
        return None

    def end(self, span_id: int) -> str | None:
        if span_id not in self.started:  # counts for nothing: a later start's end is its first
            return f"span_end without a span_start (span_id {span_id})"
        if span_id in self.ended:
            return f"a second span_end of span_id {span_id}{_AGAIN}"
        self.ended.add(span_id)
        return None


class _Accepted:
    """A line the compiled checks refused and pydantic accepted: its kind and span id."""

    __slots__ = ("kind", "span_id")

    def __init__(self, data: dict[str, Any]) -> None:
        self.kind = data["kind"]
        self.span_id = data.get("span_id")


class KindFiles:
    """The accepted lines of one segment of a batch, one JSONL file per record kind in
    ``tmp``, and how many rows of each file (``f``) each holds. With more than one file in
    the batch each line gets its file's number (``"_f"``) in front: a kind's rows are read
    in one go."""

    def __init__(self, tmp: Path, files: int, segment: int = 0) -> None:
        self.tmp = tmp
        self.files = files
        self.segment = segment
        self.size = 0  # bytes written
        self.counts: dict[str, list[int]] = {}
        self._out: dict[str, IO[bytes]] = {}

    def path(self, kind: str) -> Path:
        return self.tmp / f"kind-{kind}-{self.segment}.jsonl"

    def add(self, kind: str, f: int, lines: list[bytes]) -> None:
        out = self._out.get(kind)
        if out is None:
            out = self._out[kind] = self.path(kind).open("wb")
            self.counts[kind] = [0] * self.files
        if self.files > 1:
            head = b'{"_f":%d,' % f
            lines = [head + line.lstrip()[1:] for line in lines]
        data = b"\n".join(lines)
        out.write(data)
        out.write(b"\n")
        self.size += len(data) + 1
        self.counts[kind][f] += len(lines)

    def close(self) -> None:
        for out in self._out.values():
            out.close()

    def remove(self) -> None:
        """Close and delete its files (read, or not to be read)."""
        self.close()
        for kind in self.counts:
            self.path(kind).unlink(missing_ok=True)


def splittable(plans: list[FilePlan], migrations: Migrations, strict: bool) -> bool:
    """Whether a batch can take the split read: every file of this schema version, and not
    ``strict``."""
    return not strict and all(migrations.reads_as_is(p.version) for p in plans)


_SPAN_KINDS = frozenset({"span_start", "span_end"})


def _stored_ids(con: duckdb.DuckDBPyConnection, table: str, run_id: str) -> np.ndarray:
    """The span ids of ``table`` (span_start or span_end) a run stored, sorted."""
    got = con.execute(f"SELECT span_id FROM {table} WHERE run_id = ?", [run_id])
    return np.sort(np.asarray(got.fetchnumpy()["span_id"], dtype=np.int64))


def _among(ids: np.ndarray, wanted: np.ndarray) -> list[int]:
    """The ids of ``wanted`` that the sorted ``ids`` hold."""
    if not len(ids):
        return []
    at = np.searchsorted(ids, wanted).clip(max=len(ids) - 1)
    return wanted[ids[at] == wanted].tolist()


class StoredSpans:
    """The span_start and the span_end ids a continued file's run stored, each as one
    sorted array (8 bytes an id; fetched as Python ints, two million of them took 0.6 s and
    300 MiB, as an array 0.1 s and 16 MB: two million of each, 0.1 s and 32 MB), which each
    chunk's span ids are looked up in. Read before the reader thread shares the batch's
    connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection, run_id: str) -> None:
        self.starts = _stored_ids(con, "span_start", run_id)
        self.ends = _stored_ids(con, "span_end", run_id)

    def add_to(self, spans: SpanIds, records: list[Any]) -> None:
        """Tell ``spans`` which span ids of ``records`` (span records) the run stored a
        start, or an end, of."""
        if not len(self.starts) and not len(self.ends):
            return
        ids = [r.span_id for r in records if (KIND_OF.get(type(r)) or r.kind) in _SPAN_KINDS]
        if not ids:
            return
        wanted = np.asarray(ids, dtype=np.int64)
        spans.stored(_among(self.starts, wanted))
        spans.stored_ends(_among(self.ends, wanted))


def split_file(w: FileIngest, out: Segments, stored: StoredSpans | None = None) -> None:
    """Check the lines of one planned file and add the accepted ones to ``out``; the
    rejected ones (with pydantic's reason, or a span-id rule's) to ``w.rejected``.
    ``stored``: what its run stored, for a continued file."""
    plan = w.plan
    spans = SpanIds()
    late: dict[int, str] = {}  # ordinal -> a span-id rule's reason
    ordinal = 0  # non-blank lines before the chunk
    number = plan.base_line
    offset = plan.start
    chunk = b"\n"  # the last chunk read (none: no line to add below)
    for chunk in line_chunks(plan.path, plan.start, w.end, SPLIT_CHUNK_BYTES):
        decoded = decode_chunk(chunk, meta_ok=plan.start == 0 and ordinal == 0)
        kept: list[int] | None = None  # the ordinals in the chunk of ``lines``, when not all
        if decoded is None:
            lines, records, kept = _judge_chunk(w, chunk, offset, number, ordinal)
        else:
            lines, records = decoded
        if stored is not None:
            stored.add_to(spans, records)
        groups, problems = _group(lines, records, spans)
        for i, why in problems:
            late[ordinal + (i if kept is None else kept[i])] = why
        for kind, group in groups.items():
            out.add(kind, w.f, group)
        out.chunk_done()
        ordinal += len(lines) if kept is None else _count_records(chunk)
        number += chunk.count(b"\n")
        offset += len(chunk)
    # the lines read: their newlines, and a last line that is a whole record without one
    # (``read_extent`` reads up to the file's end then)
    w.lines_read = number - plan.base_line + (not chunk.endswith(b"\n"))
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


ORDERED_KINDS = frozenset(ORDERED_TABLES)
"""The kinds whose inserts number the batch's rows by their order (``rowid``): each segment's
rows are appended to the table ``_stage_<kind>``, which the caller inserts after the last
segment; every other kind is a view over one segment, inserted by ``take`` at once."""


class Segments:
    """The segments of a batch (the module doc): the one the check writes (``current``) and
    the read of the one before, by one worker thread, at most one at a time. ``close``
    waits for that read, if any: ``con`` is this thread's again."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, tmp: Path, files: int, take: Callable[[str], None]
    ) -> None:
        self.con = con
        self.take = take
        self.current = KindFiles(tmp, files)
        self.counts: dict[str, list[int]] = {}  # of the segments handed over
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ember-ingest-read")
        self._reading: Future[None] | None = None
        self._staged: set[str] = set()  # the ordered kinds whose table exists (reader only)
        self._closing = False

    def add(self, kind: str, f: int, lines: list[bytes]) -> None:
        self.current.add(kind, f, lines)

    def chunk_done(self) -> None:
        """A chunk's lines were added: a full segment goes to DuckDB."""
        if self.current.size >= SEGMENT_BYTES:
            self.hand_over()

    def hand_over(self) -> None:
        """Close the current segment and start its read, once the one before is read (its
        error, DuckDB's, is raised here); a new segment is written from here on."""
        done = self.current
        done.close()
        self.wait()
        for kind, counts in done.counts.items():
            total = self.counts.setdefault(kind, [0] * done.files)
            for f, n in enumerate(counts):
                total[f] += n
        self.current = KindFiles(done.tmp, done.files, done.segment + 1)
        if done.counts:
            self._reading = self._reader.submit(self._read, done)

    def wait(self) -> None:
        """Wait for the read under way, if any; raise its error."""
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.result()

    def close(self) -> None:
        """Wait for the read under way, if any. One still under way here (the batch is given
        up: an error, Ctrl-C) starts no further statement: ``con.interrupt()`` stops only
        the statement running when it is called."""
        self._closing = True
        self._reader.shutdown(wait=True, cancel_futures=True)

    def _read(self, segment: KindFiles) -> None:
        """In the reader thread: each kind of ``segment`` staged, and inserted by ``take``
        where it is not an ordered kind; the segment's files deleted."""
        try:
            for kind in segment.counts:
                if self._closing:
                    return
                _read_kind(self.con, segment, kind, append=kind in self._staged)
                if kind in ORDERED_KINDS:
                    self._staged.add(kind)
                else:
                    self.take(kind)
        finally:
            segment.remove()


def split_works(
    con: duckdb.DuckDBPyConnection, plans: list[FilePlan], migrations: Migrations, tmp: Path
) -> list[FileIngest] | None:
    """The files of a batch for ``stage_kinds``, where each one's complete lines end, and
    ``_files`` as ``ingest.read.stage`` makes it; None when a file has a line over the size
    limit (the ``_stage`` path)."""
    works = [FileIngest(con, plan, migrations, tmp, False, f) for f, plan in enumerate(plans)]
    for w in works:
        w.extent(count=False)  # ``split_file`` counts the lines as it checks them
        if find_long_line(w.plan.path, w.plan.start, w.end) is not None:
            return None
    files_table(con, works, [-1] * len(works))
    return works


def stage_kinds(
    con: duckdb.DuckDBPyConnection,
    works: list[FileIngest],
    tmp: Path,
    take: Callable[[str], None],
) -> dict[str, list[int]]:
    """Check and stage a batch by kind and segment (the module doc), the check of a segment
    overlapping DuckDB's read of the one before; ``take(kind)`` (in the reader thread, on
    ``con``) inserts the segment's ``_stage_<kind>`` of each kind not in ``ORDERED_KINDS``;
    those are whole in ``_stage_<kind>`` (``_f`` and the kind's table columns, in file
    order) on return. Returns the rows of each file (``f``) in each kind. Raises
    ``SplitRefused`` when DuckDB refused a segment's lines (``con`` used by this thread
    only again, whatever is raised)."""
    # before the reader thread shares ``con``
    stored = {w.f: StoredSpans(con, w.plan.run_id) for w in works if w.plan.start > 0}
    out = Segments(con, tmp, len(works), take)
    try:
        with no_gc():
            for w in works:
                if w.end > w.plan.start:
                    split_file(w, out, stored.get(w.f))
        out.hand_over()
        out.wait()
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        raise SplitRefused(str(exc)) from None
    finally:
        out.close()
    return out.counts


def _read_kind(
    con: duckdb.DuckDBPyConnection, out: KindFiles, kind: str, append: bool = False
) -> None:
    columns = dict(TABLE_COLUMNS[kind])
    f_sql = "_f"
    if out.files > 1:
        columns = {"_f": "INTEGER", **columns}
    else:
        f_sql = "0::INTEGER AS _f"
    names = ", ".join(f'"{c}"' for c in TABLE_COLUMNS[kind])
    select = f"SELECT {f_sql}, {names} FROM ({read_json_sql(out.path(kind), columns)})"
    if append:
        con.execute(f"INSERT INTO _stage_{kind} {select}")
        return
    what = "TABLE" if kind in ORDERED_KINDS else "VIEW"
    con.execute(f"CREATE OR REPLACE TEMP {what} _stage_{kind} AS {select}")


def drop_kinds(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the kinds' staging tables and views."""
    for kind in TABLE_COLUMNS:
        what = "TABLE" if kind in ORDERED_KINDS else "VIEW"
        con.execute(f"DROP {what} IF EXISTS _stage_{kind}")
