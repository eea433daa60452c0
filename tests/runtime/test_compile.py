"""compile/run/call: outputs by name, dtypes under x64, input errors, exception events."""

from __future__ import annotations

import logging
import re

import jax
import numpy as np
import pytest
from onnx import TensorProto, helper

import ember.runtime as rt
from ember.recorder import bus
from ember.recorder.log import log_compiles
from ember.runtime.errors import InputError, NodeError
from tests.runtime.conftest import no_cycle_collector
from tests.runtime.models import const, make_model, reference, tensor


def _matmul_model():
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["ab"], name="matmul"),
        helper.make_node("Sigmoid", ["ab"], ["y"], name="sigmoid"),
    ]
    return make_model(
        nodes,
        [tensor("a", shape=["batch", 3]), tensor("b", shape=[3, 2])],
        [tensor("y", shape=["batch", 2])],
    )


def test_call_with_dict_or_kwargs_matches_onnxruntime_and_run(ember_events):
    proto = _matmul_model()
    model = rt.load(proto)
    compiled = rt.compile(model, {"a": (4, 3)})
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    b = np.linspace(0, 2, 6, dtype=np.float32).reshape(3, 2)
    ref = reference(proto, {"a": a, "b": b})["y"]
    by_dict = compiled({"a": a, "b": b})
    by_kwargs = compiled(a=a, b=b)
    by_run = rt.run(model, {"a": a, "b": b})
    assert list(by_dict) == ["y"]
    for out in (by_dict, by_kwargs, by_run):
        np.testing.assert_allclose(np.asarray(out["y"]), ref, rtol=1e-6)
    runs = ember_events.of("ember.run.start")
    assert runs == [{"source": None, "span_id": runs[0]["span_id"], "parent_id": None}]
    assert len(ember_events.of("ember.run.stop")) == 1


