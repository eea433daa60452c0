"""One definition of every run metric: a run recorded by `ember run`, then its printed
summary, `ember report` and the dashboard show the same calls, compiles, recompiles,
evictions, latency and peak memory (all read the `run_summary` view)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from ember.analysis import connect, ingest
from ember.analysis import format as fmt
from ember.cli.main import app
from tests.analysis.traces import checked_in, meta_line, symbolic_matmul, write_lines
from tests.dashboard.apptest import shown_table

runner = CliRunner()
APP = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`ember run` of a model with a symbolic dim, swept past its cache: 4 shapes x 2 calls,
    cache_size 2 (so compiles, recompiles and evictions), ingested into a database."""
    d = tmp_path_factory.mktemp("surfaces")
    model = symbolic_matmul(d / "m.onnx")
    trace = d / "t.jsonl"
    args = ["run", str(model), "--sweep", "x:1=2,3,4,5,2", "--calls", "2", "--cache-size", "2"]
    result = runner.invoke(app, [*args, "--record", str(trace)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    db = d / "t.duckdb"
    assert ingest([trace], db).rejected == 0
    with connect(db, read_only=True) as con:
        row = con.sql("SELECT * FROM run_summary").to_dicts()[0]
    return {"run_output": result.output, "db": db, "row": row}


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_the_view_counts_what_happened(recorded):
    row = recorded["row"]
    # shapes 2, 3, 4, 5, 2 with two entries: 2 is evicted before it comes back
    assert (row["calls"], row["compiles"], row["recompiles"]) == (10, 5, 4)
    assert (row["hits"], row["misses"], row["evictions"]) == (5, 5, 3)
    assert row["recompiled_after_eviction"] == 1
    assert row["p99_ns"] >= row["p50_ns"] > 0
    # the 5 calls that missed compiled; the other 5 are the steady state
    assert row["compiling_calls"] == 5
    assert 0 < row["warm_p50_ns"] <= row["warm_p99_ns"]
    # the trace's meta says whether call spans end at results or at dispatch
    assert row["latency_kind"] == ("to results" if row["sync"] else "dispatch only")
    assert row["peak_source"] == "RSS"
    assert row["peak_bytes"] == row["peak_rss_bytes"]


def test_a_step_that_compiled_is_not_warm(tmp_path):
    # the JAX bridge's training loop: the steps whose jitted function compiled (its first
    # step, the retrace at a new shape, a jit of the eval) are apart from the steady state
    db = tmp_path / "t.duckdb"
    ingest([checked_in("train.jsonl", tmp_path)], db)
    with connect(db, read_only=True) as con:
        row = con.sql("SELECT * FROM run_summary").to_dicts()[0]
        steps = con.sql(
            """SELECT s.duration_ns, l.compiled FROM latency_samples l
            JOIN spans s ON s.run_id = l.run_id AND s.span_id = l.span_id"""
        ).to_dicts()
        jit_parents = con.sql(
            "SELECT DISTINCT parent_id FROM spans WHERE span_kind = 'jit' AND parent_id IS NOT NULL"
        ).rows()
    # 6 forward and 6 optimizer steps: the latency is the main label's (the first of the
    # two to finish, as many of each), and 2 of the 3 steps that compiled are forward steps
    assert (row["latency_of"], row["latency_step"], row["steps"]) == ("step", "forward", 12)
    assert (row["latency_spans"], row["compiling_calls"]) == (6, 2)
    assert len(jit_parents) == 3
    assert sum(s["compiled"] for s in steps) == 2
    warm = sorted(s["duration_ns"] for s in steps if not s["compiled"])
    assert len(warm) == 4
    assert row["warm_p50_ns"] == (warm[1] + warm[2]) / 2
    assert row["warm_p50_ns"] < row["p50_ns"]


def test_failed_calls_and_jit_compiles_below_a_span_of_the_user_are_not_warm(tmp_path):
    # failed calls (an unknown input, refused in microseconds) were counted among the warm
    # calls; a jit compile inside a span of the user's inside a step (not the step's own
    # child) left its step warm
    import jax
    import jax.numpy as jnp
    import numpy as np
    from onnx import helper

    import ember.runtime as rt
    from ember.recorder import record
    from ember.recorder.jax import ProfileSession
    from tests.runtime.models import make_model, tensor

    proto = make_model(
        [helper.make_node("Tanh", ["x"], ["y"])],
        [tensor("x", shape=["n"])],
        [tensor("y", shape=["n"])],
    )
    calls = tmp_path / "calls.jsonl"
    with record(calls, run_id="calls"):
        model = rt.compile(proto, {"x": (4,)})
        for _ in range(3):
            with pytest.raises(Exception, match="z"):
                model({"z": np.ones(4, np.float32)})
        for n in (4, 4, 8, 8):  # 4 was compiled with the model; 8 compiles in its first call
            model({"x": np.ones(n, np.float32)})
    steps = tmp_path / "steps.jsonl"
    f = jax.jit(lambda x: jnp.tanh(x @ x).sum())
    with ProfileSession(steps, run_id="steps") as session:
        for i, n in enumerate([16, 16, 16, 32, 32, 16]):
            with session.step("forward", i), session.recorder.span("inner"):
                f(jnp.ones((n, n))).block_until_ready()
    db = tmp_path / "t.duckdb"
    ingest([calls, steps], db)
    with connect(db, read_only=True) as con:
        rows = {r["run_id"]: r for r in con.sql("SELECT * FROM run_summary").to_dicts()}
        ok = con.sql(
            "SELECT duration_ns FROM latency_samples WHERE run_id = 'calls' AND status = 'ok' "
            "AND NOT compiled ORDER BY ts_ns"
        )["duration_ns"].to_list()
    c, s = rows["calls"], rows["steps"]
    assert (c["calls"], c["failed_calls"], c["compiling_calls"], c["warm_calls"]) == (7, 3, 1, 3)
    assert c["warm_p50_ns"] == sorted(ok)[1]
    assert (s["latency_of"], s["steps"], s["compiling_calls"], s["warm_calls"]) == ("step", 6, 2, 4)


def test_the_latency_text_says_when_no_call_was_warm():
    assert fmt.latency("call", 3, 1e9, 2e9, 3) == (
        "p50 1.0 s, p99 2.0 s (3 of 3 compiled: no warm calls)"
    )
    assert fmt.latency("call", 4, 1e9, 2e9, 3) == (
        "p50 1.0 s, p99 2.0 s (3 of 4 compiled, the others failed: no warm calls)"
    )
    assert fmt.latency("step", 4, 1e9, 2e9, 0) == "p50 1.0 s, p99 2.0 s"


def test_ember_run_report_and_dashboard_show_the_same_numbers(recorded, monkeypatch):
    row = recorded["row"]
    p50, p99, kind = fmt.duration(row["p50_ns"]), fmt.duration(row["p99_ns"]), row["latency_kind"]
    warm_p50, warm_p99 = fmt.duration(row["warm_p50_ns"]), fmt.duration(row["warm_p99_ns"])
    # half the calls compiled: the headline latency is the other half's, and says so
    latency = f"p50 {warm_p50}, p99 {warm_p99} over the 5 warm calls (all 10, 5 of which"
    latency += f" compiled: p50 {p50}, p99 {p99})"
    peak = fmt.size(row["peak_bytes"])

    # ember run's printed summary
    out = _flat(recorded["run_output"])
    assert "calls 10 " in out
    assert re.search(r"compiles 5 \([^)]+\), 4 recompiles ", out), out
    assert "5 hits, 5 misses, 3 evictions (1 compiled again after eviction)" in out
    assert f"latency {latency} ({kind})" in out
    assert f"peak memory {peak} RSS" in out

    # ember report's headline
    rep = runner.invoke(app, ["report", "--db", str(recorded["db"])], env={"COLUMNS": "300"})
    assert rep.exit_code == 0, rep.output
    head = _flat(rep.output)
    assert "10 calls · 5 compiles (" in head
    assert ", 4 recompiles) · " in head
    assert "cache 5 hits/5 misses/3 evictions" in head
    assert f"peak {peak} RSS" in head
    assert f"call {latency}" in head
    assert (f"p99 {p99}) (dispatch only)" in head) == (kind == "dispatch only")

    # the dashboard: Runs table, Recompiles, Cache and Calls metrics
    from ember.dashboard.db import DB_ENV

    monkeypatch.setenv(DB_ENV, str(recorded["db"]))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    (shown,) = shown_table(at, "peak_bytes").to_dict("records")  # the text of each cell
    counts = [shown[c] for c in ("calls", "compiles", "recompiles", "evictions")]
    assert counts == ["10", "5", "4", "3"]
    assert (shown["peak_bytes"], shown["peak_source"]) == (peak, "RSS")
    assert (shown["p50_ms"], shown["p99_ms"]) == (p50, p99)
    assert (shown["warm_p50_ms"], shown["warm_p99_ms"]) == (warm_p50, warm_p99)
    assert shown["compiling_calls"] == "5"
    assert shown["latency_kind"] == kind

    at.switch_page("recompiles.py").run()
    m = {x.label: x.value for x in at.metric}
    assert (m["Compiles"], m["Recompiles"], m["After eviction"]) == ("5", "4", "1")
    at.switch_page("cache.py").run()
    m = {x.label: x.value for x in at.metric}
    assert (m["Hits"], m["Misses"], m["Evictions"]) == ("5", "5", "3")
    at.switch_page("calls.py").run()
    m = {x.label: x.value for x in at.metric}
    assert (m["Calls"], m["p50"], m["Warm p50"]) == ("10", p50, warm_p50)
    assert ("dispatch only" in " ".join(c.value for c in at.caption)) == (kind == "dispatch only")


def test_a_database_made_before_schema_2_opens_and_says_dispatch_only(recorded, tmp_path):
    """Tables made by an older Ember (no runs.sync, a span_end attrs STRUCT without the
    fields version 2 added) are brought up to date when opened, so the views bind."""
    import shutil

    import duckdb

    db = tmp_path / "old.duckdb"
    shutil.copy(recorded["db"], db)
    c = duckdb.connect(str(db))
    for (view,) in c.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall():
        c.execute(f'DROP VIEW "{view}"')
    c.execute("ALTER TABLE runs DROP COLUMN sync")
    attrs = c.execute(
        "SELECT data_type FROM duckdb_columns() WHERE table_name = 'span_end' "
        "AND column_name = 'attrs'"
    ).fetchone()[0]
    older = re.sub(r'"?(outside_jit|host_transfer_ns|subgraph_ns)"? [A-Z]+, ', "", attrs)
    assert older != attrs
    c.execute(f"ALTER TABLE span_end ALTER attrs TYPE {older}")
    c.execute("DELETE FROM ember_schema")  # as a database of an older Ember: views made anew
    c.close()
    with connect(db) as con:
        row = con.sql("SELECT * FROM run_summary").to_dicts()[0]
    assert (row["calls"], row["compiles"], row["recompiles"]) == (10, 5, 4)
    assert row["sync"] is False
    assert row["latency_kind"] == "dispatch only"


def test_a_position_that_recompiles_on_every_call_carries_the_bucket_advice(tmp_path):
    model = symbolic_matmul(tmp_path / "m.onnx", relu=False)
    trace, db = tmp_path / "t.jsonl", tmp_path / "t.duckdb"
    sweep = ["--sweep", "x:1=5,9,13,17,21", "--calls", "1", "--record", str(trace)]
    assert runner.invoke(app, ["run", str(model), *sweep]).exit_code == 0
    assert ingest([trace], db).rejected == 0
    from ember.analysis.report import report

    with connect(db, read_only=True) as con:
        (r,) = report(con)
    first = r.findings[0]
    assert first.kind == "recompile"
    assert "x dim 1 changed on every call (5 -> 9 -> 13 -> 17 -> 21)" in first.text
    assert first.text.endswith("; padding x dim 1 to 8/16/32 would compile 3 times instead of 5")
    assert [f for f in r.findings if f.kind == "buckets"] == []  # said once, in the action


def test_a_run_with_only_its_meta_counts_zero_and_measures_nothing(tmp_path):
    # each count of run_summary comes from a CTE over runs LEFT JOIN its records: a run that
    # recorded nothing still has its row, with 0 for every count (the header's BIGINT
    # columns, never NULL) and NULL for every number that is measured
    from ember.analysis.views import VIEW_HEADERS
    from tests.analysis.traces import meta_line, write_lines

    db = tmp_path / "m.duckdb"
    assert ingest([write_lines(tmp_path / "m.jsonl", [meta_line("quiet")])], db).rejected == 0
    with connect(db, read_only=True) as con:
        types = dict(con.sql("SELECT column_name, column_type FROM (DESCRIBE run_summary)").rows())
        [row] = con.sql("SELECT * FROM run_summary").to_dicts()
    columns = VIEW_HEADERS["run_summary"].columns
    counts = [c.name for c in columns if c.type == "BIGINT" and not c.nullable]
    assert len(counts) == 26
    assert {c: (row[c], types[c]) for c in counts} == {c: (0, "BIGINT") for c in counts}
    measured = [c.name for c in columns if c.nullable and c.type in ("BIGINT", "DOUBLE")]
    assert {c: row[c] for c in measured} == {c: None for c in measured}
    assert (row["latency_of"], row["latency_kind"], row["peak_source"]) == (None, None, None)


def _step_lines(steps: list[tuple[str, int]]) -> list[str]:
    """Step spans one after another: (label, duration in ns) each, a span_start and an end."""
    lines, ts = [], 10
    for span_id, (label, duration) in enumerate(steps, 1):
        attrs = {"step": label, "index": span_id, "fun_name": label}
        common = {"span_id": span_id, "span_kind": "step", "attrs": attrs}
        lines.append(
            json.dumps({"kind": "span_start", "ts_ns": ts, "name": "ember.step", **common})
        )
        ts += duration
        lines.append(
            json.dumps({"kind": "span_end", "ts_ns": ts, "duration_ns": duration, **common})
        )
    return lines


def test_a_step_latency_is_the_main_steps_and_names_it(tmp_path):
    # an eval every few training steps: a median (or a p99) over both would describe neither
    ms = 1_000_000
    steps = [("eval_step", 100 * ms), *[("train_step", ms)] * 3, ("eval_step", 100 * ms)]
    trace = write_lines(tmp_path / "t.jsonl", [meta_line("steps"), *_step_lines(steps)])
    db = tmp_path / "t.duckdb"
    assert ingest([trace], db).rejected == 0
    with connect(db, read_only=True) as con:
        [row] = con.sql("SELECT * FROM run_summary").to_dicts()
    assert (row["steps"], row["latency_of"], row["latency_step"]) == (5, "step", "train_step")
    assert row["latency_spans"] == 3
    assert row["p50_ns"] == row["p99_ns"] == row["mean_ns"] == ms
    result = runner.invoke(app, ["report", "--db", str(db)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "train_step step p50 1.0 ms, p99 1.0 ms" in _flat(result.output)
