"""Which bytes of which trace files to read: the planning that the DuckDB-file ingest
(``ingest``), the lake (``lake``) and the Spark ingest (``lake_spark``) share.

A store (the DuckDB file's ``ingested_files``, the lake's manifest) says what it holds of
a file as a ``Previous``; ``plan_file`` decides from it and the file as it is now:

- ``unchanged``: the same size and mtime as stored (where the store keeps them), or the same
  first line and size (a last line cut short then, and still, included); nothing is read;
- grown: the same first line and more bytes than were read: continue from the last
  complete line read (``FilePlan.start``, ``base_line``);
- new or replaced (another first line, or fewer bytes): read from the start; a replaced
  file's old rows go (``replaced_run``);
- refused as a whole (``Refused``): empty, only blank lines, no valid ``meta`` first, a
  schema version this Ember cannot read, or a run id that another file already brought.

``read_extent`` says where the complete lines of a planned range end (a last line cut
short is rejected as truncated and read again when the file grows). ``claim`` is the
lake's one exclusion: a claim file per trace file while one ingester writes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import mmap
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import ValidationError

from ember.schemas import (
    RECORD,
    SCHEMA_VERSION,
    Migrations,
    TraceVersionError,
    check_version,
    explain,
    parse_schema_id,
)
from ember.schemas.records import MAX_LINE_BYTES
from ember.schemas.validate import BadLine, compressed, parse_line

__all__ = [
    "FileResult",
    "FileStatus",
    "IngestSummary",
    "Previous",
    "claim",
    "expand_paths",
    "locate_lines",
    "plan_file",
]

RAW_PREFIX_CHARS = 200
_CONTROL = {c: f"\\x{c:02x}" for c in range(32) if c != 9}

FileStatus = Literal["ok", "partial", "refused", "unchanged", "busy"]
"""What became of a file: all of it read, read but for a partial last line, refused as a
whole, already ingested as it is, or (a lake) being written by another ingester now."""


@dataclass
class FileResult:
    """What ingest did with one file."""

    path: str
    status: FileStatus
    records: int = 0
    rejected: int = 0
    message: str | None = None
    run_id: str | None = None
    bytes_read: int = 0
    seconds: float = 0.0
    continued: bool = False  # continued a file that grew
    replaced: bool = False  # the file changed since it was ingested: old rows replaced
    slow_path: bool = False  # DuckDB refused the file: every line went through pydantic


@dataclass
class IngestSummary:
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def rejected(self) -> int:
        return sum(f.rejected for f in self.files)

    @property
    def refused(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "refused"]

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


class Refused(Exception):
    """The file cannot be ingested at all; the message says why and what to do."""


# ---------------------------------------------------------------- paths


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files as given, folders as their ``*.jsonl`` files (recursively), globs expanded.

    Raises FileNotFoundError naming a path that matches nothing.
    """
    out: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        text = str(raw)
        p = Path(text)
        if p.is_dir():
            found = sorted(x for x in p.rglob("*.jsonl") if x.is_file())
        elif p.is_file():
            found = [p]
        elif glob.has_magic(text):
            found = sorted(Path(x) for x in glob.glob(text, recursive=True) if Path(x).is_file())
            if not found:
                raise FileNotFoundError(f"{text}: the pattern matches no file")
        elif p.exists():
            raise FileNotFoundError(f"{text}: not a regular file (a FIFO or a device)")
        else:
            raise FileNotFoundError(f"{text}: no such file or folder")
        for f in found:
            r = f.resolve()
            if r not in seen:
                seen.add(r)
                out.append(r)
    return out


# ---------------------------------------------------------------- reading helpers


def raw_text(raw: bytes) -> str:
    """The start of a line as text: undecodable bytes and control characters escaped."""
    text = raw[: RAW_PREFIX_CHARS * 4].decode("utf-8", "backslashreplace")
    return text.translate(_CONTROL)[:RAW_PREFIX_CHARS]


