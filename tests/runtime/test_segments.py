"""Graph breaks, segments and the segment cache: outputs against onnxruntime, exact events."""

from __future__ import annotations

import json
import os
import threading
import uuid

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember.runtime as rt
from tests import recordings
from tests.runtime.models import (
    const,
    make_model,
    nonzero_reshape_model,
    reference,
    scan_body,
    sum_is_positive,
    tensor,
)

# ---------------------------------------------------------------------------------------------
# models


def if_model() -> onnx.ModelProto:
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [tensor("t", shape=["n"])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["e"], axis=0)],
        "else",
        [],
        [tensor("e", shape=["2n"])],
    )
    nodes = [
        *sum_is_positive(),
        helper.make_node(
            "If", ["positive"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch
        ),
    ]
    return make_model(nodes, [tensor("x", shape=["n"])], [tensor("y", shape=["m"])])


def loop_model() -> onnx.ModelProto:
    body = scan_body(
        [
            const("b_one", np.array(1.0, np.float32)),
            helper.make_node("Add", ["v_in", "b_one"], ["v_out"]),
            helper.make_node("Identity", ["v_out"], ["scan_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ]
    )
    nodes = [
        const("true", np.array(True)),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Cast", ["s"], ["trips"], to=TensorProto.INT64, name="trips"),
        helper.make_node("Loop", ["trips", "true", "x"], ["v", "scans"], body=body, name="loop"),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=[3])],
        [tensor("v", shape=[3]), tensor("scans", shape=["trips", 3])],
    )


def topk_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=1, name="max"),
        helper.make_node("Cast", ["m"], ["k"], to=TensorProto.INT64, name="k"),
        helper.make_node("TopK", ["x", "k"], ["values", "indices"], name="topk"),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=[6])],
        [tensor("values", shape=["k"]), tensor("indices", TensorProto.INT64, shape=["k"])],
    )


def relu_model(dim: object = "n") -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["t"], name="add"),
        helper.make_node("Relu", ["t"], ["y"], name="relu"),
    ]
    return make_model(nodes, [tensor("x", shape=[dim])], [tensor("y", shape=[dim])])


# the events of a segment's cache miss and compile, and of a graph break's host part
SEGMENT_COMPILED = ["ember.cache.miss", "ember.segment.compile.start", "ember.segment.compile.stop"]
BREAK = ["ember.break.start", "ember.break.stop"]


def _strip(events, keep=("span_id", "parent_id")):
    """(name, metadata without span ids) for comparing sequences."""
    return [(n, {k: v for k, v in md.items() if k not in keep}) for n, _, md in events]


def _f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


# ---------------------------------------------------------------------------------------------
# breaks


