"""``compare(base, candidate, rules)``: two runs metric by metric under rules (the verdicts,
the rules' results, the causes gained and lost), and ``compare_refs`` from what a user
names."""

from __future__ import annotations

import math
from pathlib import Path, PurePosixPath
from typing import Any

from ember.analysis.gate import DERIVED_METRICS, LATENCY_METRICS, GateConfig, Rule, RuleError

from .latency import MIN_SAMPLES, latency_tests
from .load import load_run, open_sides
from .model import Cause, Comparison, MetricRow, RuleResult, RunData
from .render import show, show_change, signed_pct

__all__ = ["compare", "compare_refs"]

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
    "compiling_calls",
    "warm_p50_ns",
    "warm_p99_ns",
    "new_recompile_causes",
    "new_breaks",
    "new_eviction_sites",
}
_HIGHER_IS_BETTER = {"hit_rate", "disk_hits"}
# run_summary's warm percentiles -> the latency statistic they are
_WARM_LATENCY = {"warm_p50_ns": "p50_ns", "warm_p99_ns": "p99_ns"}
# which context must match for a metric's values to be comparable
_NEEDS_SAME = {
    **{c: ("latency_of", "latency_kind") for c in LATENCY_METRICS},
    "warm_p50_ns": ("latency_of", "latency_kind"),
    "warm_p99_ns": ("latency_of", "latency_kind"),
    "compiling_calls": ("latency_of",),
    "warm_calls": ("latency_of",),
    "loaded_calls": ("latency_of",),
    "peak_bytes": ("peak_source",),
}


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
    warm = column in _WARM_LATENCY
    if column in LATENCY_METRICS or warm:
        # the warm percentiles are tested like the others, on the warm durations alone
        key = "warm tests" if warm else "tests"
        if key not in cache:
            cache[key] = latency_tests(
                base.warm_ns if warm else base.durations_ns,
                cand.warm_ns if warm else cand.durations_ns,
            )
        test = cache[key][_WARM_LATENCY.get(column, column)]
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
                f"95% interval {signed_pct(lo)} to {signed_pct(hi)}, "
                f"Mann-Whitney p={test.p_value:.3g}"
            )
        return row
    row.verdict = _direction_verdict(row.change, better)
    return row


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
        f"({show_change(row) if rule.mode == 'change' else signed_pct(row.relative)})"
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


def _work(r: RunData) -> int:
    """Calls, else steps, the run finished: what its latency is measured on."""
    return int(r.summary.get("calls") or 0) or int(r.summary.get("steps") or 0)


def _same_model(a: str, b: str) -> bool:
    """Whether two model tags name one model: equal, or a name and a file of that name
    (``record(model="stack")`` and ``ember run path/to/stack.onnx``, which tags the path)."""
    return a == b or PurePosixPath(a).stem == b or PurePosixPath(b).stem == a


def _ground_checks(base: RunData, candidate: RunData) -> list[RuleResult]:
    """What holds before any rule can: the candidate did some work (a run that made no
    call passed every rule, or skipped it, and the gate said PASS), and both runs are of
    the same model (said, not failed: a new model version may carry a new tag)."""
    out = []
    # a run imported from a compile log (torch.compile's TORCH_TRACE) has compiles and no
    # calls: its compiles, loads and eager builds are the work to compare (a second process
    # that found every graph in a cache loaded them: it did work, it compiled nothing)
    built = sum(int(candidate.summary.get(k) or 0) for k in ("compiles", "loads", "eager_compiles"))
    if _work(candidate) == 0 and not built:
        out.append(
            RuleResult(
                "the candidate made calls",
                "fail",
                f"the candidate made no calls or steps (the base made {_work(base)}) and "
                "compiled or loaded nothing: there is "
                "nothing to compare; did it fail before its first call, or record the wrong "
                "program?",
                "calls",
                0,
            )
        )
    models = (base.summary.get("model"), candidate.summary.get("model"))
    if None not in models and not _same_model(str(models[0]), str(models[1])):
        out.append(
            RuleResult(
                "the same model",
                "skip",
                f"different models: the base ran {models[0]!r}, the candidate {models[1]!r}; "
                "their numbers are of different programs",
                "model",
                None,
            )
        )
    return out


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
    results = [*_ground_checks(base, candidate), *(_apply(r, by_column) for r in config.rules)]
    context: dict[str, tuple[Any, Any]] = {
        k: (base.summary.get(k), candidate.summary.get(k))
        for k in ("latency_of", "latency_kind", "peak_source", "backend", "host")
        if k in base.summary or k in candidate.summary
    }
    return Comparison(base, candidate, rows, results, config.origin, new, gone, context)


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
