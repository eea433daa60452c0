"""`ember.analysis.compare` on runs made up in the test: the latency statistics, the rules,
the verdicts and the three outputs (markdown, JUnit parsed back with the standard library,
JSON). Recorded runs end to end: tests/cli/test_compare.py."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from ember.analysis.compare import (
    MIN_SAMPLES,
    Cause,
    CompareError,
    RunData,
    compare,
    latency_test,
    load_run,
    open_sides,
    to_json,
    to_junit,
    to_markdown,
)
from ember.analysis.gate import GateConfig, RuleError, parse_rules
from tests.recordings import SWEEP


def durations(n: int, median_ns: float, seed: int, spread: float = 0.1) -> np.ndarray:
    """Call durations with a log-normal spread and a few slow outliers, like a busy machine."""
    rng = np.random.default_rng(seed)
    x = median_ns * rng.lognormal(0.0, spread, n)
    x[rng.random(n) < 0.05] *= 8  # preempted calls
    return x


def run(run_id: str, times: np.ndarray, causes: list[Cause] = (), **summary) -> RunData:
    row = {
        "run_id": run_id,
        "name": "bert",
        "calls": len(times),
        "recompiles": 0,
        "evictions": 0,
        "failed_calls": 0,
        "hit_rate": 0.9,
        "latency_of": "call",
        "latency_kind": "to results",
        "p50_ns": float(np.quantile(times, 0.5)) if len(times) else None,
        "p99_ns": float(np.quantile(times, 0.99)) if len(times) else None,
        "peak_bytes": 100 << 20,
        "peak_source": "RSS",
        "graph_break": False,
    }
    row.update(summary)
    return RunData(run_id, "test", row, times, {f"{c.kind}|{c.key}": c for c in causes})


def rules(text: str) -> GateConfig:
    return GateConfig(parse_rules(text), "--fail-on")


SEQ_CAUSE = Cause(
    "recompile",
    "position 0|shape|input_ids|1",
    "position 0",
    "`input_ids` dim 1",
    19,
    "`input_ids` dim 1 changed on every call at position 0 (e.g. input_ids dim 1: 8 -> 9)",
)


# ---------------------------------------------------------------- latency


def test_the_same_workload_twice_is_within_noise():
    a, b = durations(200, 1e6, seed=1), durations(200, 1e6, seed=2)
    t = latency_test(a, b, "p50_ns")
    assert t.enough
    assert not t.slower
    lo, hi = t.relative_interval
    assert lo < 0 < hi  # no change is among the plausible ones
    assert t.p_value > 0.05


def test_a_real_slowdown_is_found_with_an_interval_around_it():
    a, b = durations(200, 1e6, seed=1), durations(200, 1.5e6, seed=2)
    t = latency_test(a, b, "p50_ns")
    assert t.slower
    assert not t.faster
    assert t.p_value < 1e-6
    lo, hi = t.relative_interval
    assert 0.3 < lo < 0.5 < hi < 0.7  # the true change, +50%, lies inside
    c_lo, c_hi = t.change_interval
    assert 3e5 < c_lo < 5e5 < c_hi < 7e5


def test_the_answer_is_the_same_every_time():
    a, b = durations(100, 1e6, seed=3), durations(120, 1.1e6, seed=4)
    assert latency_test(a, b, "p99_ns") == latency_test(a, b, "p99_ns")


def test_identical_runs_differ_by_nothing():
    a = durations(50, 1e6, seed=5)
    t = latency_test(a, a.copy(), "p50_ns")
    assert t.base == t.candidate
    assert not t.slower
    assert not t.faster
    lo, hi = t.relative_interval
    assert lo <= 0 <= hi


def test_too_few_durations_give_no_interval():
    t = latency_test(np.ones(MIN_SAMPLES - 1), np.ones(50), "p50_ns")
    assert not t.enough
    assert t.relative_interval is None
    assert t.p_value is None
    assert t.base == 1.0


def test_long_runs_are_subsampled_for_the_bootstrap_only():
    a, b = durations(30_000, 1e6, seed=6), durations(25_000, 2e6, seed=7)
    t = latency_test(a, b, "mean_ns")
    assert t.base == pytest.approx(a.mean())
    assert t.candidate == pytest.approx(b.mean())
    assert t.slower
    assert t.relative_interval[0] > 0.8


# ---------------------------------------------------------------- rules


def test_a_new_recompile_cause_breaks_the_gate_and_is_named():
    base = run("base", durations(40, 1e6, 1))
    cand = run("cand", durations(40, 1e6, 2), [SEQ_CAUSE], recompiles=19)
    c = compare(base, cand, rules("recompiles>+0, new_recompile_causes>0, latency_p50>+20%"))
    assert not c.passed
    assert c.exit_code == 1
    status = {r.rule: r.status for r in c.rules}
    assert status == {
        "recompiles>+0": "fail",
        "new_recompile_causes>0": "fail",
        "latency_p50>+20%": "pass",
    }
    assert [x.name for x in c.new_causes] == ["`input_ids` dim 1"]
    assert c.metric("recompiles").change == 19
    assert c.metric("recompiles").verdict == "worse"
    assert c.metric("new_recompile_causes").candidate == 1


def test_a_cause_both_runs_have_is_not_new_and_one_that_went_is_gone():
    base = run("base", durations(40, 1e6, 1), [SEQ_CAUSE], recompiles=19)
    other = Cause("break", "nz|NonZero", "position 3", "break at `nz` (NonZero)", 40, "…")
    cand = run("cand", durations(40, 1e6, 2), [other], recompiles=19)
    c = compare(base, cand, rules("new_recompile_causes>0, new_breaks>0"))
    assert [x.kind for x in c.new_causes] == ["break"]
    assert [x.kind for x in c.gone_causes] == ["recompile"]
    assert {r.rule: r.status for r in c.rules} == {
        "new_recompile_causes>0": "pass",
        "new_breaks>0": "fail",
    }


def test_absolute_change_and_percent_read_different_numbers():
    base = run("base", durations(40, 1e6, 1), recompiles=3, peak_bytes=100 << 20)
    cand = run("cand", durations(40, 1e6, 1), recompiles=3, peak_bytes=104 << 20)
    c = compare(base, cand, rules("recompiles>0, recompiles>+0, peak>+5%, peak>+3%, peak>+2MiB"))
    assert [(r.rule, r.status) for r in c.rules] == [
        ("recompiles>0", "fail"),  # the candidate recompiles at all
        ("recompiles>+0", "pass"),  # but no more than its base
        ("peak>+5%", "pass"),
        ("peak>+3%", "fail"),
        ("peak>+2MiB", "fail"),
    ]
    assert c.rules[3].value == pytest.approx(4.0)
    assert c.rules[4].value == 4 << 20


def test_growth_from_zero_is_infinite_and_breaks_a_percent_rule():
    base = run("base", durations(40, 1e6, 1), evictions=0)
    cand = run("cand", durations(40, 1e6, 1), evictions=2)
    c = compare(base, cand, rules("evictions>+50%"))
    assert c.rules[0].status == "fail"
    assert math.isinf(c.metric("evictions").relative)


def test_a_rule_on_lower_is_worse_metrics():
    base = run("base", durations(40, 1e6, 1), hit_rate=0.9)
    cand = run("cand", durations(40, 1e6, 1), hit_rate=0.6)
    c = compare(base, cand, rules("hit_rate<-10%, hit_rate<0.5"))
    assert [r.status for r in c.rules] == ["fail", "pass"]
    assert c.metric("hit_rate").verdict == "worse"


def test_warm_latency_is_tested_on_the_warm_durations_and_compiling_calls_is_lower_better():
    # the warm percentiles took a verdict from any difference at all ("better" for -490 ns
    # between two identical runs); they are tested like p50, on the warm calls' durations
    base = run("base", durations(40, 1e6, 1), compiling_calls=2, warm_p50_ns=1e6)
    base.warm_durations_ns = durations(40, 1e6, 3)
    same = run("cand", durations(40, 1e6, 2), compiling_calls=2, warm_p50_ns=0.999e6)
    same.warm_durations_ns = durations(40, 1e6, 4)
    c = compare(base, same, rules("recompiles>+0"))
    assert c.metric("warm_p50_ns").verdict == "within noise"
    assert "Mann-Whitney" in c.metric("warm_p50_ns").note
    faster = run("cand", durations(40, 1e6, 2), compiling_calls=5, warm_p50_ns=0.5e6)
    faster.warm_durations_ns = durations(40, 0.5e6, 5)
    c = compare(base, faster, rules("recompiles>+0"))
    assert (c.metric("compiling_calls").verdict, c.metric("warm_p50_ns").verdict) == (
        "worse",
        "better",
    )
    steps = run("cand", durations(40, 1e6, 2), compiling_calls=2, latency_of="step")
    assert compare(base, steps, rules("recompiles>+0")).metric("compiling_calls").verdict == (
        "not comparable"
    )


def test_latency_rules_fail_only_beyond_the_threshold_with_confidence():
    base = run("base", durations(300, 1e6, 1))
    slower = run("cand", durations(300, 1.6e6, 2))
    c = compare(base, slower, rules("latency_p50>+20%, latency_p50>+80%, latency_p50>+100us"))
    assert [r.status for r in c.rules] == ["fail", "pass", "fail"]
    assert "95% confidence" in c.rules[0].message
    assert c.metric("latency_p50").verdict == "worse"
    # a true shift of +5% on a noisy machine: this sample's median is 16% up, over the
    # threshold, but the interval reaches below 0: noise, the build passes
    noisy = run("base", durations(30, 1e6, 1, spread=0.3))
    near = run("cand", durations(30, 1.05e6, 6, spread=0.3))
    c = compare(noisy, near, rules("latency_p50>+10%"))
    assert c.rules[0].value > 10
    assert c.rules[0].status == "pass"
    assert "over +10% but within noise" in c.rules[0].message


def test_latency_of_different_kinds_is_not_compared():
    base = run("base", durations(40, 1e6, 1), latency_kind="dispatch only")
    cand = run("cand", durations(40, 5e6, 2))
    c = compare(base, cand, rules("latency_p50>+10%, peak>+5%"))
    assert c.rules[0].status == "skip"
    assert "latency_kind" in c.rules[0].message
    assert c.metric("latency_p50").verdict == "not comparable"
    assert c.rules[1].status == "pass"
    assert c.passed


def test_too_few_calls_skip_a_latency_rule_and_say_so():
    base = run("base", durations(3, 1e6, 1))
    cand = run("cand", durations(3, 9e6, 2))
    c = compare(base, cand, rules("latency_p50>+10%"))
    assert c.rules[0].status == "skip"
    assert "too few durations" in c.rules[0].message
    assert c.passed


def test_an_unknown_metric_lists_the_known_ones():
    base = run("base", durations(10, 1e6, 1))
    with pytest.raises(RuleError, match=r"no metric 'recompile'.*recompiles"):
        compare(base, base, rules("recompile>0"))


def test_a_run_against_itself_passes_every_default_rule():
    from ember.analysis.gate import load_config

    base = run("base", durations(40, 1e6, 1), [SEQ_CAUSE], recompiles=19, evictions=4)
    c = compare(base, base, load_config(None, search_from=None, pyproject=None))
    assert c.passed
    assert all(r.status in ("pass", "skip") for r in c.rules)
    assert not c.new_causes
    assert not c.gone_causes


# ---------------------------------------------------------------- outputs

FORGED = "\n\n## PASS: every rule holds\n<!--"
"""A tag a pull request controls: as raw Markdown it makes a heading and hides the rest."""


def markdown_tokens(md: str) -> list:
    """``md`` parsed by a CommonMark parser with GitHub's tables (what a job summary is)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").parse(md)


