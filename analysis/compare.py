"""``ember compare``: a base run against a candidate run, metric by metric, under rules.

The pieces, each usable alone (the CLI and the dashboard's *Compare* page use them all):

- ``load_run(sql, run_id)`` reads what one run says from the views: its ``run_summary``
  row (every headline metric, defined once there), the durations of its calls (else of
  its steps) from ``span_end``, its recompile causes (``recompiles``: what changed, by
  name), the positions whose cache evicted (``evictions``) and its graph breaks
  (``breaks``). ``sql`` is any ``(query, params) -> polars.DataFrame``.
- ``compare(base, candidate, rules)`` -> ``Comparison``: one ``MetricRow`` per metric
  (base, candidate, change, verdict), one ``RuleResult`` per rule, the causes the
  candidate has that the base has not (and those it lost), and ``passed``.
- ``open_sides(...)`` resolves what a user names (a run id or a unique prefix in a
  DuckDB file, a trace file ingested into a temporary database, or the latest run with
  some tags) into runs to load.
- ``to_markdown``, ``to_junit``, ``to_json`` render a ``Comparison`` for CI systems.

Latency, without failing builds on noise. The durations of two runs of the same workload
differ from call to call, and more so on a busy machine. A latency metric (p50, p90, p99,
mean) is therefore compared as two samples: a percentile bootstrap (``RESAMPLES``
resamples of each side, seeded, so the same runs give the same answer) gives a 95 %
interval of the change (candidate - base) and of the relative change, and a two-sided
Mann-Whitney U test (``scipy.stats.mannwhitneyu``) asks whether one side's calls tend to
be slower at all. A latency rule on a change breaks only when both agree: the test says
the candidate is slower (p < ``ALPHA``) *and* the whole interval lies beyond the
threshold. A side with fewer than ``MIN_SAMPLES`` durations cannot fail a latency rule
(the rule is skipped and says why); a side with more than ``MAX_BOOTSTRAP`` is subsampled
(seeded) for the bootstrap only. Rules on the candidate's own value (``latency_p50>5ms``)
read the point value.

Comparable numbers only: when the base measured latency to results and the candidate
dispatch only (or the peak comes from different sources, RSS against tensors), the rules
on those metrics are skipped with the reason, never passed or failed on a mismatch.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from . import format as fmt
from .gate import DERIVED_METRICS, LATENCY_METRICS, GateConfig, Rule, RuleError, metric_column

__all__ = [
    "ALPHA",
    "Cause",
    "CompareError",
    "Comparison",
    "LatencyTest",
    "MetricRow",
    "RuleResult",
    "RunData",
    "Side",
    "compare",
    "compare_refs",
    "headline",
    "latency_test",
    "latency_tests",
    "load_run",
    "open_sides",
    "show",
    "show_change",
    "to_json",
    "to_junit",
    "to_markdown",
]

SqlRunner = Callable[[str, list[Any]], pl.DataFrame]

ALPHA = 0.05
"""Significance level of the Mann-Whitney U test; the bootstrap interval is 1 - ALPHA."""
RESAMPLES = 2000
MIN_SAMPLES = 5
MAX_BOOTSTRAP = 10_000
SEED = 0

# run_summary columns that describe a run rather than measure it
_CONTEXT_COLUMNS = {
    "run_id",
    "name",
    "started_at",
    "model",
    "phase",
    "host",
    "backend",
    "tags",
    "entrypoint",
    "file",
    "sync",
    "latency_of",
    "latency_kind",
    "peak_source",
}
_LOWER_IS_BETTER = {
    "failed_calls",
    "compiles",
    "compile_ns",
    "eager_compiles",
    "eager_compile_ns",
    "recompiles",
    "recompiled_after_eviction",
    "jax_compiles",
    "jax_compile_ns",
    "misses",
    "evictions",
    "disk_misses",
    "breaks",
    "graph_break",
    "p50_ns",
    "p90_ns",
    "p99_ns",
    "mean_ns",
    "new_recompile_causes",
    "new_breaks",
    "new_eviction_sites",
}
_HIGHER_IS_BETTER = {"hit_rate", "disk_hits"}
# which context must match for a metric's values to be comparable
_NEEDS_SAME = {
    **{c: ("latency_of", "latency_kind") for c in LATENCY_METRICS},
    "peak_bytes": ("peak_source",),
}


class CompareError(ValueError):
    """What the user named cannot be compared (no such run, a refused trace file...)."""


# ---------------------------------------------------------------- one run


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

    @property
    def name(self) -> str:
        """The run's name (scenario, model or entrypoint), long paths cut from the left."""
        return fmt.short_path(str(self.summary.get("name") or self.run_id[:8]), 40)

    @property
    def short_id(self) -> str:
        return self.run_id[:8]


