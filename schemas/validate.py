"""Validate trace lines against the schema, with messages that name the line and field."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import from_json

from .records import MAX_LINE_BYTES, MAX_NESTING, SCHEMA_VERSION, Record
from .records import RECORD_KINDS as _KINDS
from .records import SPAN_KINDS as _SPAN_KINDS
from .versions import MIGRATIONS, Migrations, TraceVersionError, check_version, parse_schema_id

__all__ = [
    "RECORD",
    "BadLine",
    "FileReport",
    "LineError",
    "compressed",
    "explain",
    "iter_lines",
    "parse_line",
    "validate_file",
    "validate_lines",
]

RECORD: TypeAdapter[Any] = TypeAdapter(Record)
"""Validates one record (``RECORD.validate_json(line)``)."""


class BadLine(ValueError):
    """A line that is not one JSON value within the schema's limits; the message says why."""


_TOO_LONG = (
    f"line is over {MAX_LINE_BYTES // 2**20} MB (the limit for one record); "
    f"record large values elsewhere and keep a reference in the trace"
)
_TOO_DEEP = (
    f"nested deeper than {MAX_NESTING} levels of arrays and objects (the limit for one "
    f"record); record deep values as text"
)


_BOM = (
    "the line starts with a UTF-8 byte order mark (BOM, bytes EF BB BF): a trace is UTF-8 "
    "without one; save the file as UTF-8 without a BOM (remove its first 3 bytes)"
)


# the magic bytes a compressor starts its files with -> its name, and how to decompress
_MAGIC = {
    b"\x1f\x8b": ("gzip", "gzip -dc"),
    b"\x28\xb5\x2f\xfd": ("zstd", "zstd -dc"),
    b"BZh": ("bzip2", "bzip2 -dc"),
    b"\xfd7zXZ\x00": ("xz", "xz -dc"),
}


def compressed(head: bytes) -> str | None:
    """What to tell a user whose trace file starts with ``head``, a compressor's magic
    bytes (a line of JSON starts with ``{``), or ``None``: decoding it as text said "not
    UTF-8: byte 0x8b", which names neither the problem nor the fix."""
    for magic, (name, command) in _MAGIC.items():
        if head.startswith(magic):
            return (
                f"the file is {name}-compressed: traces are read as plain JSONL (a growing "
                f"file is followed by its byte offset); decompress it first: "
                f"{command} FILE > FILE.jsonl"
            )
    return None


def _nesting(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (without recursion)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((x, depth + 1) for x in v if isinstance(x, (dict, list)))
    return deepest


def parse_line(raw: bytes | str) -> Any:
    """One trace line as Python values, within the schema's limits (``MAX_LINE_BYTES``,
    ``MAX_NESTING``); raises ``BadLine`` saying what is wrong.

    Every reader of traces parses lines with this, so ``ember validate`` and ``ember
    ingest`` refuse the same lines for the same reasons. It never recurses in Python: a
    line nested thousands deep is a ``BadLine``, not a ``RecursionError``.
    """
    if len(raw) > MAX_LINE_BYTES:
        raise BadLine(_TOO_LONG)
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadLine(f"not UTF-8: {exc}") from None
    else:
        text = raw
    if text.startswith("\ufeff"):
        raise BadLine(_BOM)
    try:
        data = from_json(text)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise BadLine(_TOO_DEEP) from None
        raise BadLine(f"not valid JSON: {exc}") from None
    # a line with few brackets cannot nest deeply: only count when it might
    if text.count("[") + text.count("{") > MAX_NESTING and _nesting(data) > MAX_NESTING:
        raise BadLine(_TOO_DEEP)
    return data


def iter_lines(f: IO[bytes]) -> Iterator[bytes]:
    """The lines of a binary file, without reading more than ``MAX_LINE_BYTES`` + 2 bytes of
    one line into memory: an over-long line comes back cut short (and is then too long for
    ``parse_line``)."""
    while True:
        line = f.readline(MAX_LINE_BYTES + 2)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES + 1 and not line.endswith(b"\n"):
            while True:  # skip the rest of the line
                more = f.readline(1 << 20)
                if not more or more.endswith(b"\n"):
                    break
            yield line
            continue
        yield line.rstrip(b"\r\n")


@dataclass(frozen=True)
class LineError:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class FileReport:
    path: str
    records: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[LineError] = field(default_factory=list)
    version: int | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def explain(exc: ValidationError) -> str:
    """One line per problem: ``field.path: message (got value)``.

    Pydantic's own titles name the whole tagged union; a person needs the field. The
    tag names (``span_end.segment_compile``) are dropped from the location because the
    record's kind is already known from the line.
    """
    parts = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"]]
        # loc starts with the union tags: kind, then span_kind for spans
        if loc and loc[0] in _KINDS:
            loc = loc[1:]
            if loc and loc[0] in _SPAN_KINDS:
                loc = loc[1:]
        where = ".".join(loc) or "record"
        msg = err["msg"]
        if err["type"] == "union_tag_invalid":
            msg = f"unknown {err['ctx']['discriminator'].strip(chr(39))} {err['ctx']['tag']!r}; "
            msg += f"expected one of {err['ctx']['expected_tags']}"
        elif err["type"] == "union_tag_not_found":
            msg = f"missing field {err['ctx']['discriminator'].strip(chr(39))!r}"
        elif err["type"] == "missing":
            msg = "missing required field"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling, or the schema version)"
        elif "input" in err and err["type"] not in ("json_invalid",):
            got = json.dumps(err["input"], default=str)
            msg = f"{msg} (got {got[:60]})"
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)