def test_nonzero_feeding_reshape_events_and_outputs(ember_events):
    proto = nonzero_reshape_model()
    model = rt.load(proto)
    compiled = rt.compile(model)
    assert compiled.graph_break
    assert compiled.breaks == [
        {
            "position": 5,
            "node": "nonzero",
            "op_type": "NonZero",
            "reason": "the values of NonZero's input (its output shape depends on them)",
        }
    ]
    assert _strip(ember_events)[-1] == (
        "ember.compile.stop",
        {"source": None, "compiler": "jax.jit", "graph_break": True},
    )
    ember_events.clear_all()

    data = np.arange(6, dtype=np.float32)
    x1 = _f32(0, 1, 0, 0, 0, 0)  # nz = [[1]] -> y: [3, 2]
    out = compiled({"x": x1, "data": data})
    ref = reference(proto, {"x": x1, "data": data})
    assert np.asarray(out["y"]).shape == (3, 2)
    np.testing.assert_array_equal(np.asarray(out["y"]), ref["y"])

    x_shapes = [{"name": "x", "shape": [6], "dtype": "float32"}]
    data_shapes = [{"name": "data", "shape": [6], "dtype": "float32"}]
    statics = [{"name": "nz", "value": [[1]]}]
    got = _strip(ember_events)
    names = [n for n, _ in got]
    assert names == [
        "ember.call.start",
        *SEGMENT_COMPILED,
        *BREAK,
        *SEGMENT_COMPILED,
        "ember.call.stop",
    ]
    assert got[0][1] == {
        "source": None,
        "shapes": [*data_shapes, *x_shapes],
    }
    miss0 = got[1][1]
    assert miss0["position"] == 0
    assert miss0["shapes"] == x_shapes
    assert miss0["statics"] == []
    assert len(miss0["key"]) == 16
    assert int(miss0["key"], 16) >= 0
    stop0 = got[3][1]
    assert stop0["stop"] == 5
    assert stop0["compiled"] is True
    assert stop0["disk_cache"] is None
    assert stop0["reason"].startswith("the values of NonZero")
    assert stop0["host_values"] == []
    assert stop0["key"] == miss0["key"]
    assert set(stop0["memory"]) == {
        "argument_bytes",
        "output_bytes",
        "temp_bytes",
        "alias_bytes",
        "generated_code_bytes",
    }
    assert stop0["memory"]["argument_bytes"] == 6 * 4
    assert set(stop0["cost"]) == {"flops", "bytes_accessed"}
    assert got[4][1] == {"source": None, "position": 5, "node": "nonzero", "op_type": "NonZero"}
    miss1 = got[6][1]
    assert miss1["position"] == 6
    assert miss1["shapes"] == data_shapes
    assert miss1["statics"] == statics
    stop1 = got[8][1]
    assert stop1["stop"] == "end"
    assert stop1["compiled"] is False
    assert stop1["reason"] is None
    assert stop1["disk_cache"] is None
    assert stop1["host_values"] == ["nz"]
    assert stop1["memory"] is None
    assert stop1["cost"] is None

    # other positions of the nonzero value: segment 0 hits, the eager segment misses
    ember_events.clear_all()
    x2 = _f32(0, 0, 1, 0, 0, 0)  # nz = [[2]] -> y: [2, 3]
    out = compiled({"x": x2, "data": data})
    np.testing.assert_array_equal(
        np.asarray(out["y"]), reference(proto, {"x": x2, "data": data})["y"]
    )
    assert np.asarray(out["y"]).shape == (2, 3)
    got = _strip(ember_events)
    names = [n for n, _ in got]
    assert names == [
        "ember.call.start",
        "ember.cache.hit",
        *BREAK,
        *SEGMENT_COMPILED,
        "ember.call.stop",
    ]
    assert got[1][1]["key"] == miss0["key"]
    assert got[4][1]["statics"] == [{"name": "nz", "value": [[2]]}]
    assert got[6][1]["host_values"] == []  # no new names at this position

    # the first inputs again: both segments hit
    ember_events.clear_all()
    compiled({"x": x1, "data": data})
    hits = ember_events.of("ember.cache.hit")
    assert [h["position"] for h in hits] == [0, 6]
    assert hits[1]["key"] == miss1["key"]
    assert hits[1]["statics"] == statics
    assert not ember_events.of("ember.cache.miss")


def test_compiled_segment_after_a_break_reads_host_values(ember_events):
    proto = nonzero_reshape_model(extra_adds=20)
    compiled = rt.compile(proto)
    data = np.arange(6, dtype=np.float32)
    for x in (_f32(0, 1, 0, 0, 0, 0), _f32(0, 0, 1, 0, 0, 0), _f32(0, 1, 0, 0, 0, 0)):
        out = compiled({"x": x, "data": data})
        ref = reference(proto, {"x": x, "data": data})
        np.testing.assert_allclose(np.asarray(out["y"]), ref["y"])
    stops = ember_events.of("ember.segment.compile.stop")
    after = [s for s in stops if s["position"] == 6]
    assert [s["compiled"] for s in after] == [True, True]
    assert after[0]["host_values"] == ["nz"]
    assert after[1]["host_values"] == []
    assert after[0]["stop"] == "end"
    assert after[0]["memory"]["output_bytes"] == 6 * 4
    # the third call hits both positions
    assert [h["position"] for h in ember_events.of("ember.cache.hit")] == [0, 0, 6]


