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

Every record written is validated by the Ember schema; a line that cannot be converted
stops the import with its line number (``CandleImportError``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from ember.schemas import RECORD, SCHEMA_ID, explain

__all__ = ["CANDLE_SCHEMA", "CandleImportError", "ImportResult", "import_candle"]

CANDLE_SCHEMA = "candle-graph/trace/6"

_RUN_FIELDS = {"run_id", "wall_time_ns", "host", "pid", "entrypoint", "phase"}


class CandleImportError(ValueError):
    """A candle-graph line that cannot become an Ember record."""


@dataclass
class ImportResult:
    path: str
    run_id: str
    records: int = 0
    counts: dict[str, int] = field(default_factory=dict)


class _Converter:
    def __init__(self, source: Path) -> None:
        self.source = source
        self.span_ids: dict[str, int] = {}
        self.span_start: dict[str, tuple[int, dict[str, Any]]] = {}
        self.last_ts = 0

    def span_id(self, text: str | None) -> int | None:
        if text is None:
            return None
        if text not in self.span_ids:
            self.span_ids[text] = len(self.span_ids) + 1
        return self.span_ids[text]

    def ts(self, value: Any) -> int:
        if isinstance(value, int) and value >= 0:
            self.last_ts = max(self.last_ts, value)
            return value
        return self.last_ts

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
            "wall_time_ns": int(rec.get("wall_time_ns") or stat.st_mtime_ns),
            "host": str(rec.get("host") or "unknown"),
            "pid": int(rec.get("pid") or 0),
            "entrypoint": rec.get("entrypoint"),
            "phase": phase,
            "tags": tags,
        }

    def convert(self, rec: dict[str, Any]) -> dict[str, Any]:
        kind = rec.get("kind")
        if kind == "span_start":
            attrs = {"op_kind": rec.get("span_kind", "op"), "measured": rec.get("measured", False)}
            start = self.ts(rec.get("start_ns"))
            self.span_start[rec["id"]] = (start, attrs)
            return {
                "kind": "span_start",
                "ts_ns": start,
                "span_id": self.span_id(rec["id"]),
                "parent_id": self.span_id(rec.get("parent_id")),
                "name": rec["name"],
                "span_kind": "op",
                "attrs": attrs,
            }
        if kind == "span_end":
            start, attrs = self.span_start.get(rec["id"], (self.last_ts, {"op_kind": "op"}))
            duration = int(rec.get("duration_ns", 0))
            return {
                "kind": "span_end",
                "ts_ns": self.ts(start + duration),
                "span_id": self.span_id(rec["id"]),
                "duration_ns": duration,
                "status": "ok",
                "span_kind": "op",
                "attrs": attrs,
            }
        if kind == "op":
            out = {k: v for k, v in rec.items() if k not in ("timestamp_ns", "span_id")}
            out["ts_ns"] = self.ts(rec.get("timestamp_ns", 0))
            out["span_id"] = self.span_id(rec.get("span_id"))
            return out
        if kind == "memory":
            out = {k: v for k, v in rec.items() if k not in ("timestamp_ns", "span_id")}
            out["ts_ns"] = self.ts(rec.get("timestamp_ns"))
            out["span_id"] = self.span_id(rec.get("span_id"))
            return out
        if kind == "device_memory":
            out = {k: v for k, v in rec.items() if k != "timestamp_ns"}
            out["ts_ns"] = self.ts(rec.get("timestamp_ns"))
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
    """Convert a candle-graph ``trace/6`` file to an Ember trace (``<name>.ember.jsonl``)."""
    src = Path(path)
    dst = Path(out) if out is not None else src.with_suffix(".ember.jsonl")
    conv = _Converter(src)
    result: ImportResult | None = None
    lines: list[bytes] = []
    with src.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            where = f"{src}:{number}"
            try:
                rec = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CandleImportError(f"{where}: not valid JSON: {exc}") from exc
            if not isinstance(rec, dict):
                raise CandleImportError(f"{where}: a record must be a JSON object")
            try:
                if result is None:
                    if rec.get("kind") != "meta":
                        raise CandleImportError(
                            "the first record must be 'meta' with schema "
                            f"{CANDLE_SCHEMA!r}; is this a candle-graph trace?"
                        )
                    ember = conv.meta(rec)
                    result = ImportResult(str(dst), ember["run_id"])
                elif rec.get("kind") == "meta":
                    raise CandleImportError("a second 'meta' record; one file is one run")
                else:
                    ember = conv.convert(rec)
                RECORD.validate_python(ember)
            except CandleImportError as exc:
                raise CandleImportError(f"{where}: {exc}") from None
            except KeyError as exc:
                raise CandleImportError(f"{where}: missing field {exc}") from None
            except ValidationError as exc:
                raise CandleImportError(f"{where}: {explain(exc)}") from None
            lines.append(orjson.dumps(ember, option=orjson.OPT_APPEND_NEWLINE))
            result.counts[ember["kind"]] = result.counts.get(ember["kind"], 0) + 1
            result.records += 1
    if result is None:
        raise CandleImportError(f"{src}: empty file: no 'meta' record")
    dst.write_bytes(b"".join(lines))
    return result