def table_cells(tokens: list) -> list[list[str]]:
    """The text of each table row's cells, as a reader sees them (escapes resolved)."""
    rows: list[list[str]] = []
    in_row = False
    for t in tokens:
        if t.type in ("tr_open", "tr_close"):
            in_row = t.type == "tr_open"
            rows += [[]] if in_row else []
        elif t.type == "inline" and in_row:
            rows[-1].append(rendered(t))
    return rows


def rendered(inline) -> str:
    """The text of an inline token as a reader sees it (escapes resolved)."""
    return "".join(c.content for c in inline.children)


def inline_kinds(tokens: list) -> set[str]:
    return {t.type for tok in tokens for t in tok.children or ()}


@pytest.fixture
def failing():
    base = run("base-run-0001", durations(40, 1e6, 1))
    cand = run(
        "cand-run-0002",
        durations(40, 1e6, 2),
        [SEQ_CAUSE],
        recompiles=19,
        latency_kind="dispatch only",
    )
    return compare(base, cand, rules("recompiles>+0, evictions>+0, latency_p50>+10%"))


def test_markdown_has_the_verdict_the_rules_and_the_new_cause(failing):
    md = to_markdown(failing)
    assert md.splitlines()[0] == "### Ember compare — FAIL: 1 of 3 rules broken"
    tokens = markdown_tokens(md)
    rows = table_cells(tokens)
    assert ["recompiles>+0", "❌ fail", "recompiles 0 -> 19 (+19): beyond +0"] in rows
    assert next(r[:2] for r in rows if r[0] == "evictions>+0") == ["evictions>+0", "✅ pass"]
    assert next(r for r in rows if r[0] == "latency_p50>+10%")[1] == "⚪ skip"
    texts = [rendered(t) for t in tokens if t.type == "inline"]
    assert any(
        t.startswith("new: `input_ids` dim 1 changed on every call at position 0") for t in texts
    )
    assert ["recompiles", "0", "19", "+19", "worse"] in rows
    # every table row has as many cells as its header
    assert table_rows(tokens) == [3] * 4 + [5] * (1 + len(failing.metrics))


