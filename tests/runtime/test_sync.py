"""Recorded spans end at results (issue 13): call latency, segment and break spans, sync=False.

JAX dispatches asynchronously. While a recording that syncs is open, a call's span ends
when its outputs are ready, so the trace's latencies agree with a loop that reads the
outputs; ``record(..., sync=False)`` keeps dispatch-only spans and says so in ``meta``.
"""

from __future__ import annotations

import json
import statistics
import time

import jax
import numpy as np
import onnx
import pytest
from onnx import helper

import ember.runtime as rt
from ember.analysis import connect, ingest
from ember.recorder import bus, record
from ember.runtime.workload import resolve_source
from ember.schemas import validate_file
from tests import recordings
from tests.runtime.models import const, make_model, nonzero_reshape_model, tensor


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def ends(recs, span_kind):
    return [r for r in recs if r["kind"] == "span_end" and r["span_kind"] == span_kind]


def starts(recs, span_kind):
    return [r for r in recs if r["kind"] == "span_start" and r["span_kind"] == span_kind]


@pytest.fixture(scope="module")
def squeezenet():
    model = rt.compile(rt.load(resolve_source("onnx:light/squeezenet")))
    (spec,) = model.model.inputs
    x = np.random.default_rng(0).random(spec.shape, dtype=np.float32)
    feeds = {spec.name: x}
    for _ in range(3):  # compiled at compile(); warm the C++ call path
        jax.block_until_ready(model(feeds))
    return model, feeds


def _timed_loop(model, feeds, calls: int) -> list[int]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        result = model(feeds)
        np.asarray(next(iter(result.values())))  # read the outputs, as a caller would
        out.append(time.perf_counter_ns() - t0)
    return out


def _recorded(model, feeds, path, calls: int, sync: bool = True) -> list[dict]:
    with record(path, sync=sync):
        for _ in range(calls):
            result = model(feeds)
            jax.block_until_ready(result)
    return records(path)


def test_recorded_call_latency_is_time_to_results(squeezenet, tmp_path):
    """Issue 13: a recorded call's span lasts until its results are ready, not until
    dispatch returns. Before issue 13 the spans' ratio to a timed loop that reads the outputs
    was ~0.02 (dispatch time); time to results makes it ~1.

    The bound is only the structural one (> 0.3: dispatch-only spans are 15x below it), not
    the issue's "within 15 %": that is a speed target, measured on a quiet machine by
    ``benchmarks/bench_recorder.py``, and a shared machine's load moved medians of 20 calls
    by 50 % between runs (a 0.8-1.25 bound here failed under load). The loop and the
    recording still alternate call by call, and the ratio is the median of the pairs'.
    """
    model, feeds = squeezenet
    loop, paths = [], []
    for i in range(20):
        loop.extend(_timed_loop(model, feeds, 1))
        paths.append(tmp_path / f"synced{i:02}.jsonl")
        _recorded(model, feeds, paths[-1], 1)
    calls = [c for p in paths for c in ends(records(p), "call")]
    assert len(calls) == 20
    assert all(records(p)[0]["sync"] is True for p in paths)
    # every call: dispatched first, results later
    assert all(0 < c["attrs"]["dispatch_ns"] <= c["duration_ns"] for c in calls)
    spans = statistics.median(c["duration_ns"] for c in calls)
    # the same number through ingest and the call_latency view (one row per run)
    db = tmp_path / "t.duckdb"
    ingest(paths, db)
    with connect(db) as con:
        per_run = [p50 for (p50,) in con.sql("SELECT p50_ns FROM call_latency").rows()]
    assert len(per_run) == 20
    view = statistics.median(per_run)
    assert view == pytest.approx(spans)
    ratio = statistics.median(c["duration_ns"] / t for c, t in zip(calls, loop, strict=True))
    assert ratio > 0.3, (loop, [c["duration_ns"] for c in calls])


def test_no_sync_keeps_dispatch_and_says_so(tmp_path):
    # Dispatch-only spans end when JAX's dispatch returns: with JAX's own asynchronous
    # dispatch, in a fresh process (Ember runs programs inline unless told otherwise, and
    # then dispatch ends at the results: tests/runtime/test_inline.py)
    out = recordings.run("dispatch_only", str(tmp_path), env={"EMBER_CPU_ASYNC_DISPATCH": "1"})
    assert out.stdout.strip().splitlines()[-1] == "ok"
    synced = [records(tmp_path / f"synced{i}.jsonl") for i in range(10)]
    dispatch = [records(tmp_path / f"dispatch{i}.jsonl") for i in range(10)]
    assert validate_file(tmp_path / "dispatch0.jsonl").ok
    assert all(r[0]["sync"] is True for r in synced)
    assert all(r[0]["sync"] is False for r in dispatch)
    dispatch_calls = [c for r in dispatch for c in ends(r, "call")]
    synced_calls = [c for r in synced for c in ends(r, "call")]
    assert all("dispatch_ns" not in c["attrs"] for c in dispatch_calls)
    assert all("dispatch_ns" in c["attrs"] for c in synced_calls)
    # squeezenet runs for milliseconds and dispatches in a fraction of one
    pairs = list(zip(dispatch_calls, synced_calls, strict=True))
    ratio = statistics.median(d["duration_ns"] / s["duration_ns"] for d, s in pairs)
    assert ratio < 0.5, [(d["duration_ns"], s["duration_ns"]) for d, s in pairs]


def test_sync_only_while_a_syncing_recording_is_open(tmp_path):
    assert not bus.syncing()
    with record(tmp_path / "a.jsonl", sync=False):
        assert not bus.syncing()
        with record(tmp_path / "b.jsonl"):
            assert bus.syncing()
        assert not bus.syncing()
    assert not bus.syncing()


