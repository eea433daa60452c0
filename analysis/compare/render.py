"""``ember compare``'s outputs: values and changes for people, and a ``Comparison`` as
Markdown (a CI job summary, a pull-request comment), JUnit XML (one test case per rule)
or JSON (everything, in ns and bytes)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import asdict
from typing import Any

import numpy as np

from ember.analysis import format as fmt
from ember.analysis.escape import md_text, xml_text

from .model import Comparison, MetricRow, RunData

__all__ = ["headline", "show", "show_change", "signed_pct", "to_json", "to_junit", "to_markdown"]


def signed_pct(x: float | None) -> str:
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
        text += f" ({signed_pct(row.relative)})"
    return text


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


def _md_run_line(label: str, r: RunData) -> str:
    return f"{label}: {md_text(r.name)} · {md_text(r.short_id)} · {md_text(r.origin)}"


def to_markdown(c: Comparison) -> str:
    """For a CI job summary or a pull-request comment (GitHub-flavoured tables). Every
    string that comes from the runs or the rules (names, tags, paths, messages that quote
    them) is escaped (``escape.md_text``): a tag cannot forge a heading or hide the table."""
    out = [f"### Ember compare — {headline(c)}", ""]
    out += [f"- {_md_run_line('base', c.base)}", f"- {_md_run_line('candidate', c.candidate)}"]
    out.append(f"- rules from {md_text(c.rules_origin)}")
    out.append("")
    if c.rules:
        out += ["| rule | result | details |", "|---|---|---|"]
        out += [
            f"| {md_text(r.rule)} | {_status_mark(r.status)} | {md_text(r.message)} |"
            for r in c.rules
        ]
        out.append("")
    if c.new_causes:
        out.append("**New in the candidate**")
        out.append("")
        out += [f"- new: {md_text(x.text)}" for x in c.new_causes]
        out.append("")
    if c.gone_causes:
        out.append("**Gone since the base**")
        out.append("")
        out += [f"- gone: {md_text(x.text)}" for x in c.gone_causes]
        out.append("")
    out += ["| metric | base | candidate | change | verdict |", "|---|---:|---:|---:|---|"]
    for m in c.metrics:
        verdict = m.verdict + (f" ({md_text(m.note)})" if m.note else "")
        out.append(
            f"| {md_text(m.metric)} | {show(m.base, m.unit)} | {show(m.candidate, m.unit)} | "
            f"{show_change(m)} | {verdict} |"
        )
    return "\n".join(out) + "\n"


def to_junit(c: Comparison) -> str:
    """JUnit XML: one test case per rule (failures and skips as CI systems list them).
    ElementTree escapes markup; ``xml_text`` the control characters XML cannot hold."""
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
        ET.SubElement(props, "property", name=k, value=xml_text(v))
    for r in c.rules:
        case = ET.SubElement(suite, "testcase", classname="ember.compare", name=xml_text(r.rule))
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
            message = xml_text(r.message)
            fail = ET.SubElement(case, "failure", message=message, type="regression")
            fail.text = xml_text(detail)
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message=xml_text(r.message))
        else:
            ET.SubElement(case, "system-out").text = xml_text(r.message)
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
