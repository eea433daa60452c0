"""Trends across runs: each series' history of run_summary's headline numbers, and the runs
where a level changed (change points).

A series is a model's runs (the ``trends`` view), or the runs that share the value of a
chosen tag such as ``branch`` (read from ``trend_points``), in the order they started.
The metrics are ``METRICS``: counts (compiles, recompiles, evictions, graph breaks) and
noisy measurements (warm p50/p99, compile time, peak memory).

Finding the changes: PELT (Killick, Fearnhead & Eckley, "Optimal detection of
changepoints with a linear computational cost", JASA 107(500), 2012), as implemented by
``ruptures`` (Truong, Oudre & Vayatis, "Selective review of offline change point detection
methods", Signal Processing 167, 2020; ``KernelCPD`` with the linear kernel: the
least-squares cost of a change in mean, solved by PELT in C). The penalty per change is
``PENALTY * sigma**2 * log(n)`` (the Schwarz criterion with a margin), where sigma is the
noise of the series, estimated robustly from the differences of neighbouring runs (their
median absolute deviation, which a few steps do not move), and a level must hold for at
least ``MIN_RUNS`` runs. Each side of a change is then tested as ``ember compare`` tests
two runs (``compare.latency``), because what fits one series best is not yet a change
a person should act on:

- exact metrics (counts: the same workload repeats them exactly) are fitted on the
  variance-stabilised counts (Anscombe's ``2 * sqrt(x + 3/8)``, so that a level of 20
  that varies by 2 and a level of 0 that never varies share one penalty); a change is
  kept when the two sides' medians differ and a Mann-Whitney U test of the runs before
  against the runs after gives p < ``ALPHA`` (0.001: see there).
- noisy metrics (durations, the peak) are fitted on their normal scores (ranks mapped to
  a standard normal's quantiles, so that a run a busy machine made four times slower is
  one high rank, not a level of its own); a change is kept when the Mann-Whitney U test
  gives p < ``ALPHA`` *and*
  the seeded bootstrap's 95 % interval of the change of the median lies wholly on one
  side of zero (``latency_tests``, the statistics of ``ember compare``'s latency rules).

A change that fails its test is dropped (the weakest first) and its neighbours are tested
again as one side. ``confidence`` is 1 - p.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from . import format as fmt
from .compare import MIN_SAMPLES, latency_tests, signed_pct
from .runs import SHORT_ID

__all__ = [
    "METRICS",
    "MIN_RUNS",
    "PENALTY",
    "ChangePoint",
    "TrendMetric",
    "change_points",
    "changes_since",
    "describe",
    "find_steps",
    "series_points",
    "show_value",
    "trend_points",
]

MIN_RUNS = MIN_SAMPLES
"""Runs a level must hold for to be one (and the smallest side ``compare`` tests)."""
PENALTY = 3.0
"""Multiplier of the Schwarz penalty ``sigma**2 * log(n)`` per change (2 is the criterion
itself; the margin keeps long noisy histories from splitting on chance)."""
ALPHA = 0.001
"""Significance level of a change's test. ``ember compare`` uses 0.05 for one pair of runs
chosen in advance; here PELT chose the run that splits the two sides most, so a test of
the sides it made is optimistic, and a history has hundreds of candidate runs: a level
of 50 times stricter keeps noise (a warm p50 of two calls a run) from reading as a change.
A side that varies needs about 7 runs to reach it (Mann-Whitney's smallest p)."""
_EXACT_NOISE_FLOOR = 0.5  # sigma of stabilised counts at least (a Poisson count's is 1)
_NOISY_NOISE_FLOOR = 0.05  # sigma of normal scores at least (ties: a constant series)


@dataclass(frozen=True)
class TrendMetric:
    """One metric of the trends: its ``trend_points.metric`` name, a short label, its unit
    (count | ns | bytes) and whether it is exact (a count) or noisy (a measurement)."""

    metric: str
    label: str
    unit: str
    exact: bool


METRICS: dict[str, TrendMetric] = {
    m.metric: m
    for m in (
        TrendMetric("compiles", "compiles", "count", True),
        TrendMetric("recompiles", "recompiles", "count", True),
        TrendMetric("evictions", "evictions", "count", True),
        TrendMetric("breaks", "graph breaks", "count", True),
        TrendMetric("warm_p50_ns", "warm p50", "ns", False),
        TrendMetric("warm_p99_ns", "warm p99", "ns", False),
        TrendMetric("compile_ns", "compile time", "ns", False),
        TrendMetric("peak_bytes", "peak memory", "bytes", False),
    )
}


@dataclass
class ChangePoint:
    """A run where a series' level of a metric changed."""

    series: str
    metric: str
    index: int  # 0-based position in the series of the first run at the new level
    runs: int  # runs in the series (with a value of the metric)
    run_id: str  # the first run at the new level
    started_at: datetime
    before_run_id: str  # the last run at the old level (Compare's run A)
    before: float  # median of the runs since the previous change
    after: float  # median of the runs until the next change
    runs_before: int
    runs_after: int
    p_value: float  # Mann-Whitney U, two-sided, the runs before against the runs after
    change_interval: tuple[float, float] | None  # 95 % bootstrap interval of after - before

    @property
    def exact(self) -> bool:
        return METRICS[self.metric].exact

    @property
    def unit(self) -> str:
        return METRICS[self.metric].unit

    @property
    def change(self) -> float:
        return self.after - self.before

    @property
    def relative(self) -> float | None:
        return self.after / self.before - 1 if self.before else None

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value


def _stabilised(values: np.ndarray, exact: bool) -> np.ndarray:
    """Counts through Anscombe's transform (noise of about one size at every level),
    measurements as their normal scores (ranks mapped to a standard normal's quantiles:
    a run that a busy machine made four times slower weighs as one high rank, not as a
    level of its own). See the module doc."""
    if exact:
        return 2.0 * np.sqrt(np.maximum(values, 0.0) + 3.0 / 8.0)
    from scipy.stats import norm, rankdata

    return np.asarray(norm.ppf((rankdata(values) - 0.5) / len(values)), dtype=np.float64)


def _noise(signal: np.ndarray, exact: bool) -> float:
    """The series' noise (a standard deviation), from the median absolute deviation of
    neighbouring differences: steps are few, so they do not move it."""
    floor = _EXACT_NOISE_FLOOR if exact else _NOISY_NOISE_FLOOR
    d = np.diff(signal)
    if len(d) == 0:
        return floor
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(1.4826 * mad / math.sqrt(2.0), floor)


def _fit(values: np.ndarray, exact: bool) -> list[int]:
    """PELT's change points of ``values`` (indices of the first run of each new level)."""
    import ruptures as rpt

    n = len(values)
    if n < 2 * MIN_RUNS:
        return []
    signal = _stabilised(values, exact)
    penalty = PENALTY * _noise(signal, exact) ** 2 * math.log(n)
    algo = rpt.KernelCPD(kernel="linear", min_size=MIN_RUNS, jump=1)
    ends = algo.fit(signal.reshape(-1, 1)).predict(pen=penalty)
    return [int(b) for b in ends[:-1]]


def _test(before: np.ndarray, after: np.ndarray, exact: bool) -> tuple[float, Any, bool]:
    """(p value, bootstrap interval of the median's change or None, kept?) of one change."""
    from scipy.stats import mannwhitneyu

    if exact and np.median(before) == np.median(after):
        return 1.0, None, False
    if np.all(before == before[0]) and np.all(after == after[0]):
        # every run on each side at its level: certain for counts, nothing to resample
        p = 0.0 if before[0] != after[0] else 1.0
        return p, None if exact else (after[0] - before[0],) * 2, p < ALPHA
    p = float(mannwhitneyu(after, before, alternative="two-sided").pvalue)
    if exact or p >= ALPHA:
        return p, None, p < ALPHA  # the bootstrap (the costly part) only where it decides
    t = latency_tests(before, after)["p50_ns"]
    lo, hi = t.change_interval or (0.0, 0.0)
    return p, t.change_interval, lo > 0 or hi < 0


def find_steps(values: Sequence[float] | np.ndarray, exact: bool) -> list[tuple[int, float, Any]]:
    """The changes of one series (in run order): ``(index of the first run at the new
    level, p value, interval of the median's change or None)``, each one that PELT found
    and its test kept (see the module doc)."""
    v = np.asarray(values, dtype=np.float64)
    bounds = _fit(v, exact)
    done: dict[tuple[int, int, int], tuple[float, Any, bool]] = {}  # (lo, at, hi) -> test

    def test(lo: int, at: int, hi: int) -> tuple[float, Any, bool]:
        if (lo, at, hi) not in done:
            done[lo, at, hi] = _test(v[lo:at], v[at:hi], exact)
        return done[lo, at, hi]

    while True:
        edges = [0, *bounds, len(v)]
        tested = [test(*edges[i : i + 3]) for i in range(len(bounds))]
        failed = [i for i, (_, _, kept) in enumerate(tested) if not kept]
        if not failed:
            return [(b, p, ci) for b, (p, ci, _) in zip(bounds, tested, strict=True)]
        weakest = max(failed, key=lambda i: tested[i][0])
        bounds = bounds[:weakest] + bounds[weakest + 1 :]


def _series_changes(series: str, metric: str, rows: pl.DataFrame) -> list[ChangePoint]:
    values = rows["value"].to_numpy().astype(np.float64)
    ids, starts = rows["run_id"].to_list(), rows["started_at"].to_list()
    steps = find_steps(values, METRICS[metric].exact)
    edges = [0, *(s[0] for s in steps), len(values)]
    out = []
    for k, (index, p, interval) in enumerate(steps):
        lo, hi = edges[k], edges[k + 2]
        out.append(
            ChangePoint(
                series=series,
                metric=metric,
                index=index,
                runs=len(values),
                run_id=ids[index],
                started_at=starts[index],
                before_run_id=ids[index - 1],
                before=float(np.median(values[lo:index])),
                after=float(np.median(values[index:hi])),
                runs_before=index - lo,
                runs_after=hi - index,
                p_value=p,
                change_interval=interval,
            )
        )
    return out


def change_points(points: pl.DataFrame) -> list[ChangePoint]:
    """The change points of every (series, metric) in ``points`` (``series_points``'
    columns: series, metric, run_id, started_at, value; any order), by series, metric
    (in ``METRICS`` order) and run."""
    out: list[ChangePoint] = []
    order = list(METRICS)
    ordered = points.sort("series", "metric", "started_at", "run_id")
    for (series, metric), rows in ordered.group_by(["series", "metric"], maintain_order=True):
        out += _series_changes(str(series), str(metric), rows)
    return sorted(out, key=lambda c: (c.series, order.index(c.metric), c.index))


NO_MODEL = "(no model)"
"""The series label of runs with neither a model tag nor a name."""

Query = Callable[[str], pl.DataFrame]
"""Runs one SQL query and returns its rows (``Connection.sql``, the dashboard's ``query``)."""


def trend_points(query: Query) -> pl.DataFrame:
    """Every run's trend metrics (``trend_points``), with the run's tags parsed."""
    return query(
        "SELECT run_id, started_at, model, name, tags, metric, value FROM trend_points"
    ).with_columns(pl.col("tags").map_elements(_tags, return_dtype=pl.Object).alias("tag_map"))


def _tags(text: str | None) -> dict[str, str]:
    try:
        tags = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def series_points(
    query: Query,
    *,
    by: str | None = None,
    model: str | None = None,
    tags: Mapping[str, str] | None = None,
    metrics: Sequence[str] | None = None,
) -> pl.DataFrame:
    """The points of the trends: one row per (series, metric, run) with columns series,
    metric, run_id, started_at, value, ordered by series, metric and start.

    The series is the model (the ``trends`` view's), or with ``by`` the value of that tag
    (runs without it are left out). ``model`` keeps one model's runs, ``tags`` the runs
    that have every one of these tags, ``metrics`` these metrics (``METRICS`` names)."""
    unknown = [m for m in metrics or () if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric {', '.join(unknown)}; metrics: {', '.join(METRICS)}")
    points = trend_points(query)
    keep = [
        (m == model if model is not None else True)
        and all(t.get(k) == v for k, v in (tags or {}).items())
        and (by is None or by in t)
        for m, t in zip(points["model"].to_list(), points["tag_map"].to_list(), strict=True)
    ]
    points = points.filter(pl.Series(keep, dtype=pl.Boolean))
    if by is None:
        # a run with neither (a torch.compile import has no model tag) still needs a label
        points = points.with_columns(series=pl.coalesce("model", "name", pl.lit(NO_MODEL)))
    else:
        values = [t.get(by) for t in points["tag_map"].to_list()]
        points = points.with_columns(series=pl.Series(values, dtype=pl.String))
    if metrics:
        points = points.filter(pl.col("metric").is_in(list(metrics)))
    return points.select("series", "metric", "run_id", "started_at", "value").sort(
        "series", "metric", "started_at", "run_id"
    )


def show_value(value: float | None, unit: str, signed: bool = False) -> str:
    """A metric's value for people, in its unit (``1.5 ms``, ``615 MiB``, ``14``);
    ``signed``: a change, with its sign (``+3``, ``-120 µs``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return fmt.MISSING
    sign = ("+" if value > 0 else "-" if value < 0 else "") if signed else ""
    v = abs(value) if signed else value
    text = {"ns": fmt.duration, "bytes": fmt.size}.get(unit, fmt.number)(v)
    return sign + text


def _evidence(c: ChangePoint) -> str:
    """How sure: the test's p value, and for a noisy metric the interval of the change."""
    p = "p < 0.001" if c.p_value < 0.001 else f"p = {c.p_value:.3f}"
    if c.exact or c.change_interval is None:
        return f"{p} (counts, {c.runs_before} runs before, {c.runs_after} after)"
    lo, hi = c.change_interval
    if c.before:
        interval = f"{signed_pct(lo / c.before)} .. {signed_pct(hi / c.before)}"
    else:
        interval = f"{show_value(lo, c.unit, True)} .. {show_value(hi, c.unit, True)}"
    return f"{p}, 95 % interval of the change {interval}"


def describe(c: ChangePoint) -> str:
    """One change point as a sentence: what changed, from which run, how sure."""
    label = METRICS[c.metric].label
    change = show_value(c.change, c.unit, signed=True)
    if not c.exact and c.relative is not None:
        change = signed_pct(c.relative)
    when = c.started_at.strftime("%Y-%m-%d %H:%M") if c.started_at else "?"
    return (
        f"{label} {show_value(c.before, c.unit)} -> {show_value(c.after, c.unit)} "
        f"({change}) from run {c.run_id[:SHORT_ID]} ({when}, run {c.index + 1} of "
        f"{c.runs}); {_evidence(c)}"
    )


def changes_since(query: Query, since: datetime) -> list[ChangePoint]:
    """The change points of every model's trends (found over the whole history) whose
    first run at the new level started at ``since`` or later (``ember report --since``)."""
    found = change_points(series_points(query))
    return [c for c in found if c.started_at is not None and c.started_at >= since]
