"""The findings of ``ember report``: one builder per kind, each reading its view.

A builder takes the runs' ids (and their headline numbers, ``RunSummary``, where it needs
them), reads one view of ``analysis/sql`` (``memory_peaks``, ``recompile_positions``,
``time_by_part``...) for those runs, and returns ``Finding`` objects: the sentence a
person reads, the numbers it is made of (``data``) and what it costs (``cost_ns``, the time
it names: compile time, the time a part of the calls took, Hub downloads; 0 for memory and
latency). The SQL is in the views; here are the thresholds (when a part is worth a
finding) and the words (what happened, what to do). ``report/__init__.py`` ranks what these
return; ``format.py`` writes the numbers. One job, a dozen builders: over 600 lines, each builder
short and read alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl

from ember.analysis import format as fmt
from ember.analysis.db import Connection
from ember.analysis.format import plural as _n
from ember.analysis.format import sequence, short_path, times
from ember.analysis.runs import SHORT_ID
from ember.analysis.view_rows import RunSummaryRow

__all__ = ["Finding", "FindingKind", "RunSummary", "build_all", "jit_advice", "summaries"]


@dataclass
class RunSummary(RunSummaryRow):
    """The headline numbers of one run: a row of the ``run_summary`` view (its fields are the
    view's columns, generated from its header), with the run's step labels."""

    # (label, count) of the run's steps, first started first (the ``steps`` view)
    step_labels: list[tuple[str, int]] = field(default_factory=list)

    @property
    def short_id(self) -> str:
        return self.run_id[:SHORT_ID]


# in the order findings of equal cost come in: what to fix before what to know
FindingKind = Literal[
    "errors",
    "recompile_limit",
    "graph_break",
    "break",
    "thrash",
    "recompile",
    "jit_retrace",
    "rank_divergence",
    "outside_jit",
    "buckets",
    "evictions",
    "disk_cache",
    "disk_miss",
    "torch_cache",
    "hub",
    "eager",
    "overhead",
    "memory",
    "latency",
]


@dataclass
class Finding:
    """One thing worth knowing about a run, as a sentence with its numbers."""

    run_id: str
    kind: FindingKind
    text: str
    cost_ns: int = 0
    data: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- reading views


def _rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    return df.to_dicts()


def _pick(row: dict[str, Any], names: str) -> dict[str, Any]:
    """The fields of ``row`` named in ``names`` (space-separated): a finding's ``data``."""
    return {k: row[k] for k in names.split()}


def _of(con: Connection, view: str, run_ids: list[str], order: str = "") -> pl.DataFrame:
    """The rows of a view (``analysis/sql/<view>.sql``) for these runs, in ``order``."""
    by = f" ORDER BY {order}" if order else ""
    return con.sql(
        f"SELECT * FROM {view} WHERE run_id IN (SELECT unnest($1::VARCHAR[])){by}", [run_ids]
    )


def summaries(con: Connection, run_ids: list[str]) -> dict[str, RunSummary]:
    """Each run's ``run_summary`` row as a ``RunSummary``, in start order."""
    out: dict[str, RunSummary] = {}
    for row in _rows(_of(con, "run_summary", run_ids, "started_at")):
        out[row["run_id"]] = RunSummary(**{**row, "name": short_path(row["name"])})
    for row in _rows(_of(con, "steps", run_ids, "first_start_ns")):
        out[row["run_id"]].step_labels.append((row["step"], int(row["steps"])))
    return out


# ---------------------------------------------------------------- memory

# the series that says most about a run's memory, first; readings on the CPU are the
# process's resident set and JAX's live arrays, never a device's allocator
_SERIES_RANK = {"tensors": 0, "peak": 1, "used": 2, "reserved": 3, "rss": 4}


def _peaks(
    con: Connection, run_ids: list[str], summaries: dict[str, RunSummary]
) -> list[dict[str, Any]]:
    """Per run, every memory series' peak (``memory_peaks``): the run's headline peak first
    (``run_summary.peak_bytes``/``peak_source``), then the others, most telling first."""
    rows = _rows(_of(con, "memory_peaks", run_ids))
    rows.sort(key=lambda r: (r["run_id"], _SERIES_RANK.get(r["series"], 9), -r["peak_bytes"]))
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = summaries.get(r["run_id"])
        if s is not None and r["label"] == s.peak_source and r["peak_bytes"] == s.peak_bytes:
            best.setdefault(r["run_id"], r)
    for r in rows:  # a run whose headline series is not among its peaks (none expected)
        best.setdefault(r["run_id"], r)
    return [best[k] for k in best] + [r for r in rows if r is not best[r["run_id"]]]


def _memory_findings(
    con: Connection, run_ids: list[str], summaries: dict[str, RunSummary]
) -> list[Finding]:
    rows = _peaks(con, run_ids, summaries)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r)
    out = []
    for run_id, peaks in by_run.items():
        main, others = peaks[0], peaks[1:]
        honest = {
            "RSS": " (the whole process; CPU runs have no device allocator stats)",
            "live arrays": " (live JAX arrays, not an allocator's peak)",
        }.get(main["label"], "")
        text = (
            f"peak memory {fmt.size(main['peak_bytes'])} {main['label']}{honest}"
            f"{'' if main['device'] == 'cpu:0' else ' on ' + main['device']}"
            f" at {main['peak_ts_ns'] / 1e9:.1f} s into the run"
        )
        if main["during"]:
            text += f" (during {main['during']})"
        seen = {(main["device"], main["label"])}
        extra = []
        for o in others:
            if (o["device"], o["label"]) in seen:
                continue
            seen.add((o["device"], o["label"]))
            part = f"{o['label']} {fmt.size(o['peak_bytes'])}"
            if o["device"] != main["device"]:
                part += f" on {o['device']}"
            if o["series"] == "tensors" and o["by_category"]:
                cats = sorted(o["by_category"].items(), key=lambda kv: -(kv[1] or 0))
                top = [f"{k} {fmt.size(v)}" for k, v in cats if v]
                if top:
                    part += f" ({', '.join(top[:2])})"
            extra.append(part)
        if extra:
            text += "; peaks of " + ", ".join(extra)
        out.append(
            Finding(
                run_id,
                "memory",
                text,
                data=_pick(main, "device series label peak_bytes peak_ts_ns during"),
            )
        )
    return out


