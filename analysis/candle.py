"""Import candle-graph ``trace/6`` JSONL (``candle_graph/trace/events.rs``) as Ember records.

The two formats share their record kinds; the differences this module bridges:

=====================  ====================================  ===============================
candle-graph           field                                  Ember
=====================  ====================================  ===============================
meta                   ``schema`` + flattened run metadata    ``meta``: run id from the file
                                                              (or its ``run_id``), other run
                                                              fields become ``tags``
span_start             ``id``/``parent_id`` strings,          integer ``span_id``s (in order
                       ``start_ns``, ``span_kind``            of appearance), ``span_kind:
                       (function/op/module), ``measured``     "op"`` with ``attrs.op_kind``
span_end               ``id``, ``duration_ns``                ``ts_ns`` = start + duration
op                     ``timestamp_ns``, string ``span_id``   ``ts_ns``, integer ``span_id``
memory, device_memory  ``timestamp_ns``                       ``ts_ns``; device_memory
                                                              ``source: "memory_stats"``
tensor, gradient, edge no timestamp                           ``ts_ns`` of the latest record
=====================  ====================================  ===============================

Every line goes through the same line checks as ``ember ingest`` and ``ember validate``:
``parse_line`` (the size and nesting limits), then the converted record through
``validate_lines`` (the schema, strict integers, span ids). A line that cannot be converted
or fails them is left out and named (``file:line: why``, in ``ImportResult.errors``); the
rest is kept. Only a bad ``meta`` line (no run to import into) stops the import
(``CandleImportError``). Numbers are never truncated: ``1.5`` for an integer is an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ember.analysis.imported import Imported, span_end_record, span_start_record
from ember.schemas import SCHEMA_ID
from ember.schemas.validate import BadLine, LineError, iter_lines, parse_line, validate_lines

__all__ = ["CANDLE_SCHEMA", "CandleImportError", "ImportResult", "import_candle"]

CANDLE_SCHEMA = "candle-graph/trace/6"

_RUN_FIELDS = {"run_id", "wall_time_ns", "host", "pid", "entrypoint", "phase"}


class CandleImportError(ValueError):
    """A candle-graph line that cannot become an Ember record."""


@dataclass
class ImportResult(Imported):
    errors: list[str] = field(default_factory=list)  # 'file:line: why' of each line left out


def _int(rec: dict[str, Any], key: str, default: int | None = None) -> int:
    """``rec[key]`` as the JSON integer it must be; ``default`` when absent (an error when
    there is none). A fraction, a string, a boolean or null is an error, never truncated."""
    if key not in rec and default is not None:
        return default
    value = rec.get(key)
    if type(value) is not int:
        raise CandleImportError(f"{key}: expected an integer, got {json.dumps(value)[:40]}")
    return value


class _Converter:
    def __init__(self, source: Path) -> None:
        self.source = source
        self.span_ids: dict[str, int] = {}
        self.span_start: dict[str, tuple[int, dict[str, Any]]] = {}
        self.last_ts = 0

    def span_id(self, text: Any, key: str = "span_id") -> int | None:
        if text is None:
            return None
        if not isinstance(text, str):  # candle-graph's ids are strings
            raise CandleImportError(f"{key}: expected a string id, got {json.dumps(text)[:40]}")
        if text not in self.span_ids:
            self.span_ids[text] = len(self.span_ids) + 1
        return self.span_ids[text]

    def ts(self, rec: dict[str, Any], key: str) -> int:
        """A record's time: its ``key`` (a non-negative integer), else the latest one."""
        if rec.get(key) is None:
            return self.last_ts
        value = _int(rec, key)
        if value < 0:
            raise CandleImportError(f"{key}: must be >= 0, got {value}")
        self.last_ts = max(self.last_ts, value)
        return value

    def meta(self, rec: dict[str, Any]) -> dict[str, Any]:
        schema = rec.get("schema")
        if schema != CANDLE_SCHEMA:
            raise CandleImportError(
                f"the schema is {schema!r}; this importer reads {CANDLE_SCHEMA!r} "
                f"(candle_graph/trace/events.rs)"
            )
        stat = self.source.stat()
        run_id = (
            rec.get("run_id")
            or "candle-"
            + hashlib.sha1(
                f"{self.source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()
            ).hexdigest()[:16]
        )
        phase = rec.get("phase") if rec.get("phase") in ("infer", "train") else "infer"
        tags = {
            k: v if isinstance(v, str) else json.dumps(v)
            for k, v in rec.items()
            if k not in _RUN_FIELDS and k not in ("kind", "schema")
        }
        tags["imported_from"] = CANDLE_SCHEMA
        return {
            "kind": "meta",
            "schema": SCHEMA_ID,
            "run_id": str(run_id),
            "wall_time_ns": _int(rec, "wall_time_ns", stat.st_mtime_ns),
            "host": str(rec.get("host") or "unknown"),
            "pid": _int(rec, "pid", 0),
            "entrypoint": rec.get("entrypoint"),
            "phase": phase,
            "tags": tags,
        }

    def convert(self, rec: dict[str, Any]) -> dict[str, Any]:
        kind = rec.get("kind")
        if kind == "span_start":
            attrs = {"op_kind": rec.get("span_kind", "op"), "measured": rec.get("measured", False)}
            start = self.ts(rec, "start_ns")
            span_id = self.span_id(rec["id"], "id")
            self.span_start[rec["id"]] = (start, attrs)
            parent_id = self.span_id(rec.get("parent_id"), "parent_id")
            return span_start_record(start, span_id, rec["name"], "op", attrs, parent_id=parent_id)
        if kind == "span_end":
            span_id = self.span_id(rec["id"], "id")
            start, attrs = self.span_start.get(rec["id"], (self.last_ts, {"op_kind": "op"}))
            duration = _int(rec, "duration_ns", 0)
            if duration < 0:
                raise CandleImportError(f"duration_ns: must be >= 0, got {duration}")
            end = self.ts({"end": start + duration}, "end")
            return span_end_record(end, span_id, duration, "op", attrs)
        if kind == "op":
            out = {k: v for k, v in rec.items() if k not in ("timestamp_ns", "span_id")}
            out["ts_ns"] = self.ts({"timestamp_ns": 0, **rec}, "timestamp_ns")
            out["span_id"] = self.span_id(rec.get("span_id"))
            return out
        if kind == "memory":
            out = {k: v for k, v in rec.items() if k not in ("timestamp_ns", "span_id")}
            out["ts_ns"] = self.ts(rec, "timestamp_ns")
            out["span_id"] = self.span_id(rec.get("span_id"))
            return out
        if kind == "device_memory":
            out = {k: v for k, v in rec.items() if k != "timestamp_ns"}
            out["ts_ns"] = self.ts(rec, "timestamp_ns")
            out["source"] = "memory_stats"
            return out
        if kind == "tensor":
            out = {k: v for k, v in rec.items() if k != "span_id"}
            out["ts_ns"] = self.last_ts
            out["span_id"] = self.span_id(rec.get("span_id"))
            return out
        if kind in ("gradient", "edge"):
            return {**rec, "ts_ns": self.last_ts}
        raise CandleImportError(
            f"unknown kind {kind!r}; candle-graph trace/6 has meta, span_start, span_end, op, "
            f"tensor, memory, device_memory, gradient, edge"
        )