def _cause_name(change: str, arg: str | None, dim: int | None) -> str:
    if change == "shape":
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
    if change.startswith("jit:"):
        return f"`{arg}` {change[4:]}"
    return change


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


# the recompiles run_summary counts (not of eager segments, not JAX's own primitives),
# one row per change each names (a recompile after an eviction: that one cause)
_RECOMPILE_CAUSES = """
WITH r AS (
    SELECT r.position, r.fun_name, r.compile_index, r.reason,
        unnest(CASE WHEN r.after_eviction OR len(r.changes) = 0
            THEN [{'change': r.change, 'arg': r.arg, 'dim': r.dim}]
            ELSE list_transform(r.changes, lambda c: {'change': c.change, 'arg': c.arg,
                'dim': c.dim}) END) AS ch
    FROM recompiles r
    LEFT JOIN compiles c ON c.run_id = r.run_id AND c.source IS NOT DISTINCT FROM r.source
        AND c.position IS NOT DISTINCT FROM r.position
        AND c.fun_name IS NOT DISTINCT FROM r.fun_name AND c.compile_index = r.compile_index
    LEFT JOIN _jit_functions j ON j.run_id = r.run_id AND j.fun_name = r.fun_name
    WHERE r.run_id = $1 AND c.compiled IS DISTINCT FROM false
        AND NOT coalesce(j.internal, false)
),
lookups AS (
    SELECT position, count(*) AS lookups FROM cache_lookups WHERE run_id = $1 GROUP BY ALL
)
SELECT r.position, r.fun_name, r.ch.change AS change, r.ch.arg AS arg, r.ch.dim AS dim,
    count(*) AS n, any_value(r.reason ORDER BY r.compile_index) AS example,
    any_value(l.lookups) AS lookups
FROM r LEFT JOIN lookups l ON l.position = r.position
GROUP BY ALL
ORDER BY n DESC, change, arg, dim
"""

_EVICTION_SITES = """
SELECT position, count(*) AS n, max(cache_size) AS cache_size,
    count(*) FILTER (WHERE recompiled) AS recompiled
FROM evictions WHERE run_id = $1 GROUP BY ALL ORDER BY position
"""

_BREAK_NODES = """
SELECT node, op_type, min(position) AS position, any_value(reason) AS reason,
    sum(runs) AS runs
FROM breaks WHERE run_id = $1 GROUP BY ALL ORDER BY position
"""


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
    of = row.get("latency_of") or "call"
    durations = sql(
        "SELECT duration_ns FROM span_end WHERE run_id = $1 AND span_kind = $2 "
        "AND duration_ns IS NOT NULL ORDER BY ts_ns",
        [run_id, of],
    )["duration_ns"].to_numpy()
    data = RunData(run_id, origin, row, np.asarray(durations, dtype=np.float64))
    for r in sql(_RECOMPILE_CAUSES, [run_id]).to_dicts():
        where = f"position {r['position']}" if r["position"] is not None else r["fun_name"]
        key = f"{where}|{r['change']}|{r['arg']}|{r['dim']}"
        name = _cause_name(r["change"], r["arg"], r["dim"])
        every = r["lookups"] is not None and r["n"] == r["lookups"] - 1 and r["n"] > 1
        if r["change"] in ("after_eviction", "same_key", "other"):
            text = f"{name} at {where} ({_times(r['n'])}; e.g. {r['example']})"
        else:
            when = "on every call" if every else _times(r["n"])
            text = f"{name} changed {when} at {where} (e.g. {r['example']})"
        data.causes[f"recompile|{key}"] = Cause("recompile", key, where, name, r["n"], text)
    for r in sql(_EVICTION_SITES, [run_id]).to_dicts():
        where = f"position {r['position']}"
        again = f", {r['recompiled']} compiled again" if r["recompiled"] else ""
        text = (
            f"the cache at {where} evicted {_times(r['n'])} (cache_size {r['cache_size']}{again})"
        )
        data.causes[f"eviction|{where}"] = Cause(
            "eviction", where, where, f"evictions at {where}", r["n"], text
        )
    for r in sql(_BREAK_NODES, [run_id]).to_dicts():
        name = f"break at `{r['node']}` ({r['op_type']})"
        why = f": {r['reason']}" if r["reason"] else ""
        where = f"position {r['position']}"
        data.causes[f"break|{r['node']}|{r['op_type']}"] = Cause(
            "break", f"{r['node']}|{r['op_type']}", where, name, int(r["runs"]), name + why
        )
    return data