def test_int64_and_float64_keep_their_dtypes_without_touching_global_x64():
    nodes = [
        helper.make_node("Add", ["i", "i"], ["i2"]),
        helper.make_node("Cast", ["i2"], ["d"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["d", "f"], ["y"]),
    ]
    proto = make_model(
        nodes,
        [tensor("i", TensorProto.INT64, [2]), tensor("f", TensorProto.DOUBLE, [2])],
        [tensor("i2", TensorProto.INT64, [2]), tensor("y", TensorProto.DOUBLE, [2])],
    )
    before = jax.config.jax_enable_x64
    big = np.array([2**40, -3], np.int64)
    f = np.array([0.1, 1e-300], np.float64)
    for out in (rt.compile(proto)(i=big, f=f), rt.run(proto, i=big, f=f)):
        assert out["i2"].dtype == np.int64
        assert out["y"].dtype == np.float64
        np.testing.assert_array_equal(np.asarray(out["i2"]), [2**41, -6])
        np.testing.assert_array_equal(
            np.asarray(out["y"]), reference(proto, {"i": big, "f": f})["y"]
        )
    assert jax.config.jax_enable_x64 == before


def test_wrong_inputs_list_what_the_model_expects():
    compiled = rt.compile(_matmul_model(), {"a": (2, 3)})
    a = np.zeros((2, 3), np.float32)
    b = np.zeros((3, 2), np.float32)
    expects = r"the model expects: a: float32\[batch, 3\]; b: float32\[3, 2\]"
    with pytest.raises(InputError, match=r"missing input\(s\) \['b'\].*" + expects):
        compiled(a=a)
    with pytest.raises(InputError, match=r"unknown input\(s\) \['c'\]"):
        compiled(a=a, b=b, c=b)
    with pytest.raises(InputError, match=r"'a' has dtype float64, expected float32.*" + expects):
        compiled(a=a.astype(np.float64), b=b)
    with pytest.raises(InputError, match=r"'a' has rank 1 \(shape \[6\]\), expected rank 2"):
        compiled(a=np.zeros(6, np.float32), b=b)
    with pytest.raises(InputError, match=r"'b' has shape \[4, 2\], but dim 0 must be 3"):
        compiled(a=a, b=np.zeros((4, 2), np.float32))
    with pytest.raises(InputError, match="expected float32"):
        rt.run(_matmul_model(), a=a.astype(np.int32), b=b)


def test_input_specs_errors():
    with pytest.raises(InputError, match=r"unknown input\(s\) \['z'\]"):
        rt.compile(_matmul_model(), {"z": (1, 3)})
    with pytest.raises(InputError, match="give a shape tuple"):
        rt.compile(_matmul_model(), {"a": "big"})


def test_failure_inside_a_call_is_an_exception_event_and_names_the_node(ember_events):
    # Reshape to a shape that does not fit: fails while the segment traces
    nodes = [
        const("shape", np.array([5, -1], np.int64)),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape"),
    ]
    proto = make_model(nodes, [tensor("x", shape=["n"])], [tensor("y", shape=[5, "m"])])
    compiled = rt.compile(proto)
    with pytest.raises(NodeError, match=r"node 1 'bad_reshape' \(Reshape\) failed") as info:
        compiled(x=np.zeros(6, np.float32))
    assert "x=float32[6]" in str(info.value)
    exc = ember_events.of("ember.call.exception")
    assert len(exc) == 1
    assert "bad_reshape" in exc[0]["reason"]
    assert len(ember_events.of("ember.segment.compile.exception")) == 1


def test_log_compiles_writes_one_line_per_compile_event(caplog):
    proto = make_model(
        [
            helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
            helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT, name="cast"),
        ],
        [tensor("x", shape=[4])],
        [tensor("y", shape=[1, "k"])],
    )
    log_compiles(level=logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="ember.compile"):
            compiled = rt.compile(proto, cache_size=1)
            compiled(x=np.array([0, 1, 0, 2], np.float32))
            compiled(x=np.array([3, 0, 0, 0], np.float32))
    finally:
        log_compiles(False)
    lines = [r.getMessage() for r in caplog.records if r.name == "ember.compile"]
    assert lines[0].startswith("compiled <memory> in ")
    assert "with graph breaks" in lines[0]
    assert lines[1].startswith("break <memory> at position 0: node 'nonzero' (NonZero) ran")
    assert lines[2].startswith("cache miss <memory> at position 1 for nz: int64[1, 2]")
    assert lines[3].startswith("segment <memory> [1..end) kept eager (not compiled) in ")
    assert lines[4].startswith("break <memory> at position 0")
    assert lines[5].startswith("cache miss <memory> at position 1 for nz: int64[1, 1]")
    assert lines[6].startswith("segment <memory> [1..end)")
    assert lines[7] == (
        "cache evict <memory> at position 1 (cache_size 1): removed nz: int64[1, 2]"
    )
    assert len(lines) == 8
    # detached: nothing more is logged
    caplog.clear()
    compiled(x=np.array([1, 1, 0, 0], np.float32))
    assert not [r for r in caplog.records if r.name == "ember.compile"]


def test_fast_path_falls_back_to_checked_path_on_other_shapes_and_dtypes(ember_events):
    compiled = rt.compile(_matmul_model(), {"a": (2, 3)})
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 2), np.float32)
    for _ in range(2):  # the second call goes straight to jax's C++ call
        np.testing.assert_allclose(np.asarray(compiled(a=a, b=b)["y"]), 1 / (1 + np.exp(-3)))
    assert not ember_events.of("ember.cache.miss")
    out = compiled(a=np.ones((5, 3), np.float32), b=b)  # other batch: cache at position 0
    assert np.asarray(out["y"]).shape == (5, 2)
    assert [m["position"] for m in ember_events.of("ember.cache.miss")] == [0]
    with pytest.raises(InputError, match="expected float32"):
        compiled(a=a.astype(np.float16), b=b)
    with pytest.raises(InputError, match="missing input"):
        compiled(a=a, c=b)


