"""Control flow compiled, not interpreted: an If specialises on its condition's value.

The models are built here with onnx.helper after the shape of streaming audio models
(silero VAD): the whole network sits inside an ``If`` on a condition computed from a scalar
input, with recurrent state passed in and out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember.runtime as rt
from tests.runtime.models import (
    const,
    make_model,
    reference,
    scan_body,
    sum_is_positive,
    tensor,
)

HIDDEN = 16
CHUNK = 64


def _branch(tag: str, seed: int, depth: int = 8, batch: object = 1) -> onnx.GraphProto:
    """A recurrent cell over the outer ``x`` and ``state``: (out [1, 1], stateN [2, 1, H])."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    p = f"{tag}_"
    nodes = [
        const(p + "W", w(CHUNK, HIDDEN)),
        const(p + "U", w(HIDDEN, HIDDEN)),
        const(p + "i0", np.array(0, np.int64)),
        const(p + "i1", np.array(1, np.int64)),
        const(p + "ax0", np.array([0], np.int64)),
        const(p + "ax1", np.array([1], np.int64)),
        helper.make_node("Gather", ["state", p + "i0"], [p + "h0"], axis=0),
        helper.make_node("Gather", ["state", p + "i1"], [p + "c0"], axis=0),
        helper.make_node("MatMul", ["x", p + "W"], [p + "a"]),
        helper.make_node("MatMul", [p + "h0", p + "U"], [p + "b"]),
        helper.make_node("Add", [p + "a", p + "b"], [p + "z0"]),
    ]
    z = p + "z0"
    for k in range(depth):
        nodes += [
            const(f"{p}V{k}", w(HIDDEN, HIDDEN)),
            const(f"{p}bias{k}", w(HIDDEN)),
            helper.make_node("MatMul", [z, f"{p}V{k}"], [f"{p}m{k}"]),
            helper.make_node("Add", [f"{p}m{k}", f"{p}bias{k}"], [f"{p}s{k}"]),
            helper.make_node("Tanh", [f"{p}s{k}"], [f"{p}z{k + 1}"]),
        ]
        z = f"{p}z{k + 1}"
    nodes += [
        helper.make_node("Add", [p + "c0", z], [p + "c1"]),
        helper.make_node("Unsqueeze", [z, p + "ax0"], [p + "hN"]),
        helper.make_node("Unsqueeze", [p + "c1", p + "ax0"], [p + "cN"]),
        helper.make_node("Concat", [p + "hN", p + "cN"], [p + "stateN"], axis=0),
        helper.make_node("ReduceSum", [z, p + "ax1"], [p + "mean"], keepdims=1),
        helper.make_node("Sigmoid", [p + "mean"], [p + "out"]),
    ]
    return helper.make_graph(
        nodes,
        tag,
        [],
        [tensor(p + "out", shape=[batch, 1]), tensor(p + "stateN", shape=[2, batch, HIDDEN])],
    )


def _cell_if(cond: str, outputs: list[str], batch: object = 1) -> onnx.NodeProto:
    """If(cond, then: cell A, else: cell B): two recurrent cells of other weights."""
    return helper.make_node(
        "If",
        [cond],
        outputs,
        name="If_0",
        then_branch=_branch("then", 1, batch=batch),
        else_branch=_branch("else", 2, batch=batch),
    )


def vad_like_model(batch: object = 1) -> onnx.ModelProto:
    """out, stateN = If(sr == 16000, then: cell A, else: cell B) over x [batch, 64]."""
    nodes = [
        const("sr16k", np.array(16000, np.int64)),
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="Equal_0"),
        _cell_if("is16k", ["if_out", "if_state"], batch=batch),
        helper.make_node("Identity", ["if_out"], ["output"]),
        helper.make_node("Identity", ["if_state"], ["stateN"]),
    ]
    return make_model(
        nodes,
        [
            tensor("x", shape=[batch, CHUNK]),
            tensor("state", shape=[2, batch, HIDDEN]),
            tensor("sr", TensorProto.INT64, []),
        ],
        [tensor("output", shape=[batch, 1]), tensor("stateN", shape=[2, batch, HIDDEN])],
    )


def _stream(compiled: rt.CompiledModel, proto: onnx.ModelProto, rates: list[int]) -> None:
    """Call chunk by chunk, feeding the state back; each call checked against onnxruntime."""
    rng = np.random.default_rng(0)
    state = np.zeros((2, 1, HIDDEN), np.float32)
    for sr in rates:
        feeds = {
            "x": rng.standard_normal((1, CHUNK)).astype(np.float32),
            "state": state,
            "sr": np.array(sr, np.int64),
        }
        out = compiled(feeds)
        ref = reference(proto, feeds)
        np.testing.assert_allclose(np.asarray(out["output"]), ref["output"], atol=1e-5)
        np.testing.assert_allclose(np.asarray(out["stateN"]), ref["stateN"], atol=1e-5)
        state = np.asarray(out["stateN"])


