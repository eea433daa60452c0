"""load(): sources, model facts, external data rules, unsupported ops, the load span."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember.runtime as rt
from ember.runtime.errors import (
    ExternalDataError,
    LoadError,
    NewerOpsetWarning,
    UnsupportedOpsError,
)
from tests.runtime.models import make_model, tensor


def _add_model() -> onnx.ModelProto:
    return make_model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor("x", shape=["batch", 3])],
        [tensor("y", shape=["batch", 3])],
        [numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")],
        opset=17,
    )


def test_load_path_bytes_and_proto_give_the_same_model(tmp_path, ember_events):
    proto = _add_model()
    path = tmp_path / "add.onnx"
    onnx.save(proto, path)
    from_path = rt.load(path)
    from_str = rt.load(str(path))
    from_bytes = rt.load(proto.SerializeToString())
    from_proto = rt.load(proto)
    for m in (from_path, from_str, from_bytes, from_proto):
        assert m.node_count == 1
        assert m.opset == 17
        assert m.input_names == ["x"]  # the initializer is not an input
        assert m.inputs[0].shape == ("batch", 3)
        assert m.inputs[0].dtype == np.float32
        assert m.outputs[0].name == "y"
    assert from_path.source == str(path)
    assert from_bytes.source is None
    assert from_proto.source is None
    starts = ember_events.of("ember.load.start")
    stops = ember_events.of("ember.load.stop")
    assert [s["source"] for s in starts] == [str(path), str(path), None, None]
    assert all(s["node_count"] == 1 and s["opset"] == 17 for s in stops)


def test_missing_file_and_garbage_bytes_are_load_errors(tmp_path, ember_events):
    with pytest.raises(LoadError, match="no such model file"):
        rt.load(tmp_path / "nope.onnx")
    with pytest.raises(LoadError, match="not an ONNX model"):
        rt.load(b"\xff\x00 definitely not protobuf \xff" * 3)
    with pytest.raises(LoadError, match="takes a path"):
        rt.load(42)  # type: ignore[arg-type]
    exc = ember_events.of("ember.load.exception")
    assert len(exc) == 3
    assert "LoadError" in exc[0]["reason"]


def test_unsupported_ops_are_listed_in_one_error_with_node_names():
    then_branch = helper.make_graph(
        [helper.make_node("NoSuchOpInBranch", ["x"], ["t"], name="inner")],
        "then",
        [],
        [tensor("t", shape=[2])],
    )
    nodes = [
        helper.make_node("FancyOp", ["x"], ["a"], name="fancy_1", domain="com.acme"),
        helper.make_node("FancyOp", ["a"], ["b"], name="fancy_2", domain="com.acme"),
        helper.make_node("NoSuchOp", ["b"], ["c"], name="nosuch"),
        helper.make_node("Greater", ["c", "c"], ["cond"], name="gt"),
        helper.make_node(
            "If", ["cond"], ["y"], name="if", then_branch=then_branch, else_branch=then_branch
        ),
    ]
    graph = helper.make_graph(nodes, "g", [tensor("x", shape=[2])], [tensor("y", shape=[2])])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 3)],
    )
    with pytest.raises(UnsupportedOpsError) as info:
        rt.load(model)
    err = info.value
    assert err.ops == {
        ("com.acme", "FancyOp", 3): ["fancy_1", "fancy_2"],
        ("", "NoSuchOp", 17): ["nosuch"],
        ("", "NoSuchOpInBranch", 17): ["if/else_branch/inner", "if/then_branch/inner"],
    }
    text = str(err)
    assert "3 unsupported op(s)" in text
    assert "com.acme::FancyOp (opset 3): nodes 'fancy_1', 'fancy_2'" in text
    assert "ai.onnx::NoSuchOp (opset 17)" in text


def _external_model(tmp_path, location: str) -> tuple[onnx.ModelProto, np.ndarray]:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    init = numpy_helper.from_array(w, "w")
    init.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(w.nbytes))):
        entry = init.external_data.add()
        entry.key, entry.value = k, v
    init.ClearField("raw_data")
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor("x", shape=[2, 3])],
        [tensor("y", shape=[2, 3])],
        [init],
        check=False,
    )
    return model, w


def _assert_refused(model: onnx.ModelProto, folder: Path, match: str) -> None:
    """Save ``model`` as ``folder/m.onnx``: loading it raises ``ExternalDataError`` matching
    ``match``."""
    onnx.save(model, folder / "m.onnx")
    with pytest.raises(ExternalDataError, match=match):
        rt.load(folder / "m.onnx")


def test_external_data_inside_the_folder_loads(tmp_path):
    model, w = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(w.tobytes())
    onnx.save(model, tmp_path / "m.onnx")
    loaded = rt.load(tmp_path / "m.onnx")
    np.testing.assert_array_equal(loaded.graph.initializers["w"], w)
    out = rt.compile(loaded)({"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(np.asarray(out["y"]), w + 1)


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    model, w = _external_model(folder, location)
    (tmp_path / "secret.bin").write_bytes(w.tobytes())
    _assert_refused(model, folder, r"tensor 'w' points to .*secret\.bin.*outside")


@pytest.mark.parametrize("link", ["file", "folder"])
def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path, link):
    folder = tmp_path / "model"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    location = "data.bin" if link == "file" else "sub/secret.bin"
    model, w = _external_model(folder, location)
    (outside / "secret.bin").write_bytes(w.tobytes())
    if link == "file":
        (folder / "data.bin").symlink_to(outside / "secret.bin")
    else:
        (folder / "sub").symlink_to(outside, target_is_directory=True)
    _assert_refused(
        model,
        folder,
        rf"tensor 'w' points to '{location}', which resolves to .*outside.secret.bin "
        "outside the model's folder",
    )


def test_external_data_through_symlinks_inside_the_folder_loads(tmp_path):
    # the model's folder itself reached through a link, and a link to a file inside it
    real = tmp_path / "real"
    (real / "weights").mkdir(parents=True)
    model, w = _external_model(real, "w.bin")
    (real / "weights" / "w.bin").write_bytes(w.tobytes())
    (real / "w.bin").symlink_to(real / "weights" / "w.bin")
    onnx.save(model, real / "m.onnx")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    loaded = rt.load(tmp_path / "alias" / "m.onnx")
    np.testing.assert_array_equal(loaded.graph.initializers["w"], w)


def test_external_data_absolute_path_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    model, w = _external_model(tmp_path, str(secret))
    secret.write_bytes(w.tobytes())
    _assert_refused(model, tmp_path, "tensor 'w' points to the absolute path")


def test_external_data_missing_file_and_bytes_source(tmp_path):
    model, _ = _external_model(tmp_path, "gone.bin")
    _assert_refused(model, tmp_path, r"needs the external data file 'gone\.bin'")
    with pytest.raises(ExternalDataError, match="load it from its path"):
        rt.load(model.SerializeToString())


def test_local_functions_are_inlined():
    fn = helper.make_function(
        "local",
        "Twice",
        ["a"],
        ["b"],
        [helper.make_node("Add", ["a", "a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [helper.make_node("Twice", ["x"], ["y"], domain="local")],
        "g",
        [tensor("x", shape=[2])],
        [tensor("y", shape=[2])],
    )
    model = helper.make_model(
        graph,
        functions=[fn],
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
    )
    loaded = rt.load(model)
    assert [n.op_type for n in loaded.graph.nodes] == ["Add"]
    out = rt.run(loaded, {"x": np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(np.asarray(out["y"]), [2.0, 4.0])


def test_unsorted_graph_is_sorted():
    nodes = [
        helper.make_node("Relu", ["t"], ["y"], name="second"),
        helper.make_node("Neg", ["x"], ["t"], name="first"),
    ]
    graph = helper.make_graph(nodes, "g", [tensor("x", shape=[2])], [tensor("y", shape=[2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    loaded = rt.load(model)
    assert [n.name for n in loaded.graph.nodes] == ["first", "second"]
    out = rt.compile(loaded)({"x": np.array([1.0, -2.0], np.float32)})
    np.testing.assert_array_equal(np.asarray(out["y"]), [0.0, 2.0])


# -- malformed models: a LoadError at load time naming the file, node or tensor


def test_an_empty_file_or_bytes_is_a_load_error(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(LoadError, match=r"empty.onnx: the file is empty \(0 bytes\)"):
        rt.load(tmp_path / "empty.onnx")
    with pytest.raises(LoadError, match=r"the bytes given to load\(\): not an ONNX model"):
        rt.load(b"")
    with pytest.raises(LoadError, match=r"the ModelProto given to load\(\): not an ONNX model"):
        rt.load(onnx.ModelProto())


@dataclass
class Malformed:
    """A graph onnx's checker is skipped for, and the load error that must match ``match``;
    loaded from ``m.onnx`` (the message starts with that path) when ``saved``, else as a
    ModelProto."""

    nodes: list[onnx.NodeProto]
    inputs: list[onnx.ValueInfoProto]
    outputs: list[onnx.ValueInfoProto]
    match: str
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    saved: bool = False


def _refused_at_load(graph: Malformed, folder: Path) -> pytest.ExceptionInfo[LoadError]:
    model = make_model(graph.nodes, graph.inputs, graph.outputs, graph.initializers, check=False)
    source: onnx.ModelProto | Path = model
    if graph.saved:
        source = folder / "m.onnx"
        onnx.save(model, source)
    with pytest.raises(LoadError, match=graph.match) as info:
        rt.load(source)
    return info


def _short_tensor() -> onnx.TensorProto:
    """``w``, 4 floats of data under dims [16]."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    w.dims[:] = [16]
    return w


