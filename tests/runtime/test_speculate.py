"""Loop bodies compiled for the shapes a run saw (runtime/jit/speculate.py) and loop-invariant
nodes moved out of bodies (runtime/graph/hoist.py): the values stay onnxruntime's, a step
whose shapes differ from those seen runs as written, and what moves out of a body."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember.runtime as rt
from tests.runtime.models import const, counter_loop, make_model, reference, tensor


def _at(events: list[dict[str, Any]], position: int) -> list[dict[str, Any]]:
    return [e for e in events if e["position"] == position]


@pytest.fixture
def segment_events(ember_events: Any) -> Any:
    """``ember_events`` with the segment spans too (one per run of a segment)."""
    from ember.recorder import bus

    names = ["ember.segment.start", "ember.segment.stop", "ember.segment.exception"]
    bus.attach("test-speculate-segments", names, lambda n, m, md: ember_events.append((n, m, md)))
    try:
        yield ember_events
    finally:
        bus.detach("test-speculate-segments")


def _eager_tanh(monkeypatch: pytest.MonkeyPatch) -> list[type]:
    """The types the body's Tanh is given, run by run: numpy eagerly, tracers when traced."""
    from ember.runtime.graph import ir

    seen: list[type] = []
    run_node = ir.run_node

    def spy(node: Any, env: Any, *args: Any) -> Any:
        if node.op_type == "Tanh":
            seen.append(type(env[node.inputs[0]]))
        return run_node(node, env, *args)

    monkeypatch.setattr(ir, "run_node", spy)
    return seen