def first_line(path: Path, size: int) -> bytes:
    """The first non-blank line, without its newline (b"" when there is none)."""
    with path.open("rb") as f:
        offset = 0
        while offset < size:
            line = f.readline(MAX_LINE_BYTES + 1)
            offset += len(line)
            if line.strip():
                if len(line) > MAX_LINE_BYTES:
                    raise Refused(
                        f"the first line is over {MAX_LINE_BYTES // 2**20} MB; it must be the "
                        f"'meta' record (is this an Ember trace?)"
                    )
                return line.rstrip(b"\r\n")
    return b""


@overload
def read_extent(
    plan: FilePlan, count: Literal[True] = True
) -> tuple[int, int, Rejected | None]: ...
@overload
def read_extent(plan: FilePlan, count: bool) -> tuple[int, int | None, Rejected | None]: ...
def read_extent(plan: FilePlan, count: bool = True) -> tuple[int, int | None, Rejected | None]:
    """What of ``plan``'s bytes to read: ``(end, lines, truncated)``.

    ``end`` is the offset after the last complete line, or the file's end when its last line is a
    whole record without its newline (a hand-made file); ``lines`` counts the lines before ``end``
    (None when not ``count`` and the file ends with a newline: a reader that passes over the
    lines counts them itself, rather than in one more pass over the file's bytes);
    ``truncated`` is the rejected partial last line (the writer stopped mid-line), read again
    when the file grows. Shared by the DuckDB ingest and the Spark ingest of the lake.
    """
    end, tail, tail_length = _end_of_complete_lines(plan.path, plan.start, plan.size)
    if not tail.strip():
        return end, _count_lines(plan.path, plan.start, end) if count else None, None
    lines = _count_lines(plan.path, plan.start, end)
    if tail_length <= MAX_LINE_BYTES:
        try:
            if isinstance(parse_line(tail), dict):
                return plan.size, lines + 1, None
        except BadLine:
            pass
    line = plan.base_line + lines + 1
    reason = (
        f"truncated last line {line}: no newline at the end of the file (the writer "
        f"stopped mid-line); it is read again if the file grows"
    )
    return end, lines, Rejected(line, end, reason, raw_text(tail))


def _end_of_complete_lines(path: Path, start: int, size: int) -> tuple[int, bytes, int]:
    """Where the complete lines in ``[start, size)`` end, and the partial line after them.

    Returns ``(end, tail, tail_length)``: ``end`` is the offset after the last newline
    (``start`` if there is none), ``tail`` the first bytes after it (all of them when the
    tail is at most MAX_LINE_BYTES long) and ``tail_length`` its full length.
    """
    with path.open("rb") as f:
        pos = size
        end = start
        while pos > start:
            step = min(1 << 20, pos - start)
            pos -= step
            f.seek(pos)
            i = f.read(step).rfind(b"\n")
            if i >= 0:
                end = pos + i + 1
                break
        f.seek(end)
        tail_length = size - end
        tail = f.read(tail_length if tail_length <= MAX_LINE_BYTES else RAW_PREFIX_CHARS * 4)
    return end, tail, tail_length


def _count_lines(path: Path, start: int, end: int) -> int:
    if end <= start:
        return 0
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return _count_chunks(m, start, end)


def _count_chunks(m: mmap.mmap, start: int, end: int) -> int:
    # 1 MB at a time: a copy of the whole range costs more than the count (fresh pages)
    n = 0
    step = 1 << 20
    for a in range(start, end, step):
        n += m[a : min(a + step, end)].count(b"\n")
    return n


def read_range(path: Path, start: int, end: int) -> Iterator[bytes]:
    """The bytes ``[start, end)`` of a file, in pieces of at most 4 MB."""
    with path.open("rb") as f:
        f.seek(start)
        remaining = end - start
        while remaining > 0:
            buf = f.read(min(remaining, 1 << 22))
            if not buf:
                break
            yield buf
            remaining -= len(buf)