def _if_reading_a_ghost() -> onnx.NodeProto:
    """An If whose then-branch reads ``ghost``, which nothing makes; its else-branch ``x``."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["ghost"], ["t"])], "then", [], [tensor("t", shape=[3])]
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [tensor("e", shape=[3])]
    )
    return helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)


X3, Y3 = [tensor("x", shape=[3])], [tensor("y", shape=[3])]
MALFORMED = {
    "a_value_nothing_produces_names_the_node": Malformed(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")],
        X3,
        Y3,
        r"m.onnx: node 'add' \(Add\) reads 'ghost', which is not a graph input, an "
        "initializer or the output of any node",
        saved=True,
    ),
    "a_subgraph_reading_a_value_nothing_produces": Malformed(
        [_if_reading_a_ghost()],
        [tensor("c", TensorProto.BOOL, []), *X3],
        Y3,
        r"node 'if' \(If\) reads \(in a subgraph\) 'ghost'",
    ),
    "an_output_nothing_produces": Malformed(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        X3,
        [*Y3, tensor("z", shape=[3])],
        "graph output 'z' is not produced by any node",
    ),
    "a_tensor_whose_bytes_do_not_fit_its_dims": Malformed(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor("x", shape=[16])],
        [tensor("y", shape=[16])],
        r"tensor 'w' has 16 bytes of data, but its dims \[16\] and type "
        "TensorProto.FLOAT need 64",
        initializers=[_short_tensor()],
    ),
    "two_nodes_writing_one_tensor_names_both": Malformed(
        [
            helper.make_node("Relu", ["x"], ["y"], name="first"),
            helper.make_node("Neg", ["x"], ["y"], name="second"),
        ],
        X3,
        Y3,
        r"m.onnx: graph 'g': tensor 'y' is written by two nodes, 'first' \(Relu\) and "
        r"'second' \(Neg\)",
        saved=True,
    ),
    "a_node_writing_a_graph_input": Malformed(
        [helper.make_node("Neg", ["x"], ["x"], name="overwrite")],
        X3,
        [tensor("x", shape=[3])],
        r"tensor 'x' is a graph input and written by node ",
    ),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_graph_is_a_load_error_that_says_what_is_wrong(case, tmp_path):
    _refused_at_load(MALFORMED[case], tmp_path)


def test_external_data_shorter_than_its_tensor_names_the_tensor_and_file(tmp_path):
    model, w = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(w.tobytes()[:4])
    _assert_refused(
        model,
        tmp_path,
        r"tensor 'w' needs 24 bytes of 'weights.bin' from offset 0, but the file "
        r"\(4 bytes\) gives only 4",
    )


def test_external_data_without_a_length_reads_the_tensor_and_checks_it(tmp_path):
    model, w = _external_model(tmp_path, "weights.bin")
    [init] = model.graph.initializer
    kept = [(e.key, e.value) for e in init.external_data if e.key != "length"]
    del init.external_data[:]
    for k, v in (*kept, ("offset", "8")):
        if k != "offset" or v != "0":
            entry = init.external_data.add()
            entry.key, entry.value = k, v
    # 8 bytes of something else, the tensor, then another tensor's bytes
    (tmp_path / "weights.bin").write_bytes(b"x" * 8 + w.tobytes() + b"y" * 12)
    onnx.save(model, tmp_path / "m.onnx")
    np.testing.assert_array_equal(rt.load(tmp_path / "m.onnx").graph.initializers["w"], w)
    (tmp_path / "weights.bin").write_bytes(b"x" * 8 + w.tobytes()[:20])
    with pytest.raises(ExternalDataError, match=r"needs 24 bytes of 'weights\.bin' from offset 8"):
        rt.load(tmp_path / "m.onnx")


@pytest.mark.parametrize(("key", "value"), [("offset", "abc"), ("length", "-4")])
def test_external_data_offset_or_length_that_is_not_a_count(tmp_path, key, value):
    model, w = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(w.tobytes())
    [init] = model.graph.initializer
    for e in init.external_data:
        if e.key == key:
            e.value = value
    _assert_refused(
        model,
        tmp_path,
        rf"tensor 'w' has the external data {key} '{value}' in 'weights.bin'; it must be "
        "a whole number of bytes",
    )


def test_an_opset_newer_than_the_op_library_warns_and_still_runs(tmp_path):
    model = make_model(
        [helper.make_node("Add", ["x", "x"], ["y"], name="add")],
        [tensor("x", shape=[3])],
        [tensor("y", shape=[3])],
        opset=99,
        check=False,
    )
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.warns(NewerOpsetWarning, match=r"m.onnx uses opset 99 of ai.onnx, newer than"):
        loaded = rt.load(tmp_path / "m.onnx")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(rt.compile(loaded)(x=x)["y"]), 2 * x)


def test_a_cycle_is_a_load_error_naming_a_node_on_it(tmp_path):
    # a -> b -> c -> a, and d after the cycle (stuck too, but not on it)
    cycle = [
        helper.make_node("Add", ["x", "c"], ["a"], name="node_a"),
        helper.make_node("Relu", ["a"], ["b"], name="node_b"),
        helper.make_node("Neg", ["b"], ["c"], name="node_c"),
        helper.make_node("Relu", ["c"], ["y"], name="after"),
    ]
    info = _refused_at_load(Malformed(cycle, X3, Y3, "has a cycle"), tmp_path)
    message = str(info.value)
    assert "node_a -> node_b -> node_c -> node_a" in " ".join(message.split()).replace("'", "")
    assert "after" not in message
