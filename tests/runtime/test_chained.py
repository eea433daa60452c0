"""The direct call of a graph whose breaks only bring If conditions to the host
(``ember.runtime.jit.chained``) against the checked call: the same outputs, the checked
path for every call someone listens to and for every condition value not yet registered,
evicted programs forgotten, bad inputs refused as the checked path refuses them.

The model: ``positive = ReduceSum(x) > 0`` computed on the device, then ``If(positive)``
over two recurrent cells (``test_control_flow``'s), a break at the If.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember.runtime as rt
from ember.recorder import bus
from ember.runtime.jit.chained import ChainCalls
from tests.runtime.models import make_model, reference, sum_is_positive, tensor
from tests.runtime.test_control_flow import CHUNK, HIDDEN, _cell_if


def _gated_cells() -> Any:
    nodes = [*sum_is_positive(), _cell_if("positive", ["output", "stateN"])]
    return make_model(
        nodes,
        # a batch of any size: the condition reads the data on the device (a small input of
        # known shape would be computed on the host: no break)
        [tensor("x", shape=["batch", CHUNK]), tensor("state", shape=[2, "batch", HIDDEN])],
        [tensor("output", shape=[1, 1]), tensor("stateN", shape=[2, 1, HIDDEN])],
    )


def _feeds(sign: float, state: Any) -> dict[str, Any]:
    return {"x": np.full((1, CHUNK), sign * 0.1, np.float32), "state": state}


class _CountChecked:
    """Counts the model's checked calls (``_run_segments``), passing them on."""

    def __init__(self, compiled: rt.CompiledModel) -> None:
        self.calls = 0
        checked = compiled._run_segments

        def counting(inputs: Any) -> Any:
            self.calls += 1
            return checked(inputs)

        compiled._run_segments = counting  # type: ignore[method-assign]


def _stream(compiled: rt.CompiledModel, proto: Any, signs: list[float]) -> None:
    """Calls of ``signs`` in a row, each checked against the reference (state carried)."""
    state = np.zeros((2, 1, HIDDEN), np.float32)
    for sign in signs:
        feeds = _feeds(sign, state)
        out = compiled(feeds)
        want = reference(proto, feeds)
        for name, value in want.items():
            np.testing.assert_allclose(np.asarray(out[name]), value, atol=1e-5, err_msg=name)
        state = np.asarray(out["stateN"])


def test_each_condition_value_is_checked_once_then_its_programs_run_in_a_row():
    proto = _gated_cells()
    compiled = rt.compile(proto)
    assert isinstance(compiled._fast, ChainCalls)
    checked = _CountChecked(compiled)
    _stream(compiled, proto, [1, 1, -1, -1, 1, -1, 1, 1])
    # the first call of each condition value: the checked path (it compiles, registers)
    assert checked.calls == 2
    # both of the If's programs and the first segment's one are registered
    assert [len(steps) for steps in compiled._fast.steps] == [1, 2]
    # no one program runs such a call
    assert compiled.program_for(_feeds(1, np.zeros((2, 1, HIDDEN), np.float32))) is None


def test_calls_someone_listens_to_take_the_checked_path_with_all_their_events():
    proto = _gated_cells()
    compiled = rt.compile(proto)
    checked = _CountChecked(compiled)
    _stream(compiled, proto, [1, -1, 1, -1])
    assert checked.calls == 2
    handler = "test-chained-listener"
    seen: list[tuple[str, dict[str, Any]]] = []
    events = ["ember.cache.hit", "ember.break.stop"]
    bus.attach(handler, events, lambda n, m, md: seen.append((n, md)))
    try:
        _stream(compiled, proto, [1, -1, 1])
    finally:
        bus.detach(handler)
    assert checked.calls == 5
    hits = [md["position"] for name, md in seen if name == "ember.cache.hit"]
    assert hits == [0, 3] * 3
    assert [name for name, _ in seen].count("ember.break.stop") == 3
    # nobody listens again: one checked call registers the programs for this generation
    _stream(compiled, proto, [1, -1, 1, -1])
    assert checked.calls == 7


