"""``ember compare``: a base run against a candidate run, metric by metric, under rules.

The pieces, each usable alone (the CLI and the dashboard's *Compare* page use them all),
one job a module; this package's front re-exports their names:

- ``load.py``: ``open_sides(...)`` resolves what a user names (a run id or a
  unique prefix in a DuckDB file or a lake, a trace file ingested into a temporary
  database, or the latest run with some tags) into runs to load; ``load_run(sql, run_id)``
  reads what one run says from the views (its ``run_summary`` row, its latency samples,
  its recompile causes, eviction sites and graph breaks, named for a person).
- ``rules.py``: ``compare(base, candidate, rules)`` -> ``Comparison``: one
  ``MetricRow`` per metric (base, candidate, change, verdict), one ``RuleResult`` per
  rule, the causes the candidate has that the base has not (and those it lost), and
  ``passed``.
- ``latency.py``: the two-sample latency tests below.
- ``model.py``: the data all of them share (``RunData``, ``Cause``, ``Comparison``...).
- ``render.py``: ``to_markdown``, ``to_junit``, ``to_json`` render a
  ``Comparison`` for CI systems; ``show``/``show_change`` write a value for people.

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

from .latency import ALPHA, MIN_SAMPLES, LatencyTest, latency_test, latency_tests
from .load import Side, load_run, open_sides
from .model import Cause, CompareError, Comparison, MetricRow, RuleResult, RunData, SqlRunner
from .render import headline, show, show_change, signed_pct, to_json, to_junit, to_markdown
from .rules import compare, compare_refs

__all__ = [
    "ALPHA",
    "MIN_SAMPLES",
    "Cause",
    "CompareError",
    "Comparison",
    "LatencyTest",
    "MetricRow",
    "RuleResult",
    "RunData",
    "Side",
    "SqlRunner",
    "compare",
    "compare_refs",
    "headline",
    "latency_test",
    "latency_tests",
    "load_run",
    "open_sides",
    "show",
    "show_change",
    "signed_pct",
    "to_json",
    "to_junit",
    "to_markdown",
]