def test_an_if_on_an_input_condition_is_one_program_per_condition_value(ember_events):
    proto = vad_like_model()
    compiled = rt.compile(proto)
    assert compiled.breaks == []
    _stream(compiled, proto, [16000, 16000, 16000, 8000, 8000, 16000])
    # no break: the condition is computed on the host, the taken branch is in the program
    assert not ember_events.of("ember.break.start")
    stops = ember_events.of("ember.segment.compile.stop")
    assert [(s["position"], s["stop"], s["compiled"]) for s in stops] == [(0, "end", True)] * 2
    misses = ember_events.of("ember.cache.miss")
    assert [m["statics"] for m in misses] == [
        [{"name": "If_0 condition", "value": True}],
        [{"name": "If_0 condition", "value": False}],
    ]
    # the scalar input decides the condition and is not an argument of the program
    assert [a["name"] for a in misses[0]["shapes"]] == ["state", "x"]
    hits = ember_events.of("ember.cache.hit")
    assert [h["statics"][0]["value"] for h in hits] == [True, True, False, True]


def test_the_recompile_reason_names_the_condition(tmp_path):
    from ember.analysis import connect, ingest
    from ember.recorder import record

    proto = vad_like_model()
    path = tmp_path / "vad.jsonl"
    with record(path, run_id="vad"):
        compiled = rt.compile(proto)
        _stream(compiled, proto, [16000, 16000, 8000])
    db = tmp_path / "vad.duckdb"
    ingest([path], db)
    with connect(db, read_only=True) as con:
        rows = con.sql("SELECT position, change, arg, reason FROM recompiles").rows()
        breaks = con.sql("SELECT count(*) FROM breaks").rows()
    assert rows == [(0, "static", "If_0 condition", "If_0 condition: True -> False")]
    assert breaks == [(0,)]


def test_an_if_on_a_device_condition_compiles_its_branch_after_a_short_break(ember_events):
    # the condition reads the data itself (a batch of any size): computed in the program,
    # brought to the host, and the If starts the next segment with the condition as a static
    nodes = [*sum_is_positive(), _cell_if("positive", ["output", "stateN"])]
    proto = make_model(
        nodes,
        [tensor("x", shape=["batch", CHUNK]), tensor("state", shape=[2, "batch", HIDDEN])],
        [tensor("output", shape=[1, 1]), tensor("stateN", shape=[2, 1, HIDDEN])],
    )
    compiled = rt.compile(proto)
    assert compiled.breaks == [
        {"position": 3, "node": "If_0", "op_type": "If", "reason": "the If condition"}
    ]
    state = np.zeros((2, 1, HIDDEN), np.float32)
    for sign in (1, 1, -1, 1):
        feeds = {"x": np.full((1, CHUNK), sign * 0.1, np.float32), "state": state}
        out = compiled(feeds)
        ref = reference(proto, feeds)
        np.testing.assert_allclose(np.asarray(out["output"]), ref["output"], atol=1e-5)
        np.testing.assert_allclose(np.asarray(out["stateN"]), ref["stateN"], atol=1e-5)
        state = np.asarray(out["stateN"])
    stops = ember_events.of("ember.segment.compile.stop")
    # the If's segment is compiled, once per condition value
    assert [(s["position"], s["stop"], s["compiled"]) for s in stops] == [
        (0, 3, True),
        (3, "end", True),
        (3, "end", True),
    ]
    misses = [m for m in ember_events.of("ember.cache.miss") if m["position"] == 3]
    assert [m["statics"] for m in misses] == [
        [{"name": "If_0 condition", "value": True}],
        [{"name": "If_0 condition", "value": False}],
    ]
    hits = ember_events.of("ember.cache.hit")
    assert [(h["position"], h["statics"]) for h in hits if h["position"] == 3] == [
        (3, [{"name": "If_0 condition", "value": True}])
    ] * 2
    assert [b["op_type"] for b in ember_events.of("ember.break.stop")] == ["If"] * 4


def test_steady_state_calls_without_listeners_take_the_program_of_the_condition():
    # nobody listens: after a checked call per condition value, calls go straight to the
    # program compiled for the value (compiled._fast.programs), checked against onnxruntime
    proto = vad_like_model(batch="batch")
    compiled = rt.compile(proto)
    _stream(compiled, proto, [16000, 8000, 16000, 16000, 8000, 8000])
    assert sorted(key[0][2] for key in compiled._fast.programs) == [b"\x00", b"\x01"]
    # the conditions are computed once per sample rate, then found by its value
    assert len(compiled._fast.memo) == 2
    # another batch size is not the registered program's: the checked path compiles it
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((2, CHUNK)).astype(np.float32),
        "state": np.zeros((2, 2, HIDDEN), np.float32),
        "sr": np.array(8000, np.int64),
    }
    np.testing.assert_allclose(
        np.asarray(compiled(feeds)["stateN"]), reference(proto, feeds)["stateN"], atol=1e-5
    )
    # an input of the wrong dtype is an InputError, not narrowed by the direct call
    with pytest.raises(rt.InputError, match="input 'x' has dtype float64"):
        compiled({**feeds, "x": feeds["x"].astype(np.float64)})


def test_program_for_names_the_program_of_the_direct_call_per_condition_value():
    proto = vad_like_model()
    compiled = rt.compile(proto)
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((1, CHUNK)).astype(np.float32),
        "state": np.zeros((2, 1, HIDDEN), np.float32),
        "sr": np.array(8000, np.int64),
    }
    assert compiled.program_for(feeds) is None  # nothing registered before a checked call
    want = compiled(feeds)
    program = compiled.program_for(feeds)
    assert program is not None
    # the sample rate only picks the program; the program takes the audio and the state
    assert (sorted(program.arg_names), program.output_names, program.x64) == (
        ["state", "x"],
        ("output", "stateN"),
        False,
    )
    assert program.dtypes == (np.dtype(np.float32), np.dtype(np.float32))
    outs = program.call(*[feeds[n] for n in program.arg_names])
    for name, got in zip(program.output_names, outs, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want[name]))
    # the other sample rate has no program yet; after its checked call, its own
    other = {**feeds, "sr": np.array(16000, np.int64)}
    assert compiled.program_for(other) is None
    compiled(other)
    assert compiled.program_for(other) not in (None, program)