def test_an_evicted_program_is_forgotten_and_compiled_again_when_its_value_returns():
    proto = _gated_cells()
    compiled = rt.compile(proto, cache_size=1)
    checked = _CountChecked(compiled)
    _stream(compiled, proto, [1, 1, -1, -1, 1, -1])
    # one program per position: each change of the condition evicts the other's program,
    # and its direct call goes with it
    assert checked.calls == 4
    cached = {id(e) for pos in compiled._builder.segments._positions.values() for e in pos.values()}
    kept = [step.entry for steps in compiled._fast.steps for step in steps.values()]
    assert kept
    assert all(id(e) in cached for e in kept)


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (np.zeros((1, CHUNK), np.float64), "input 'x' has dtype"),
        (np.zeros((1, CHUNK + 1), np.float32), "input 'x'"),
    ],
    ids=["float64", "other-shape"],
)
def test_inputs_the_programs_do_not_fit_are_refused_as_the_checked_path_refuses_them(x, match):
    proto = _gated_cells()
    compiled = rt.compile(proto)
    _stream(compiled, proto, [1, 1])
    checked = _CountChecked(compiled)
    with pytest.raises(rt.InputError, match=match):
        compiled({"x": x, "state": np.zeros((2, 1, HIDDEN), np.float32)})
    assert checked.calls == 0  # refused by the input check, before any segment
    _stream(compiled, proto, [1])
    assert checked.calls == 0  # the direct call again


def test_a_graph_whose_break_runs_a_subgraph_is_no_chain():
    # a break that runs its subgraph (not only a condition brought to the host) keeps the
    # checked path: the chain calls programs between condition reads only
    from tests.runtime.models import nonzero_reshape_model

    compiled = rt.compile(nonzero_reshape_model())
    assert compiled.graph_break
    assert not isinstance(compiled._fast, ChainCalls)


def test_an_input_no_program_reads_keeps_the_checked_path_which_checks_it():
    # the direct call leaves the checking of its arguments to jax's call: an input no
    # program takes would go unchecked, so such a model keeps the checked path
    proto = _gated_cells()
    proto.graph.input.append(tensor("unused", shape=[2]))
    compiled = rt.compile(proto)
    assert compiled.graph_break
    assert not isinstance(compiled._fast, ChainCalls)
    state = np.zeros((2, 1, HIDDEN), np.float32)
    feeds = {**_feeds(1, state), "unused": np.zeros(2, np.float32)}
    for _ in range(2):
        compiled(feeds)
    with pytest.raises(rt.InputError, match="input 'unused'"):
        compiled({**feeds, "unused": np.zeros(3, np.float32)})


# --- what a review of the direct call found (each failed before its fix)


def _gate_reading(extra: str) -> Any:
    """``_gate_model("score")`` whose verifier adds the model input ``z`` [1, 8] (``extra``
    = "z"), or with an output ``c`` that is a constant (``extra`` = "const")."""
    from onnx import helper

    from tests.runtime.models import const
    from tests.runtime.test_control_flow import _gate_model

    proto = _gate_model("score")
    g = proto.graph
    if extra == "z":
        then = next(a.g for a in g.node[-1].attribute if a.name == "then_branch")
        then.node.append(helper.make_node("Add", ["verified", "z"], ["verified_z"]))
        then.output[0].name = "verified_z"
        g.input.append(tensor("z", shape=[1, 8]))
    else:
        g.node.append(const("c", np.array([1.0, 2.0], np.float32)))
        g.output.append(tensor("c", shape=[2]))
    return proto


def test_a_branch_that_passes_a_value_on_still_checks_the_inputs_its_segment_takes():
    from tests.runtime.test_control_flow import _gate_feeds

    compiled = rt.compile(_gate_reading("z"))
    good = {**_gate_feeds(False), "z": np.zeros((1, 8), np.float32)}
    for _ in range(3):
        compiled(good)
    for z, match in [
        (np.zeros((5, 7), np.float32), "input 'z' has shape"),
        (np.zeros(3, np.float32), "input 'z' has rank"),
        (np.zeros((1, 8), np.int32), "input 'z' has dtype"),
    ]:
        with pytest.raises(rt.InputError, match=match):
            compiled({**good, "z": z})


