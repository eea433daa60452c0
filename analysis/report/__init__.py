"""``ember report``: per run, a headline of numbers and the findings as sentences.

``report()`` reads the views and returns, per run, a :class:`RunSummary` (the headline
numbers) and its :class:`Finding` list, most costly first. Each finding carries the
sentence a person reads and the numbers it is made of (``data``), so the dashboard and
tests use the same facts the CLI prints. Rendering (widths, colours) lives in the CLI.

Costs: a finding's ``cost_ns`` is the time it names: compile time (recompiles, thrashing,
what padding or a disk cache would save, what a disk cache missed), the time a part of the
calls took (a break that holds much of each call, eager segments, Ember's overhead:
``time_by_part``) or Hub downloads; findings are ranked by it. Findings about memory and
latency cost 0 and come last.

This package's front: it reads the headline, asks ``builders.py`` (one builder per kind
of finding, each reading its view) for the findings and ranks them. The words of each
finding are in ``builders.py``; numbers are written by ``analysis/format.py``.

JAX compiles its own eager ops (``_normal``, ``_reduce_sum``, ``convert_element_type``)
through ``jit`` too. A jitted function counts as JAX's own when none of its compiles has
a retrace reason and it never ran inside a call or step span: those compiles go into the
headline as ``jax_compiles`` and never into the recompile findings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

from ember.analysis.db import Connection
from ember.analysis.format import short_path, wrap
from ember.analysis.runs import resolve_run

from . import builders
from .builders import Finding, FindingKind, RunSummary, summaries

__all__ = [
    "Finding",
    "RunReport",
    "RunSummary",
    "findings",
    "rejected_summary",
    "report",
    "resolve_run",
    "short_path",
    "summaries",
    "trace_summary",
    "wrap",
]


@dataclass
class RunReport:
    run: RunSummary
    findings: list[Finding]


def trace_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``run_summary`` row of one trace file, read through an in-memory database (what
    ``ember run`` prints after recording, so its numbers are the report's and the
    dashboard's)."""
    from ember.analysis.db import connect
    from ember.analysis.ingest.database import ingest_file

    with connect(":memory:") as con:
        result = ingest_file(con, Path(path))
        if result.status == "refused" or result.run_id is None:
            raise ValueError(f"{path}: {result.message}")
        rows = con.sql("SELECT * FROM run_summary WHERE run_id = ?", [result.run_id]).to_dicts()
    return rows[0]


# the order findings of equal cost come in: what to fix before what to know
_KIND_ORDER = list(get_args(FindingKind))


def _advise_buckets(found: list[Finding]) -> list[Finding]:
    """A position that recompiles on every call gets the bucket advice in its own sentence
    (the action); the bucket finding it took is left out."""
    advice = {(f.run_id, f.data.get("position")): f for f in found if f.kind == "buckets"}
    for f in found:
        if f.kind != "recompile" or "on every call" not in f.text:
            continue
        b = advice.get((f.run_id, f.data.get("position")))
        if b is not None:
            pad = b.text.split(": ", 1)[1]
            f.text += f"; {pad}"
            f.data["buckets"] = b.data
            found = [x for x in found if x is not b]
    return found


def report(
    con: Connection, run_id: str | None = None, limit: int = 10, since: datetime | None = None
) -> list[RunReport]:
    """Per run (one, or all in start order; ``since``: those started since then): the
    headline and up to ``limit`` findings."""
    if run_id is None:
        run_ids = con.sql(
            "SELECT run_id FROM runs WHERE started_at >= coalesce(?, started_at) "
            "ORDER BY started_at",
            [since],
        )["run_id"].to_list()
    else:
        run_ids = [resolve_run(con, run_id)]
    if not run_ids:
        return []
    summaries = builders.summaries(con, run_ids)
    found = _advise_buckets(builders.build_all(con, run_ids, summaries))
    by_run: dict[str, list[Finding]] = {r: [] for r in run_ids}
    for f in found:
        by_run[f.run_id].append(f)
    out = []
    for r in run_ids:
        # failed calls first whatever they cost: the run did not do what it was asked
        fs = sorted(
            by_run[r],
            key=lambda f: (f.kind != "errors", -f.cost_ns, _KIND_ORDER.index(f.kind)),
        )
        out.append(RunReport(summaries[r], fs[: max(int(limit), 0)]))
    return out


def findings(con: Connection, run_id: str | None = None, limit: int = 10) -> list[Finding]:
    """Every run's findings in one list (run by run, most costly first within a run)."""
    return [f for r in report(con, run_id, limit) for f in r.findings]


def rejected_summary(con: Connection, run_id: str | None = None) -> list[dict[str, Any]]:
    """Per trace file: lines ingest rejected, with the first one's line number and reason."""
    where = "" if run_id is None else " WHERE run_id = ?"
    return con.sql(
        f"SELECT file, lines, first_line, first_reason FROM rejected_files{where} ORDER BY file",
        [] if run_id is None else [run_id],
    ).to_dicts()
