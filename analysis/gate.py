"""The rules of ``ember compare``: a small grammar, its defaults, and ``[tool.ember.gate]``.

Grammar (rules separated by commas, semicolons or new lines; spaces are ignored)::

    rule      := metric op threshold
    op        := ">" | ">=" | "<" | "<="
    threshold := [sign] number [unit] ["%"]
    sign      := "+" | "-"
    unit      := ns | us | µs | ms | s | B | KiB | MiB | GiB | KB | MB | GB

A duration (``*_ns``) takes a duration unit, a size (``*bytes*``) a size unit, a count
none; a duration or size without a unit or ``%`` is an error unless it is 0
(``latency_p50>+10`` would have been 10 ns).

What a threshold means depends on how it is written:

- ``recompiles>0``: no sign, no ``%``: the candidate's own value (a budget).
- ``evictions>+0``, ``compile_time>+2s``: a sign: the change, candidate - base.
- ``peak>+5%``, ``hit_rate<-10%``: a ``%``: the relative change, (candidate - base) / base;
  from a base of 0, any increase is an infinite one.

A rule *breaks* (the build fails) when its comparison is true: ``peak>+5%`` breaks when
the peak grew by more than 5 %. Latency rules (``latency_p50``, ``latency_p90``,
``latency_p99``, ``latency_mean``) on a change break only when the change is beyond the
threshold with 95 % confidence (see ``ember.analysis.compare``), so noise does not fail a
build.

Metric names are the columns of the ``run_summary`` view (``recompiles``, ``evictions``,
``misses``, ``hit_rate``, ``failed_calls``, ``peak_bytes``, ...), these short names
(``latency_p50`` = ``p50_ns``, ``latency_p99`` = ``p99_ns``, ``peak`` = ``peak_bytes``,
``compile_time`` = ``compile_ns``, ``load_time`` = ``load_ns``), and what the comparison
counts itself:
``new_recompile_causes`` (what changed at a recompile, by name, that the base never
recompiled on), ``new_breaks`` (graph break nodes the base did not break at) and
``new_eviction_sites`` (positions that evict where the base did not).

Where the rules come from, first found wins: ``--fail-on``, then ``fail-on`` in the
``[tool.ember.gate]`` table of the nearest ``pyproject.toml`` (a string in the grammar or a
list of rules), then ``DEFAULT_RULES``.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

__all__ = [
    "ALIASES",
    "DEFAULT_RULES",
    "DERIVED_METRICS",
    "LATENCY_METRICS",
    "GateConfig",
    "Rule",
    "RuleError",
    "find_pyproject",
    "load_config",
    "metric_column",
    "parse_rules",
]

DEFAULT_RULES = (
    "recompiles>+0, evictions>+0, new_recompile_causes>0, new_breaks>0, failed_calls>+0, "
    "latency_p50>+20%, peak>+10%"
)
"""The rules when neither ``--fail-on`` nor ``pyproject.toml`` gives any."""

ALIASES: dict[str, str] = {
    "latency_p50": "p50_ns",
    "latency_p90": "p90_ns",
    "latency_p99": "p99_ns",
    "latency_mean": "mean_ns",
    "peak": "peak_bytes",
    "compile_time": "compile_ns",
    "load_time": "load_ns",
}
"""Short names for ``run_summary`` columns."""

LATENCY_METRICS: dict[str, float | None] = {
    "p50_ns": 0.5,
    "p90_ns": 0.9,
    "p99_ns": 0.99,
    "mean_ns": None,
}
"""Columns compared as distributions of call (or step) durations: the quantile, or None
for the mean."""

DERIVED_METRICS: tuple[str, ...] = ("new_recompile_causes", "new_breaks", "new_eviction_sites")
"""Counted by the comparison itself (what the candidate has that the base has not)."""

_UNITS: dict[str, float] = {
    "ns": 1,
    "us": 1e3,
    "µs": 1e3,
    "ms": 1e6,
    "s": 1e9,
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
}

_RULE_RE = re.compile(
    r"""^(?P<metric>[A-Za-z_][A-Za-z0-9_]*)
        (?P<op>>=|<=|>|<)
        (?P<sign>[+-])?
        (?P<number>\d+(?:\.\d*)?|\.\d+)
        (?P<unit>[A-Za-zµ]+)?
        (?P<percent>%)?$""",
    re.VERBOSE,
)


class RuleError(ValueError):
    """A rule that cannot be read, or names a metric the comparison does not have."""


RuleOp = Literal[">", ">=", "<", "<="]
RuleMode = Literal["absolute", "change", "percent"]


@dataclass(frozen=True)
class Rule:
    """One rule: ``metric op threshold``, breaking when the comparison is true."""

    text: str  # as written, without spaces: 'latency_p50>+10%'
    metric: str  # as written: 'latency_p50'
    op: RuleOp
    threshold: float  # in the metric's unit (ns, bytes) or percent when mode is 'percent'
    # absolute: the candidate's value; change: candidate - base; percent: the change in %
    mode: RuleMode

    @property
    def column(self) -> str:
        """The ``run_summary`` column (or derived metric) the rule reads."""
        return metric_column(self.metric)

    def breaks(self, value: float) -> bool:
        """Whether ``value`` (absolute, change or percent, as ``mode`` says) breaks it."""
        if math.isnan(value):
            return False
        return {
            ">": value > self.threshold,
            ">=": value >= self.threshold,
            "<": value < self.threshold,
            "<=": value <= self.threshold,
        }[self.op]

    @property
    def worse_is_up(self) -> bool:
        """True when the rule guards against the metric going up (``>``, ``>=``)."""
        return self.op.startswith(">")


def metric_column(metric: str) -> str:
    return ALIASES.get(metric, metric)


def _parse_one(text: str, where: str) -> Rule:
    m = _RULE_RE.match(text)
    if not m:
        raise RuleError(
            f"{where}: cannot read the rule {text!r}; write METRIC OP THRESHOLD, e.g. "
            "'recompiles>0' (the candidate's value), 'evictions>+0' (the change), "
            "'latency_p50>+10%' (the relative change), 'peak>+100MiB'"
        )
    number = float(m["number"])
    unit = m["unit"]
    column = metric_column(m["metric"])
    measures = "duration" if column.endswith("_ns") else "size" if "bytes" in column else None
    if unit is not None:
        scale = _UNITS.get(unit.lower() if unit != "µs" else unit)
        if scale is None:
            raise RuleError(
                f"{where}: unknown unit {unit!r} in {text!r}; use one of "
                "ns, us, ms, s (durations) or B, KiB, MiB, GiB, KB, MB, GB (sizes)"
            )
        if m["percent"]:
            raise RuleError(f"{where}: {text!r} has both a unit and '%'; give one")
        kind = "duration" if unit.lower() in ("ns", "us", "µs", "ms", "s") else "size"
        if kind != measures:
            # 'peak>+5ms' compared bytes with 5,000,000
            what = f"a {measures}" if measures else "a count, without a unit"
            raise RuleError(f"{where}: {text!r}: {unit} is a {kind}, {m['metric']} is {what}")
        number *= scale
    elif measures and number and not m["percent"]:
        # 'latency_p50>+10' meant 10 ns, not 10 %
        raise RuleError(
            f"{where}: {text!r}: {m['metric']} is a {measures}; give a unit "
            f"({'ms, us, s' if measures == 'duration' else 'MiB, KiB, B'}) or a '%'"
        )
    mode: RuleMode
    if m["percent"]:
        mode = "percent"
    elif m["sign"]:
        mode = "change"
    else:
        mode = "absolute"
    if m["sign"] == "-":
        number = -number
    op = cast(RuleOp, m["op"])  # _RULE_RE matches no other
    return Rule(text=text, metric=m["metric"], op=op, threshold=number, mode=mode)


def parse_rules(text: str | list[str], where: str = "--fail-on") -> list[Rule]:
    """The rules in ``text`` (the grammar above; a list holds one or more rules an item).

    ``"none"`` (or an empty list) means no rules: the comparison is reported, never
    failed. Raises ``RuleError`` naming the rule that cannot be read, or for a text with
    no rules that is not ``"none"`` (an empty ``--fail-on`` does not turn the gate off).
    """
    items = text if isinstance(text, list) else [text]
    rules: list[Rule] = []
    for item in items:
        if not isinstance(item, str):
            raise RuleError(f"{where}: a rule must be a string, not {item!r}")
        for part in re.split(r"[,;\n]", item):
            part = re.sub(r"\s+", "", part)
            if not part or part.lower() == "none":
                continue
            rules.append(_parse_one(part, where))
    if not rules and isinstance(text, str) and text.strip().lower() != "none":
        # an empty --fail-on (an unset variable in a CI script) would turn the gate off
        raise RuleError(f"{where}: no rules in {text!r}; write 'none' to compare without rules")
    return rules


@dataclass(frozen=True)
class GateConfig:
    """The rules to apply and where they came from (for the output)."""

    rules: list[Rule]
    origin: str  # '--fail-on' | 'path/pyproject.toml [tool.ember.gate]' | 'defaults'


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` (default: here) or a folder above it."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(
    fail_on: str | None = None,
    *,
    pyproject: Path | None = None,
    search_from: Path | None = None,
) -> GateConfig:
    """The rules: ``fail_on`` if given, else ``[tool.ember.gate] fail-on`` of ``pyproject``
    (default: the nearest ``pyproject.toml``), else ``DEFAULT_RULES``.

    Raises ``RuleError`` for an unreadable rule or ``pyproject.toml`` (naming the file).
    """
    if fail_on is not None:
        return GateConfig(parse_rules(fail_on, "--fail-on"), "--fail-on")
    path = pyproject or find_pyproject(search_from)
    if path is not None:
        try:
            data: dict[str, Any] = tomllib.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise RuleError(f"{path}: cannot read it as TOML: {exc}") from None
        # `tool = "x"` or `[tool] ember = 5` is valid TOML whose tables are not tables
        tool = data.get("tool", {})
        ember = tool.get("ember", {}) if isinstance(tool, dict) else None
        if not isinstance(ember, dict):
            raise RuleError(f"{path}: [tool.ember] must be a table (as [tool.ember.gate] is)")
        gate = ember.get("gate")
        if gate is not None:
            where = f"{path} [tool.ember.gate]"
            if not isinstance(gate, dict):
                raise RuleError(f"{where}: must be a table with a 'fail-on' key")
            unknown = sorted(set(gate) - {"fail-on"})
            if unknown:
                raise RuleError(
                    f"{where}: unknown key(s) {', '.join(unknown)}; the table has 'fail-on' "
                    "(a string of rules, or a list of them)"
                )
            if "fail-on" in gate:
                value = gate["fail-on"]
                if not isinstance(value, str | list):
                    raise RuleError(f"{where}: fail-on must be a string or a list of strings")
                return GateConfig(parse_rules(value, f"{where} fail-on"), where)
    return GateConfig(parse_rules(DEFAULT_RULES, "defaults"), "defaults")