def test_an_output_that_is_a_constant_comes_back_on_the_direct_call():
    from tests.runtime.test_control_flow import _gate_feeds

    compiled = rt.compile(_gate_reading("const"))
    for taken in (True, True, False, False):
        out = compiled(_gate_feeds(taken))
        np.testing.assert_array_equal(np.asarray(out["c"]), [1.0, 2.0])


def test_inputs_as_a_list_of_pairs_are_refused_on_every_call():
    proto = _gated_cells()
    compiled = rt.compile(proto)
    _stream(compiled, proto, [1, 1])
    feeds = _feeds(1, np.zeros((2, 1, HIDDEN), np.float32))
    with pytest.raises(rt.InputError, match="list"):
        compiled(list(feeds.items()))  # type: ignore[arg-type]


def test_an_output_that_is_a_python_scalar_input_comes_back_as_numpy_reads_it():
    from onnx import TensorProto, helper

    from tests.runtime.test_control_flow import _gate_feeds, _gate_model

    proto = _gate_model("score")
    proto.graph.input.append(tensor("k", TensorProto.INT64, []))
    proto.graph.node.append(helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT))
    proto.graph.node.append(helper.make_node("Add", ["y", "kf"], ["y2"]))
    proto.graph.output.append(tensor("y2", shape=["a", "b"]))
    proto.graph.output.append(tensor("k", TensorProto.INT64, []))
    compiled = rt.compile(proto)
    assert isinstance(compiled._fast, ChainCalls)
    for taken in (True, True, False, False):
        k = compiled({**_gate_feeds(taken), "k": 3})["k"]
        assert type(k) is np.ndarray
        assert k.dtype == np.int64


def test_a_handler_attached_as_a_checked_call_looks_sees_the_next_calls_breaks(monkeypatch):
    # another thread attaches a break listener right after the checked call asked whether
    # anyone listens to breaks: the programs that call registers are not called directly
    proto = _gated_cells()
    compiled = rt.compile(proto)
    seen: list[str] = []
    real = bus.listening
    attached = False

    def listening(*names: str) -> bool:
        nonlocal attached
        result = real(*names)
        if not attached and names and names[0] == "ember.break.start":
            attached = True
            bus.attach("test-chained-late", ["ember.break.stop"], lambda n, m, md: seen.append(n))
        return result

    monkeypatch.setattr(bus, "listening", listening)
    try:
        _stream(compiled, proto, [1, 1, 1, 1])
    finally:
        bus.detach("test-chained-late")
    assert len(seen) == 3  # each call after the one that attached it


def test_an_entry_evicted_while_a_call_runs_is_not_registered_by_it(monkeypatch):
    # a call runs the If's program for True; before it registers, another call evicts that
    # program (cache_size=1): the direct call must not keep it (out of the cache, alive)
    proto = _gated_cells()
    compiled = rt.compile(proto, cache_size=1)
    _stream(compiled, proto, [1])
    chain = compiled._fast
    assert isinstance(chain, ChainCalls)
    register = ChainCalls.register
    state = np.zeros((2, 1, HIDDEN), np.float32)

    def evict_then_register(self: ChainCalls, *args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(ChainCalls, "register", register)
        self.generation = -1
        compiled(_feeds(-1, state))  # the checked path: evicts True's program
        register(self, *args, **kwargs)

    chain.generation = -1  # the next call is checked
    monkeypatch.setattr(ChainCalls, "register", evict_then_register)
    compiled(_feeds(1, state))
    cached = {id(e) for pos in compiled._builder.segments._positions.values() for e in pos.values()}
    kept = [step.entry for steps in chain.steps for step in steps.values()]
    assert kept
    assert all(id(e) in cached for e in kept)