def import_candle(
    path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
) -> ImportResult:
    """Convert a candle-graph ``trace/6`` file to an Ember trace (``<name>.ember.jsonl``).

    Lines that cannot be converted or fail the line checks are left out and listed in
    ``errors``; a bad first (``meta``) line raises ``CandleImportError``."""
    src = Path(path)
    dst = Path(out) if out is not None else src.with_suffix(".ember.jsonl")
    conv = _Converter(src)
    result: ImportResult | None = None
    converted: list[tuple[int, bytes]] = []  # (line in the source, the Ember line)
    errors: dict[int, str] = {}
    with src.open("rb") as f:
        for number, raw in enumerate(iter_lines(f), start=1):
            if not raw.strip():
                continue
            try:
                ember = _convert_line(conv, raw, first=result is None)
                encoded = _encoded(ember)
            except (BadLine, CandleImportError) as exc:
                if result is None:
                    raise CandleImportError(f"{src}:{number}: {exc}") from None
                errors[number] = str(exc)
                continue
            if result is None:
                result = ImportResult(str(dst), ember["run_id"])
            converted.append((number, encoded))
    if result is None:
        raise CandleImportError(f"{src}: empty file: no 'meta' record")
    # the line checks of ingest and validate, on the Ember lines
    kept = []
    for n, checked in validate_lines(line for _, line in converted):
        number, line = converted[n - 1]
        if isinstance(checked, LineError):
            if n == 1:
                raise CandleImportError(f"{src}:{number}: {checked.message}")
            errors[number] = checked.message
            continue
        kept.append(line + b"\n")
        result.counts[checked.kind] = result.counts.get(checked.kind, 0) + 1
        result.records += 1
    result.errors = [f"{src}:{n}: {why}" for n, why in sorted(errors.items())]
    dst.write_bytes(b"".join(kept))
    return result


def _encoded(record: dict[str, Any]) -> bytes:
    """The Ember line of a converted record; a value JSON cannot hold as Ember writes it
    (an integer of 2**64 or more) leaves that line out, not the file."""
    try:
        return orjson.dumps(record)
    except orjson.JSONEncodeError as exc:
        raise CandleImportError(f"a value Ember cannot write: {exc}") from None


def _convert_line(conv: _Converter, raw: bytes, *, first: bool) -> dict[str, Any]:
    """One candle-graph line as an Ember record (not yet checked by the schema)."""
    rec = parse_line(raw)
    if not isinstance(rec, dict):
        raise CandleImportError("a record must be a JSON object")
    if first:
        if rec.get("kind") != "meta":
            raise CandleImportError(
                f"the first record must be 'meta' with schema {CANDLE_SCHEMA!r}; is this a "
                "candle-graph trace?"
            )
        return conv.meta(rec)
    if rec.get("kind") == "meta":
        raise CandleImportError("a second 'meta' record; one file is one run")
    try:
        return conv.convert(rec)
    except KeyError as exc:
        raise CandleImportError(f"missing field {exc}") from None