def test_fast_path_notices_handlers_attached_after_it_went_direct():
    compiled = rt.compile(_matmul_model(), {"a": (2, 3)})
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 2), np.float32)
    other = np.ones((5, 3), np.float32)
    for _ in range(3):  # nobody listens: after the first call, straight to jax's C++ call
        np.testing.assert_allclose(np.asarray(compiled(a=a, b=b)["y"]), 1 / (1 + np.exp(-3)))
    seen = []
    names = ["ember.call.start", "ember.call.stop", "ember.cache.miss"]
    bus.attach("test-late", names, lambda n, m, md: seen.append((n, md.get("position"))))
    try:
        compiled(a=a, b=b)
        compiled(a=other, b=b)
    finally:
        bus.detach("test-late")
    assert seen == [
        ("ember.call.start", None),
        ("ember.call.stop", None),
        ("ember.call.start", None),
        ("ember.cache.miss", 0),
        ("ember.call.stop", None),
    ]
    for _ in range(2):  # detached: direct again, and other shapes still fall back
        np.testing.assert_allclose(np.asarray(compiled(a=a, b=b)["y"]), 1 / (1 + np.exp(-3)))
        assert np.asarray(compiled(a=other, b=b)["y"]).shape == (5, 2)


def test_large_weights_folded_from_constants_are_program_parameters():
    # light-model style: the weight is made by ConstantOfShape inside the graph, then read
    # by MatMul. Folded once per model, it must reach the program as a device array: as
    # an embedded constant XLA rebuilt the 256x512 broadcast on every call.
    from ember.runtime.breaks.plan import PARAM_MIN_SIZE

    shape = np.array([256, 512], np.int64)
    nodes = [
        const("shape", shape),
        helper.make_node(
            "ConstantOfShape",
            ["shape"],
            ["w"],
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5]),
        ),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[2, 256])], [tensor("y", shape=[2, 512])])
    assert PARAM_MIN_SIZE <= 256 * 512
    compiled = rt.compile(model)
    (segment,) = compiled.plan.segments
    assert segment.params == ("w",)
    assert segment.args == ("x",)
    x = np.arange(512, dtype=np.float32).reshape(2, 256) / 512
    for _ in range(2):  # the checked call, then the direct one
        np.testing.assert_allclose(
            np.asarray(compiled(x=x)["y"]), reference(model, {"x": x})["y"], rtol=1e-5
        )


def test_cpu_programs_give_dots_to_ynnpack_and_keep_convolutions_xlas():
    """A Gemm with a transposed weight (ddddocr's CRNN head: 72 ms a call in XLA's own dot,
    5.7 ms in onnxruntime) runs as a YNNPACK fusion; a convolution stays XLA's."""
    nodes = [helper.make_node("Gemm", ["a", "b"], ["y"], transB=1)]
    model = make_model(
        nodes,
        [tensor("a", shape=[32, 64]), tensor("b", shape=[96, 64])],
        [tensor("y", shape=[32, 96])],
    )
    compiled = rt.compile(model)
    assert jax.default_backend() == "cpu"
    assert "ynn_fusion" in compiled._main.exe.as_text()
    rng = np.random.default_rng(0)
    feeds = {
        "a": rng.standard_normal((32, 64)).astype(np.float32),
        "b": rng.standard_normal((96, 64)).astype(np.float32),
    }
    np.testing.assert_allclose(
        np.asarray(compiled(feeds)["y"]), reference(model, feeds)["y"], rtol=1e-4, atol=1e-4
    )


def test_cpu_convolutions_are_compiled_without_ynnpack_fusions():
    # a deliberate choice (see runtime/xla_cpu.py and bench_runtime.py): the
    # program of a convolution is XLA's own (by default XLA gives this one to YNNPACK)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(
        nodes,
        [tensor("x", shape=[1, 64, 32, 32]), tensor("w", shape=[64, 64, 3, 3])],
        [tensor("y", shape=[1, 64, 32, 32])],
    )
    compiled = rt.compile(model)
    assert jax.default_backend() == "cpu"
    assert "ynn_fusion" not in compiled._main.exe.as_text()
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((1, 64, 32, 32)).astype(np.float32),
        "w": rng.standard_normal((64, 64, 3, 3)).astype(np.float32),
    }
    np.testing.assert_allclose(
        np.asarray(compiled(feeds)["y"]), reference(model, feeds)["y"], rtol=1e-4, atol=1e-3
    )


