"""The data of ``ember compare``, in one place: what one run says (``RunData``, its
``Cause`` objects), and what comparing two says (``Comparison``: a ``MetricRow`` per metric,
a ``RuleResult`` per rule). ``load`` fills the first, ``rules`` makes the second, ``render``
writes it for people and CI systems."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl

from ember.analysis import format as fmt
from ember.analysis.gate import metric_column

from .latency import LatencyTest

__all__ = [
    "Cause",
    "CompareError",
    "Comparison",
    "MetricRow",
    "RuleResult",
    "RunData",
    "SqlRunner",
]

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