def test_if_on_computed_condition_with_different_branch_shapes(ember_events):
    proto = if_model()
    compiled = rt.compile(proto)
    assert compiled.breaks[0]["reason"] == "the If condition"
    for x in (_f32(1, 2, 3), _f32(-1, -2, 0.5), _f32(4, 5)):
        out = compiled({"x": x})
        ref = reference(proto, {"x": x})
        np.testing.assert_array_equal(np.asarray(out["y"]), ref["y"])
    stops = ember_events.of("ember.segment.compile.stop")
    # position 0 compiles once per input length; the break brings the condition to the
    # host and the If starts the next segment, one per (length, condition); a short one
    # (3 nodes with its branches) runs eagerly
    assert [(s["position"], s["stop"], s["reason"], s["compiled"]) for s in stops] == [
        (0, 3, "the If condition", True),
        (3, "end", None, False),
        (3, "end", None, False),
        (0, 3, "the If condition", True),
        (3, "end", None, False),
    ]
    misses = [m for m in ember_events.of("ember.cache.miss") if m["position"] == 3]
    assert [m["statics"] for m in misses] == [
        [{"name": "if condition", "value": v}] for v in (True, False, True)
    ]
    breaks = ember_events.of("ember.break.stop")
    assert [(b["position"], b["op_type"], b["node"]) for b in breaks] == [(3, "If", "if")] * 3


def test_loop_with_computed_trip_count(ember_events):
    proto = loop_model()
    compiled = rt.compile(proto)
    assert compiled.breaks[0]["reason"] == "the Loop trip count"
    for x in (_f32(1, 0.5, 0.5), _f32(1, 1, 1), _f32(0, 0, 0)):
        out = compiled({"x": x})
        ref = reference(proto, {"x": x})
        np.testing.assert_allclose(np.asarray(out["v"]), ref["v"])
        if ref["scans"].size:
            np.testing.assert_allclose(np.asarray(out["scans"]), ref["scans"])
        else:
            assert np.asarray(out["scans"]).size == 0
    assert [b["op_type"] for b in ember_events.of("ember.break.start")] == ["Loop"] * 3


def test_topk_with_computed_k(ember_events):
    proto = topk_model()
    compiled = rt.compile(proto)
    assert compiled.breaks == [
        {
            "position": 2,
            "node": "topk",
            "op_type": "TopK",
            "reason": "the value of TopK's input 'K'",
        }
    ]
    for x in (_f32(1, 3, 2, 0, 2, 1), _f32(1, 1, 2, 0, 0, 0)):
        out = compiled({"x": x})
        ref = reference(proto, {"x": x})
        np.testing.assert_array_equal(np.asarray(out["values"]), ref["values"])
        np.testing.assert_array_equal(np.asarray(out["indices"]), ref["indices"])
    # one segment (position 0, same shapes both times) and the TopK break each call
    assert len(ember_events.of("ember.cache.miss")) == 1
    assert len(ember_events.of("ember.cache.hit")) == 1
    assert len(ember_events.of("ember.break.stop")) == 2


