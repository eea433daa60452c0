"""The regression gate on the *Compare* page: the rules, verdicts and new causes of
``ember compare A B`` (run A the base, run B the candidate), computed by the same code
(``ember.analysis.compare``) over the dashboard's read-only queries."""

from __future__ import annotations

from typing import Any

import polars as pl
import streamlit as st

from ember.analysis.compare import (
    Comparison,
    compare,
    headline,
    load_run,
    show,
    show_change,
)
from ember.analysis.escape import md_text
from ember.analysis.gate import GateConfig, RuleError, load_config, parse_rules

from . import db, state, ui

__all__ = ["comparison", "default_rules", "render"]


def _sql(query: str, params: list[Any]) -> pl.DataFrame:
    return db.query(query, *params)


def default_rules() -> tuple[str, str]:
    """The rules ``ember compare`` would apply here (``[tool.ember.gate]`` of the nearest
    pyproject.toml, else the defaults), as text, and where they come from."""
    try:
        config = load_config(None)
    except RuleError as exc:
        st.warning(f"{md_text(exc)}; using the built-in defaults")
        config = _defaults()
    return ", ".join(r.text for r in config.rules), config.origin


def _defaults() -> GateConfig:
    from ember.analysis.gate import DEFAULT_RULES

    return GateConfig(parse_rules(DEFAULT_RULES, "defaults"), "defaults")


@st.cache_data(show_spinner=False, max_entries=64)
def _compare(version: db.DbVersion, base: str, candidate: str, rules: str, origin: str):
    config = GateConfig(parse_rules(rules, "rules"), origin)
    where = "this database"
    return compare(load_run(_sql, base, where), load_run(_sql, candidate, where), config)


def comparison(base: str, candidate: str, rules: str, origin: str) -> Comparison:
    """``ember compare base candidate --fail-on rules`` on the dashboard's database
    (``RuleError`` for rules that cannot be read or name no metric)."""
    return _compare(db.db_version(), base, candidate, rules, origin)


def render(base: str, candidate: str) -> None:
    """The gate section: the rules (editable, kept in ``?rules=``), the verdict, each rule's
    result, what is new in B, and every metric with its change and verdict."""
    st.subheader("Regression gate")
    if ui.lacks("run_summary"):
        return
    default, origin = default_rules()
    rules = st.text_input(
        "Rules (`--fail-on`)",
        value=state.get_param("rules", default),
        key="ember_gate_rules",
        help="METRIC OP THRESHOLD, comma separated: 'recompiles>0' (B's value), "
        "'evictions>+0' (the change), 'latency_p50>+10%' (the relative change). "
        "'none': no rules.",
    )
    state.set_param("rules", None if rules == default else rules)
    shown_origin = origin if rules == default else "this page"
    try:
        c = comparison(base, candidate, rules, shown_origin)
    except RuleError as exc:
        st.error(md_text(exc))
        return
    st.caption(
        f"Run A is the base, run B the candidate; rules from {md_text(c.rules_origin)}. "
        "The same as `ember compare A B --db DB`"
        + ("" if rules == default else f" with the rules {md_text(repr(rules))}")
        + ": exit 0 when every rule holds, 1 when one breaks."
    )
    (st.success if c.passed else st.error)(headline(c))
    if c.rules:
        ui.table(
            pl.DataFrame(
                {
                    "rule": [r.rule for r in c.rules],
                    "result": [r.status for r in c.rules],
                    "details": [r.message for r in c.rules],
                }
            ),
            key="ember_gate_rules_table",
        )
    lines = [f"- new: {md_text(x.text)}" for x in c.new_causes]
    lines += [f"- gone: {md_text(x.text)}" for x in c.gone_causes]
    if lines:
        st.markdown("\n".join(lines))
    ui.table(
        pl.DataFrame(
            {
                "metric": [m.metric for m in c.metrics],
                "run A": [show(m.base, m.unit) for m in c.metrics],
                "run B": [show(m.candidate, m.unit) for m in c.metrics],
                "change": [show_change(m) for m in c.metrics],
                "verdict": [m.verdict for m in c.metrics],
                "note": [m.note for m in c.metrics],
            }
        ),
        key="ember_gate_metrics",
    )