def test_a_graph_of_dynamic_shapes_with_a_64_bit_input_gets_the_direct_call_too():
    # like silero VAD exported without the If: dims unknown at compile time (nothing is
    # compiled ahead) and an int64 scalar argument (the program runs with x64)
    nodes = [
        helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "srf"], ["y"]),
    ]
    proto = make_model(
        nodes,
        [tensor("x", shape=["n"]), tensor("sr", TensorProto.INT64, [])],
        [tensor("y", shape=["n"])],
    )
    compiled = rt.compile(proto)
    assert compiled._fast is not None
    assert not compiled._fast.programs
    x = np.arange(5, dtype=np.float32)
    for sr in (16000, 8000):
        out = compiled({"x": x, "sr": np.array(sr, np.int64)})
        np.testing.assert_array_equal(np.asarray(out["y"]), x * sr)
    assert list(compiled._fast.programs) == [()]  # registered after the first (checked) call
    with pytest.raises(rt.InputError, match="input 'sr' has dtype int32"):
        compiled({"x": x, "sr": np.array(8000, np.int32)})


def _counting_loop(trips: str, scans: bool) -> onnx.ModelProto:
    """v = x; repeat trips times: v = v * 0.5 + 1 (and the v of each step as a scan output)."""
    body_nodes = [
        const("b_half", np.array(0.5, np.float32)),
        const("b_one", np.array(1.0, np.float32)),
        helper.make_node("Mul", ["v_in", "b_half"], ["v_half"]),
        helper.make_node("Add", ["v_half", "b_one"], ["v_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    outs = [tensor("cond_out", TensorProto.BOOL, []), tensor("v_out", shape=[3])]
    if scans:
        body_nodes.append(helper.make_node("Identity", ["v_out"], ["scan_out"]))
        outs.append(tensor("scan_out", shape=[3]))
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            tensor("iter", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("v_in", shape=[3]),
        ],
        outs,
    )
    loop_outs = ["v", "scans"] if scans else ["v"]
    nodes = [
        const("true", np.array(True)),
        helper.make_node("Loop", [trips, "true", "x"], loop_outs, body=body, name="Loop_0"),
    ]
    inputs = [tensor("x", shape=[3])]
    if trips == "trips":
        nodes[1:1] = [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Cast", ["s"], ["trips"], to=TensorProto.INT64),
        ]
    else:
        nodes.insert(0, const(trips, np.array(50, np.int64)))
    outputs = [tensor("v", shape=[3])]
    if scans:
        outputs.append(tensor("scans", shape=["n", 3]))
    return make_model(nodes, inputs, outputs)


def test_a_loop_on_a_computed_trip_count_without_scan_outputs_is_a_lax_loop(ember_events):
    proto = _counting_loop("trips", scans=False)
    compiled = rt.compile(proto)
    assert compiled.breaks == []
    for x in ([1, 0.5, 0.5], [1, 1, 1], [0, 0, 0], [7, 0, 0]):
        x = np.array(x, np.float32)
        out = compiled({"x": x})
        np.testing.assert_allclose(np.asarray(out["v"]), reference(proto, {"x": x})["v"], rtol=1e-6)
    # one program for every trip count: the count is a value of the program, not of its key
    assert len(ember_events.of("ember.segment.compile.stop")) == 1
    assert not ember_events.of("ember.break.start")


def test_a_loop_with_a_known_trip_count_is_one_scan_not_unrolled():
    proto = _counting_loop("fifty", scans=True)
    compiled = rt.compile(proto)
    x = np.array([1, 2, 3], np.float32)
    out = compiled({"x": x})
    ref = reference(proto, {"x": x})
    np.testing.assert_allclose(np.asarray(out["v"]), ref["v"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["scans"]), ref["scans"], rtol=1e-6)
    hlo = compiled._main.exe.as_text()
    assert "while(" in hlo
    assert hlo.count("multiply(") < 5


# --- a break that runs a subgraph compiles it (issue 14): a Loop whose trip count is computed
# on the device and that has scan outputs, an If whose branch reads a device value on the host


def _loop_break(proto: onnx.ModelProto, feeds_list: list[dict[str, np.ndarray]]) -> Any:
    """Call a model once per feeds, each checked against onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    compiled = rt.compile(proto)
    ref = ReferenceEvaluator(proto)
    names = [o.name for o in proto.graph.output]
    for feeds in feeds_list:
        out = compiled(feeds)
        for name, want in zip(names, ref.run(None, feeds), strict=True):
            np.testing.assert_allclose(np.asarray(out[name]), want, rtol=1e-6, atol=1e-6)
    return compiled


def _at(events: list[dict[str, Any]], position: int) -> list[dict[str, Any]]:
    return [e for e in events if e["position"] == position]


@pytest.fixture
def segment_events(ember_events: Any) -> Any:
    """``ember_events`` with the segment spans too (one per run of a segment)."""
    from ember.recorder import bus

    names = ["ember.segment.start", "ember.segment.stop", "ember.segment.exception"]
    handler = "test-control-flow-segments"
    bus.attach(handler, names, lambda n, m, md: ember_events.append((n, m, md)))
    try:
        yield ember_events
    finally:
        bus.detach(handler)


def test_a_loop_with_scan_outputs_on_a_computed_trip_count_is_one_compiled_program(
    segment_events,
):
    ember_events = segment_events
    # the trip count is the sum of x (computed on the device) and the Loop stacks each
    # step's value: its output length is data, so the Loop is a break. It runs as one
    # program (a while loop writing the steps into rows) per bucket of trip counts
    proto = _counting_loop("trips", scans=True)
    xs = ([1, 0.5, 0.5], [1, 1, 1], [2, 1, 1], [7, 0, 0], [9, 0, 0], [6, 6, 0])
    compiled = _loop_break(proto, [{"x": np.array(x, np.float32)} for x in xs])
    assert compiled.breaks == [
        {"position": 3, "node": "Loop_0", "op_type": "Loop", "reason": "the Loop trip count"}
    ]
    loop = _at(ember_events.of("ember.segment.compile.stop"), 3)
    assert [(s["stop"], s["compiled"], s["reason"]) for s in loop] == [("end", True, None)] * 2
    misses = _at(ember_events.of("ember.cache.miss"), 3)
    # 2, 3, 4 and 7 trips share the program of 8 rows; 9 and 12 that of 16
    assert [m["statics"] for m in misses] == [
        [{"name": "Loop_0 iterations at most", "value": 8}],
        [{"name": "Loop_0 iterations at most", "value": 16}],
    ]
    # the program takes the trip count, the condition, the first step and the carried value
    assert [(a["name"], a["shape"], a["dtype"]) for a in misses[0]["shapes"]] == [
        ("Loop_0 iterations left", [], "int64"),
        ("true", [], "bool"),
        ("Loop_0 first iteration", [], "int64"),
        ("x", [3], "float32"),
    ]
    hits = _at(ember_events.of("ember.cache.hit"), 3)
    assert [h["statics"][0]["value"] for h in hits] == [8, 8, 8, 16]
    # one compiled segment run per call at the Loop's position
    runs = _at(ember_events.of("ember.segment.stop"), 3)
    assert [(r["stop"], r["compiled"]) for r in runs] == [("end", True)] * 6


def _loop_on_sum(body: onnx.GraphProto, outputs: list[Any]) -> onnx.ModelProto:
    """x[3] -> Loop_0(trip count sum(x), computed on the device; carries x) -> v, scans."""
    nodes = [
        const("true", np.array(True)),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Cast", ["s"], ["trips"], to=TensorProto.INT64),
        helper.make_node("Loop", ["trips", "true", "x"], ["v", "scans"], body=body, name="Loop_0"),
    ]
    return make_model(nodes, [tensor("x", shape=[3])], outputs)


def _loop_until(stop_after: int) -> onnx.ModelProto:
    """Like ``_counting_loop`` with scans, but the body ends the loop itself: cond = iter <
    stop_after (so stop_after + 1 steps unless the trip count, sum(x), is smaller)."""
    body = scan_body(
        [
            const("b_half", np.array(0.5, np.float32)),
            const("b_one", np.array(1.0, np.float32)),
            const("b_stop", np.array(stop_after, np.int64)),
            helper.make_node("Mul", ["v_in", "b_half"], ["v_half"]),
            helper.make_node("Add", ["v_half", "b_one"], ["v_out"]),
            helper.make_node("Less", ["iter", "b_stop"], ["cond_out"]),
            helper.make_node("Identity", ["v_out"], ["scan_out"]),
        ]
    )
    return _loop_on_sum(body, [tensor("v", shape=[3]), tensor("scans", shape=["n", 3])])


def test_a_loop_that_its_condition_ends_runs_in_chunks_of_one_program(segment_events):
    # a trip count of 100,000 (the INT64_MAX of a while loop, say) that the body's condition
    # ends after 300 steps: the program runs 128 steps a call, called again from where it
    # stopped while all its rows were used and the condition holds
    ember_events = segment_events
    proto = _loop_until(299)
    xs = ([100000, 0, 0], [0, 100000, 0])
    _loop_break(proto, [{"x": np.array(x, np.float32)} for x in xs])
    compiles = _at(ember_events.of("ember.segment.compile.stop"), 3)
    assert [(s["stop"], s["compiled"]) for s in compiles] == [("end", True)]
    (miss,) = _at(ember_events.of("ember.cache.miss"), 3)
    assert miss["statics"] == [{"name": "Loop_0 iterations at most", "value": 128}]
    # the steps left and the first step's number are arguments: one program for the chunks
    assert [a["name"] for a in miss["shapes"]] == [
        "Loop_0 iterations left",
        "true",
        "Loop_0 first iteration",
        "x",
    ]
    assert len(_at(ember_events.of("ember.cache.hit"), 3)) == 2 * 3 - 1
    runs = _at(ember_events.of("ember.segment.stop"), 3)
    assert [(r["stop"], r["compiled"]) for r in runs] == [("end", True)] * 6


def _loop_with_if_on_its_condition() -> onnx.ModelProto:
    """``_loop_until(4)`` whose body passes v through an If on its condition input, whose
    branches give different shapes (the else branch never runs): as one traced program the
    If would be a lax.cond, which needs equal shapes, so the Loop runs body by body."""
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["v_in"], ["t_w"])], "then", [], [tensor("t_w", shape=[3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Concat", ["v_in", "v_in"], ["e_w"], axis=0)],
        "else",
        [],
        [tensor("e_w", shape=[6])],
    )
    proto = _loop_until(4)
    body = proto.graph.node[3].attribute[0].g
    body.node.insert(
        0,
        helper.make_node(
            "If", ["cond_in"], ["w"], name="If_in_body", then_branch=then_g, else_branch=else_g
        ),
    )
    for n in body.node:
        if n.op_type == "Mul":
            n.input[0] = "w"
    return proto


def test_a_loop_that_cannot_be_one_program_runs_its_body_compiled_per_step(segment_events):
    ember_events = segment_events
    proto = _loop_with_if_on_its_condition()
    xs = ([100000, 0, 0], [0, 100000, 0], [100000, 1, 0])
    _loop_break(proto, [{"x": np.array(x, np.float32)} for x in xs])
    compiles = _at(ember_events.of("ember.segment.compile.stop"), 3)
    # the whole Loop did not trace (and says why); the body did, once
    assert [(s["stop"], s["compiled"]) for s in compiles] == [("end", False), ("end", True)]
    assert "'If_in_body' (If) failed" in compiles[0]["reason"]
    assert "needs branches with the same output shapes" in compiles[0]["reason"]
    body_miss = _at(ember_events.of("ember.cache.miss"), 3)[1]
    # the step number and the carried value are arguments; the condition is static
    assert [(a["name"], a["shape"], a["dtype"]) for a in body_miss["shapes"]] == [
        ("iter", [], "int64"),
        ("v_in", [3], "float32"),
    ]
    assert body_miss["statics"] == [{"name": "Loop_0 condition", "value": True}]
    hits = _at(ember_events.of("ember.cache.hit"), 3)
    assert len(hits) == 3 * 5 - 1  # 5 steps a call
    assert {h["key"] for h in hits} == {body_miss["key"]}
    runs = _at(ember_events.of("ember.segment.stop"), 3)
    assert [(r["stop"], r["compiled"]) for r in runs] == [("end", True)] * 15


def test_a_loop_body_compiled_per_step_runs_without_listeners_too():
    # nobody listens: steps after the first skip the cache lookup; results stay right
    proto = _loop_with_if_on_its_condition()
    xs = ([100000, 0, 0], [0, 0, 100000])
    compiled = _loop_break(proto, [{"x": np.array(x, np.float32)} for x in xs])
    # the whole Loop's eager entry (no arguments kept) and the body's program (iter, v_in)
    assert sorted(len(e) for e in compiled.cache_info()[3]) == [2, 4]


def _if_reshape_model() -> onnx.ModelProto:
    """y = If(sum(x) > 0, then: Reshape(data, [-1, cols]), else: Reshape(-data, [-1, cols]))
    with cols = max(x) computed on the device outside the If: the branches read it on the
    host, so the If is a break (not only its condition)."""

    def branch(tag: str, negate: bool) -> onnx.GraphProto:
        nodes = []
        src = "data"
        if negate:
            nodes.append(helper.make_node("Neg", ["data"], [tag + "_neg"]))
            src = tag + "_neg"
        nodes.append(helper.make_node("Reshape", [src, "shape"], [tag + "_y"]))
        return helper.make_graph(nodes, tag, [], [tensor(tag + "_y", shape=["r", "c"])])

    nodes = [
        *sum_is_positive(),
        const("minus_one", np.array([-1], np.int64)),
        const("axes0", np.array([0], np.int64)),
        helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0, name="max"),
        helper.make_node("Cast", ["mx"], ["cols0"], to=TensorProto.INT64, name="cast"),
        helper.make_node("Unsqueeze", ["cols0", "axes0"], ["cols"], name="unsqueeze"),
        helper.make_node("Concat", ["minus_one", "cols"], ["shape"], axis=0, name="concat"),
        helper.make_node(
            "If",
            ["positive"],
            ["y"],
            name="If_0",
            then_branch=branch("then", False),
            else_branch=branch("else", True),
        ),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=[4]), tensor("data", shape=[12])],
        [tensor("y", shape=["r", "c"])],
    )


def test_an_if_whose_branch_reads_a_device_value_on_the_host_compiles_the_branch(ember_events):
    proto = _if_reshape_model()
    data = np.arange(12, dtype=np.float32)
    xs = ([2, 0, 0, 1], [3, 1, 0, 0], [3, 0, 0, 1], [-1, -4, 2, 2], [2, 1, 0, 0])
    compiled = _loop_break(proto, [{"x": np.array(x, np.float32), "data": data} for x in xs])
    (brk,) = compiled.breaks
    assert (brk["node"], brk["op_type"]) == ("If_0", "If")
    at = brk["position"]
    # a program per branch and shape: then [-1, 2], then [-1, 3], else [-1, 2]
    misses = _at(ember_events.of("ember.cache.miss"), at)
    assert [m["statics"] for m in misses] == [
        [{"name": "If_0 condition", "value": True}, {"name": "shape", "value": [-1, 2]}],
        [{"name": "If_0 condition", "value": True}, {"name": "shape", "value": [-1, 3]}],
        [{"name": "If_0 condition", "value": False}, {"name": "shape", "value": [-1, 2]}],
    ]
    assert [m["shapes"][0]["name"] for m in misses] == ["data"] * 3
    compiles = _at(ember_events.of("ember.segment.compile.stop"), at)
    assert [(c["stop"], c["compiled"]) for c in compiles] == [("end", True)] * 3
    hits = _at(ember_events.of("ember.cache.hit"), at)
    assert [h["statics"][1]["value"] for h in hits] == [[-1, 3], [-1, 2]]


def test_a_subgraph_that_cannot_be_one_program_is_kept_eager_and_says_why(segment_events):
    ember_events = segment_events
    # the branch itself makes a shape from data (NonZero): it runs node by node, as before,
    # and its compile span says why; the cache keeps that answer
    then_g = helper.make_graph(
        [
            helper.make_node("NonZero", ["x"], ["t_nz"]),
            helper.make_node("Cast", ["t_nz"], ["t_y"], to=TensorProto.FLOAT),
        ],
        "then",
        [],
        [tensor("t_y", shape=[1, "n"])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e_y"])], "else", [], [tensor("e_y", shape=[4])]
    )
    nodes = [
        *sum_is_positive(),
        helper.make_node(
            "If", ["positive"], ["y"], name="If_0", then_branch=then_g, else_branch=else_g
        ),
    ]
    proto = make_model(nodes, [tensor("x", shape=[4])], [tensor("y", shape=None)], check=False)
    xs = ([1, 0, 2, 0], [0, 3, 0, 1])
    _loop_break(proto, [{"x": np.array(x, np.float32)} for x in xs])
    compiles = _at(ember_events.of("ember.segment.compile.stop"), 3)
    assert [(c["stop"], c["compiled"]) for c in compiles] == [("end", False)]
    assert "NonZero" in compiles[0]["reason"]
    runs = _at(ember_events.of("ember.segment.stop"), 3)
    assert [r["compiled"] for r in runs] == [False, False]
    assert len(_at(ember_events.of("ember.cache.hit"), 3)) == 1


def test_the_trace_nests_the_compiled_body_in_the_break_span(tmp_path):
    import json

    from ember.recorder import record

    proto = _counting_loop("trips", scans=True)
    path = tmp_path / "loop.jsonl"
    with record(path, run_id="loop"):
        _loop_break(proto, [{"x": np.array([2, 1, 0], np.float32)}] * 2)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    starts = {r["span_id"]: r for r in records if r["kind"] == "span_start"}
    breaks = [s for s in starts.values() if s["span_kind"] == "break"]
    assert len(breaks) == 2
    for brk in breaks:
        inside = [s for s in starts.values() if s.get("parent_id") == brk["span_id"]]
        kinds = [(s["span_kind"], s["attrs"]["position"]) for s in inside]
        want = [("segment", 3)]
        if brk is breaks[0]:  # the first run compiles the Loop's program before it runs
            want.insert(0, ("segment_compile", 3))
        assert kinds == want
        cache = [r for r in records if r["kind"] == "cache" and r["span_id"] == brk["span_id"]]
        assert [c["action"] for c in cache] == (["miss"] if brk is breaks[0] else ["hit"])
    # the break's subgraph time holds its segments: the call's parts still add up
    from ember.analysis import connect, ingest

    db = tmp_path / "loop.duckdb"
    ingest([path], db)
    with connect(db, read_only=True) as con:
        rows = con.sql(
            "SELECT call_ns, sum(ns) FROM call_breakdown GROUP BY call_span_id, call_ns"
        ).rows()
    assert all(total == call_ns for call_ns, total in rows)


def test_a_call_whose_break_compiled_its_program_is_not_a_warm_call(tmp_path):
    # the misses of the Loop's programs are recorded in the break span, not the call's: the
    # calls that compiled (3 trips: 8 rows; 9 trips: 16 rows) counted as warm, their
    # compiles inside run_summary's warm p50 and call_latency's p50_warm_ns
    from ember.analysis import connect, ingest
    from ember.recorder import record

    proto = _counting_loop("trips", scans=True)
    path = tmp_path / "loop.jsonl"
    trips = ([2, 1, 0], [5, 4, 0], [1, 1, 1], [6, 3, 0])  # 3, 9, 3, 9 steps
    with record(path, run_id="loop"):
        _loop_break(proto, [{"x": np.array(x, np.float32)} for x in trips])
    db = tmp_path / "loop.duckdb"
    ingest([path], db)
    with connect(db, read_only=True) as con:
        summary = con.sql("SELECT * FROM run_summary").to_dicts()[0]
        per_shape = con.sql("SELECT compiling_calls, p50_warm_ns FROM call_latency").to_dicts()
        samples = con.sql(
            "SELECT compiled, duration_ns FROM latency_samples ORDER BY ts_ns"
        ).to_dicts()
    assert [s["compiled"] for s in samples] == [True, True, False, False]
    warm = [s["duration_ns"] for s in samples[2:]]
    assert (summary["calls"], summary["compiling_calls"]) == (4, 2)
    assert summary["warm_p50_ns"] == pytest.approx(sum(warm) / 2)
    assert per_shape == [{"compiling_calls": 2, "p50_warm_ns": pytest.approx(sum(warm) / 2)}]


def _growing_loop() -> onnx.ModelProto:
    """A Loop on a device trip count whose body grows v by one each step."""
    body = helper.make_graph(
        [
            const("b_one", np.array([1.0], np.float32)),
            helper.make_node("Concat", ["v_in", "b_one"], ["v_out"], axis=0),
            helper.make_node("ReduceSum", ["v_out"], ["scan_out"], keepdims=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            tensor("iter", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("v_in", shape=["k"]),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("v_out", shape=["k2"]),
            tensor("scan_out", shape=[]),
        ],
    )
    return _loop_on_sum(body, [tensor("v", shape=["m"]), tensor("scans", shape=["n"])])


def test_a_loop_whose_body_changes_shapes_runs_it_eagerly_and_says_why(segment_events):
    # v grows by one each step: neither one program nor one body program fits every step.
    # The whole-Loop compile says why it failed, the body compiles for the first three
    # steps (a second program in one run is allowed: a carried scalar may become [1] after
    # the first step), and from the third program on it runs node by node (no compile per
    # step)
    ember_events = segment_events
    proto = _growing_loop()
    compiled = rt.compile(proto)
    for x in ([3, 1, 0], [2, 1, 0]):  # 4 steps, then 3
        feeds = {"x": np.array(x, np.float32)}
        out = compiled(feeds)
        want = reference(proto, feeds)  # onnx's reference evaluator stacks scalars wrongly
        np.testing.assert_allclose(np.asarray(out["v"]), want["v"])
        np.testing.assert_allclose(np.asarray(out["scans"]), want["scans"])
    compiles = _at(ember_events.of("ember.segment.compile.stop"), 3)
    assert [c["compiled"] for c in compiles] == [False, True, True, True]
    assert "carry input and carry output must have equal types" in compiles[0]["reason"]
    runs = _at(ember_events.of("ember.segment.stop"), 3)
    assert [r["compiled"] for r in runs] == [True, True, True, False] + [False] * 3


def test_a_loop_with_scan_outputs_that_its_data_ends_is_a_break_not_an_error(segment_events):
    # no trip count, the condition computed from the carried values: the number of steps is
    # data. The trace finds it (it was a NodeError: "needs a condition known on the host"),
    # the Loop becomes a break and runs as one program in chunks
    ember_events = segment_events
    body = scan_body(
        [
            const("b_half", np.array(0.5, np.float32)),
            const("b_one", np.array(1.0, np.float32)),
            const("b_lim", np.array(5.9, np.float32)),
            helper.make_node("Mul", ["v_in", "b_half"], ["v_half"]),
            helper.make_node("Add", ["v_half", "b_one"], ["v_out"]),
            helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "b_lim"], ["cond_out"]),
            helper.make_node("Identity", ["v_out"], ["scan_out"]),
        ]
    )
    nodes = [
        const("true", np.array(True)),
        helper.make_node("Loop", ["", "true", "x"], ["v", "scans"], body=body, name="Loop_0"),
    ]
    proto = make_model(
        nodes, [tensor("x", shape=[3])], [tensor("v", shape=[3]), tensor("scans", shape=["n", 3])]
    )
    xs = ([1, 2, 3], [0, 0, 1], [-40, 0, 1])  # 1, 6 and 9 steps
    compiled = _loop_break(proto, [{"x": np.array(x, np.float32)} for x in xs])
    assert [(b["node"], b["position"]) for b in compiled.breaks] == [("Loop_0", 1)]
    compiles = _at(ember_events.of("ember.segment.compile.stop"), 1)
    assert [(c["stop"], c["compiled"]) for c in compiles] == [("end", True)]
    assert len(_at(ember_events.of("ember.segment.stop"), 1)) == 3


def test_a_loop_program_at_a_break_is_kept_in_the_disk_cache(tmp_path, ember_events):
    # the break's program goes to the program store like any segment: a new model object
    # with the same cache_dir loads it instead of compiling (disk_cache: hit at position 3)
    proto = _counting_loop("trips", scans=True)
    feeds = {"x": np.array([2, 1, 0], np.float32)}
    first = rt.compile(proto, cache_dir=tmp_path)(feeds)
    second = rt.compile(proto, cache_dir=tmp_path)(feeds)
    np.testing.assert_array_equal(np.asarray(first["scans"]), np.asarray(second["scans"]))
    stops = _at(ember_events.of("ember.segment.compile.stop"), 3)
    assert [(s["compiled"], s["disk_cache"]) for s in stops] == [(True, "miss"), (True, "hit")]


def test_a_body_run_node_by_node_at_a_break_is_not_a_compiled_program(tmp_path):
    # call_breakdown counted every segment span inside a break as its compiled program, and
    # the report said the growing body "runs as a compiled program of its own"
    from ember.analysis import connect, ingest
    from ember.analysis.report import report
    from ember.recorder import record

    path = tmp_path / "grow.jsonl"
    with record(path, run_id="grow"):
        compiled = rt.compile(_growing_loop())
        for _ in range(3):
            compiled({"x": np.array([12, 0, 0], np.float32)})
    db = tmp_path / "grow.duckdb"
    ingest([path], db)
    with connect(db, read_only=True) as con:
        eager = con.sql(
            "SELECT sum(duration_ns) FROM spans WHERE span_kind = 'segment' "
            "AND end_attrs.compiled = false"
        ).item()
        compiled_ns = con.sql(
            "SELECT coalesce(sum(duration_ns), 0) FROM spans s WHERE span_kind = 'segment' "
            "AND end_attrs.compiled AND parent_id IN "
            "(SELECT span_id FROM spans WHERE span_kind = 'break')"
        ).item()
        part = con.sql("SELECT * FROM time_by_part WHERE part_kind = 'break'").to_dicts()[0]
        (r,) = report(con)
    assert eager > 0
    assert (part["program_ns"] or 0) == compiled_ns
    assert part["subgraph_ns"] >= eager
    (finding,) = [f for f in r.findings if f.kind == "break"]
    assert "runs its body from the host" in finding.text


def _gate_model(passed: str) -> onnx.ModelProto:
    """A wake-word gate (openwakeword's hey_jarvis): ``score = Sigmoid(x @ W)``; If the
    score's sum is positive a verifier (``Tanh`` 20 times) runs, else the branch passes
    ``passed`` on (the score, computed in the program, or the input ``x`` itself)."""
    rng = np.random.default_rng(0)
    # x is too large for the prelude to compute the condition on the host: a sync break
    # a verifier of 20 nodes: the segment the If starts is compiled, not run eagerly
    chain = [helper.make_node("Tanh", ["score"], ["v0"])]
    chain += [helper.make_node("Tanh", [f"v{k}"], [f"v{k + 1}"]) for k in range(18)]
    then = helper.make_graph(
        [*chain, helper.make_node("Tanh", ["v18"], ["verified"])],
        "then",
        [],
        [tensor("verified", shape=[1, 8])],
    )
    orelse = helper.make_graph(
        [helper.make_node("Identity", [passed], ["same"])],
        "else",
        [],
        [tensor("same", shape=[1, 8])],
    )
    nodes = [
        const("W", np.abs(rng.standard_normal((2048, 8))).astype(np.float32)),
        helper.make_node("MatMul", ["x", "W"], ["mm"]),
        helper.make_node("Sigmoid", ["mm"], ["score"]),
        *sum_is_positive("mm"),
        helper.make_node(
            "If", ["positive"], ["y"], name="If_0", then_branch=then, else_branch=orelse
        ),
    ]
    return make_model(nodes, [tensor("x", shape=[1, 2048])], [tensor("y", shape=["a", "b"])])


def _gate_feeds(taken: bool) -> dict[str, np.ndarray]:
    """Inputs on which the gate's If takes ``then_branch`` (True) or ``else_branch``."""
    return {"x": np.full((1, 2048), 0.01 if taken else -0.01, np.float32)}


class _Counting:
    """A compiled program that counts its calls."""

    def __init__(self, exe: Any) -> None:
        self.exe, self.calls = exe, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.exe(*args)


def _if_entries(compiled: Any) -> dict[bool, Any]:
    """The cached programs at the If (its sync break) by their condition's value."""
    (at,) = [b["position"] for b in compiled.breaks]
    entries = compiled._builder.segments._positions[at].values()
    return {bool(np.frombuffer(e.key[2][0][1][2], np.bool_)[0]): e for e in entries}


def test_a_branch_that_only_passes_a_device_value_on_runs_no_program(tmp_path):
    # hey_jarvis's If runs its verifier only on a detection; its other branch is Identity
    # of the score. The segment the If starts compiled to a program that copied the score
    # out (~5 us of a 70 us call); now the score is the output, and the program not run.
    proto = _gate_model("score")
    compiled = rt.compile(proto, cache_dir=tmp_path)
    feeds = {taken: _gate_feeds(taken) for taken in (False, True)}
    for f in feeds.values():
        np.testing.assert_allclose(
            np.asarray(compiled(f)["y"]), reference(proto, f)["y"], atol=1e-5
        )
    entries = _if_entries(compiled)
    assert entries[False].forwards == (0,)
    assert entries[True].forwards is None
    counting = {taken: _Counting(e.exe) for taken, e in entries.items()}
    for taken, e in entries.items():
        e.exe = counting[taken]
        compiled._fast.forget(e)  # the direct call (``chained``) registers the counters anew
    for taken in (False, True, False):
        out = compiled(feeds[taken])["y"]
        np.testing.assert_allclose(np.asarray(out), reference(proto, feeds[taken])["y"], atol=1e-5)
    assert (counting[False].calls, counting[True].calls) == (0, 1)
    # the program store keeps what the program passes on: a new process's model skips it too
    again = rt.compile(proto, cache_dir=tmp_path)
    again(feeds[False])
    assert _if_entries(again)[False].forwards == (0,)


@pytest.mark.parametrize("as_jax", [False, True])
def test_a_branch_that_passes_the_callers_input_on_still_runs_its_program(as_jax):
    # the caller's own array must not come back as the output: a numpy one they may write
    # to next, a jax one they may delete or donate (which deleted their input too: review)
    import jax
    import jax.numpy as jnp

    proto = _gate_model("x")
    compiled = rt.compile(proto)
    feeds = _gate_feeds(False)
    x = jnp.asarray(feeds["x"]) if as_jax else feeds["x"]
    out = compiled({"x": x})["y"]
    assert out is not x
    assert not isinstance(out, np.ndarray)
    np.testing.assert_array_equal(np.asarray(out), feeds["x"])
    assert _if_entries(compiled)[False].forwards is None
    jax.jit(lambda a: a * 2, donate_argnums=0)(out)  # the output's buffer given away
    np.testing.assert_array_equal(np.asarray(x), feeds["x"])