def validate_lines(
    lines: Iterable[bytes], path: str = "<trace>", migrations: Migrations = MIGRATIONS
) -> Iterator[tuple[int, Any | LineError]]:
    """Yield ``(line number, record or LineError)`` for each non-empty line.

    The first line must be ``meta``; its schema version decides whether later lines
    are upgraded (older) or the file is refused (newer: one error, then stop). Span ids
    follow ingest's rules across lines (``_SpanIds``): a span_end before its span_start is
    an error here as there.
    """
    version: int | None = None
    spans = _SpanIds()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = parse_line(raw)
        except BadLine as exc:
            yield number, LineError(path, number, str(exc))
            continue
        if not isinstance(data, dict):
            yield number, LineError(path, number, "a record must be a JSON object")
            continue
        if version is None:
            if data.get("kind") != "meta":
                yield (
                    number,
                    LineError(
                        path, number, "the first record must be 'meta' (is this an Ember trace?)"
                    ),
                )
                return
            try:
                version = parse_schema_id(data.get("schema"))
                check_version(version)
            except TraceVersionError as exc:
                yield number, LineError(path, number, str(exc))
                return
        elif data.get("kind") == "meta":
            yield number, LineError(path, number, "a second 'meta' record; one file is one run")
            continue
        if version != SCHEMA_VERSION:
            try:
                data = migrations.upgrade(data, version)
            except (TraceVersionError, KeyError, TypeError, ValueError) as exc:
                yield number, LineError(path, number, f"cannot upgrade: {exc}")
                continue
        try:
            record = RECORD.validate_python(data)
        except ValidationError as exc:
            yield number, LineError(path, number, explain(exc))
            continue
        why = spans.see(data)
        yield number, (record if why is None else LineError(path, number, why))


_AGAIN = " (span ids are unique in a run; were two traces concatenated?)"


class _SpanIds:
    """The rules across lines of span ids, as ingest applies them (``span_problems_sql``):
    a second span_start of an id, a second span_end of an id, a span_end before any
    span_start of its id. Only the records that pass their own checks count: ingest stores
    those alone and applies the rules to what it stores (a span_start rejected for a bad
    field does not make a valid one of its id after it a second start, nor does a span_end
    rejected for having no start make the end of a span that starts later a second end)."""

    def __init__(self) -> None:
        self.started: set[int] = set()
        self.ended: set[int] = set()

    def see(self, data: dict[str, Any]) -> str | None:
        kind, span_id = data.get("kind"), data.get("span_id")
        if kind not in ("span_start", "span_end") or type(span_id) is not int:
            return None
        if kind == "span_start":
            if span_id in self.started:
                return f"a second span_start of span_id {span_id}{_AGAIN}"
            self.started.add(span_id)
            return None
        if span_id not in self.started:  # counts for nothing: a later start's end is its first
            return f"span_end without a span_start (span_id {span_id})"
        if span_id in self.ended:
            return f"a second span_end of span_id {span_id}{_AGAIN}"
        self.ended.add(span_id)
        return None


def validate_file(path: str | Path, migrations: Migrations = MIGRATIONS) -> FileReport:
    """Check every line of one trace file."""
    p = Path(path)
    report = FileReport(str(p))
    if p.stat().st_size == 0:
        report.errors.append(LineError(str(p), 1, "empty file: no 'meta' record"))
        return report
    with p.open("rb") as f:
        why = compressed(f.read(8))
        if why is not None:
            report.errors.append(LineError(str(p), 1, why))
            return report
        f.seek(0)
        for _, result in validate_lines(iter_lines(f), str(p), migrations):
            if isinstance(result, LineError):
                report.errors.append(result)
            else:
                report.records += 1
                report.counts[result.kind] = report.counts.get(result.kind, 0) + 1
                if result.kind == "meta":
                    report.version = parse_schema_id(result.schema_id)
    return report