def test_shape_arithmetic_is_not_a_break():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        const("idx", np.array([0], np.int64)),
        const("minus_one", np.array([-1], np.int64)),
        helper.make_node("Gather", ["s", "idx"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    proto = make_model(nodes, [tensor("x", shape=[2, 3, 4])], [tensor("y", shape=[2, 12])])
    compiled = rt.compile(proto)
    assert not compiled.graph_break
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(compiled(x=x)["y"]), x.reshape(2, 12))


# ---------------------------------------------------------------------------------------------
# no breaks, LRU, decode loop, threads


def test_no_breaks_compiles_once_and_emits_no_cache_events(ember_events):
    proto = relu_model(dim=4)
    model = rt.load(proto)
    ember_events.clear_all()
    compiled = rt.compile(model)
    names = ember_events.names()
    assert names == [
        "ember.compile.start",
        "ember.segment.compile.start",
        "ember.segment.compile.stop",
        "ember.compile.stop",
    ]
    seg = ember_events.of("ember.segment.compile.stop")[0]
    assert seg["stop"] == "end"
    assert seg["compiled"] is True
    assert seg["reason"] is None
    assert seg["memory"]["argument_bytes"] == 16
    assert seg["memory"]["output_bytes"] == 16
    ember_events.clear_all()
    x = _f32(1, -2, 3, -4)
    for _ in range(3):
        out = compiled(x=x)
    np.testing.assert_array_equal(np.asarray(out["y"]), reference(proto, {"x": x})["y"])
    assert ember_events.names() == ["ember.call.start", "ember.call.stop"] * 3
    assert ember_events.of("ember.call.start")[0]["shapes"] == [
        {"name": "x", "shape": [4], "dtype": "float32"}
    ]


def test_other_shapes_go_through_the_cache_at_position_0(ember_events):
    proto = relu_model()
    compiled = rt.compile(proto, {"x": (4,)})
    ember_events.clear_all()
    compiled(x=_f32(1, 2))
    compiled(x=_f32(1, 2, 3, 4))  # the compile-time shape: no cache events
    compiled(x=_f32(3, 4))
    assert ember_events.names("ember.cache") == ["ember.cache.miss", "ember.cache.hit"]
    assert ember_events.of("ember.cache.miss")[0]["position"] == 0


def test_lru_with_three_lengths_in_rotation(ember_events):
    compiled = rt.compile(relu_model(), cache_size=2)
    lengths = [3, 4, 5] * 3
    for n in lengths:
        x = np.linspace(-1, 1, n).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(compiled(x=x)["y"]), np.maximum(2 * x, 0))
    cache_events = [(n, md) for n, _, md in ember_events if n.startswith("ember.cache")]
    kinds = [n.rsplit(".", 1)[1] for n, _ in cache_events]
    # first round: 3 misses (the third evicts); after it every call misses and evicts
    assert kinds == ["miss", "miss", "miss", "evict"] + ["miss", "evict"] * 6
    evicted = [md["shapes"][0]["shape"][0] for n, md in cache_events if n.endswith("evict")]
    assert evicted == [3, 4, 5, 3, 4, 5, 3]
    assert all(md["cache_size"] == 2 for n, md in cache_events if n.endswith("evict"))
    assert compiled.cache_info()[0] == [
        [{"name": "x", "shape": [4], "dtype": "float32"}],
        [{"name": "x", "shape": [5], "dtype": "float32"}],
    ]


def test_greedy_decode_loop_misses_once_per_length(ember_events):
    nodes = [
        helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["f"], ["s"], axes=None, keepdims=0),
    ]
    proto = make_model(
        nodes, [tensor("ids", TensorProto.INT64, [1, "seq"])], [tensor("s", shape=[])]
    )
    compiled = rt.compile(proto, cache_size=3)
    ids = [1]
    for _ in range(6):
        out = compiled(ids=np.array([ids], np.int64))
        assert float(out["s"]) == sum(ids)
        ids.append(int(float(out["s"])) % 7 + 1)  # the next token depends on the output
    assert len(ember_events.of("ember.cache.miss")) == 6
    evicted = [e["shapes"][0]["shape"] for e in ember_events.of("ember.cache.evict")]
    assert evicted == [[1, 1], [1, 2], [1, 3]]


def test_threads_share_one_compile_per_key(ember_events):
    compiled = rt.compile(relu_model())
    x = _f32(-1, 0, 1, 2, 3)
    results = []
    barrier = threading.Barrier(4)

    def call():
        barrier.wait()
        results.append(np.asarray(compiled(x=x)["y"]))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for r in results:
        np.testing.assert_array_equal(r, np.maximum(2 * x, 0))
    assert len(ember_events.of("ember.cache.miss")) == 1
    assert len(ember_events.of("ember.cache.hit")) == 3


def test_cache_size_must_be_positive():
    with pytest.raises(ValueError, match="cache_size must be at least 1"):
        rt.compile(relu_model(), cache_size=0)
    compiled = rt.compile(relu_model())
    with pytest.raises(ValueError, match="cache_size must be at least 1, got 0"):
        compiled.cache_size = 0  # the next miss failed with a KeyError from the cache
    assert compiled.cache_size == 8
    np.testing.assert_array_equal(np.asarray(compiled(x=_f32(-1, 1))["y"]), [0, 2])


def test_a_smaller_cache_size_evicts_down_to_it_at_the_next_insert(ember_events):
    compiled = rt.compile(relu_model(), cache_size=4)
    for n in (2, 3, 4, 5):
        compiled(x=np.ones(n, np.float32))
    compiled.cache_size = 2
    compiled(x=np.ones(6, np.float32))  # a miss: the position keeps 2, not 4 (5 - 1)
    assert [s[0]["shape"] for s in compiled.cache_info()[0]] == [[5], [6]]
    evicted = [e["shapes"][0]["shape"] for e in ember_events.of("ember.cache.evict")]
    assert evicted == [[2], [3], [4]]
    assert {e["cache_size"] for e in ember_events.of("ember.cache.evict")} == {2}


