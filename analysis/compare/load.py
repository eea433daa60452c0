"""Loading one side of ``ember compare``: what a user names -> a run -> its ``RunData``.

- ``open_sides(...)`` resolves what a user names (a run id or a unique prefix in a
  DuckDB file or a lake, a trace file ingested into a temporary database, or the latest
  run with some tags) into ``Side`` objects: how to query the run's database and its id.
- ``load_run(sql, run_id)`` reads what one run says from the views: its ``run_summary``
  row (every headline metric, defined once there), the durations its latency is made of
  (``latency_samples``), and its causes: why it recompiled (``recompile_causes``), where
  its cache evicted (``eviction_sites``) and where its graph broke (``break_nodes``),
  each named for a person. ``sql`` is any ``(query, params) -> polars.DataFrame``.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember.analysis.format import times

from .model import Cause, CompareError, RunData, SqlRunner

__all__ = ["Side", "load_run", "open_sides"]


def _cause_name(change: str, arg: str | None, dim: int | None) -> str:
    if change == "shape" or (change == "jit:shape" and dim is not None):  # torch names the dim
        return f"`{arg}` dim {dim}"
    if change in ("dtype", "rank"):
        return f"`{arg}` {change}"
    if change == "static":
        return f"static value `{arg}`"
    if change == "new_arg":
        return f"new argument `{arg}`"
    if change == "removed_arg":
        return f"argument `{arg}` gone"
    if change == "after_eviction":
        return "a re-compile after eviction"
    if change == "same_key":
        return "the same key compiled again"
    if change == "recompile_limit":
        return "torch's recompile limit reached (the frame runs eagerly)"
    if change.startswith("jit:"):
        return f"`{arg}` {change[4:]}"
    return change


def _of(sql: SqlRunner, view: str, run_id: str, order: str) -> list[dict[str, Any]]:
    """The rows of a view (``analysis/sql/<view>.sql``) for one run, in ``order``."""
    return sql(f"SELECT * FROM {view} WHERE run_id = $1 ORDER BY {order}", [run_id]).to_dicts()


def load_run(sql: SqlRunner, run_id: str, origin: str = "") -> RunData:
    """One run's ``run_summary`` row, durations and causes (see the module doc)."""
    import duckdb

    try:
        summary = sql("SELECT * FROM run_summary WHERE run_id = $1", [run_id])
    except duckdb.CatalogException:
        raise CompareError(
            f"{origin or 'the database'} has no run_summary view: it was written by "
            "an older `ember ingest`; run `ember ingest` on it again to add the views"
        ) from None
    if summary.height == 0:
        raise CompareError(f"no run {run_id!r} in {origin or 'the database'}")
    row = summary.row(0, named=True)
    samples = sql(
        "SELECT duration_ns, NOT compiled AND status IS DISTINCT FROM 'error' AS warm "
        "FROM latency_samples WHERE run_id = $1 ORDER BY ts_ns",
        [run_id],
    )
    durations = np.asarray(samples["duration_ns"].to_numpy(), dtype=np.float64)
    warm = samples["warm"].to_numpy().astype(bool)
    data = RunData(run_id, origin, row, durations, warm_durations_ns=durations[warm])
    for r in _of(sql, "recompile_causes", run_id, "n DESC, change, arg, dim"):
        where = f"position {r['position']}" if r["position"] is not None else r["fun_name"]
        key = f"{where}|{r['change']}|{r['arg']}|{r['dim']}"
        name = _cause_name(r["change"], r["arg"], r["dim"])
        every = r["lookups"] is not None and r["n"] == r["lookups"] - 1 and r["n"] > 1
        if r["change"] in ("after_eviction", "same_key", "other", "recompile_limit"):
            text = f"{name} at {where} ({times(r['n'])}; e.g. {r['example']})"
        else:
            when = "on every call" if every else times(r["n"])
            text = f"{name} changed {when} at {where} (e.g. {r['example']})"
        data.causes[f"recompile|{key}"] = Cause("recompile", key, where, name, r["n"], text)
    for r in _of(sql, "eviction_sites", run_id, "position"):
        where = f"position {r['position']}"
        again = f", {r['recompiled']} compiled again" if r["recompiled"] else ""
        text = f"the cache at {where} evicted {times(r['n'])} (cache_size {r['cache_size']}{again})"
        data.causes[f"eviction|{where}"] = Cause(
            "eviction", where, where, f"evictions at {where}", r["n"], text
        )
    for r in _of(sql, "break_nodes", run_id, "position"):
        name = f"break at `{r['node']}` ({r['op_type']})"
        why = f": {r['reason']}" if r["reason"] else ""
        where = f"position {r['position']}"
        data.causes[f"break|{r['node']}|{r['op_type']}"] = Cause(
            "break", f"{r['node']}|{r['op_type']}", where, name, int(r["runs"]), name + why
        )
    return data


@dataclass
class Side:
    """A run to load: how to query its database, its id, and where it came from."""

    sql: SqlRunner
    run_id: str
    origin: str


