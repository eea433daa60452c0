"""Where each call's time goes: call_breakdown, time_by_part and the report's ranked findings,
on a model built here whose graph break holds most of every call (a Loop whose trip count
is computed from the input's values and whose scan output is as long as that count: the
break runs the loop as a compiled program of its own, compiled inside the first call's
break), recorded by the real runtime; and the same views on a version-1 trace (dispatch
only, no segment spans)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.analysis import connect, ingest
from ember.analysis import format as fmt
from ember.analysis.report import report

WIDTH, DEPTH, ITERS, CALLS = 256, 12, 30, 4


def loop_model() -> onnx.ModelProto:
    """x[1, 256] -> Loop (trip count from x's values, a scan output: a break) of 12
    MatMul+Tanh -> y."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    body_nodes, cur = [], "v_in"
    for i in range(DEPTH):
        body_nodes += [
            helper.make_node("MatMul", [cur, "w"], [f"m{i}"]),
            helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]),
        ]
        cur = f"t{i}"
    body_nodes += [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Identity", [cur], ["v_out"]),
        helper.make_node("Identity", ["cond_in"], ["scan_out"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1, WIDTH]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, WIDTH]),
            helper.make_tensor_value_info("scan_out", TensorProto.BOOL, []),
        ],
    )
    nodes = [
        helper.make_node("Mul", ["x", "zero"], ["x0"]),
        helper.make_node("ReduceSum", ["x0"], ["s"], keepdims=0),
        helper.make_node("Add", ["s", "iters"], ["sf"]),
        helper.make_node("Cast", ["sf"], ["M"], to=TensorProto.INT64),
        helper.make_node("Loop", ["M", "true", "x"], ["y", "ran"], body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "loop_break",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
        initializer=[
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            numpy_helper.from_array(np.array(float(ITERS), np.float32), "iters"),
            numpy_helper.from_array(np.array(True), "true"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def loop_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ember import runtime
    from ember.recorder import record

    d = tmp_path_factory.mktemp("loop")
    model = d / "loop.onnx"
    onnx.save(loop_model(), model)
    trace = d / "loop.jsonl"
    x = np.ones((1, WIDTH), np.float32)
    with record(trace, run_id="loop", scenario="loop-break"):
        compiled = runtime.compile(runtime.load(model), cache_size=4)
        for _ in range(CALLS):
            compiled({"x": x})
    return trace


def _spans(trace: Path) -> dict[int, dict]:
    """span_id -> {kind, parent, duration, attrs} from the trace file itself."""
    out: dict[int, dict] = {}
    for line in trace.read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "span_start":
            out[r["span_id"]] = {"kind": r["span_kind"], "parent": r["parent_id"]}
        elif r["kind"] == "span_end":
            out[r["span_id"]].update(duration=r["duration_ns"], attrs=r["attrs"])
    return out


@pytest.fixture(scope="module")
def loop_db(loop_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("loopdb") / "t.duckdb"
    assert ingest([loop_trace], db).rejected == 0
    return db


def test_call_parts_add_up_to_each_call(loop_db, loop_trace):
    spans = _spans(loop_trace)
    calls = {i: s for i, s in spans.items() if s["kind"] == "call"}
    with connect(loop_db, read_only=True) as con:
        rows = con.sql(
            "SELECT call_span_id, any_value(call_ns) AS call_ns, sum(ns) AS parts, "
            "list(part_kind) AS kinds FROM call_breakdown GROUP BY ALL"
        ).to_dicts()
    assert {r["call_span_id"] for r in rows} == set(calls)
    for r in rows:
        assert r["call_ns"] == calls[r["call_span_id"]]["duration"]
        assert r["parts"] == r["call_ns"]  # the rest is Ember's overhead (or unattributed)
        assert "break" in r["kinds"]


def test_time_by_part_agrees_with_the_spans_and_the_report_names_the_break(loop_db, loop_trace):
    spans = _spans(loop_trace)
    breaks = [s for s in spans.values() if s["kind"] == "break"]
    assert len(breaks) == CALLS
    assert {s["attrs"]["node"] for s in breaks} == {"Loop_4"}
    share_of_each = statistics.median(
        s["duration"] / spans[s["parent"]]["duration"] for s in breaks
    )
    assert share_of_each > 0.5  # the break holds most of every call
    with connect(loop_db, read_only=True) as con:
        (part,) = con.sql("SELECT * FROM time_by_part WHERE part_kind = 'break'").to_dicts()
        (first,) = report(con, "loop")[0].findings[:1]
    assert part["node"] == "Loop_4"
    assert part["spans"] == CALLS
    # the loop's program is compiled inside the first break: that time is the compile's,
    # in the call, not the break's (it was counted twice: in the break and outside calls)
    break_ids = {i for i, s in spans.items() if s["kind"] == "break"}
    inside = [s for s in spans.values() if s["parent"] in break_ids]
    compiled_inside = [s["duration"] for s in inside if s["kind"] == "segment_compile"]
    programs = [s["duration"] for s in inside if s["kind"] == "segment"]
    assert (len(compiled_inside), len(programs)) == (1, CALLS)
    assert part["total_ns"] == sum(s["duration"] for s in breaks) - sum(compiled_inside)
    compile_in = {s["parent"]: s["duration"] for s in inside if s["kind"] == "segment_compile"}
    break_share = statistics.median(
        (s["duration"] - compile_in.get(i, 0)) / spans[s["parent"]]["duration"]
        for i, s in spans.items()
        if i in break_ids
    )
    assert part["p50_share_of_call"] == pytest.approx(break_share, rel=0.05)
    assert part["program_ns"] == sum(programs)
    # the programs run inside the break: a part of its time (how large a part depends on
    # the machine's load: 4.9 of 11.5 ms in one run with the test suite beside)
    assert 0 < part["program_ns"] <= part["in_calls_ns"]
    calls = [s["duration"] for s in spans.values() if s["kind"] == "call"]
    assert part["share_of_calls"] == pytest.approx(part["total_ns"] / sum(calls), rel=0.05)
    with connect(loop_db, read_only=True) as con:
        (compile_part,) = con.sql(
            "SELECT * FROM time_by_part WHERE part_kind = 'compile' AND position = ?",
            [part["position"]],
        ).to_dicts()
    assert compile_part["in_calls_ns"] == compile_part["total_ns"] == sum(compiled_inside)
    # the first finding: the break, its share of each call and what to do
    assert first.kind == "break"
    assert first.cost_ns == part["in_calls_ns"]
    # what the break is said to do follows the measured split: its compiled program when
    # that holds at least half of the break's time (a quiet machine), else the body run from
    # the host (a loaded machine slows the host side more than the program)
    half = 0.5 * part["in_calls_ns"]
    if part["program_ns"] >= half:
        what = "runs its body as a compiled program of its own"
    elif (part["subgraph_ns"] or 0) >= half:
        what = "runs its body from the host"
    else:
        what = "runs on the host"
    assert first.text.startswith(f"break at `Loop_4` (the Loop trip count) {what}: ")
    assert f": {fmt.percent(part['p50_share_of_call'])} of each call, " in first.text
    assert "trip count from shapes or constants" in first.text


def _as_v1(trace: Path, out: Path) -> Path:
    """The same run as an older Ember wrote it: schema 1, no sync flag, no segment spans,
    no dispatch/host-transfer/subgraph times."""
    lines = []
    segment_ids = set()
    for line in trace.read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "meta":
            r["schema"] = "ember.trace/1"
            r.pop("sync", None)
        elif r["kind"] in ("span_start", "span_end"):
            if r.get("span_kind") == "segment":
                segment_ids.add(r["span_id"])
                continue
            for k in ("dispatch_ns", "host_transfer_ns", "subgraph_ns"):
                r.get("attrs", {}).pop(k, None)
        lines.append(json.dumps(r))
    out.write_text("\n".join(lines) + "\n")
    return out


def test_views_on_a_version_1_trace_say_dispatch_only(loop_trace, tmp_path):
    v1 = _as_v1(loop_trace, tmp_path / "v1.jsonl")
    db = tmp_path / "v1.duckdb"
    assert ingest([v1], db).rejected == 0
    with connect(db, read_only=True) as con:
        row = con.sql("SELECT * FROM run_summary").to_dicts()[0]
        kinds = con.sql(
            "SELECT DISTINCT part_kind, latency_kind FROM call_breakdown ORDER BY ALL"
        ).rows()
        by_part = con.sql("SELECT part_kind, latency_kind FROM time_by_part").rows()
        (r,) = report(con)
    assert row["sync"] is False
    assert row["latency_kind"] == "dispatch only"
    assert row["calls"] == CALLS
    assert row["p50_ns"] > 0
    # without segment spans, the segments' time and Ember's cannot be told apart
    assert {k for k, _ in kinds} == {"compile", "break", "unattributed"}
    assert {lk for _, lk in kinds} == {"dispatch only"}
    assert ("break", "dispatch only") in by_part
    assert r.run.latency_kind == "dispatch only"
    assert r.findings[0].kind == "break"
    assert "(dispatch only)" in r.findings[0].text
    latency = next(f for f in r.findings if f.kind == "latency")
    assert "dispatch only" in latency.text


def test_dashboard_ranks_the_parts_and_stacks_each_call(loop_db, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from ember.dashboard.db import DB_ENV

    monkeypatch.setenv(DB_ENV, str(loop_db))
    app = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    with connect(loop_db, read_only=True) as con:
        ranked = con.sql("SELECT part FROM time_by_part ORDER BY rank")["part"].to_list()
        breakdown = con.sql("SELECT count(*) FROM call_breakdown").item()
    table = next(f.value for f in at.dataframe if {"rank", "part"} <= set(f.value.columns))
    assert table["part"].tolist() == ranked
    assert "break Loop_4 (Loop)" in ranked
    at.switch_page("calls.py").run()
    assert not at.exception, [e.message for e in at.exception]
    charts = at.get("vega_lite_chart")
    stacked = [c for c in charts if "Where each call" in str(c.proto.spec)]
    assert len(stacked) == 1
    assert breakdown >= 2 * CALLS


def test_hub_downloads_that_dominate_a_cold_start_are_a_finding(tmp_path):
    import time

    from ember.recorder import bus, events, record

    trace = tmp_path / "cold.jsonl"
    meta = {"source": "hf://acme/big/model.onnx", "revision": "main"}
    with record(trace, run_id="cold"):
        with bus.span(events.HUB_DOWNLOAD, meta) as span:
            time.sleep(0.3)
            span.set(bytes=64 << 20)
        with bus.span(events.LOAD, {"source": "/cache/model.onnx"}):
            time.sleep(0.01)
    db = tmp_path / "cold.duckdb"
    assert ingest([trace], db).rejected == 0
    with connect(db, read_only=True) as con:
        (hub,) = con.sql("SELECT * FROM time_by_part WHERE part_kind = 'hub_download'").to_dicts()
        (r,) = report(con)
    assert hub["total_ns"] >= 300_000_000
    assert hub["share_of_wall"] > 0.5
    (first,) = r.findings[:1]
    assert first.kind == "hub"
    assert first.cost_ns == hub["total_ns"]
    assert first.text.startswith(f"Hub downloads took {fmt.duration(hub['total_ns'])}, ")
    assert f"{fmt.percent(hub['share_of_wall'])} of the run (a cold start)" in first.text