# ---------------------------------------------------------------------------------------------
# disk cache


def test_second_process_reads_every_segment_from_the_disk_cache(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(nonzero_reshape_model(extra_adds=20), path)
    cache = tmp_path / "cache"

    def run_process() -> dict:
        proc = recordings.run("segment_disk_cache", str(path), str(cache), timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run_process()
    second = run_process()
    assert [s["disk_cache"] for s in first["stops"]] == ["miss", "miss"]
    assert [s["disk_cache"] for s in second["stops"]] == ["hit", "hit"]
    assert all(s["compiled"] for s in second["stops"])
    assert first["y"] == second["y"]
    feeds = {"x": np.array([0, 1, 0, 0, 0, 0], np.float32), "data": np.arange(6, dtype=np.float32)}
    np.testing.assert_allclose(
        second["y"], reference(nonzero_reshape_model(extra_adds=20), feeds)["y"]
    )
    # the second process took both programs from Ember's store: nothing went to XLA
    assert first["xla"] >= 2
    assert second["xla"] == 0
    assert len(list((cache / "ember-programs").glob("*.program"))) == 2


def _scaled_model(factor: float) -> onnx.ModelProto:
    nodes = [const("k", np.float32(factor)), helper.make_node("Mul", ["x", "k"], ["y"])]
    return make_model(nodes, [tensor("x", shape=[3])], [tensor("y", shape=[3])])


def _disk_stops(events) -> list[str | None]:
    return [md["disk_cache"] for md in events.of("ember.segment.compile.stop")]


def test_program_store_is_keyed_by_the_models_bytes(tmp_path, ember_events):
    x = _f32(1, 2, 3)
    first = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    again = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    other = rt.compile(_scaled_model(3.0), cache_dir=tmp_path)  # same graph, other constant
    assert _disk_stops(ember_events) == ["miss", "hit", "miss"]
    np.testing.assert_allclose(np.asarray(again(x=x)["y"]), np.asarray(first(x=x)["y"]))
    np.testing.assert_allclose(np.asarray(other(x=x)["y"]), [3, 6, 9])
    assert len(list((tmp_path / "ember-programs").glob("*.program"))) == 2


def test_unreadable_stored_program_is_compiled_and_removed(tmp_path, caplog, ember_events):
    rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    (entry,) = (tmp_path / "ember-programs").glob("*.program")
    entry.write_bytes(b"not a program")
    with caplog.at_level("WARNING", logger="ember.runtime"):
        compiled = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    assert f"ignoring compiled program {entry}" in caplog.text
    assert "it is removed, and the program compiled" in caplog.text
    np.testing.assert_allclose(np.asarray(compiled(x=_f32(1, 2, 3))["y"]), [2, 4, 6])
    # The compile was read from JAX's own cache: that program, serialized again, would not
    # run, so it is not stored; the bad entry is gone, and the next process reads JAX's.
    assert _disk_stops(ember_events)[-1] == "hit"
    assert not entry.exists()
    caplog.clear()
    with caplog.at_level("WARNING", logger="ember.runtime"):
        again = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    np.testing.assert_allclose(np.asarray(again(x=_f32(1, 2, 3))["y"]), [2, 4, 6])
    assert _disk_stops(ember_events)[-1] == "hit"
    assert not caplog.text


def test_a_program_from_jaxs_cache_is_not_stored_where_it_would_not_run(tmp_path, ember_events):
    rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    (entry,) = _store_entries(tmp_path)
    entry.unlink()  # the store lost it; JAX's persistent cache still has the program
    rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    for _ in range(2):
        compiled = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
        np.testing.assert_allclose(np.asarray(compiled(x=_f32(1, 2, 3))["y"]), [2, 4, 6])
    assert _disk_stops(ember_events) == ["miss", "hit", "hit", "hit"]


def test_program_store_that_cannot_be_written_warns_and_the_model_runs(tmp_path, caplog):
    (tmp_path / "ember-programs").write_text("a file where the store's folder would go")
    with caplog.at_level("WARNING", logger="ember.runtime"):
        compiled = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    assert "could not store the compiled program" in caplog.text
    assert str(tmp_path / "ember-programs") in caplog.text
    np.testing.assert_allclose(np.asarray(compiled(x=_f32(1, 2, 3))["y"]), [2, 4, 6])


def _store_entries(folder) -> set:
    return set((folder / "ember-programs").glob("*.program"))


@pytest.mark.parametrize("other", ["same signature", "other signature"])
def test_entries_swapped_between_names_are_compiled_and_replaced(
    tmp_path, caplog, ember_events, other
):
    rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    (mine,) = _store_entries(tmp_path)
    # another model's program: the same argument (wrong values if taken) or another shape
    rt.compile(
        _scaled_model(3.0) if other == "same signature" else relu_model(dim=4),
        {},
        cache_dir=tmp_path,
    )
    (theirs,) = _store_entries(tmp_path) - {mine}
    a, b = mine.read_bytes(), theirs.read_bytes()
    mine.write_bytes(b)
    theirs.write_bytes(a)
    with caplog.at_level("WARNING", logger="ember.runtime"):
        compiled = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
        for _ in range(2):
            np.testing.assert_allclose(np.asarray(compiled(x=_f32(1, 2, 3))["y"]), [2, 4, 6])
    assert f"ignoring compiled program {mine}" in caplog.text
    assert ": entries renamed or swapped); it is removed, and the program compiled" in (caplog.text)
    # gone, or replaced by its own program (not when JAX's cache gave it: see above)
    assert not mine.exists() or mine.read_bytes() not in (a, b)
    caplog.clear()
    with caplog.at_level("WARNING", logger="ember.runtime"):  # replaced: a hit, no warning
        again = rt.compile(_scaled_model(2.0), cache_dir=tmp_path)
    np.testing.assert_allclose(np.asarray(again(x=_f32(1, 2, 3))["y"]), [2, 4, 6])
    assert _disk_stops(ember_events)[-1] == "hit"
    assert not caplog.text


def test_a_cache_dir_that_cannot_be_used_warns_once_and_every_call_runs(
    tmp_path, caplog, ember_events
):
    (tmp_path / "afile").write_text("x")
    cases = [
        (tmp_path / "afile", "it is a file, not a folder"),
        (tmp_path / "afile" / "sub", f"{tmp_path / 'afile'} is a file"),
    ]
    if os.path.isdir("/sys/kernel"):  # a folder that cannot be made, even by root
        cases.append((f"/sys/ember-test-{uuid.uuid4().hex}", "cannot create it"))
    for cache_dir, why in cases:
        caplog.clear()
        with caplog.at_level("WARNING", logger="ember.runtime"):
            for _ in range(2):  # a second model with the same directory: no second warning
                compiled = rt.compile(relu_model(), {"x": (3,)}, cache_dir=cache_dir)
                for n in (3, 5):  # the whole-graph program, then the cache at position 0
                    x = _f32(*range(-1, n - 1))
                    np.testing.assert_allclose(np.asarray(compiled(x=x)["y"]), np.maximum(2 * x, 0))
        (warning,) = [r.getMessage() for r in caplog.records]
        assert warning.startswith(f"ember: the cache directory {cache_dir} cannot be used ({why}")
        assert warning.endswith("; compiling without the disk cache")
    assert set(_disk_stops(ember_events)) == {None}


def test_disk_cache_does_not_change_the_callers_jax_setting(tmp_path):
    import jax

    before = jax.config.jax_compilation_cache_dir
    rt.compile(relu_model(dim=3), cache_dir=tmp_path / "c")
    assert jax.config.jax_compilation_cache_dir == before


def test_whole_graph_program_has_the_key_the_cache_gives_the_same_shapes(ember_events):
    compiled = rt.compile(relu_model(), {"x": (4,)})
    precompiled = ember_events.of("ember.segment.compile.start")[0]
    compiled(x=_f32(1, 2))  # other shapes: through the cache at position 0
    miss = ember_events.of("ember.cache.miss")[0]
    assert precompiled["position"] == miss["position"] == 0
    assert precompiled["key"] != miss["key"]
    other = rt.compile(relu_model(), {"x": (2,)})
    assert other is not compiled
    assert ember_events.of("ember.segment.compile.start")[-1]["key"] == miss["key"]


def test_sequence_argument_shapes_list_each_element(ember_events):
    nodes = [
        helper.make_node("SequenceConstruct", ["x", "x2"], ["seq"], name="seq"),
        helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
        helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0, name="cat"),
        helper.make_node("Cast", ["nz"], ["nzf"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("ReduceSum", ["nzf"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Mul", ["cat", "s"], ["y"], name="mul"),
    ]
    proto = make_model(
        nodes,
        [tensor("x", shape=[3]), tensor("x2", shape=[2])],
        [tensor("y", shape=[5])],
    )
    compiled = rt.compile(proto)
    x, x2 = _f32(0, 1, 1), _f32(5, 6)
    out = compiled(x=x, x2=x2)
    np.testing.assert_array_equal(np.asarray(out["y"]), reference(proto, {"x": x, "x2": x2})["y"])
    after = next(m for m in ember_events.of("ember.cache.miss") if m["position"] == 2)
    assert after["shapes"] == [
        {"name": "nz", "shape": [1, 2], "dtype": "int64"},
        {
            "name": "seq",
            "sequence": [
                {"shape": [3], "dtype": "float32"},
                {"shape": [2], "dtype": "float32"},
            ],
        },
    ]
    assert rt.run(proto, x=x, x2=x2)["y"].tolist() == np.asarray(out["y"]).tolist()


def test_program_store_key_covers_the_runtime_sources_and_the_segment(tmp_path, monkeypatch):
    from ember.runtime.jit import diskcache

    store = diskcache.ProgramStore(tmp_path, b"model bytes")
    key = store.digest("segment 0..end", (("x", ((3,), "float32")),), ())
    assert key == store.digest("segment 0..end", (("x", ((3,), "float32")),), ())
    assert key != store.digest("segment 0..end", (("x", ((4,), "float32")),), ())
    assert key != diskcache.ProgramStore(tmp_path, b"other model").digest(
        "segment 0..end", (("x", ((3,), "float32")),), ()
    )
    # an edited op (another digest of ember.runtime's sources) must not reuse programs
    monkeypatch.setattr(diskcache, "_runtime_fingerprint", lambda: "edited runtime")
    assert key != store.digest("segment 0..end", (("x", ((3,), "float32")),), ())


def _conv_model(seed: int = 4) -> onnx.ModelProto:
    """y = Conv(x, w) with w: 128x64x3x3 (73,728 values), a parameter kept on the device as
    HWIO on XLA:CPU."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((128, 64, 3, 3)).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.reshape(-1))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    return make_model(
        nodes, [tensor("x", shape=[1, 64, 8, 8])], [tensor("y", shape=[1, 128, 8, 8])], inits
    )


def test_conv_weights_laid_out_for_xla_cpu_are_stored_and_mapped_back(tmp_path, monkeypatch):
    from ember.runtime.jit import xla_cpu

    proto = _conv_model()
    x = np.random.default_rng(5).standard_normal((1, 64, 8, 8)).astype(np.float32)
    want = reference(proto, {"x": x})["y"]
    first = rt.compile(proto, cache_dir=tmp_path)
    assert first._hwio_params() == {"w"}
    (stored,) = (tmp_path / "ember-programs").glob("*.weights")
    laid_out = []
    real = xla_cpu.oihw_to_hwio
    monkeypatch.setattr(xla_cpu, "oihw_to_hwio", lambda w: laid_out.append(w.shape) or real(w))
    again = rt.compile(proto, cache_dir=tmp_path)
    assert laid_out == []  # read from the store, not laid out again
    for compiled in (first, again):
        np.testing.assert_allclose(np.asarray(compiled(x=x)["y"]), want, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(np.asarray(again._params["w"]), np.asarray(first._params["w"]))
    # another model's weights have another entry
    rt.compile(_conv_model(seed=6), cache_dir=tmp_path)
    assert len(list((tmp_path / "ember-programs").glob("*.weights"))) == 2
    assert laid_out == [(128, 64, 3, 3)]
    assert stored.exists()


@pytest.mark.parametrize("damage", ["truncated", "swapped", "empty"])
def test_unreadable_stored_weights_are_laid_out_again_and_replaced(tmp_path, caplog, damage):
    proto = _conv_model()
    x = np.random.default_rng(5).standard_normal((1, 64, 8, 8)).astype(np.float32)
    want = reference(proto, {"x": x})["y"]
    rt.compile(proto, cache_dir=tmp_path)
    (entry,) = (tmp_path / "ember-programs").glob("*.weights")
    data = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "swapped":  # another model's weights under this name
        rt.compile(_conv_model(seed=6), cache_dir=tmp_path)
        (other,) = set((tmp_path / "ember-programs").glob("*.weights")) - {entry}
        entry.write_bytes(other.read_bytes())
    else:
        entry.write_bytes(b"")
    with caplog.at_level("WARNING", logger="ember.runtime"):
        compiled = rt.compile(proto, cache_dir=tmp_path)
    assert f"ignoring stored weights {entry}" in caplog.text
    np.testing.assert_allclose(np.asarray(compiled(x=x)["y"]), want, rtol=1e-4, atol=1e-3)
    assert entry.read_bytes() == data  # laid out again and stored again
    caplog.clear()
    with caplog.at_level("WARNING", logger="ember.runtime"):
        again = rt.compile(proto, cache_dir=tmp_path)
    np.testing.assert_allclose(np.asarray(again(x=x)["y"]), want, rtol=1e-4, atol=1e-3)
    assert not caplog.text


def _tail_inputs_seen(monkeypatch: pytest.MonkeyPatch) -> list[type]:
    """The types of what each Tanh of the demo model's tail is given when run one by one."""
    from ember.runtime.graph import ir

    seen: list[type] = []
    run_node = ir.run_node

    def spy(node, env, *args):
        if node.op_type == "Tanh" and node.name.startswith("dec"):
            seen.append(type(env[node.inputs[0]]))
        return run_node(node, env, *args)

    monkeypatch.setattr(ir, "run_node", spy)
    return seen


@pytest.mark.parametrize("layers", [5, 7])
def test_a_short_segment_after_a_break_runs_on_numpy_on_the_cpu(layers, monkeypatch):
    # the demo model with 5 dense layers after its NonZero: 18 nodes, run one by one each
    # call, through JAX's eager dispatch (339 us a call) and now numpy (156 us); with 7
    # layers the tail is compiled and its nodes never run one by one
    from onnx.reference import ReferenceEvaluator

    from ember.runtime.examples import token_filter_model

    seen = _tail_inputs_seen(monkeypatch)
    proto = token_filter_model(layers=layers)
    compiled = rt.compile(proto)
    ref = ReferenceEvaluator(proto)
    for seed in range(3):
        feeds = {"input_ids": np.random.default_rng(seed).integers(0, 64, (2, 16))}
        (want,) = ref.run(None, feeds)
        got = compiled(feeds)["pooled"]
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    eager = {
        position: {e.exe is None for e in entries.values()}
        for position, entries in compiled._builder.segments._positions.items()
    }
    (tail,) = [p for p in eager if p > 0]
    assert eager == {0: {False}, tail: {layers == 5}}  # one entry per count of kept tokens
    assert set(seen) == ({np.ndarray} if layers == 5 else set())
    assert len(seen) == (3 * layers if layers == 5 else 0)


def test_a_short_segment_on_values_larger_than_the_numpy_bound_stays_on_jax(monkeypatch):
    # numpy's loops use one core: above EAGER_NUMPY_MAX elements the nodes keep JAX's
    # eager dispatch (here the bound is made smaller than the kept tokens)
    from ember.runtime.examples import token_filter_model
    from ember.runtime.jit import xla_cpu

    seen = _tail_inputs_seen(monkeypatch)
    monkeypatch.setattr(xla_cpu, "EAGER_NUMPY_MAX", 4)
    compiled = rt.compile(token_filter_model(layers=5))
    compiled({"input_ids": np.random.default_rng(0).integers(0, 64, (2, 16))})
    assert seen
    assert np.ndarray not in set(seen)
