"""Validate trace lines against the schema, with messages that name the line and field."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .records import RECORD_KINDS as _KINDS
from .records import SCHEMA_VERSION, Record
from .records import SPAN_KINDS as _SPAN_KINDS
from .versions import MIGRATIONS, Migrations, TraceVersionError, check_version, parse_schema_id

__all__ = ["RECORD", "LineError", "FileReport", "explain", "validate_lines", "validate_file"]

RECORD: TypeAdapter[Any] = TypeAdapter(Record)
"""Validates one record (``RECORD.validate_json(line)``)."""


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
    are upgraded (older) or the file is refused (newer: one error, then stop).
    """
    version: int | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            reason = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not valid JSON"
            yield number, LineError(path, number, f"{reason}: {exc}")
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
            yield number, RECORD.validate_python(data)
        except ValidationError as exc:
            yield number, LineError(path, number, explain(exc))


def validate_file(path: str | Path, migrations: Migrations = MIGRATIONS) -> FileReport:
    """Check every line of one trace file."""
    p = Path(path)
    report = FileReport(str(p))
    if p.stat().st_size == 0:
        report.errors.append(LineError(str(p), 1, "empty file: no 'meta' record"))
        return report
    with p.open("rb") as f:
        for _, result in validate_lines(f, str(p), migrations):
            if isinstance(result, LineError):
                report.errors.append(result)
            else:
                report.records += 1
                report.counts[result.kind] = report.counts.get(result.kind, 0) + 1
                if result.kind == "meta":
                    report.version = parse_schema_id(result.schema_id)
    return report