# ---------------------------------------------------------------- segments and breaks


def loop_model(adds: int = 3) -> onnx.ModelProto:
    """v, scans = Loop(trips = sum(x), body: v + 1 (adds times), scan of v): a break that runs
    a body (the scan outputs' length is the computed trip count)."""
    body_nodes, prev = [const("b_one", np.array(1.0, np.float32))], "v_in"
    for i in range(adds):
        body_nodes.append(helper.make_node("Add", [prev, "b_one"], [f"b{i}"]))
        prev = f"b{i}"
    body_nodes += [
        helper.make_node("Identity", [prev], ["v_out"]),
        helper.make_node("Identity", [prev], ["scan_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            tensor("iter", onnx.TensorProto.INT64, []),
            tensor("cond_in", onnx.TensorProto.BOOL, []),
            tensor("v_in", shape=[4]),
        ],
        [
            tensor("cond_out", onnx.TensorProto.BOOL, []),
            tensor("v_out", shape=[4]),
            tensor("scan_out", shape=[4]),
        ],
    )
    nodes = [
        const("true", np.array(True)),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Cast", ["s"], ["trips"], to=onnx.TensorProto.INT64, name="trips"),
        helper.make_node("Loop", ["trips", "true", "x"], ["v", "scans"], body=body, name="loop"),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=[4])],
        [tensor("v", shape=[4]), tensor("scans", shape=["trips", 4])],
    )


def test_segment_spans_one_per_segment_run_inside_the_call(tmp_path):
    model = rt.compile(rt.load(nonzero_reshape_model(extra_adds=25)))
    feeds = {
        "x": np.array([1, 0, 2, -1, -1, -1], np.float32),  # NonZero: 0, 2 -> 3 columns
        "data": np.arange(6, dtype=np.float32),
    }
    path = tmp_path / "t.jsonl"
    with record(path):
        for _ in range(2):
            model(feeds)
    assert validate_file(path).ok
    recs = records(path)
    (first_call, second_call) = starts(recs, "call")
    segments = starts(recs, "segment")
    expected = [
        (s.position, "end" if s.stop is None else s.stop, s.compiled) for s in model.plan.segments
    ]
    assert len(expected) == 2
    got = [(s["attrs"]["position"], s["attrs"]["stop"], s["attrs"]["compiled"]) for s in segments]
    assert got == expected * 2
    # children of their call; their keys are the cache's keys (cache records of the calls)
    assert [s["parent_id"] for s in segments] == [first_call["span_id"]] * 2 + [
        second_call["span_id"]
    ] * 2
    cache_keys = [r["key"] for r in recs if r["kind"] == "cache"]
    assert [s["attrs"]["key"] for s in segments] == cache_keys
    # compiles are not inside segment spans: a compile is a child of the call
    segment_ids = {s["span_id"] for s in segments}
    assert all(c["parent_id"] not in segment_ids for c in starts(recs, "segment_compile"))
    # each call holds its segments and its break, which end in order inside it
    call_end = {r["span_id"]: r for r in ends(recs, "call")}
    for seg in ends(recs, "segment"):
        (start,) = [s for s in segments if s["span_id"] == seg["span_id"]]
        parent = call_end[start["parent_id"]]
        assert seg["duration_ns"] <= parent["duration_ns"]
        assert seg["attrs"] == start["attrs"]
    # the break: NonZero reads its input on the host; it runs no subgraph
    brk = ends(recs, "break")
    assert len(brk) == 2
    for b in brk:
        assert b["attrs"]["node"] == "nonzero"
        assert 0 <= b["attrs"]["host_transfer_ns"] <= b["duration_ns"]
        assert b["attrs"].get("subgraph_ns") is None


def test_break_that_runs_a_body_says_how_long_the_body_took(tmp_path):
    # (an If no longer runs its branch at a break: it specialises on its condition)
    model = rt.compile(rt.load(loop_model()))
    x = np.array([1.0, 2.0, 0.0, -1.0], np.float32)  # two trips
    path = tmp_path / "t.jsonl"
    with record(path):
        out = model({"x": x})
    np.testing.assert_allclose(np.asarray(out["v"]), x + 6)
    np.testing.assert_allclose(np.asarray(out["scans"]), [x + 3, x + 6])
    recs = records(path)
    (brk,) = ends(recs, "break")
    assert brk["attrs"]["op_type"] == "Loop"
    attrs = brk["attrs"]
    assert attrs["subgraph_ns"] > 0
    assert attrs["host_transfer_ns"] >= 0
    assert attrs["host_transfer_ns"] + attrs["subgraph_ns"] <= brk["duration_ns"]


def test_whole_graph_call_has_one_segment_span_and_the_fast_path_comes_back(squeezenet):
    model, feeds = squeezenet
    got = []
    events = ["ember.call.stop", "ember.segment.start"]
    bus.attach("test-sync-spy", events, lambda n, m, md: got.append((n, md)))
    try:
        model(feeds)
    finally:
        bus.detach("test-sync-spy")
    # the whole-graph program is the call's one segment
    assert [n for n, _ in got] == ["ember.segment.start", "ember.call.stop"]
    seg = got[0][1]
    assert (seg["position"], seg["stop"], seg["compiled"]) == (0, "end", True)
    assert seg["parent_id"] == got[1][1]["span_id"]
    # no recording open: nothing syncs, so the call carries no dispatch time
    assert "dispatch_ns" not in got[1][1]
    # nobody listens: the call takes the direct path again (no span, no sync)
    model(feeds)
    model(feeds)
    assert model._fast.try_call is not model._fast.checked