def test_junit_has_one_test_case_per_rule(failing):
    root = ET.fromstring(to_junit(failing))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["recompiles>+0", "evictions>+0", "latency_p50>+10%"]
    failure = cases["recompiles>+0"].find("failure")
    assert failure.get("message") == "recompiles 0 -> 19 (+19): beyond +0"
    assert "`input_ids` dim 1 changed on every call" in failure.text
    assert cases["evictions>+0"].find("failure") is None
    assert "latency_kind" in cases["latency_p50>+10%"].find("skipped").get("message")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["base"] == "base-run-0001"
    assert props["candidate"] == "cand-run-0002"


def test_json_carries_everything(failing):
    doc = json.loads(to_json(failing))
    assert doc["passed"] is False
    assert doc["exit_code"] == 1
    assert [r["status"] for r in doc["rules"]] == ["fail", "pass", "skip"]
    assert doc["new_causes"][0]["name"] == "`input_ids` dim 1"
    recompiles = next(m for m in doc["metrics"] if m["metric"] == "recompiles")
    assert (recompiles["base"], recompiles["candidate"], recompiles["change"]) == (0, 19, 19)
    assert doc["context"]["latency_kind"] == ["to results", "dispatch only"]


# ---------------------------------------------------------------- recorded runs


def test_causes_are_named_from_the_views_of_a_recorded_run(con):
    # the session's sweep (conftest): the token filter, whose NonZero breaks the graph,
    # at lengths 17, 23, 31, 17, 23, 23 with a cache of 2 (it evicts and compiles again)
    sweep = load_run(con.sql, "sweep", "views.duckdb")
    bus = load_run(con.sql, "bus-run", "views.duckdb")
    assert sweep.summary["calls"] == len(SWEEP)
    assert len(sweep.durations_ns) == len(SWEEP)
    kinds = {c.kind for c in sweep.causes.values()}
    assert kinds == {"recompile", "eviction", "break"}
    (brk,) = [c for c in sweep.causes.values() if c.kind == "break"]
    assert brk.name == "break at `kept_positions` (NonZero)"
    assert brk.count == len(SWEEP)
    evicted = sweep.causes["eviction|position 0"]
    assert (
        evicted.count
        == con.sql("SELECT count(*) AS n FROM evictions WHERE run_id = 'sweep' AND position = 0")[
            "n"
        ][0]
    )
    assert "cache_size 2" in evicted.text
    names = {c.name for c in sweep.causes.values() if c.kind == "recompile"}
    assert "`input_ids` dim 1" in names
    assert "a re-compile after eviction" in names
    c = compare(bus, sweep, rules("new_breaks>0, new_eviction_sites>0"))
    # two runs of different models: said first (not failed), then the rules
    assert (c.rules[0].rule, c.rules[0].status) == ("the same model", "skip")
    assert "different models" in c.rules[0].message
    assert [r.status for r in c.rules[1:]] == ["fail", "fail"]
    assert brk in c.new_causes
    itself = compare(sweep, sweep, rules("new_breaks>0, new_recompile_causes>0"))
    assert itself.passed
    assert not itself.new_causes


