"""Errors a Python caller makes with a model's inputs, and what the message tells them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ember.runtime as rt
from ember.recorder import bus
from ember.runtime.errors import InputError
from tests.runtime.models import make_model, one_relu, tensor


def _step_model():
    """A recurrent step: out = x + state, next_state = state * 2."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return make_model(
        [
            helper.make_node("Add", ["x", "state"], ["out"]),
            helper.make_node("Mul", ["state", "two"], ["next_state"]),
        ],
        [tensor("x", shape=[2]), tensor("state", shape=[2])],
        [tensor("out", shape=[2]), tensor("next_state", shape=[2])],
        initializers=[two],
    )


def test_unpacking_the_output_dict_is_explained_on_the_next_call():
    compiled = rt.compile(_step_model())
    x = np.ones(2, np.float32)
    out, state = compiled(x=x, state=np.zeros(2, np.float32))  # the dict's keys, not arrays
    assert (out, state) == ("out", "next_state")
    hint = (
        r"input 'state' is the string 'next_state', the name of one of the model's outputs"
        r".*`a, b = cm\(\.\.\.\)` unpacks the names.*cm\(\.\.\.\)\['next_state'\]"
        r".*`a, b = cm\(\.\.\.\)\.values\(\)` \(outputs: out, next_state\)"
        r".*the model expects: x: float32\[2\]; state: float32\[2\]"
    )
    with pytest.raises(InputError, match=hint):
        compiled(x=x, state=state)
    with pytest.raises(InputError, match=hint):  # the eager interpreter says the same
        rt.run(_step_model(), x=x, state=state)
    # what the message suggests works
    out, state = compiled(x=x, state=np.ones(2, np.float32)).values()
    np.testing.assert_array_equal(np.asarray(compiled(x=x, state=state)["out"]), [3.0, 3.0])


def test_a_string_that_names_no_output_keeps_the_dtype_error():
    compiled = rt.compile(_step_model())
    with pytest.raises(InputError, match=r"'state' has dtype str\d+, expected float32") as info:
        compiled(x=np.ones(2, np.float32), state="hello")
    assert "outputs" not in str(info.value)


@pytest.mark.parametrize("rows", [3, "n"], ids=["compiled-ahead", "registered-per-call"])
@pytest.mark.parametrize("recorded", [False, True], ids=["quiet", "recorded"])
def test_inputs_given_positionally_are_an_input_error_that_says_how_to_call(rows, recorded):
    # compiled([x]) or compiled(x) failed with "list indices must be integers", "unhashable
    # type" or "no attribute 'items'", depending on the path the call took
    proto = one_relu([rows])
    compiled = rt.compile(proto)
    x = np.ones(3, np.float32)
    events = []
    if recorded:
        bus.attach("test-positional", ["ember.call.start"], lambda n, m, md: events.append(md))
    try:
        for _ in range(2):  # before and after the direct call is taken
            for bad in ([x], (x,), x, "x"):
                with pytest.raises(
                    rt.InputError,
                    match=rf"the inputs are a {type(bad).__name__}, not a dict .*\(x=\.\.\.\)",
                ):
                    compiled(bad)
            np.testing.assert_array_equal(np.asarray(compiled(x=x)["y"]), x)
    finally:
        bus.detach("test-positional")
    with pytest.raises(rt.InputError, match="the inputs are a list, not a dict"):
        rt.run(proto, [x])
    if recorded:
        assert [md["shapes"] for md in events][:1] == [[]]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ((5,), r"input 'x' has shape \[5\], but dim 0 must be 3"),
        (((3,), np.float64), "input 'x' has dtype float64, expected float32"),
        ((3, 1), r"input 'x' has rank 2 \(shape \[3, 1\]\), expected rank 1"),
    ],
    ids=["static-dim", "float64", "rank"],
)
def test_input_specs_the_model_refuses_are_an_input_error_at_compile(spec, problem):
    # The program compiled ahead for such specs was called straight with inputs that the
    # model refuses (a float64 array into a float32 model ran, in float64)
    proto = one_relu([3])
    with pytest.raises(InputError, match=f"input_specs: {problem}; the model expects: x: float32"):
        rt.compile(proto, {"x": spec})
    with pytest.raises(InputError, match=f"input_specs: {problem}"):
        rt.compile(proto, [spec])
    # a spec that names the model's own shape, or fills in a dynamic dim, is fine
    rt.compile(proto, {"x": (3,)})
    dynamic = one_relu(["n"])
    compiled = rt.compile(dynamic, {"x": (5,)})
    assert compiled.program_for({"x": np.ones(5, np.float32)}) is not None


def _break_model():
    """out = x + state, then a Reshape to a shape computed from x's values: a graph break,
    so every call goes through the checked path."""
    return make_model(
        [
            helper.make_node("Add", ["x", "state"], ["out0"]),
            helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
            helper.make_node("Abs", ["xi"], ["shape"]),
            helper.make_node("Reshape", ["out0", "shape"], ["out"]),
        ],
        [tensor("x", shape=[1]), tensor("state", shape=[2])],
        [tensor("out", shape=["n"])],
    )


def test_inputs_like_ones_that_passed_skip_the_checks_but_others_are_still_checked():
    # a model with breaks remembers the signatures (names, types, shapes, dtypes) of arrays
    # that passed as given; anything else is checked, converted or refused as before
    compiled = rt.compile(_break_model())
    assert compiled.graph_break
    x, state = np.array([2.0], np.float32), np.array([1.0, 2.0], np.float32)
    for _ in range(2):
        out = compiled(x=x, state=state)["out"]
        np.testing.assert_array_equal(np.asarray(out), [3.0, 4.0])
    assert len(compiled._accepted) == 1
    with pytest.raises(InputError, match=r"input 'state' has dtype float64, expected float32"):
        compiled(x=x, state=state.astype(np.float64))
    with pytest.raises(InputError, match=r"input 'x' has shape \[2\], but dim 0 must be 1"):
        compiled(x=np.ones(2, np.float32), state=state)
    with pytest.raises(InputError, match=r"missing input\(s\) \['state'\]"):
        compiled(x=x)
    # converted inputs (big-endian data) pass but are not remembered
    big = state.astype(">f4")
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(compiled(x=x, state=big)["out"]), [3, 4])
    assert len(compiled._accepted) == 1