def test_a_body_that_reads_its_counter_on_the_host_compiles_for_the_row_it_saw(
    ember_events: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SLANet-plus: 199 steps of ~300 nodes ran node by node (9 ms a step on JAX's eager
    # ops, ~2 ms on numpy). Now the first step runs on numpy and notes the shape of the row
    # its Slice cut; every later step is one program that cuts a row of that shape where the
    # counter says (jit/speculate.py). The values stay the reference's.
    seen = _eager_tanh(monkeypatch)
    table = np.random.default_rng(3).standard_normal((6, 4)).astype(np.float32)
    proto = counter_loop()
    compiled = rt.compile(proto)
    for trips in (4, 2, 6):
        feeds = {"x": np.array([trips, 0, 0], np.float32), "table": table}
        out, want = compiled(feeds), reference(proto, feeds)  # onnxruntime stacks the rows
        for name in ("count", "acc", "sums"):
            np.testing.assert_allclose(np.asarray(out[name]), want[name], rtol=1e-6, atol=1e-6)
        assert out["sums"].shape == (trips, 1, 4)
    (brk,) = compiled.breaks
    assert brk["op_type"] == "Loop"
    # one step ran on numpy (the first: it noted the shapes), the other eleven in a program
    assert seen.count(np.ndarray) == 1
    compiles = _at(ember_events.of("ember.segment.compile.stop"), brk["position"])
    assert [c["compiled"] for c in compiles] == [False, True]
    assert "reads on the host" in compiles[0]["reason"]  # the whole Loop as one program
    misses = _at(ember_events.of("ember.cache.miss"), brk["position"])
    body_statics = misses[-1]["statics"]  # the body's program, keyed by the row's shape
    assert {"name": "Slice_7 shape seen", "value": [[1, 4]]} in body_statics


def test_a_step_whose_slice_is_shorter_than_the_one_seen_runs_as_written(
    ember_events: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two rows a step, seen in the first step; from counter 5 on the table has one row left,
    # then none: the program's guard says so and those steps run node by node
    seen = _eager_tanh(monkeypatch)
    table = np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
    proto = counter_loop(rows=2)
    compiled = rt.compile(proto)
    for trips in (7, 3, 6):
        feeds = {"x": np.array([trips, 0, 0], np.float32), "table": table}
        out, want = compiled(feeds), reference(proto, feeds)
        for name in ("count", "acc", "sums"):
            np.testing.assert_allclose(np.asarray(out[name]), want[name], rtol=1e-6, atol=1e-6)
    # eager: the first step (it notes the shapes), counters 5 and 6 of the first call and
    # counter 5 of the third: the other twelve steps ran in the program
    assert seen.count(np.ndarray) == 4
    (brk,) = compiled.breaks
    compiled_bodies = [
        c
        for c in _at(ember_events.of("ember.segment.compile.stop"), brk["position"])
        if c["compiled"]
    ]
    assert len(compiled_bodies) == 1


def _flag_loop() -> onnx.ModelProto:
    """paddle2onnx's decoders end their Loop with an ``If`` whose branches give a scalar and
    a ``[1]``: here ``done = sum(acc * w) > limit`` (``w`` computed before the Loop)."""
    then_branch = helper.make_graph(
        [const("t_done", np.array(True))], "then", [], [tensor("t_done", TensorProto.BOOL, [])]
    )
    else_branch = helper.make_graph(
        [
            const("e_zero", np.array([0], np.int64)),
            helper.make_node("Cast", ["cond_in"], ["e_c"], to=TensorProto.INT64),
            helper.make_node("Mul", ["e_c", "e_zero"], ["e_m"]),
            helper.make_node("Cast", ["e_m"], ["e_done"], to=TensorProto.BOOL),
        ],
        "else",
        [],
        [tensor("e_done", TensorProto.BOOL, [1])],
    )
    body = helper.make_graph(
        [
            const("b_one", np.array(1.0, np.float32)),
            helper.make_node("Add", ["acc_in", "b_one"], ["acc_out"]),
            helper.make_node("Mul", ["acc_out", "w"], ["b_w"]),
            helper.make_node("ReduceSum", ["b_w"], ["b_s"], keepdims=0),
            helper.make_node("Greater", ["b_s", "limit"], ["b_over"]),
            helper.make_node(
                "If", ["b_over"], ["b_done"], then_branch=then_branch, else_branch=else_branch
            ),
            helper.make_node("Not", ["b_done"], ["cond_out"]),
        ],
        "body",
        [
            tensor("iter", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("acc_in", shape=[4]),
        ],
        [tensor("cond_out", TensorProto.BOOL, None), tensor("acc_out", shape=[4])],
    )
    nodes = [
        const("max_trips", np.array(100, np.int64)),
        const("true", np.array(True)),
        const("acc0", np.zeros(4, np.float32)),
        helper.make_node("Abs", ["weights"], ["w"]),
        helper.make_node("Loop", ["max_trips", "true", "acc0"], ["acc"], body=body),
    ]
    return make_model(
        nodes,
        [tensor("weights", shape=[4]), tensor("limit", shape=[])],
        [tensor("acc", shape=[4])],
    )


def test_an_if_whose_branches_differ_in_shape_compiles_and_its_flip_runs_as_written(
    segment_events: Any,
) -> None:
    # the steps take the else branch ([1]) until the last one (a scalar): the body is one
    # program for the shapes seen, and the last step runs node by node. The weights read
    # inside the If's condition stay an argument: new weights run the same program (they
    # were a static value of its key, a compile per input)
    ember_events = segment_events
    proto = _flag_loop()
    compiled = rt.compile(proto)
    rng = np.random.default_rng(7)
    for limit in (9.0, 20.0, 14.0):
        feeds = {
            "weights": rng.uniform(0.5, 1.5, 4).astype(np.float32),
            "limit": np.array(limit, np.float32),
        }
        out, want = compiled(feeds), reference(proto, feeds)
        np.testing.assert_allclose(np.asarray(out["acc"]), want["acc"])
        assert float(np.asarray(out["acc"])[0]) > 1  # more than one step ran
    (brk,) = compiled.breaks
    compiles = _at(ember_events.of("ember.segment.compile.stop"), brk["position"])
    # two programs: the first step's condition is a scalar, the later steps' a [1]
    assert [c["compiled"] for c in compiles].count(True) == 2
    runs = _at(ember_events.of("ember.segment.stop"), brk["position"])
    assert sum(r["compiled"] for r in runs) > len(runs) // 2


def _hoist_model(extra: list[onnx.NodeProto], reads: str = "wt") -> onnx.ModelProto:
    """A Loop of 3 steps carrying ``w`` through unchanged; its body transposes it (and runs
    ``extra``) and multiplies the carried ``h`` by ``reads``."""
    body = helper.make_graph(
        [
            helper.make_node("Transpose", ["w_in"], ["wt"], perm=[1, 0]),
            *extra,
            helper.make_node("MatMul", ["h_in", reads], ["h_mm"]),
            helper.make_node("Tanh", ["h_mm"], ["h_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            tensor("iter", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("w_in", shape=[4, 4]),
            tensor("h_in", shape=[1, 4]),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("w_in", shape=[4, 4]),
            tensor("h_out", shape=[1, 4]),
        ],
    )
    nodes = [
        const("trips", np.array(3, np.int64)),
        const("true", np.array(True)),
        helper.make_node("Loop", ["trips", "true", "w", "h"], ["w_last", "h_last"], body=body),
    ]
    return make_model(
        nodes,
        [tensor("w", shape=[4, 4]), tensor("h", shape=[1, 4])],
        [tensor("w_last", shape=[4, 4]), tensor("h_last", shape=[1, 4])],
    )


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "w": rng.standard_normal((4, 4)).astype(np.float32),
        "h": rng.standard_normal((1, 4)).astype(np.float32),
    }


def _ops(graph: Any) -> list[str]:
    return [n.op_type for n in graph.nodes]


def test_a_node_of_values_the_body_passes_through_moves_in_front_of_the_loop() -> None:
    proto = _hoist_model([])
    model = rt.load(proto)
    (loop,) = [n for n in model.graph.nodes if n.op_type == "Loop"]
    assert "Transpose" in _ops(model.graph)  # in front of the Loop, reading its input "w"
    (moved,) = [n for n in model.graph.nodes if n.op_type == "Transpose"]
    assert moved.inputs == ("w",)
    assert moved.name == f"{loop.name}/Transpose_0"
    assert moved.position < loop.position
    assert _ops(loop.attrs["body"]) == ["MatMul", "Tanh", "Identity"]
    assert "wt" in loop.outer_reads
    out, want = rt.compile(proto)(_feeds()), reference(proto, _feeds())
    for name in ("w_last", "h_last"):
        np.testing.assert_allclose(np.asarray(out[name]), want[name], rtol=1e-6, atol=1e-6)


def test_random_nodes_and_nodes_of_carried_values_stay_in_the_body() -> None:
    # a random value differs per step; the MatMul reads h, which changes per step
    noise = helper.make_node("RandomUniformLike", ["w_in"], ["w_noise"], seed=1.0)
    scaled = helper.make_node("Mul", ["wt", "w_noise"], ["w_mixed"])
    model = rt.load(_hoist_model([noise, scaled], reads="w_mixed"))
    (loop,) = [n for n in model.graph.nodes if n.op_type == "Loop"]
    body_ops = _ops(loop.attrs["body"])
    assert "RandomUniformLike" in body_ops
    assert "Mul" in body_ops
    assert "MatMul" in body_ops
    assert "Transpose" not in body_ops  # it alone reads only what passes through


def test_a_body_value_named_like_one_outside_stays_in_the_body() -> None:
    # the moved Transpose's output would take a name the enclosing graph already has
    proto = _hoist_model([])
    proto.graph.node.insert(0, const("wt", np.ones((4, 4), np.float32)))
    proto.graph.output.append(tensor("wt", shape=[4, 4]))
    model = rt.load(proto)
    (loop,) = [n for n in model.graph.nodes if n.op_type == "Loop"]
    assert "Transpose" in _ops(loop.attrs["body"])


def _range_loop() -> onnx.ModelProto:
    """A Loop on a device trip count whose body makes ``Range(0.1 i, 0.1 i + 1.2, 0.3)``
    (4 values, then 5 where double precision counts them: float32 says 4) and emits its
    length."""

    def f(name: str, value: float) -> onnx.NodeProto:
        return const(name, np.array(value, np.float32))

    body = helper.make_graph(
        [
            f("a", 0.1),
            f("b", 1.2),
            f("d", 0.3),
            const("one", np.array(1, np.int64)),
            helper.make_node("Cast", ["i_in"], ["i_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["i_f", "a"], ["s"]),
            helper.make_node("Add", ["s", "b"], ["lim"]),
            helper.make_node("Range", ["s", "lim", "d"], ["r"]),
            helper.make_node("Shape", ["r"], ["n"]),
            helper.make_node("ReduceSum", ["r"], ["total"], keepdims=0),
            helper.make_node("Add", ["i_in", "one"], ["i_out"]),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [
            tensor("it", TensorProto.INT64, []),
            tensor("cond", TensorProto.BOOL, []),
            tensor("i_in", TensorProto.INT64, []),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("i_out", TensorProto.INT64, []),
            tensor("n", TensorProto.INT64, [1]),
            tensor("total", shape=[]),
        ],
    )
    return make_model(
        [
            const("t", np.array(True)),
            const("i0", np.array(0, np.int64)),
            helper.make_node("ReduceSum", ["x"], ["tot"], keepdims=0),
            helper.make_node("Cast", ["tot"], ["trips"], to=TensorProto.INT64),
            helper.make_node(
                "Loop", ["trips", "t", "i0"], ["i_last", "lengths", "totals"], body=body
            ),
        ],
        [tensor("x", shape=[1])],
        [
            tensor("i_last", TensorProto.INT64, []),
            tensor("lengths", TensorProto.INT64, ["n", 1]),
            tensor("totals", shape=["n"]),
        ],
    )


def test_a_float_range_counts_its_length_as_onnxruntime_does() -> None:
    # the guard counted in float32 (4 values at step 1) and held against the 4 seen
    proto = _range_loop()
    compiled = rt.compile(proto)
    for trips in (4, 4, 3):
        feeds = {"x": np.array([trips], np.float32)}
        out, want = compiled(feeds), reference(proto, feeds)
        np.testing.assert_array_equal(np.asarray(out["lengths"]).ravel(), [4, 5, 5, 4][:trips])
        np.testing.assert_array_equal(np.asarray(out["lengths"]), want["lengths"])
        np.testing.assert_allclose(np.asarray(out["totals"]), want["totals"], rtol=1e-6)


def test_moved_nodes_are_named_for_their_loop() -> None:
    # two Loops with the same body: the first one's Transpose moves out, named for it (the
    # body's "Transpose_0" is a name the graph may hold already); the second one's output
    # "wt" is then a name of the enclosing graph, so it stays in its body
    proto = _hoist_model([])
    second = onnx.NodeProto()
    second.CopyFrom(proto.graph.node[2])
    second.name, second.output[:] = "Loop_b", ["w_last_b", "h_last_b"]
    proto.graph.node[2].name = "Loop_a"
    proto.graph.node.append(second)
    model = rt.load(proto)
    moved = [n.name for n in model.graph.nodes if n.op_type == "Transpose"]
    assert moved == ["Loop_a/Transpose_0"]
    (loop_b,) = [n for n in model.graph.nodes if n.name == "Loop_b"]
    assert "Transpose" in _ops(loop_b.attrs["body"])
    names = [n.name for n in model.graph.nodes]
    assert len(names) == len(set(names))


def test_a_body_reading_outer_shapes_by_its_condition_compiles(segment_events: Any) -> None:
    # Reshape(table, Where(cond, Shape(table), Shape(flat))): the body's condition is a
    # static value, so the shapes it picks between are statics too (they were arguments,
    # the Reshape read them on the host and the body stayed eager)
    body = helper.make_graph(
        [
            helper.make_node("Where", ["cond_in", "rows_cols", "flat_len"], ["b_shape"]),
            helper.make_node("Reshape", ["tbl", "b_shape"], ["b_tbl"]),
            helper.make_node("ReduceSum", ["b_tbl"], ["b_sum"], keepdims=0),
            helper.make_node("Add", ["acc_in", "b_sum"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            tensor("iter", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("acc_in", shape=[]),
        ],
        [tensor("cond_out", TensorProto.BOOL, []), tensor("acc_out", shape=[])],
    )
    nodes = [
        const("true", np.array(True)),
        const("acc0", np.array(0.0, np.float32)),
        const("two", np.array(2.0, np.float32)),
        const("minus_one", np.array([-1], np.int64)),
        helper.make_node("Mul", ["table", "two"], ["tbl"]),
        # the shapes times a one computed from the data: device values, not host ones
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Div", ["total", "total"], ["one_f"]),
        helper.make_node("Cast", ["one_f"], ["one"], to=TensorProto.INT64),
        helper.make_node("Shape", ["table"], ["shape_rc"]),
        helper.make_node("Mul", ["shape_rc", "one"], ["rows_cols"]),
        helper.make_node("Reshape", ["table", "minus_one"], ["flat"]),
        helper.make_node("Shape", ["flat"], ["flat1"]),
        helper.make_node("Concat", ["flat1", "minus_one"], ["shape_flat"], axis=0),
        helper.make_node("Mul", ["shape_flat", "one"], ["flat_len"]),
        helper.make_node("Cast", ["total"], ["trips"], to=TensorProto.INT64),
        helper.make_node("Loop", ["trips", "true", "acc0"], ["acc"], body=body),
    ]
    proto = make_model(
        nodes,
        [tensor("x", shape=[3]), tensor("table", shape=[6, 4])],
        [tensor("acc", shape=[])],
    )
    compiled = rt.compile(proto)
    table = np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32)
    for trips in (3, 5):
        feeds = {"x": np.array([trips, 0, 0], np.float32), "table": table}
        out, want = compiled(feeds), reference(proto, feeds)
        np.testing.assert_allclose(np.asarray(out["acc"]), want["acc"], rtol=1e-5)
    (brk,) = compiled.breaks
    runs = _at(segment_events.of("ember.segment.stop"), brk["position"])
    assert runs
    assert all(r["compiled"] for r in runs)


def test_values_a_body_passes_through_are_not_outputs_of_its_program() -> None:
    # SLANet-plus carries ~25 weights through its decoder's body unchanged: as outputs of
    # the body's program XLA copied each one every step
    proto = counter_loop()
    loop = proto.graph.node[-1]
    body = loop.attribute[0].g
    body.input.append(tensor("scale_in", shape=[1, 4]))
    body.output.insert(3, tensor("scale_in", shape=[1, 4]))
    (emit,) = [n for n in body.node if n.output[0] == "scan_out"]
    emit.CopyFrom(helper.make_node("Mul", ["b_t", "scale_in"], ["scan_out"]))
    loop.input.append("scale")
    loop.output.insert(3, "scale_last")
    proto.graph.input.append(tensor("scale", shape=[1, 4]))
    proto.graph.output.append(tensor("scale_last", shape=[1, 4]))
    compiled = rt.compile(proto)
    rng = np.random.default_rng(4)
    table = rng.standard_normal((6, 4)).astype(np.float32)
    scale = rng.standard_normal((1, 4)).astype(np.float32)
    for trips in (4, 5):
        feeds = {"x": np.array([trips, 0, 0], np.float32), "table": table, "scale": scale}
        out, want = compiled(feeds), reference(proto, feeds)
        for name in ("count", "acc", "sums", "scale_last"):
            np.testing.assert_allclose(np.asarray(out[name]), want[name], rtol=1e-6, atol=1e-6)
    (brk,) = compiled.breaks
    programs = [
        e for e in compiled._builder.segments._positions[brk["position"]].values() if e.guarded
    ]
    assert programs
    for entry in programs:
        assert "scale_in" not in entry.dynamic_outputs
        assert "acc_out" in entry.dynamic_outputs