# ---------------------------------------------------------------- compiles


def _recompile_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    """One finding per segment position compiled more than once."""
    positions = _of(con, "recompile_positions", run_ids, "run_id, position")
    changes = _of(con, "recompile_changes", run_ids, "n DESC, change, arg, dim")
    # the size of every (arg, dim) at every compile, in compile order: the sequence
    sizes = _of(con, "compile_sizes", run_ids)
    size_of = {
        (r["run_id"], r["source"], r["position"], r["arg"], r["dim"]): r["sizes"]
        for r in _rows(sizes)
    }
    changes_of: dict[tuple, list[dict[str, Any]]] = {}
    for r in _rows(changes):
        changes_of.setdefault((r["run_id"], r["source"], r["position"]), []).append(r)
    out = []
    for p in _rows(positions):
        key = (p["run_id"], p["source"], p["position"])
        chs = changes_of.get(key, [])
        recompiles = p["compiles"] - 1
        text = f"position {p['position']} compiled {p['compiles']} times"
        if p["lookups"] and p["lookups"] != p["compiles"]:
            text += f" in {p['lookups']} lookups"
        text += f" ({fmt.duration(p['compile_ns'])})"
        data: dict[str, Any] = {
            "position": p["position"],
            "source": p["source"],
            "compiles": p["compiles"],
            "compile_ns": p["compile_ns"],
            "lookups": p["lookups"],
        }
        if chs:
            main = chs[0]
            what = _change_words(main, size_of.get((*key, main["arg"], main["dim"])))
            every = main["n"] == recompiles and p["compiles"] == p["lookups"]
            when = "on every call" if every else f"{times(main['n'])}"
            if main["change"] == "shape":
                seq = size_of.get((*key, main["arg"], main["dim"])) or []
                text += f": {main['arg']} dim {main['dim']} changed {when} ({sequence(seq)})"
                data.update(arg=main["arg"], dim=main["dim"], sizes=seq)
            else:
                text += f": {what}"
            evicted = max((c["after_eviction"] for c in chs), default=0)
            if evicted:
                text += f"; {evicted} of them after an eviction"
            others = [
                f"{c['arg']} dim {c['dim']}" if c["change"] == "shape" else c["change"]
                for c in chs[1:4]
                if c["change"] not in ("after_eviction", "same_key")
            ]
            if others:
                text += f"; also changed: {', '.join(others)}"
            data["changes"] = [_pick(c, "change arg dim n after_eviction") for c in chs]
        out.append(Finding(p["run_id"], "recompile", text, int(p["recompile_ns"]), data))
    return out


