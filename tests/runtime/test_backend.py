"""EmberBackend (onnx.backend.base.Backend), the nine light models, the conformance script."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.backend.test.runner import Runner

import ember.runtime as rt
from ember.runtime import conformance
from ember.runtime.backend import EmberBackend
from tests.runtime.models import make_model, reference, tensor

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(glob.glob(os.path.join(LIGHT, "light_*.onnx")))
# Their weights come from ConstantOfShape, so they compile as large constants: the biggest
# take 5-15 s each on 2 cores and run with the slow tests.
SLOW_LIGHT = {"bvlc_alexnet", "densenet121", "inception_v2", "vgg19", "zfnet512"}


def _light_param(path: str):
    name = os.path.basename(path)[len("light_") : -len(".onnx")]
    marks = [pytest.mark.slow] if name in SLOW_LIGHT else []
    return pytest.param(path, id=name, marks=marks)


def light_inputs(path: str) -> dict[str, np.ndarray]:
    """The inputs ONNX's runner gives the light models (and their expected outputs fit)."""
    proto = onnx.load(path)
    inits = {i.name for i in proto.graph.initializer}
    return {
        i.name: Runner.generate_dummy_data(i, seed=0, name=path, random=False)
        for i in proto.graph.input
        if i.name not in inits
    }


def test_there_are_nine_light_models():
    assert len(LIGHT_MODELS) == 9


def _softmax_input(
    path: str, feeds: dict[str, np.ndarray]
) -> tuple[onnx.ModelProto, str, np.ndarray] | None:
    """For a model whose last node is a Softmax: the model without it, the name of its input
    (the logits, now the output) and onnxruntime's logits; None for any other model."""
    import onnxruntime as ort

    proto = onnx.load(path)
    last = proto.graph.node[-1]
    if last.op_type != "Softmax":
        return None
    del proto.graph.node[-1]
    del proto.graph.output[:]
    proto.graph.output.append(onnx.ValueInfoProto(name=last.input[0]))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return proto, last.input[0], sess.run(None, feeds)[0]


@pytest.mark.parametrize("path", [_light_param(p) for p in LIGHT_MODELS])
def test_light_model_loads_compiles_and_matches_expected_output(path):
    model = rt.load(path)
    assert model.source == path
    assert model.node_count > 0
    compiled = rt.compile(model)
    assert not compiled.graph_break
    feeds = light_inputs(path)
    out = compiled(feeds)
    expected = numpy_helper.to_array(onnx.load_tensor(path[: -len(".onnx")] + "_output_0.pb"))
    got = np.asarray(out[model.output_names[0]])
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    cut = _softmax_input(path, feeds)
    if cut is None or np.spacing(np.abs(cut[2]).max()) < 1:
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-6)
        return
    # Light squeezenet: its constant weights make all 1000 logits equal, about 9.5e9, where
    # neighbouring float32 values are 1024 apart. Which class a one-ulp difference in the
    # summation order favours decides a one-hot softmax (XLA's own convolutions on an AVX2
    # CPU: one class 0.124, the rest 0.0, where 0.001 each is expected), so the logits are
    # what can be compared: Ember's against onnxruntime's.
    proto, name, logits = cut
    np.testing.assert_allclose(
        np.asarray(rt.compile(rt.load(proto))(feeds)[name]), logits, rtol=1e-5
    )
    assert np.all(got >= 0)
    assert abs(float(got.sum()) - 1) < 1e-5


def test_backend_prepare_run_model_and_run_node():
    proto = make_model(
        [helper.make_node("Sub", ["a", "b"], ["y"])],
        [tensor("a", shape=[2]), tensor("b", shape=[2])],
        [tensor("y", shape=[2])],
    )
    a = np.array([3.0, 4.0], np.float32)
    b = np.array([1.0, 5.0], np.float32)
    expected = reference(proto, {"a": a, "b": b})["y"]
    for mode in ("compile", "eager", "numpy"):
        rep = EmberBackend.prepare(proto, "CPU", mode=mode)
        (y,) = rep.run([a, b])
        assert isinstance(y, np.ndarray)
        np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(EmberBackend.run_model(proto, {"a": a, "b": b})[0], expected)
    node = helper.make_node("Mul", ["p", "q"], ["r"])
    (r,) = EmberBackend.run_node(node, [a, b])
    np.testing.assert_array_equal(r, a * b)
    assert EmberBackend.supports_device("CPU")
    with pytest.raises(ValueError, match="mode must be"):
        EmberBackend.prepare(proto, mode="fast")