@pytest.mark.parametrize("also_read_by_add", [False, True])
def test_large_conv_weights_kept_transposed_give_the_same_outputs(also_read_by_add):
    # 128x64x3x3 = 73,728 values: a parameter, kept on the device as HWIO when only Conv
    # reads it (and as given when another op reads it too)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((128, 64, 3, 3)).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.reshape(-1))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    outputs = [tensor("y", shape=[1, 128, 8, 8])]
    if also_read_by_add:
        nodes.append(helper.make_node("Add", ["w", "w"], ["w2"]))
        outputs.append(tensor("w2", shape=[128, 64, 3, 3]))
    graph = helper.make_graph(nodes, "g", [tensor("x", shape=[1, 64, 16, 16])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = rt.compile(model)
    assert compiled._hwio_params() == (frozenset() if also_read_by_add else {"w"})
    x = rng.standard_normal((1, 64, 16, 16)).astype(np.float32)
    want = reference(model, {"x": x})
    for _ in range(2):
        got = compiled(x=x)
        np.testing.assert_allclose(np.asarray(got["y"]), want["y"], rtol=1e-4, atol=1e-3)
    if also_read_by_add:
        np.testing.assert_allclose(np.asarray(got["w2"]), want["w2"], rtol=1e-6)


@pytest.mark.parametrize(
    ("w_shape", "x_shape", "strides"),
    [
        ((258, 1, 256), (1, 1, 640), [128]),  # silero-vad op 15's STFT: 66,048 values
        ((128, 64, 3, 3), (1, 64, 16, 16), [2, 2]),
        ((32, 32, 4, 4, 4), (1, 32, 6, 6, 6), [2, 2, 2]),
    ],
    ids=["1d", "2d", "3d"],
)
def test_conv_weights_of_any_rank_are_not_copied_into_the_kernel_layout_per_call(
    w_shape, x_shape, strides
):
    # A weight kept as ONNX gives it (O, I, *spatial) is transposed into XLA:CPU's kernel
    # layout (*spatial, I, O) inside the program, on every call (silero-vad op 15: 103 us
    # a call instead of 59). Kept in that layout on the device, the program has no such copy.
    rng = np.random.default_rng(2)
    w = (rng.standard_normal(w_shape) * 0.1).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.reshape(-1))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], strides=strides)]
    graph = helper.make_graph(nodes, "g", [tensor("x", shape=list(x_shape))], [], inits)
    graph.output.extend([helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = rt.compile(model)
    assert compiled._hwio_params() == {"w"}
    kernel = ",".join(str(d) for d in (*w_shape[2:], w_shape[1], w_shape[0]))
    hlo = compiled._main.exe.as_text()
    copies = re.findall(rf"= f32\[{kernel}\]\{{[\d,]*\}} (?:transpose|copy)\(", hlo)
    assert copies == []
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = reference(model, {"x": x})["y"]
    for _ in range(2):  # the checked call, then the direct one
        np.testing.assert_allclose(np.asarray(compiled(x=x)["y"]), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [2, "n"], ids=["compiled-ahead", "registered-per-call"])
def test_a_dropped_compiled_model_frees_its_device_parameters_at_once(rows):
    import weakref

    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    w = np.ones((256, 512), np.float32)  # a parameter: 131,072 values
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.reshape(-1))]
    graph = helper.make_graph(
        nodes, "g", [tensor("x", shape=[rows, 256])], [tensor("y", shape=[rows, 512])], inits
    )
    compiled = rt.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    for _ in range(3):  # the checked call, then the direct one
        compiled(x=np.ones((2, 256), np.float32))
    assert compiled.program_for({"x": np.ones((2, 256), np.float32)}) is not None
    model_ref = weakref.ref(compiled)
    with no_cycle_collector():
        del compiled
        assert model_ref() is None