def _change_words(c: dict[str, Any], sizes: list[int] | None) -> str:
    if c["change"] == "shape":
        return f"{c['arg']} dim {c['dim']}"
    if c["change"] in ("same_key", "other"):
        return c["example"]
    return f"{c['arg']} {c['change'].replace('_', ' ')}: {c['example']}"


def jit_advice(rows: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """What would save a jitted function's compiles (its ``jit_shape_buckets`` rows): a
    smaller (last) batch padded or dropped, else a dimension padded to power-of-two buckets.
    The sentence and its data, or None; the report and the dashboard's Recompiles page say it."""
    if not rows:
        return None
    compiles = rows[0]["compiles"]
    if all(r["ragged"] for r in rows) and len({(r["max_size"], r["min_size"]) for r in rows}) == 1:
        dims = ", ".join(f"{r['arg']} dim {r['dim']}" for r in rows)
        big, small = rows[0]["max_size"], rows[0]["min_size"]
        # two sizes, the smaller after the larger: the evidence of a ragged last batch, or
        # of a smaller batch from then on; padding serves both, dropping only the first
        text = (
            f"{dims} went from {big} to {small}: padding to {big} (or dropping a ragged "
            f"last batch) would need {_n(compiles - 1, 'compile')} instead of {compiles}"
        )
        return text, {"ragged": True, "dims": dims, "pad_to": big, "saved_compiles": 1}
    best = max(rows, key=lambda r: r["saved_compiles"])
    if best["saved_compiles"] <= 0:
        return None
    buckets = "/".join(str(x) for x in best["pow2_sizes"])
    text = (
        f"padding {best['arg']} dim {best['dim']} to {buckets} would save "
        f"{_n(best['saved_compiles'], 'compile')}"
    )
    return text, {"ragged": False, **_pick(best, "arg dim pow2_sizes saved_compiles")}


def _jit_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    df = _of(con, "jit_retraces", run_ids, "run_id, fun_name")
    buckets: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for b in _rows(_of(con, "jit_shape_buckets", run_ids, "run_id, fun_name, arg, dim")):
        buckets.setdefault((b["run_id"], b["fun_name"]), []).append(b)
    out = []
    for r in _rows(df):
        reasons = list(dict.fromkeys(r["reasons"]))
        shown = "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "")
        took = fmt.duration(r["compile_ns"])
        if r["loads"] == r["retraces"]:
            # a retrace whose program came from the persistent cache: a load, not a compile
            took = f"loaded from the persistent cache, not compiled: {took}"
        elif r["loads"]:
            took = f"{_n(r['recompiles'], 'compile')} and {_n(r['loads'], 'load')}: {took}"
        text = f"{r['fun_name']} retraced {times(r['retraces'])} ({took}): {shown}"
        data = {
            "fun_name": r["fun_name"],
            "retraces": r["retraces"],
            "recompiles": r["recompiles"],
            "loads": r["loads"],
            "reasons": reasons,
        }
        advice = jit_advice(buckets.get((r["run_id"], r["fun_name"]), []))
        if advice is not None:
            text += f"; {advice[0]}"
            data["advice"] = advice[1]
        out.append(Finding(r["run_id"], "jit_retrace", text, r["compile_ns"], data))
    return out


def _ranks_words(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _divergence_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    """A program some ranks of a job compiled (again) and the others did not: the finding of
    the first divergent rank's run, with what the other ranks waited for the slowest."""
    df = con.sql(
        "SELECT d.*, j.run_id FROM rank_divergence d "
        "JOIN job_ranks j ON j.job_id = d.job_id AND j.rank = d.divergent_ranks[1] "
        "WHERE j.run_id IN (SELECT unnest($1::VARCHAR[])) ORDER BY d.job_id, d.program",
        [run_ids],
    )
    out = []
    for r in _rows(df):
        ranks, others = r["divergent_ranks"], r["ranks"] - len(r["divergent_ranks"])
        who, job = _ranks_words(ranks), r["job_id"]
        if r["divergence"] == "compiled on some ranks only":
            did = f"compiled {r['program']}"
        elif r["divergence"] == "recompiled on some ranks only":
            did = f"recompiled {r['program']}" + (f" ({r['reason']})" if r["reason"] else "")
        else:
            did = f"missed the persistent cache for {r['program']}"
        advice = (
            "give every rank the same persistent cache (one jax_compilation_cache_dir)"
            if r["divergence"] == "persistent-cache misses on some ranks only"
            else "compile the same shapes on every rank (pad or bucket the batch)"
        )
        waited = fmt.duration(r["waited_ns"])
        rest = (
            "the other rank did not; it"
            if others == 1
            else f"the other {others} ranks did not; they"
        )
        wait = (
            f" waited ~{waited} for rank {r['slowest_rank']} (its compile time minus the "
            "median rank's)"
            if r["waited_ns"] > 0
            else " lost no time to it"
        )
        text = f"{who} of job {job} {did} and {rest}{wait}: {advice}"
        data = _pick(r, "job_id program divergence divergent_ranks slowest_rank waited_ns reason")
        out.append(Finding(r["run_id"], "rank_divergence", text, r["waited_ns"], data))
    return out


def _outside_jit_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    """JAX's compiles of primitives run outside jit, grouped apart: one line per run."""
    df = _of(con, "jit_functions", run_ids, "run_id, compile_ns DESC, fun_name")
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in _rows(df):
        if r["internal"] and r["compiles"]:  # loads from the persistent cache compiled nothing
            by_run.setdefault(r["run_id"], []).append(r)
    out = []
    for run_id, funs in by_run.items():
        total = sum(f["compile_ns"] for f in funs)
        compiles = sum(f["compiles"] for f in funs)
        names = [
            f"{f['fun_name']}" + (f" ×{f['compiles']}" if f["compiles"] > 1 else "")
            for f in funs[:6]
        ]
        more = f", and {len(funs) - 6} more" if len(funs) > 6 else ""
        what = "1 primitive" if len(funs) == 1 else f"{len(funs)} primitives"
        text = (
            f"JAX compiled {what} run outside jit: {', '.join(names)}{more} "
            f"({_n(compiles, 'compile')}, {fmt.duration(total)}); code that runs jax.numpy "
            "op by op compiles each op once per shape: move it into a jitted function"
        )
        data = {"primitives": [f["fun_name"] for f in funs], "compiles": compiles}
        out.append(Finding(run_id, "outside_jit", text, total, data))
    return out


def _thrash_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    df = _of(con, "thrash_positions", run_ids, "run_id, position")
    out = []
    for r in _rows(df):
        segs = "1 segment was" if r["keys"] == 1 else f"{r['keys']} segments were"
        text = (
            f"position {r['position']} thrashed: {segs} compiled again after eviction "
            f"({_n(r['wasted'], 'wasted compile')}, {fmt.duration(r['wasted_ns'])})"
        )
        if r["fixes"] is not None and r["cache_size"] is not None:
            text += f"; cache_size {r['cache_size']} -> {r['fixes']} removes them (cache_what_if)"
        out.append(
            Finding(
                r["run_id"],
                "thrash",
                text,
                r["wasted_ns"] or 0,
                {
                    "position": r["position"],
                    "keys": r["keys"],
                    "wasted_compiles": r["wasted"],
                    "cache_size": r["cache_size"],
                    "cache_size_that_fixes": r["fixes"],
                },
            )
        )
    return out


def _eviction_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    """Evictions that cost nothing: say so, since a bigger cache would not help."""
    df = _of(con, "eviction_totals", run_ids)
    out = []
    for r in _rows(df):
        if r["recompiled"]:
            continue  # the thrash findings say what these cost
        where = "" if r["positions"] == 1 else f" at {r['positions']} positions"
        text = (
            f"{r['evictions']} evictions{where} (cache_size {r['cache_size']}); no evicted "
            "segment was needed again, so a bigger cache would not help"
        )
        out.append(Finding(r["run_id"], "evictions", text, 0, dict(r)))
    return out


def _bucket_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    df = _of(con, "bucket_advice", run_ids, "saved_compiles DESC, position, arg, dim")
    out = []
    for r in _rows(df):
        buckets = "/".join(str(s) for s in r["pow2_sizes"])
        if r["varying_dims"] == 1:
            tail = f"would compile {times(r['pow2_buckets'])} instead of {r['compiles']}"
        else:
            tail = (
                f"would leave {_n(r['pow2_buckets'], 'size')} instead of {r['distinct_sizes']} "
                f"({', '.join(o for o in r['varying'] if o != r['arg'] + ' dim ' + str(r['dim']))}"
                " varies too)"
            )
        text = f"position {r['position']}: padding {r['arg']} dim {r['dim']} to {buckets} {tail}"
        saved_ns = int((r["mean_compile_ns"] or 0) * r["saved_compiles"])
        out.append(
            Finding(
                r["run_id"],
                "buckets",
                text,
                saved_ns,
                _pick(
                    r,
                    "position arg dim distinct_sizes pow2_buckets pow2_sizes saved_compiles "
                    "compiles",
                ),
            )
        )
    return out


def _disk_cache_findings(con: Connection, summaries: dict[str, RunSummary]) -> list[Finding]:
    """A run that loaded segments from the disk cache, against a run of the same model."""
    out: list[Finding] = []
    loaded = [s for s in summaries.values() if s.disk_hits]
    if not loaded:
        return out
    # the runs to compare with may be outside the selection (--run): read them all
    everyone = con.sql("SELECT * FROM disk_cache_runs")
    rows = {r["run_id"]: r for r in _rows(everyone)}
    for s in loaded:
        total = s.disk_hits + s.disk_misses
        me = rows.get(s.run_id)
        if me is None:  # no segments: programs of jitted functions from JAX's cache
            text = f"persistent cache: {s.disk_hits}/{total} programs loaded, not compiled"
            programs = {"disk_hits": s.disk_hits, "programs": total}
            out.append(Finding(s.run_id, "disk_cache", text, 0, programs))
            continue
        text = f"disk cache: {me['disk_hits']}/{me['disk_segments']} segments loaded from disk"
        data: dict[str, Any] = {"disk_hits": me["disk_hits"], "segments": me["disk_segments"]}
        peers = [
            r
            for r in rows.values()
            if r["run_id"] != s.run_id
            and r["model"] is not None
            and r["model"] == me["model"]
            and r["disk_hits"] == 0
            and r["segments"] == me["segments"]
        ]
        saved = 0
        if peers:
            # the run that wrote the cache (its misses) if there is one, the latest before
            # this one first
            peer = max(
                peers,
                key=lambda r: (
                    r["disk_misses"] > 0,
                    r["started_at"] <= me["started_at"],
                    r["started_at"],
                ),
            )
            saved = max(0, peer["compile_ns"] - me["compile_ns"])
            text += (
                f"; compile time {fmt.duration(me['compile_ns'])}"
                f" vs {fmt.duration(peer['compile_ns'])}"
                f" in run {peer['run_id'][:SHORT_ID]} ({short_path(peer['name'], 24)})"
            )
            data.update(compared_with=peer["run_id"], compile_ns=me["compile_ns"])
            data["other_compile_ns"] = peer["compile_ns"]
        out.append(Finding(s.run_id, "disk_cache", text, saved, data))
    return out


def _latency_findings(
    con: Connection, run_ids: list[str], summaries: dict[str, RunSummary]
) -> list[Finding]:
    df = _of(con, "slowest_shapes", run_ids)
    out = []
    for r in _rows(df):
        text = f"slowest shape: {short_path(r['shapes_text'], 48)} p99 {fmt.duration(r['p99_ns'])}"
        notes = []
        if r["compiling_calls"]:
            n = r["compiling_calls"]
            notes.append("first call compiles" if n == 1 else f"{n} calls compiled")
        if r["p50_warm_ns"] is not None:
            notes.append(f"warm p50 {fmt.duration(r['p50_warm_ns'])}")
        notes.append("1 call" if r["calls"] == 1 else f"{r['calls']} calls")
        if summaries[r["run_id"]].latency_kind == "dispatch only":
            notes.append("dispatch only: the calls were timed to dispatch, not to results")
        text += f" ({'; '.join(notes)})"
        out.append(
            Finding(
                r["run_id"],
                "latency",
                text,
                0,
                _pick(r, "shapes_text calls p50_ns p99_ns p50_warm_ns"),
            )
        )
    return out


def _error_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    df = _of(con, "call_errors", run_ids)
    out = []
    for r in _rows(df):
        if r["span_kind"] == "call":
            what = "1 call failed" if r["errors"] == 1 else f"{r['errors']} calls failed"
        else:  # a run whose model did not load said "nothing to report"
            what = f"the model failed to {r['span_kind']}"
        text = f"{what}: {'; '.join(sorted(r['reasons'])[:2])}"
        out.append(Finding(r["run_id"], "errors", text, 0, dict(r)))
    return out


def _guard(reason: str | None) -> str:
    return (reason or "?").removeprefix("guard failed: ")


def _torch_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    """torch.compile runs: a frame that hit the recompile limit, and each graph break."""
    out = []
    limits = _of(con, "torch_compiles", run_ids, "ts_ns").filter(pl.col("recompile_limit_hit"))
    for r in _rows(limits):
        text = (
            f"{r['fun_name']} hit torch's recompile limit ({r['recompile_limit']}) and runs "
            f"eagerly from then on (torch's eviction: each new input runs uncompiled); the "
            f"last guard that failed: {_guard(r['retrace_reason'])}. Keep that value from "
            "changing (mark it dynamic), or raise torch._dynamo.config.recompile_limit"
        )
        out.append(Finding(r["run_id"], "recompile_limit", text, 0, dict(r)))
    out += _torch_cache_findings(con, run_ids)
    torch_runs = set(_of(con, "torch_compiles", run_ids)["run_id"].to_list())
    for r in _rows(_of(con, "breaks", sorted(torch_runs), "first_ts_ns")):
        stack = r.get("user_stack") or []
        caller = f", reached from {stack[-2]}" if len(stack) >= 2 else ""
        text = (
            f"graph break in {r['source']} at {r['node']}{caller} ({r['op_type']}): "
            f"{(r['reason'] or '?').rstrip('.')}; "
            "the code after it compiles as resume frames, one graph more per break"
        )
        out.append(Finding(r["run_id"], "graph_break", text, 0, dict(r)))
    return out


def _torch_cache_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    """A torch.compile run whose compiles came from the FX graph / AOTAutograd caches."""
    out = []
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in _rows(_of(con, "torch_compiles", run_ids, "ts_ns")):
        by_run.setdefault(r["run_id"], []).append(r)
    for run_id, compiles in by_run.items():
        cached = [c for c in compiles if c["outcome"] == "compiled from the caches"]
        if not cached:
            continue
        saved = sum(x["time_saved_ns"] or 0 for c in cached for x in c["cache_lookups"] or [])
        text = (
            f"{len(cached)} of {len(compiles)} compiles came from torch's FX graph and "
            "AOTAutograd caches (on disk: an earlier compile of the same graphs)"
            + (f"; torch estimates they saved {fmt.duration(saved)}" if saved else "")
        )
        out.append(
            Finding(run_id, "torch_cache", text, 0, {"cached": len(cached), "saved_ns": saved})
        )
    return out


# ---------------------------------------------------------------- where the time goes

# what to do about a break that holds much of each call, by its op
_BREAK_ACTION = {
    "If": "compute the condition from small inputs (not from values the model computes on "
    "the device) so Ember specialises on it and compiles the taken branch inline, or move "
    "the branch's work out of the If",
    "Loop": "compute the trip count from shapes or constants (not tensor values) so the loop "
    "compiles into the program, or export it as a Scan of fixed length",
    "Scan": "give the sequence a fixed length so the body compiles into the program",
}
_DEFAULT_ACTION = (
    "the graph stops here for values computed on the device; make them static (an input, "
    "a constant) or pad to fixed sizes so the graph stays one program"
)
_SUBGRAPH = {"If": "its branch", "Loop": "its body", "Scan": "its body"}
# a part becomes a finding when its median share of a call is at least this
_BREAK_SHARE = 0.10
_EAGER_SHARE = 0.25
_OVERHEAD_SHARE = 0.25
_HUB_SHARE = 0.5


def _part_findings(con: Connection, run_ids: list[str]) -> list[Finding]:
    """Breaks, eager segments, Ember's overhead and Hub downloads that hold much of the time
    (``time_by_part``), each with what to do."""
    rows = _rows(_of(con, "time_by_part", run_ids, "run_id, rank"))
    out = []
    for r in rows:
        share, per_call = r["p50_share_of_call"], r["p50_call_ns"]
        kind = r["part_kind"]
        each = f"{fmt.percent(share)} of each call, {fmt.duration(per_call)}"
        if r["latency_kind"] == "dispatch only":
            each += " (dispatch only)"
        data = _pick(
            r,
            "part_kind part position node op_type total_ns p50_share_of_call p50_call_ns "
            "share_of_wall program_ns",
        )
        if kind == "break" and share is not None and share >= _BREAK_SHARE:
            op = r["op_type"]
            sub, program = r["subgraph_ns"] or 0, r["program_ns"] or 0
            half = 0.5 * (r["in_calls_ns"] or 0)
            if program >= half:
                # Ember compiled what the break runs: what costs is that it runs apart, a
                # program of its own between two segments, with values read on the host
                what = f"runs {_SUBGRAPH.get(op, 'its subgraph')} as a compiled program of its own"
            elif sub >= half:
                what = f"runs {_SUBGRAPH.get(op, 'its subgraph')} from the host"
            else:
                what = "runs on the host"
            text = f"break at `{r['node']}` ({r['reason'] or op}) {what}: {each}"
            moving = r["host_transfer_ns"] or 0
            if moving >= 0.1 * (r["in_calls_ns"] or 1):
                text += f" (moving its inputs to the host: {fmt.duration(moving)})"
            text += f"; {_BREAK_ACTION.get(op, _DEFAULT_ACTION)}"
            out.append(Finding(r["run_id"], "break", text, r["in_calls_ns"] or 0, data))
        elif kind == "eager_segment" and share is not None and share >= _EAGER_SHARE:
            text = (
                f"segment {r['position']} runs eagerly, node by node (a short segment after "
                f"a break): {each}; removing the break before it lets it join a compiled "
                "segment"
            )
            out.append(Finding(r["run_id"], "eager", text, r["in_calls_ns"] or 0, data))
        elif kind == "overhead" and share is not None and share >= _OVERHEAD_SHARE:
            text = (
                f"Ember's own work in each call (cache lookups, keys, input checks between "
                f"segments): {each}; fewer breaks mean fewer segments to look up"
            )
            out.append(Finding(r["run_id"], "overhead", text, r["in_calls_ns"] or 0, data))
        elif kind == "hub_download" and (r["share_of_wall"] or 0) >= _HUB_SHARE:
            text = (
                f"Hub downloads took {fmt.duration(r['total_ns'])}, "
                f"{fmt.percent(r['share_of_wall'])} of the run (a cold start): keep "
                "HF_HUB_CACHE on a disk that outlives the job, or download ahead, so the next "
                "run reads the files from the cache"
            )
            out.append(Finding(r["run_id"], "hub", text, r["total_ns"] or 0, data))
    return out


def _disk_miss_findings(con: Connection, summaries: dict[str, RunSummary]) -> list[Finding]:
    """Compiled segments a disk cache did not have (they were compiled in full)."""
    missed = [s.run_id for s in summaries.values() if s.disk_misses]
    if not missed:
        return []
    out = []
    reasons = _changed_disk_keys(con, missed)
    for view_row in _rows(_of(con, "disk_cache_runs", missed)):
        r = {
            "run_id": view_row["run_id"],
            "misses": view_row["disk_misses"],
            "segments": view_row["disk_segments"],
            "miss_ns": view_row["miss_ns"],
        }
        s = summaries[r["run_id"]]
        text = (
            f"disk cache missed {r['misses']} of {r['segments']} compiled segments "
            f"({fmt.duration(r['miss_ns'])} compiling them)"
        )
        if s.disk_hits:
            text += (
                "; the others loaded: the missed ones have new keys (new shapes or static "
                "values), and a later run with the same cache_dir loads them"
            )
        changed = reasons.get(r["run_id"])
        if changed:
            # the cache held these segments under another key: name the part
            text += f"; the cache held them under another key: {'; '.join(changed)}"
            r["changed"] = changed
        elif not s.disk_hits:
            text += (
                "; a first run fills the cache (none of its segments was in it under another key)"
            )
        out.append(Finding(r["run_id"], "disk_miss", text, r["miss_ns"], dict(r)))
    return out


def _changed_disk_keys(con: Connection, run_ids: list[str]) -> dict[str, list[str]]:
    """run id -> the different key changes its disk-cache misses name (disk_cache_misses),
    most frequent first."""
    rows = con.sql(
        "SELECT run_id, reason, count(*) AS n FROM disk_cache_misses "
        "WHERE changed AND run_id IN (SELECT unnest($1::VARCHAR[])) GROUP BY ALL "
        "ORDER BY n DESC, reason",
        [run_ids],
    )
    out: dict[str, list[str]] = {}
    for row in _rows(rows):
        out.setdefault(row["run_id"], []).append(row["reason"])
    return out


def build_all(
    con: Connection, run_ids: list[str], summaries: dict[str, RunSummary]
) -> list[Finding]:
    """Every builder's findings for these runs, unranked."""
    return [
        *_error_findings(con, run_ids),
        *_torch_findings(con, run_ids),
        *_thrash_findings(con, run_ids),
        *_recompile_findings(con, run_ids),
        *_jit_findings(con, run_ids),
        *_divergence_findings(con, run_ids),
        *_outside_jit_findings(con, run_ids),
        *_bucket_findings(con, run_ids),
        *_eviction_findings(con, run_ids),
        *_disk_cache_findings(con, summaries),
        *_disk_miss_findings(con, summaries),
        *_part_findings(con, run_ids),
        *_memory_findings(con, run_ids, summaries),
        *_latency_findings(con, run_ids, summaries),
    ]