def test_a_trace_with_rejected_lines_says_so(sweep_trace, tmp_path):
    copy = tmp_path / "damaged.jsonl"
    copy.write_text(sweep_trace.read_text() + '{"kind": "cache", "oops": 1}\n')
    with open_sides(str(sweep_trace), str(copy), db=tmp_path / "none.duckdb") as (b, c):
        assert b.origin == f"trace file {sweep_trace}"
        assert c.origin.startswith(f"trace file {copy} (1 line(s) rejected; `ember validate")
        assert b.run_id == c.run_id == "sweep"


def test_a_database_without_the_views_is_an_error_that_says_what_to_do(tmp_path):
    import duckdb

    old = tmp_path / "old.duckdb"
    with duckdb.connect(str(old)) as duck:  # what an older ingest left: tables, no view
        duck.execute(
            "CREATE TABLE runs (run_id VARCHAR, started_at TIMESTAMP, tags JSON, "
            "entrypoint VARCHAR)"
        )
        duck.execute("INSERT INTO runs VALUES ('r1', now(), NULL, NULL)")
    with pytest.raises(CompareError, match=r"no run_summary view: .* run `ember ingest` on it"):
        with open_sides("r1", "r1", db=old) as (b, _):
            load_run(b.sql, b.run_id, b.origin)