def _is_trace_ref(ref: str) -> bool:
    p = Path(ref)
    return p.suffix == ".jsonl" or p.is_file() or "/" in ref


def _latest_with_tags(con: Any, tags: dict[str, str], exclude: str | None, origin: str) -> str:
    # a tag key is a plain string ('git.branch', '*'), never a JSON path: the tags as a map
    tag_map = """from_json(CAST(tags AS JSON), '"MAP(VARCHAR, VARCHAR)"')"""
    where = " AND ".join(f"{tag_map}[${i * 2 + 1}] = ${i * 2 + 2}" for i in range(len(tags)))
    params: list[Any] = [x for kv in tags.items() for x in kv]
    params.append(exclude or "")
    n = len(params)
    found = con.sql(
        f"SELECT run_id FROM runs WHERE {where} AND run_id <> ${n} "
        "ORDER BY started_at DESC, run_id DESC LIMIT 1",
        params,
    )
    if found.height == 0:
        wanted = ", ".join(f"{k}={v}" for k, v in tags.items())
        raise CompareError(
            f"no run tagged {wanted} in {origin}"
            + (f" other than the candidate {exclude[:8]}" if exclude else "")
            + "; record one with `--tag` (ember run) or record(..., TAG=VALUE) and ingest it"
        )
    return found["run_id"][0]


def _connect_db(path: str | Path) -> Any:
    """A read-only connection to a DuckDB file or a lake folder (``ember ingest --lake``)."""
    from ember.analysis.db import connect
    from ember.analysis.lake.ingest import connect_lake

    try:
        return connect_lake(path) if Path(path).is_dir() else connect(path, read_only=True)
    except FileNotFoundError as exc:
        raise CompareError(str(exc)) from None


def _trace_side(stack: contextlib.ExitStack, ref: str) -> Side:
    """The run of the trace file ``ref``, ingested into a temporary database that ``stack``
    removes."""
    from ember.analysis.db import connect
    from ember.analysis.ingest.database import ingest

    if not Path(ref).is_file():
        raise CompareError(f"{ref}: no such trace file")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ember-compare-")))
    (f,) = ingest([ref], tmp / "trace.duckdb").files
    if f.status == "refused" or f.run_id is None:
        raise CompareError(f"{ref}: refused: {f.message}")
    rejected = (
        f" ({f.rejected} line(s) rejected; `ember validate {ref}` lists them)" if f.rejected else ""
    )
    con = stack.enter_context(connect(tmp / "trace.duckdb", read_only=True))
    return Side(con.sql, f.run_id, f"trace file {ref}{rejected}")


@contextlib.contextmanager
def open_sides(
    base: str | None,
    candidate: str,
    *,
    db: str | Path,
    baseline_tags: dict[str, str] | None = None,
    baseline_db: str | Path | None = None,
) -> Iterator[tuple[Side, Side]]:
    """The base and candidate runs, from what a user names (see the module doc).

    ``base`` and ``candidate`` are run ids (or unique prefixes) in ``db``, or trace files,
    which are ingested into a temporary database removed on exit. Without ``base``,
    ``baseline_tags`` pick the latest run (other than the candidate) with those tags in
    ``baseline_db`` (default ``db``). A database is a DuckDB file or a lake folder
    (``ember ingest --lake``). Raises ``CompareError`` with what to do.
    """
    from ember.analysis.runs import resolve_run

    if base is None and not baseline_tags:
        raise CompareError("no baseline: give BASE CANDIDATE, or CANDIDATE --baseline-tag K=V")
    if base is not None and baseline_tags:
        raise CompareError("give a BASE run or --baseline-tag, not both")
    with contextlib.ExitStack() as stack:
        cons: dict[str, Any] = {}

        def open_db(path: str | Path) -> Any:
            if str(path) not in cons:
                cons[str(path)] = stack.enter_context(_connect_db(path))
            return cons[str(path)]

        # each trace file in a temporary database of its own: two copies of one run (the
        # same run id in two files) compare like any two runs
        traces: dict[str, Side] = {}
        for ref in (base, candidate):
            if ref is not None and _is_trace_ref(ref) and ref not in traces:
                traces[ref] = _trace_side(stack, ref)

        def side(ref: str) -> Side:
            if ref in traces:
                return traces[ref]
            con = open_db(db)
            try:
                run_id = resolve_run(con, ref)
            except (LookupError, ValueError) as exc:
                raise CompareError(f"{db}: {exc}") from None
            return Side(con.sql, run_id, str(db))

        cand = side(candidate)
        if base is not None:
            yield side(base), cand
            return
        assert baseline_tags is not None
        where = baseline_db if baseline_db is not None else db
        con = open_db(where)
        run_id = _latest_with_tags(con, baseline_tags, cand.run_id, str(where))
        tags = ", ".join(f"{k}={v}" for k, v in baseline_tags.items())
        yield Side(con.sql, run_id, f"{where} (latest run tagged {tags})"), cand