def iter_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, line without newline)`` of every line in ``[start, end)``."""
    with path.open("rb") as f:
        f.seek(start)
        offset = start
        while offset < end:
            line = f.readline(min(end - offset, MAX_LINE_BYTES + 2))
            if not line:
                break
            if len(line) > MAX_LINE_BYTES + 1 and not line.endswith(b"\n"):
                # an over-long line: skip to its end without keeping it in memory
                rest = 0
                while True:
                    more = f.readline(1 << 20)
                    rest += len(more)
                    if not more or more.endswith(b"\n"):
                        break
                yield offset, line[: MAX_LINE_BYTES + 1]
                offset += len(line) + rest
                continue
            yield offset, line.rstrip(b"\r\n") if line.endswith(b"\n") else line
            offset += len(line)


def locate_lines(
    plan: FilePlan, end: int, ordinals: list[int], first: int = 0
) -> dict[int, tuple[int, int, bytes]]:
    """Line number, byte offset and bytes of the non-blank lines of ``plan``'s range up to
    ``end`` whose ordinals are ``ordinals`` (sorted; the range's first non-blank line is
    ``first``)."""
    out: dict[int, tuple[int, int, bytes]] = {}
    wanted = iter(ordinals)
    target = next(wanted, None)
    ordinal = first - 1
    number = plan.base_line
    for offset, raw in iter_lines(plan.path, plan.start, end):
        number += 1
        if not raw.strip():
            continue
        ordinal += 1
        if ordinal == target:
            out[target] = (number, offset, raw)
            target = next(wanted, None)
            if target is None:
                break
    return out


@dataclass
class Rejected:
    line: int
    offset: int
    reason: str
    raw: str


# ---------------------------------------------------------------- the decision


@dataclass
class FilePlan:
    path: Path
    size: int
    start: int  # byte offset to read from
    base_line: int  # lines before ``start``
    first_hash: str
    run_id: str
    version: int
    meta: dict[str, Any] | None  # the meta record when reading from the start
    replaced_run: str | None = None  # rows to delete first (a replaced file)
    continued: bool = False
    mtime_ns: int = 0  # the file's mtime when planned
    # the file goes on after ``size`` (a piece of a big file, ``first_piece``): the next
    # piece is planned as a file that grew, once this one is written
    more: bool = False


def first_piece(plan: FilePlan, max_bytes: int) -> FilePlan:
    """``plan`` cut after its last complete line within ``max_bytes`` of its start (or as it
    is when it is shorter): a big file goes in piece by piece, so that what is staged at
    once, and the memory it takes, does not grow with the file."""
    if plan.size - plan.start <= max_bytes:
        return plan
    limit = plan.start + max_bytes
    with plan.path.open("rb") as f:
        pos = limit
        while pos > plan.start:  # the last newline before ``limit``, a MiB at a time
            step = min(1 << 20, pos - plan.start)
            pos -= step
            f.seek(pos)
            i = f.read(step).rfind(b"\n")
            if i >= 0:
                return dataclasses.replace(plan, size=pos + i + 1, more=True)
    return plan  # no newline in the piece: a line longer than it, read as one


@dataclass(frozen=True)
class Previous:
    """What a store holds of one file (its last ingest that was not a refusal)."""

    run_id: str
    offset_bytes: int  # bytes read (the end of the last complete line)
    lines: int  # lines before ``offset_bytes``
    first_line_hash: str
    schema_version: int
    size: int | None = None  # the file's size then (more than ``offset_bytes`` when its
    # last line was cut short: the same size again is unchanged)
    mtime_ns: int | None = None  # its mtime then, where the store keeps it

    def unchanged(self, st: os.stat_result) -> bool:
        """The file has the size and mtime it had when ingested (a ``stat`` answers)."""
        return self.size == st.st_size and self.mtime_ns == st.st_mtime_ns


def unchanged_result(file: str, previous: Previous) -> FileResult:
    return FileResult(file, "unchanged", run_id=previous.run_id, message="already ingested")


def _parse_meta(first: bytes, migrations: Migrations) -> tuple[dict[str, Any], int]:
    why = compressed(first)
    if why is not None:
        raise Refused(why)
    try:
        data = parse_line(first)
    except BadLine as exc:
        raise Refused(f"line 1: {exc}; the first line must be the 'meta' record") from exc
    if not isinstance(data, dict) or data.get("kind") != "meta":
        raise Refused(
            "missing 'meta': the first record must be 'meta' (schema, run id, wall-clock "
            "anchor); is this an Ember trace? Record it with ember.recorder.record()"
        )
    try:
        version = parse_schema_id(data.get("schema"))
        check_version(version)
    except TraceVersionError as exc:
        raise Refused(str(exc)) from exc
    if version != SCHEMA_VERSION:
        try:
            data = migrations.upgrade(dict(data), version)
        except (TraceVersionError, KeyError, TypeError, ValueError) as exc:
            raise Refused(f"cannot upgrade the meta record: {exc}") from exc
    try:
        meta = RECORD.validate_python(data)
    except ValidationError as exc:
        raise Refused(f"line 1: invalid 'meta' record: {explain(exc)}") from exc
    return meta.model_dump(mode="json", by_alias=True), version


def plan_file(
    path: Path,
    previous: Previous | None,
    migrations: Migrations,
    run_owner: Callable[[str], str | None],
    *,
    store: str = "database",
) -> FilePlan | FileResult:
    """What to read of ``path`` given what the store holds of it (see the module doc).

    ``run_owner(run_id)`` names the other file that brought ``run_id`` into the store, if
    any; ``store`` names the store in that refusal. Raises ``Refused`` (and ``OSError``)."""
    file = str(path)
    st = path.stat()
    if previous is not None and previous.unchanged(st):
        return unchanged_result(file, previous)
    size = st.st_size
    if size == 0:
        raise Refused("empty file: no 'meta' record (is the run still starting?)")
    first = first_line(path, size)
    if not first:
        raise Refused("the file has only blank lines: no 'meta' record")
    first_hash = hashlib.sha1(first).hexdigest()
    if previous is not None and previous.first_line_hash == first_hash:
        if size in (previous.offset_bytes, previous.size):
            # all read, or all but the partial last line that was there then
            return unchanged_result(file, previous)
        if size > previous.offset_bytes:
            return FilePlan(
                path,
                size,
                previous.offset_bytes,
                previous.lines,
                first_hash,
                previous.run_id,
                previous.schema_version,
                None,
                continued=True,
                mtime_ns=st.st_mtime_ns,
            )
    meta, version = _parse_meta(first, migrations)
    run_id = meta["run_id"]
    other = run_owner(run_id)
    if other is not None:
        raise run_taken(run_id, other, store)
    return FilePlan(
        path,
        size,
        0,
        0,
        first_hash,
        run_id,
        version,
        meta,
        replaced_run=previous.run_id if previous is not None else None,
        mtime_ns=st.st_mtime_ns,
    )


def run_taken(run_id: str, other: str, store: str) -> Refused:
    """The refusal of a file whose run another file already brought into the store."""
    return Refused(
        f"run {run_id} is already in the {store} from {other}; one run is one file. "
        f"If this file is a copy, skip it; if it is another run, record it with a new run id"
    )


def cannot_read(exc: OSError) -> str:
    """The refusal of a file the OS does not let us read."""
    return f"cannot read the file: {exc.strerror or exc}"


# ---------------------------------------------------------------- claims


@contextlib.contextmanager
def claim(folder: Path, key: str, stale_s: float) -> Iterator[bool]:
    """Hold ``folder/<key>.claim`` while ingesting a file; yields False if another has it.

    The claim is created with O_EXCL; one older than ``stale_s`` or of a dead process on
    this host is taken over."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.claim"
    me = {"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _stale(path, stale_s):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            yield False
            return
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        try:
            yield True
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        return
    yield False


def _stale(path: Path, stale_s: float) -> bool:
    try:
        holder = json.loads(path.read_text())
        age = time.time() - float(holder["at"])
    except (OSError, ValueError, KeyError, TypeError):
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return True
        return age > stale_s
    if age > stale_s:
        return True
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError):
            return False
    return False
