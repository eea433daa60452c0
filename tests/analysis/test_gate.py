"""The rule grammar of `ember compare` and where its rules come from (`ember.analysis.gate`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from ember.analysis.gate import (
    DEFAULT_RULES,
    Rule,
    RuleError,
    load_config,
    parse_rules,
)


def one(text: str) -> Rule:
    (rule,) = parse_rules(text)
    return rule


@pytest.mark.parametrize(
    ("text", "metric", "column", "op", "threshold", "mode"),
    [
        ("recompiles>0", "recompiles", "recompiles", ">", 0, "absolute"),
        ("evictions>+0", "evictions", "evictions", ">", 0, "change"),
        ("latency_p50>+10%", "latency_p50", "p50_ns", ">", 10, "percent"),
        ("peak>+5%", "peak", "peak_bytes", ">", 5, "percent"),
        ("hit_rate<-10%", "hit_rate", "hit_rate", "<", -10, "percent"),
        ("hit_rate<=0.5", "hit_rate", "hit_rate", "<=", 0.5, "absolute"),
        ("misses>=+3", "misses", "misses", ">=", 3, "change"),
        ("peak>+100MiB", "peak", "peak_bytes", ">", 100 * 2**20, "change"),
        ("peak>2GB", "peak", "peak_bytes", ">", 2e9, "absolute"),
        ("latency_p99>5ms", "latency_p99", "p99_ns", ">", 5e6, "absolute"),
        ("compile_time>+1.5s", "compile_time", "compile_ns", ">", 1.5e9, "change"),
        ("latency_mean>250us", "latency_mean", "mean_ns", ">", 250e3, "absolute"),
        ("latency_p50>+.5%", "latency_p50", "p50_ns", ">", 0.5, "percent"),
        ("new_breaks>0", "new_breaks", "new_breaks", ">", 0, "absolute"),
    ],
)
def test_each_form_of_threshold_reads_as_documented(text, metric, column, op, threshold, mode):
    rule = one(text)
    assert (rule.metric, rule.column, rule.op, rule.mode) == (metric, column, op, mode)
    assert rule.threshold == pytest.approx(threshold)
    assert rule.text == text


def test_the_issue_example_parses_with_spaces_and_separators():
    rules = parse_rules("recompiles>0, evictions > +0;latency_p50>+10%\n peak>+5% , new_breaks>0")
    assert [r.text for r in rules] == [
        "recompiles>0",
        "evictions>+0",
        "latency_p50>+10%",
        "peak>+5%",
        "new_breaks>0",
    ]
    assert [r.mode for r in rules] == ["absolute", "change", "percent", "percent", "absolute"]


def test_a_list_holds_rules_and_none_means_no_rules():
    assert [r.text for r in parse_rules(["recompiles>0", "peak>+5%, misses>+1"])] == [
        "recompiles>0",
        "peak>+5%",
        "misses>+1",
    ]
    assert parse_rules("none") == []
    assert parse_rules([]) == []


@pytest.mark.parametrize("text", ["", "  ", ",", " ; "])
def test_an_empty_fail_on_is_an_error_not_no_rules(text):
    # `--fail-on "$RULES"` with RULES unset passed every build: the gate was off
    with pytest.raises(RuleError, match=r"no rules in .*; write 'none' to compare without rules"):
        parse_rules(text)


def test_breaks_compares_with_the_operator():
    assert one("evictions>+0").breaks(1)
    assert not one("evictions>+0").breaks(0)
    assert one("evictions>=+1").breaks(1)
    assert not one("evictions>=+1").breaks(0)
    assert one("hit_rate<-10%").breaks(-11)
    assert not one("hit_rate<-10%").breaks(-10)
    assert one("hit_rate<=-10%").breaks(-10)
    assert one("peak>+5%").breaks(math.inf)  # any growth from a base of 0
    assert not one("peak>+5%").breaks(math.nan)  # no value: never breaks by itself
    assert one("evictions>+0").worse_is_up
    assert not one("hit_rate<-1%").worse_is_up


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("recompiles", "cannot read the rule 'recompiles'"),
        ("recompiles=0", "cannot read the rule 'recompiles=0'"),
        ("recompiles>>0", "cannot read"),
        ("peak>+5parsecs", "unknown unit 'parsecs'"),
        ("peak>+5MiB%", "both a unit and '%'"),
        (",", "no rules"),
    ],
)
def test_unreadable_rules_are_named_with_how_to_write_one(text, says):
    with pytest.raises(RuleError, match="--fail-on") as err:
        parse_rules(text)
    assert says in str(err.value)


def test_the_defaults_parse_and_guard_the_issue_metrics():
    rules = parse_rules(DEFAULT_RULES)
    columns = {r.column: r for r in rules}
    assert {"recompiles", "evictions", "new_breaks", "p50_ns", "peak_bytes"} <= set(columns)
    assert columns["p50_ns"].mode == "percent"
    assert columns["p50_ns"].threshold > 0


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_fail_on_wins_over_pyproject_which_wins_over_the_defaults(tmp_path):
    project = write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.ember.gate]\nfail-on = "recompiles>0, peak>+5%"\n',
    )
    nested = tmp_path / "src" / "deep"
    nested.mkdir(parents=True)
    from_file = load_config(None, search_from=nested)  # found in a folder above
    assert [r.text for r in from_file.rules] == ["recompiles>0", "peak>+5%"]
    assert from_file.origin == f"{project.resolve()} [tool.ember.gate]"
    given = load_config("evictions>+0", search_from=nested)
    assert [r.text for r in given.rules] == ["evictions>+0"]
    assert given.origin == "--fail-on"
    write(project, '[project]\nname = "x"\n')  # no [tool.ember.gate]: the defaults
    defaults = load_config(None, search_from=nested)
    assert defaults.origin == "defaults"
    assert [r.text for r in defaults.rules] == [r.text for r in parse_rules(DEFAULT_RULES)]


def test_pyproject_takes_a_list_of_rules(tmp_path):
    path = write(
        tmp_path / "pyproject.toml",
        '[tool.ember.gate]\nfail-on = ["recompiles>0", "latency_p50>+10%, new_breaks>0"]\n',
    )
    config = load_config(None, pyproject=path)
    assert [r.text for r in config.rules] == ["recompiles>0", "latency_p50>+10%", "new_breaks>0"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("[tool.ember.gate\nfail-on = 1\n", "cannot read it as TOML"),
        ("[tool.ember.gate]\nfail-on = 3\n", "must be a string or a list"),
        ("[tool.ember.gate]\nfail_on = 'recompiles>0'\n", "unknown key(s) fail_on"),
        ("[tool.ember]\ngate = 'recompiles>0'\n", "must be a table"),
        ("[tool.ember.gate]\nfail-on = 'recompiles=>0'\n", "cannot read the rule"),
    ],
)
def test_a_bad_pyproject_is_an_error_that_names_the_file(tmp_path, body, says):
    path = write(tmp_path / "pyproject.toml", body)
    with pytest.raises(RuleError) as err:
        load_config(None, pyproject=path)
    assert str(path) in str(err.value)
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("latency_p50>+10", "latency_p50 is a duration; give a unit (ms, us, s) or a '%'"),
        ("peak>+5", "peak is a size; give a unit (MiB, KiB, B) or a '%'"),
        ("peak>+5ms", "ms is a duration, peak is a size"),
        ("latency_p99>5MiB", "MiB is a size, latency_p99 is a duration"),
        ("recompiles>1s", "s is a duration, recompiles is a count, without a unit"),
    ],
)
def test_a_threshold_s_unit_must_fit_its_metric(text, says):
    # 'latency_p50>+10' was read as +10 ns and 'peak>+5ms' as +5,000,000 bytes
    with pytest.raises(RuleError, match=re.escape(says)):
        parse_rules(text)
    assert one("peak>+0").threshold == 0
    assert one("latency_p50>+0").mode == "change"