def table_rows(tokens: list) -> list[int]:
    """The number of cells in each row of each table."""
    rows, cells = [], 0
    for t in tokens:
        if t.type == "tr_open":
            cells = 0
        elif t.type in ("td_open", "th_open"):
            cells += 1
        elif t.type == "tr_close":
            rows.append(cells)
    return rows


LINKS = " [click](https://evil.example) ![i](https://evil.example/i.png) `code` | cell"


@pytest.fixture
def forged():
    base = run("base-run-0001", durations(40, 1e6, 1), name=FORGED)
    cause = Cause("recompile", "k", "position 0", "`a|b` dim 1", 3, "x <!--" + LINKS + FORGED)
    cand = run("cand-run-0002", durations(40, 1e6, 2), [cause], recompiles=3, name=FORGED)
    return compare(base, cand, rules("recompiles>+0, evictions>+0"))


def test_markdown_shows_a_forged_tag_as_text(forged):
    tokens = markdown_tokens(to_markdown(forged))
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["Ember compare — FAIL: 1 of 2 rules broken"]
    assert [t.type for t in tokens].count("table_open") == 2
    assert not {"html_block", "code_block", "fence", "hr"} & {t.type for t in tokens}
    assert not {"html_inline", "link_open", "image", "code_inline"} & inline_kinds(tokens)
    # every row has as many cells as its header: no '|' in a name opened a cell
    assert table_rows(tokens) == [3] * 3 + [5] * (1 + len(forged.metrics))
    # the texts read as their characters (a line break as \n)
    texts = ["".join(c.content for c in t.children) for t in tokens if t.type == "inline"]
    assert "base: \\n\\n## PASS: every rule holds\\n<!-- · base-run · test" in texts
    assert "new: x <!--" + LINKS + "\\n\\n## PASS: every rule holds\\n<!--" in texts