def test_conformance_runs_cases_prints_counts_and_checks_the_floor(capsys, tmp_path):
    code = conformance.main(["--kinds", "node", "-k", "test_abs", "--floor", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "node: 1 passed, 0 failed" in out
    assert "1 passed, 0 failed" in out
    results = [
        conformance.run_case("simple", c, "compile", 60)
        for _, c in conformance._load_cases(("simple",))
        if c.name in ("test_sequence_model1", "test_gradient_of_add")
    ]
    by_name = {r.name: r for r in results}
    assert by_name["test_sequence_model1"].ok
    assert not by_name["test_gradient_of_add"].ok
    assert by_name["test_gradient_of_add"].message == "unsupported: Gradient"
    conformance.report(results)
    out = capsys.readouterr().out
    assert "Gradient (1): test_gradient_of_add" in out
    assert "simple: 1 passed, 1 failed" in out
    floor = tmp_path / "floor.txt"
    floor.write_text("1450\n")
    assert conformance.read_floor(floor) == 1450
    assert conformance.read_floor(tmp_path / "missing.txt") is None


class _CastCase:
    """A node case like onnx's: one Cast from float to int4, its expected output given."""

    name = "test_cast_FLOAT_to_INT4_like"
    rtol, atol = 1e-3, 1e-7

    def __init__(self, expected: list[int]) -> None:
        import ml_dtypes

        node = helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.INT4)
        self.model = make_model(
            [node], [tensor("x", shape=[3])], [tensor("y", onnx.TensorProto.INT4, [3])], opset=21
        )
        x = np.array([1.5, -9.0, 20.0], np.float32)
        self.data_sets = [([x], [np.array(expected, np.int8).astype(ml_dtypes.int4)])]


def test_conformance_leaves_out_what_the_spec_leaves_undefined(capsys):
    # -9.0 and 20.0 are out of int4's range: any expected value there passes (ml_dtypes 0.6
    # wrapped them, 0.7 gives 0), counted apart; a wrong in-range value (1.5 -> 1) fails.
    for expected_out_of_range in ([7, 4], [0, 0]):
        result = conformance.run_case("node", _CastCase([1, *expected_out_of_range]), "compile", 60)
        assert result.ok, result.message
        assert result.undefined == 2
    wrong = conformance.run_case("node", _CastCase([2, 7, 4]), "compile", 60)
    assert not wrong.ok
    conformance.report([result])
    assert "(1 cases, 2 elements left out: a float cast to fixed point" in capsys.readouterr().out


def test_conformance_floor_file_exists_and_is_reasonable():
    floor = conformance.read_floor()
    assert floor is not None
    assert floor >= 1450


# ops that the decoders and short tails run one by one on numpy (SLANet-plus's body: GRU
# cell MatMuls, Softmax, ArgMax, OneHot, ScatterElements, Tile, Expand, Range, If)
_ON_NUMPY = (
    "test_gru_defaults",
    "test_softmax_axis_1",
    "test_argmax_default_axis_example",
    "test_onehot_with_axis",
    "test_scatter_elements_with_axis",
    "test_tile",
    "test_expand_dim_changed",
    "test_range_float_type_positive_delta",
    "test_if",
    "test_loop11",
    "test_slice_negative_axes",
    "test_cast_FLOAT_to_FLOAT16",
)


def test_conformance_cases_pass_node_by_node_on_numpy():
    # the runtime computes short segments and eager subgraphs on numpy on the CPU
    # (xla_cpu.eager_on_numpy); the whole node suite passes so too (1,878 of 1,884, the
    # same as on JAX), these cases in every test run
    cases = [c for _, c in conformance._load_cases(("node",)) if c.name in _ON_NUMPY]
    assert len(cases) == len(_ON_NUMPY)
    failed = [
        (r.name, r.message)
        for r in (conformance.run_case("node", c, "numpy", 60) for c in cases)
        if not r.ok
    ]
    assert failed == []