# ---------------------------------------------------------------- latency


@dataclass
class LatencyTest:
    """Two samples of durations compared on one statistic (a quantile or the mean)."""

    column: str  # p50_ns | p90_ns | p99_ns | mean_ns
    n_base: int
    n_candidate: int
    base: float | None  # the statistic on all of each side's durations
    candidate: float | None
    change_interval: tuple[float, float] | None  # 95 % interval of candidate - base (ns)
    relative_interval: tuple[float, float] | None  # of candidate / base - 1
    p_value: float | None  # Mann-Whitney U, two-sided
    slower: bool = False  # candidate's durations tend to be larger (one-sided p < ALPHA)
    faster: bool = False

    @property
    def enough(self) -> bool:
        return self.n_base >= MIN_SAMPLES and self.n_candidate >= MIN_SAMPLES


def _stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """Every latency statistic of ``x`` along its last axis."""
    qs = [q for q in LATENCY_METRICS.values() if q is not None]
    values = np.quantile(x, qs, axis=-1)
    out = {c: values[qs.index(q)] for c, q in LATENCY_METRICS.items() if q is not None}
    out.update({c: np.mean(x, axis=-1) for c, q in LATENCY_METRICS.items() if q is None})
    return out


def _resampled(x: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every statistic of ``RESAMPLES`` resamples of ``x`` (with replacement), in batches
    of at most two million values; one draw of resamples serves every statistic."""
    n = len(x)
    out = {c: np.empty(RESAMPLES) for c in LATENCY_METRICS}
    batch = max(1, min(RESAMPLES, 2_000_000 // n))
    for start in range(0, RESAMPLES, batch):
        k = min(batch, RESAMPLES - start)
        for c, v in _stats(x[rng.integers(0, n, size=(k, n))]).items():
            out[c][start : start + k] = v
    return out


def latency_tests(base: np.ndarray, candidate: np.ndarray) -> dict[str, LatencyTest]:
    """Compare two samples of durations on each latency statistic (see the module doc):
    one Mann-Whitney U test of the samples, one bootstrap of each side for all of them."""
    from scipy.stats import mannwhitneyu

    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    point_a = {c: float(v) for c, v in _stats(a).items()} if len(a) else {}
    point_b = {c: float(v) for c, v in _stats(b).items()} if len(b) else {}
    tests = {
        c: LatencyTest(c, len(a), len(b), point_a.get(c), point_b.get(c), None, None, None)
        for c in LATENCY_METRICS
    }
    if not (len(a) >= MIN_SAMPLES and len(b) >= MIN_SAMPLES):
        return tests
    if np.all(a == a[0]) and np.all(b == a[0]):
        p_value, slower, faster = 1.0, False, False  # the same constant: nothing differs
    else:
        p_greater = float(mannwhitneyu(b, a, alternative="greater").pvalue)
        p_less = float(mannwhitneyu(b, a, alternative="less").pvalue)
        p_value = min(1.0, 2 * min(p_greater, p_less))
        slower, faster = p_greater < ALPHA, p_less < ALPHA
    rng = np.random.default_rng(SEED)
    a_boot = rng.choice(a, MAX_BOOTSTRAP, replace=False) if len(a) > MAX_BOOTSTRAP else a
    b_boot = rng.choice(b, MAX_BOOTSTRAP, replace=False) if len(b) > MAX_BOOTSTRAP else b
    sa_all, sb_all = _resampled(a_boot, rng), _resampled(b_boot, rng)
    lo, hi = 100 * ALPHA / 2, 100 * (1 - ALPHA / 2)
    for c, test in tests.items():
        sa, sb = sa_all[c], sb_all[c]
        diff = sb - sa
        test.change_interval = (float(np.percentile(diff, lo)), float(np.percentile(diff, hi)))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(sa > 0, sb / sa - 1, np.where(sb > 0, np.inf, 0.0))
        test.relative_interval = (float(np.percentile(rel, lo)), float(np.percentile(rel, hi)))
        test.p_value, test.slower, test.faster = p_value, slower, faster
    return tests


def latency_test(base: np.ndarray, candidate: np.ndarray, column: str) -> LatencyTest:
    """``latency_tests`` of one statistic (``p50_ns``, ``p90_ns``, ``p99_ns``, ``mean_ns``)."""
    return latency_tests(base, candidate)[column]


# ---------------------------------------------------------------- comparison


@dataclass
class MetricRow:
    """One metric of both runs."""

    metric: str  # the run_summary column (or derived metric)
    unit: str  # count | ns | bytes | fraction | flag
    base: Any
    candidate: Any
    change: float | None  # candidate - base
    relative: float | None  # change / base (inf from a base of 0)
    verdict: str  # same | worse | better | changed | within noise | not comparable | –
    better: str | None  # lower | higher | None (neither)
    latency: LatencyTest | None = None
    note: str = ""  # why not comparable, or the latency interval in words


@dataclass
class RuleResult:
    """One rule applied to the comparison."""

    rule: str  # as written
    status: Literal["pass", "fail", "skip"]
    message: str  # what was compared and why it passed, failed or was skipped
    metric: str  # the column it read
    value: float | None  # what the threshold was compared with (absolute, change or %)


@dataclass
class Comparison:
    base: RunData
    candidate: RunData
    metrics: list[MetricRow]
    rules: list[RuleResult]
    rules_origin: str
    new_causes: list[Cause]  # the candidate has them, the base does not
    gone_causes: list[Cause]  # the base had them, the candidate does not
    context: dict[str, tuple[Any, Any]]  # latency_kind, peak_source...: (base, candidate)

    @property
    def failed(self) -> list[RuleResult]:
        return [r for r in self.rules if r.status == "fail"]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def metric(self, name: str) -> MetricRow:
        column = metric_column(name)
        for m in self.metrics:
            if m.metric == column:
                return m
        raise KeyError(name)


def _unit(column: str, value: Any) -> str:
    if isinstance(value, bool):
        return "flag"
    if column.endswith("_ns"):
        return "ns"
    if column.endswith("_bytes"):
        return "bytes"
    if column.endswith("_rate"):
        return "fraction"
    return "count"


def _better(column: str) -> str | None:
    if column in _LOWER_IS_BETTER or column.endswith("_bytes"):
        return "lower"
    if column in _HIGHER_IS_BETTER:
        return "higher"
    return None


def _num(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        return None if isinstance(v, float) and math.isnan(v) else float(v)
    return None


def _relative(change: float, base: float) -> float:
    if base == 0:
        return 0.0 if change == 0 else math.copysign(math.inf, change)
    return change / abs(base)


def _direction_verdict(change: float, better: str | None) -> str:
    if change == 0:
        return "same"
    if better is None:
        return "changed"
    return "worse" if (change > 0) == (better == "lower") else "better"


def _metric_rows(base: RunData, cand: RunData, derived: dict[str, tuple[int, int]]) -> list:
    rows: list[MetricRow] = []
    cache: dict[str, Any] = {}  # the latency tests, computed once for every statistic
    columns = [c for c in base.summary if c not in _CONTEXT_COLUMNS]
    columns += [c for c in cand.summary if c not in _CONTEXT_COLUMNS and c not in columns]
    for column in columns:
        bv, cv = base.summary.get(column), cand.summary.get(column)
        sample = bv if bv is not None else cv
        if sample is not None and not isinstance(sample, bool | int | float):
            continue  # a text or time column: context, not a metric
        rows.append(_metric_row(column, bv, cv, base, cand, cache))
    for column, (bv, cv) in derived.items():
        rows.append(_metric_row(column, bv, cv, base, cand, cache))
    return rows


def _metric_row(
    column: str, bv: Any, cv: Any, base: RunData, cand: RunData, cache: dict[str, Any]
) -> MetricRow:
    unit = _unit(column, bv if bv is not None else cv)
    better = _better(column)
    b, c = _num(bv), _num(cv)
    row = MetricRow(column, unit, bv, cv, None, None, "–", better)
    if b is None or c is None:
        if b is not None or c is not None:
            row.verdict = "not comparable"
            row.note = "only one run has it"
        return row
    row.change = c - b
    row.relative = _relative(row.change, b)
    mismatch = [
        f"{k}: {base.summary.get(k)} vs {cand.summary.get(k)}"
        for k in _NEEDS_SAME.get(column, ())
        if base.summary.get(k) != cand.summary.get(k)
    ]
    if mismatch:
        row.verdict = "not comparable"
        row.note = "; ".join(mismatch)
        return row
    if column in LATENCY_METRICS:
        if "tests" not in cache:
            cache["tests"] = latency_tests(base.durations_ns, cand.durations_ns)
        test = cache["tests"][column]
        row.latency = test
        if not test.enough:
            row.verdict = _direction_verdict(row.change, better) if row.change == 0 else "–"
            row.note = (
                f"too few durations to tell ({test.n_base} and {test.n_candidate}; "
                f"needs {MIN_SAMPLES} a side)"
            )
        elif test.slower and test.change_interval and test.change_interval[0] > 0:
            row.verdict = "worse"
        elif test.faster and test.change_interval and test.change_interval[1] < 0:
            row.verdict = "better"
        else:
            row.verdict = "same" if row.change == 0 else "within noise"
        if test.relative_interval:
            lo, hi = test.relative_interval
            row.note = (
                f"95% interval {_signed_pct(lo)} to {_signed_pct(hi)}, "
                f"Mann-Whitney p={test.p_value:.3g}"
            )
        return row
    row.verdict = _direction_verdict(row.change, better)
    return row


def _signed_pct(x: float | None) -> str:
    if x is None or math.isnan(x):
        return fmt.MISSING
    if math.isinf(x):
        return "+∞%" if x > 0 else "-∞%"
    if x >= 9.5:  # +950% and more read better as a ratio: '64x'
        return f"{1 + x:,.0f}x"
    sign = "+" if x > 0 else "-" if x < 0 else "±"
    return sign + fmt.percent(abs(x))


def show(value: Any, unit: str) -> str:
    """A metric's value for people (through ``analysis.format``)."""
    if value is None:
        return fmt.MISSING
    if unit == "flag":
        return "yes" if value else "no"
    if unit == "ns":
        return fmt.duration(value)
    if unit == "bytes":
        return fmt.size(value)
    if unit == "fraction":
        return fmt.percent(value)
    return fmt.count(value)


def show_change(row: MetricRow) -> str:
    """'+11', '+1.2 ms (+15%)', '–' for a row."""
    if row.change is None:
        return fmt.MISSING
    if row.change == 0:
        return "0"
    sign = "+" if row.change > 0 else "-"
    if row.unit == "fraction":
        return f"{sign}{abs(row.change) * 100:.1f} pp"
    if row.unit == "flag":
        return "yes" if row.candidate else "no"
    text = sign + show(abs(row.change), row.unit)
    if row.relative is not None and row.unit in ("ns", "bytes") and not math.isinf(row.relative):
        text += f" ({_signed_pct(row.relative)})"
    return text


def _threshold_text(rule: Rule, unit: str) -> str:
    if rule.mode == "percent":
        return f"{rule.threshold:+g}%"
    value = show(abs(rule.threshold), unit if unit != "flag" else "count")
    if rule.mode == "change":
        return ("+" if rule.threshold >= 0 else "-") + value
    return value


def _apply(rule: Rule, rows: dict[str, MetricRow]) -> RuleResult:
    column = rule.column
    row = rows.get(column)
    if row is None:
        known = ", ".join(sorted(rows))
        raise RuleError(f"rule {rule.text!r}: no metric {rule.metric!r}; metrics: {known}")
    label = rule.metric
    if rule.mode == "absolute":
        value = _num(row.candidate)
        if value is None:
            return RuleResult(
                rule.text, "skip", f"{label}: the candidate has no value", column, None
            )
        broke = rule.breaks(value)
        said = f"{label} is {show(row.candidate, row.unit)}"
        limit = _threshold_text(rule, row.unit)
        msg = f"{said}, {'more' if rule.worse_is_up else 'less'} than {limit}"
        if not broke:
            msg = f"{said}; the limit is {rule.op} {limit}"
        return RuleResult(rule.text, "fail" if broke else "pass", msg, column, value)
    if row.change is None or row.verdict == "not comparable":
        why = row.note or "a run has no value"
        return RuleResult(rule.text, "skip", f"{label}: not comparable ({why})", column, None)
    assert row.relative is not None  # set with change (inf from a base of 0)
    value = row.change if rule.mode == "change" else row.relative * 100
    moved = (
        f"{label} {show(row.base, row.unit)} -> {show(row.candidate, row.unit)} "
        f"({show_change(row) if rule.mode == 'change' else _signed_pct(row.relative)})"
    )
    limit = _threshold_text(rule, row.unit)
    test = row.latency
    if test is not None:
        if not test.enough:
            return RuleResult(rule.text, "skip", f"{moved}: {row.note}", column, value)
        interval = test.change_interval if rule.mode == "change" else test.relative_interval
        assert interval is not None
        lo, hi = interval if rule.mode == "change" else (interval[0] * 100, interval[1] * 100)
        significant = test.slower if rule.worse_is_up else test.faster
        edge = lo if rule.worse_is_up else hi  # the interval's end nearest the threshold
        broke = significant and rule.breaks(edge)
        sure = f"{row.note}"
        if broke:
            msg = f"{moved}: beyond {limit} with 95% confidence ({sure})"
        elif rule.breaks(value):
            msg = f"{moved}: over {limit} but within noise ({sure})"
        else:
            msg = f"{moved}: within {limit} ({sure})"
        return RuleResult(rule.text, "fail" if broke else "pass", msg, column, value)
    broke = rule.breaks(value)
    msg = f"{moved}: {'beyond' if broke else 'within'} {limit}"
    return RuleResult(rule.text, "fail" if broke else "pass", msg, column, value)


def compare(base: RunData, candidate: RunData, config: GateConfig) -> Comparison:
    """Every metric of the two runs, the causes the candidate adds, and the rules applied.

    Raises ``RuleError`` when a rule names a metric the runs do not have.
    """
    new = [c for k, c in candidate.causes.items() if k not in base.causes]
    gone = [c for k, c in base.causes.items() if k not in candidate.causes]

    def count(kind: str, causes: dict[str, Cause], other: dict[str, Cause]) -> int:
        return sum(1 for k, c in causes.items() if c.kind == kind and k not in other)

    derived = {
        "new_recompile_causes": (0, count("recompile", candidate.causes, base.causes)),
        "new_breaks": (0, count("break", candidate.causes, base.causes)),
        "new_eviction_sites": (0, count("eviction", candidate.causes, base.causes)),
    }
    assert set(derived) == set(DERIVED_METRICS)
    rows = _metric_rows(base, candidate, derived)
    by_column = {r.metric: r for r in rows}
    results = [_apply(rule, by_column) for rule in config.rules]
    context: dict[str, tuple[Any, Any]] = {
        k: (base.summary.get(k), candidate.summary.get(k))
        for k in ("latency_of", "latency_kind", "peak_source", "backend", "host")
        if k in base.summary or k in candidate.summary
    }
    return Comparison(base, candidate, rows, results, config.origin, new, gone, context)


# ---------------------------------------------------------------- sources


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
    where = " AND ".join(
        f"json_extract_string(tags, '$.' || ${i * 2 + 1}) = ${i * 2 + 2}" for i in range(len(tags))
    )
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


# ---------------------------------------------------------------- outputs


def _status_mark(status: str) -> str:
    return {"pass": "✅ pass", "fail": "❌ fail", "skip": "⚪ skip"}[status]


def headline(c: Comparison) -> str:
    """'PASS: 6 of 7 rules hold, 1 skipped' or 'FAIL: 2 of 7 rules broken'."""
    n = len(c.rules)
    if not n:
        return "no rules"
    if c.passed:
        skipped = sum(1 for r in c.rules if r.status == "skip")
        return f"PASS: {n - skipped} of {n} rules hold" + (
            f", {skipped} skipped" if skipped else ""
        )
    return f"FAIL: {len(c.failed)} of {n} rules broken"


def _run_line(label: str, r: RunData) -> str:
    return f"{label}: {r.name} · {r.short_id} · {r.origin}"


def to_markdown(c: Comparison) -> str:
    """For a CI job summary or a pull-request comment (GitHub-flavoured tables)."""
    out = [f"### Ember compare — {headline(c)}", ""]
    out += [f"- {_run_line('base', c.base)}", f"- {_run_line('candidate', c.candidate)}"]
    out.append(f"- rules from {c.rules_origin}")
    out.append("")
    if c.rules:
        out += ["| rule | result | details |", "|---|---|---|"]
        out += [f"| `{r.rule}` | {_status_mark(r.status)} | {_md(r.message)} |" for r in c.rules]
        out.append("")
    if c.new_causes:
        out.append("**New in the candidate**")
        out.append("")
        out += [f"- new: {_md(x.text)}" for x in c.new_causes]
        out.append("")
    if c.gone_causes:
        out.append("**Gone since the base**")
        out.append("")
        out += [f"- gone: {_md(x.text)}" for x in c.gone_causes]
        out.append("")
    out += ["| metric | base | candidate | change | verdict |", "|---|---:|---:|---:|---|"]
    for m in c.metrics:
        verdict = m.verdict + (f" ({_md(m.note)})" if m.note else "")
        out.append(
            f"| {m.metric} | {show(m.base, m.unit)} | {show(m.candidate, m.unit)} | "
            f"{show_change(m)} | {verdict} |"
        )
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_junit(c: Comparison) -> str:
    """JUnit XML: one test case per rule (failures and skips as CI systems list them)."""
    suite = ET.Element(
        "testsuite",
        name="ember compare",
        tests=str(len(c.rules)),
        failures=str(len(c.failed)),
        errors="0",
        skipped=str(sum(1 for r in c.rules if r.status == "skip")),
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (
        ("base", c.base.run_id),
        ("candidate", c.candidate.run_id),
        ("rules_from", c.rules_origin),
    ):
        ET.SubElement(props, "property", name=k, value=str(v))
    for r in c.rules:
        case = ET.SubElement(suite, "testcase", classname="ember.compare", name=r.rule)
        if r.status == "fail":
            detail = r.message
            if r.metric in (
                "recompiles",
                "new_recompile_causes",
                "evictions",
                "new_breaks",
                "new_eviction_sites",
            ):
                new = [x.text for x in c.new_causes]
                if new:
                    detail += "\nnew in the candidate:\n" + "\n".join(f"- {t}" for t in new)
            fail = ET.SubElement(case, "failure", message=r.message, type="regression")
            fail.text = detail
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message=r.message)
        else:
            ET.SubElement(case, "system-out").text = r.message
    root = ET.Element(
        "testsuites",
        name="ember compare",
        tests=suite.get("tests", "0"),
        failures=suite.get("failures", "0"),
    )
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, np.generic):
        return v.item()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def to_json(c: Comparison) -> str:
    """Everything in the comparison as JSON (numbers in ns and bytes)."""

    def run(r: RunData) -> dict[str, Any]:
        return {
            "run_id": r.run_id,
            "name": r.name,
            "origin": r.origin,
            "durations": len(r.durations_ns),
        }

    def metric(m: MetricRow) -> dict[str, Any]:
        d = {k: _jsonable(v) for k, v in asdict(m).items() if k != "latency"}
        if m.latency is not None:
            d["latency"] = {k: _jsonable(v) for k, v in asdict(m.latency).items()}
            for k in ("change_interval", "relative_interval"):
                if d["latency"][k] is not None:
                    d["latency"][k] = [_jsonable(x) for x in d["latency"][k]]
        return d

    doc = {
        "passed": c.passed,
        "exit_code": c.exit_code,
        "base": run(c.base),
        "candidate": run(c.candidate),
        "rules_from": c.rules_origin,
        "rules": [{k: _jsonable(v) for k, v in asdict(r).items()} for r in c.rules],
        "new_causes": [asdict(x) for x in c.new_causes],
        "gone_causes": [asdict(x) for x in c.gone_causes],
        "metrics": [metric(m) for m in c.metrics],
        "context": {k: [_jsonable(x) for x in v] for k, v in c.context.items()},
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def compare_refs(
    base: str | None,
    candidate: str,
    config: GateConfig,
    *,
    db: str | Path,
    baseline_tags: dict[str, str] | None = None,
    baseline_db: str | Path | None = None,
) -> Comparison:
    """``open_sides`` + ``load_run`` of each + ``compare``: what ``ember compare`` does."""
    with open_sides(
        base, candidate, db=db, baseline_tags=baseline_tags, baseline_db=baseline_db
    ) as (b, c):
        return compare(
            load_run(b.sql, b.run_id, b.origin), load_run(c.sql, c.run_id, c.origin), config
        )