def test_junit_holds_control_characters_and_markup(forged):
    forged.rules[0].message += " \x1b[31m\x00 <b>&"
    root = ET.fromstring(to_junit(forged))  # well-formed despite \x00 and \x1b
    failure = root.find("testsuite/testcase/failure")
    assert failure.get("message").endswith("\\x1b[31m\\x00 <b>&")
    assert "<!--" in failure.text


def test_a_candidate_that_made_no_calls_fails_the_gate_with_the_reason():
    # every rule passed or was skipped and the gate said PASS, exit 0
    base = run("base", durations(200, 1e6, seed=1))
    empty = run("empty", np.array([]), calls=0, hit_rate=None)
    c = compare(base, empty, rules("p50_ns>+10%, recompiles>0, evictions>0"))
    assert not c.passed
    assert c.exit_code == 1
    (failed,) = c.failed
    assert failed.rule == "the candidate made calls"
    assert "made no calls or steps (the base made 200)" in failed.message
    assert "FAIL" in to_markdown(c)
    assert compare(base, base, rules("p50_ns>+10%")).passed


def test_runs_of_different_models_are_said_in_every_output():
    base = run("base", durations(200, 1e6, seed=1), model="bert")
    other = run("other", durations(200, 1e6, seed=2), model="gpt2")
    c = compare(base, other, rules("recompiles>0"))
    assert c.passed  # said, not failed
    note = "different models: the base ran 'bert', the candidate 'gpt2'"
    assert note in c.rules[0].message
    shown = [rendered(t) for t in markdown_tokens(to_markdown(c)) if t.type == "inline"]
    assert any(note in text for text in shown)  # escaped, read as its characters
    assert note in to_junit(c)
    assert note in to_json(c)
    same = compare(
        base, run("b2", durations(200, 1e6, seed=2), model="bert"), rules("recompiles>0")
    )
    assert [r.rule for r in same.rules] == ["recompiles>0"]


def _tagged_trace(folder, run_id: str, tags: dict[str, str], ts: int):
    from tests.analysis.traces import cache_line, meta_line, write_lines

    meta = json.loads(meta_line(run_id)) | {"tags": tags}
    meta["wall_time_ns"] += ts
    return write_lines(folder / f"{run_id}.jsonl", [json.dumps(meta), cache_line(1, "miss")])


@pytest.mark.parametrize("key", ["git.branch", "*", "a'b", "$.x", 'say "hi"'])
def test_a_baseline_tag_key_is_a_plain_string(tmp_path, key):
    # git.branch=main found nothing (the key was read as a JSON path); '*' was a traceback
    from ember.analysis import ingest

    files = [
        _tagged_trace(tmp_path, "nested", {"git": "x"}, 0),
        _tagged_trace(tmp_path, "base", {key: "main"}, 1),
        _tagged_trace(tmp_path, "cand", {key: "main"}, 2),
    ]
    db = tmp_path / "t.duckdb"
    ingest(files, db)
    with open_sides(None, "cand", db=db, baseline_tags={key: "main"}) as (b, c):
        assert (b.run_id, c.run_id) == ("base", "cand")
    with pytest.raises(CompareError, match="no run tagged"):
        with open_sides(None, "cand", db=db, baseline_tags={key: "dev"}):
            pass


def test_a_model_name_and_a_file_of_that_name_are_one_model():
    # record(model="stack") and `ember run path/to/stack.onnx` (which tags the path)
    base = run("base", durations(50, 1e6, seed=1), model="stack")
    cand = run("cand", durations(50, 1e6, seed=2), model="/tmp/models/stack.onnx")
    assert [r.rule for r in compare(base, cand, rules("recompiles>0")).rules] == ["recompiles>0"]