@pytest.mark.parametrize(
    ("elem", "good", "bad"),
    [
        (
            TensorProto.INT32,
            np.array([1, 2, 3], np.int32),
            np.array([2**40 + 5, -1, 3_000_000_000], np.int64),
        ),
        (TensorProto.FLOAT, np.ones(3, np.float32), np.array([0.1, 1e300, 2.0])),
    ],
    ids=["int64-into-int32", "float64-into-float32"],
)
def test_every_call_path_checks_dtypes_after_the_fast_path_went_direct(elem, good, bad):
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [tensor("x", elem, [3])],
        [tensor("y", elem, [3])],
    )
    compiled = rt.compile(model)
    for _ in range(3):  # after the first call, straight to jax's C++ call
        np.testing.assert_array_equal(np.asarray(compiled(x=good)["y"]), good)
    want = f"has dtype {bad.dtype.name}, expected {np.dtype(good.dtype).name}"
    for _ in range(2):  # a 64-bit array must not be narrowed by jax's call
        with pytest.raises(InputError, match=want):
            compiled(x=bad)
    with pytest.raises(InputError, match=want):
        compiled({"x": bad})
    with pytest.raises(InputError, match=want):
        rt.run(model, x=bad)
    with jax.enable_x64(True):
        bad_on_device = jax.device_put(bad)
    with pytest.raises(InputError, match=want):  # a jax array: refused by jax's call
        compiled(x=bad_on_device)
    # the good input still takes the direct call, and gives its values
    np.testing.assert_array_equal(np.asarray(compiled(x=good)["y"]), good)


def test_the_direct_call_of_several_inputs_checks_each_dtype():
    compiled = rt.compile(_matmul_model(), {"a": (2, 3)})
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 2), np.float32)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(compiled(a=a, b=b)["y"]), 1 / (1 + np.exp(-3)))
    with pytest.raises(InputError, match="input 'b' has dtype float64, expected float32"):
        compiled(a=a, b=b.astype(np.float64))
    with pytest.raises(InputError, match="input 'a' has dtype float64, expected float32"):
        compiled(a=a.astype(np.float64), b=jax.device_put(b))


def test_program_for_names_the_program_compiled_ahead_for_its_shapes():
    compiled = rt.compile(_matmul_model(), {"a": (2, 3)})
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 2), np.float32)
    program = compiled.program_for({"a": a, "b": b})
    assert program is not None
    assert (program.arg_names, program.output_names, program.x64) == (("a", "b"), ("y",), False)
    (y,) = program.call(a, b)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(compiled(a=a, b=b)["y"]))
    # other shapes or dtypes are not the program's: the checked path compiles them
    assert compiled.program_for({"a": np.ones((4, 3), np.float32), "b": b}) is None
    assert compiled.program_for({"a": a, "b": b.astype(np.float64)}) is None
    assert compiled.program_for({"a": a}) is None


def test_string_inputs_stay_on_the_host_as_breaks_named_by_the_input():
    """XLA has no strings: a node that reads a string input is a break (it runs eagerly),
    where the compiled call used to fail with JAX's 'No dtype_to_ir_type handler'."""
    from onnx import TensorProto, helper

    string = helper.make_tensor_value_info("s", TensorProto.STRING, [2])
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["s", "s"], ["ss"], axis=0, name="cat"),
            helper.make_node("Identity", ["ss"], ["words"], name="copy"),
            helper.make_node("Relu", ["x"], ["y"], name="relu"),
        ],
        "g",
        [string, helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [
            helper.make_tensor_value_info("words", TensorProto.STRING, [4]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
        ],
    )
    model = rt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    inputs = {"s": np.array(["a", "b"], object), "x": np.array([-1, 0, 2], np.float32)}
    compiled = rt.compile(model)
    for _ in range(2):
        out = compiled(inputs)
        assert out["words"].tolist() == ["a", "b", "a", "b"]
        np.testing.assert_array_equal(np.asarray(out["y"]), [0, 0, 2])
    (only,) = compiled.plan.breaks.values()
    assert (only.node, only.reason) == (
        "cat",
        "input 's' is a string tensor: strings stay on the host",
    )
