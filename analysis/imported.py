"""What the importers of other formats (``candle``, ``torch_trace``) share: the result of
an import and the Ember span records they write."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Imported", "span_end_record", "span_start_record"]


@dataclass
class Imported:
    """An import's Ember trace: its path, run id, records written and the count of each kind."""

    path: str
    run_id: str
    records: int = 0
    counts: dict[str, int] = field(default_factory=dict)


def span_start_record(
    ts: int, span_id: int | None, name: str, span_kind: str, attrs: dict[str, Any], **ids: Any
) -> dict[str, Any]:
    """An Ember ``span_start`` record; ``ids`` (``parent_id``) stand after ``span_id``."""
    return _span_record("span_start", ts, span_id, span_kind, attrs, **ids, name=name)


def span_end_record(
    ts: int, span_id: int | None, duration: int, span_kind: str, attrs: dict[str, Any]
) -> dict[str, Any]:
    """An Ember ``span_end`` record of a span that ended well (``status: "ok"``)."""
    fields = {"duration_ns": duration, "status": "ok"}
    return _span_record("span_end", ts, span_id, span_kind, attrs, **fields)


def _span_record(
    kind: str, ts: int, span_id: int | None, span_kind: str, attrs: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    # the keys in the order Ember's own writer gives them
    return {
        "kind": kind,
        "ts_ns": ts,
        "span_id": span_id,
        **fields,
        "span_kind": span_kind,
        "attrs": attrs,
    }
