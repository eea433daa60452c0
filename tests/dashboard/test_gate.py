"""The Compare page's regression gate shows what `ember compare` says (AppTest, on the
dashboard tests' database: runs small-cache and big-cache of the same sweep)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ember.cli.main import app
from tests.dashboard.apptest import as_text, open_page, table

runner = CliRunner()


def command(db: Path, *args: str) -> dict:
    result = runner.invoke(app, ["compare", "small-cache", "big-cache", "--db", str(db), *args])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.output)
    assert doc["exit_code"] == result.exit_code
    return doc


def rules_shown(at) -> list[tuple[str, str, str]]:
    frame = table(at, "rule", "result", "details")
    return list(frame.itertuples(index=False, name=None))


def test_the_page_shows_the_rules_and_verdicts_of_the_command(app_env: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject.toml: the defaults, as for the command
    doc = command(app_env, "--json")
    at = open_page("compare.py", run="small-cache", other="big-cache")
    assert rules_shown(at) == [(r["rule"], r["status"], r["message"]) for r in doc["rules"]]
    banner = (at.success if doc["passed"] else at.error)[0].value
    assert banner.startswith("PASS" if doc["passed"] else "FAIL")
    metrics = table(at, "metric", "run A", "run B", "change", "verdict").set_index("metric")
    for m in doc["metrics"]:
        assert metrics.loc[m["metric"], "verdict"] == m["verdict"]
    # small-cache evicted 8 times, big-cache never: B lost that cause
    assert "gone: the cache at position" in " ".join(str(m.value) for m in at.markdown)


def test_rules_typed_on_the_page_are_the_command_s_fail_on(app_env: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rules = "compiles<+0, evictions>+0, hit_rate<-1%"
    doc = command(app_env, "--json", "--fail-on", rules)
    at = open_page("compare.py", run="small-cache", other="big-cache")
    at.text_input(key="ember_gate_rules").set_value(rules).run()
    assert not at.exception
    shown = rules_shown(at)
    assert shown == [(r["rule"], r["status"], r["message"]) for r in doc["rules"]]
    assert [s for _, s, _ in shown] == ["fail", "pass", "pass"]  # 12 -> 8 compiles
    assert at.query_params["rules"] == rules  # kept in the link
    assert at.error[0].value == "FAIL: 1 of 3 rules broken"
    at.text_input(key="ember_gate_rules").set_value("compiles>>1").run()
    assert "cannot read the rule 'compiles>>1'" in as_text(at.error[0].value)


def test_rules_from_pyproject_apply_on_the_page(app_env: Path, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.ember.gate]\nfail-on = "evictions>+0"\n')
    monkeypatch.chdir(tmp_path)
    at = open_page("compare.py", run="small-cache", other="big-cache")
    assert [r for r, _, _ in rules_shown(at)] == ["evictions>+0"]
    assert "pyproject.toml [tool.ember.gate]" in as_text(" ".join(str(c.value) for c in at.caption))
