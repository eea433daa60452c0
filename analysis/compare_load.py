"""Loading one side of ``ember compare``: what a user names -> a run -> its ``RunData``.

- ``open_sides(...)`` resolves what a user names (a run id or a unique prefix in a
  DuckDB file or a lake, a trace file ingested into a temporary database, or the latest
  run with some tags) into ``Side`` objects: how to query the run's database and its id.
- ``load_run(sql, run_id)`` reads what one run says from the views: its ``run_summary``
  row (every headline metric, defined once there), the durations its latency is made of
  (``_latency_samples``), and its causes: why it recompiled (``_recompile_causes``), where
  its cache evicted (``_eviction_sites``) and where its graph broke (``_break_nodes``),
  each named for a person. ``sql`` is any ``(query, params) -> polars.DataFrame``.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from . import format as fmt
from .format import times

__all__ = ["Cause", "CompareError", "RunData", "Side", "SqlRunner", "load_run", "open_sides"]

SqlRunner = Callable[[str, list[Any]], pl.DataFrame]


class CompareError(ValueError):
    """What the user named cannot be compared (no such run, a refused trace file...)."""


@dataclass
class Cause:
    """One reason a run recompiled, evicted or broke its graph, named for a person."""

    kind: Literal["recompile", "eviction", "break"]
    key: str  # identity across runs: 'position 0|shape|input_ids|1'
    where: str  # 'position 0', a jitted function's name
    name: str  # '`input_ids` dim 1', 'break at `kept_positions` (NonZero)'
    count: int  # recompiles with this cause, evictions at this position, break runs
    text: str  # the sentence: '`input_ids` dim 1 changed on every call at position 0 ...'


@dataclass
class RunData:
    """What ``compare`` needs of one run."""

    run_id: str
    origin: str  # where it came from: 'ember.duckdb', 'trace file base.jsonl'
    summary: dict[str, Any]  # its run_summary row
    durations_ns: np.ndarray  # call (else step) durations, in recording order
    causes: dict[str, Cause] = field(default_factory=dict)
    # the durations of the calls (else steps) that neither compiled nor failed (run_summary's
    # warm_*); None: the same as durations_ns
    warm_durations_ns: np.ndarray | None = None

    @property
    def name(self) -> str:
        """The run's name (scenario, model or entrypoint), long paths cut from the left."""
        return fmt.short_path(str(self.summary.get("name") or self.run_id[:8]), 40)

    @property
    def short_id(self) -> str:
        return self.run_id[:8]

    @property
    def warm_ns(self) -> np.ndarray:
        """The warm durations (``warm_durations_ns``, else all of them)."""
        return self.durations_ns if self.warm_durations_ns is None else self.warm_durations_ns


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
        "FROM _latency_samples WHERE run_id = $1 ORDER BY ts_ns",
        [run_id],
    )
    durations = np.asarray(samples["duration_ns"].to_numpy(), dtype=np.float64)
    warm = samples["warm"].to_numpy().astype(bool)
    data = RunData(run_id, origin, row, durations, warm_durations_ns=durations[warm])
    for r in _of(sql, "_recompile_causes", run_id, "n DESC, change, arg, dim"):
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
    for r in _of(sql, "_eviction_sites", run_id, "position"):
        where = f"position {r['position']}"
        again = f", {r['recompiled']} compiled again" if r["recompiled"] else ""
        text = f"the cache at {where} evicted {times(r['n'])} (cache_size {r['cache_size']}{again})"
        data.causes[f"eviction|{where}"] = Cause(
            "eviction", where, where, f"evictions at {where}", r["n"], text
        )
    for r in _of(sql, "_break_nodes", run_id, "position"):
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
    from .db import connect
    from .ingest import ingest
    from .lake import connect_lake
    from .runs import resolve_run

    if base is None and not baseline_tags:
        raise CompareError("no baseline: give BASE CANDIDATE, or CANDIDATE --baseline-tag K=V")
    if base is not None and baseline_tags:
        raise CompareError("give a BASE run or --baseline-tag, not both")
    with contextlib.ExitStack() as stack:
        cons: dict[str, Any] = {}

        def open_db(path: str | Path) -> Any:
            key = str(path)
            if key not in cons:
                try:
                    if Path(path).is_dir():  # a lake written by `ember ingest --lake`
                        con = connect_lake(path)
                    else:
                        con = connect(path, read_only=True)
                except FileNotFoundError as exc:
                    raise CompareError(str(exc)) from None
                cons[key] = stack.enter_context(con)
            return cons[key]

        # each trace file in a temporary database of its own: two copies of one run (the
        # same run id in two files) compare like any two runs
        traces: dict[str, Side] = {}
        for ref in (base, candidate):
            if ref is None or not _is_trace_ref(ref) or ref in traces:
                continue
            if not Path(ref).is_file():
                raise CompareError(f"{ref}: no such trace file")
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ember-compare-")))
            (f,) = ingest([ref], tmp / "trace.duckdb").files
            if f.status == "refused" or f.run_id is None:
                raise CompareError(f"{ref}: refused: {f.message}")
            rejected = (
                f" ({f.rejected} line(s) rejected; `ember validate {ref}` lists them)"
                if f.rejected
                else ""
            )
            con = stack.enter_context(connect(tmp / "trace.duckdb", read_only=True))
            traces[ref] = Side(con.sql, f.run_id, f"trace file {ref}{rejected}")

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
