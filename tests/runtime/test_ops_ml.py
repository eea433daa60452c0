"""The ai.onnx.ml ops against onnxruntime, compiled and eager, and their error messages."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember.runtime as rt
from tests.runtime.models import reference

ML = "ai.onnx.ml"
F32, F64, I64, STR = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.STRING
rng = np.random.default_rng(7)


def ml_model(
    op_type: str,
    inputs: dict[str, tuple[int, list[Any] | None]],
    output: tuple[int, list[Any] | None],
    attrs: dict[str, Any],
    *,
    ml_opset: int,
    pre: list[onnx.NodeProto] | None = None,
    node_input: list[str] | None = None,
) -> onnx.ModelProto:
    """One ai.onnx.ml node (after the ``pre`` nodes) reading ``node_input``, writing ``y``."""
    node = helper.make_node(
        op_type, node_input or list(inputs), ["y"], domain=ML, name="ml_node", **attrs
    )
    graph = helper.make_graph(
        [*(pre or []), node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", *output)],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(ML, ml_opset)],
    )
    model.ir_version = 9
    return model


def run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Ember's output compiled and eager (they must agree exactly)."""
    compiled = np.asarray(rt.compile(model)(feeds)["y"])
    eager = np.asarray(rt.run(model, feeds)["y"])
    assert compiled.dtype == eager.dtype
    if compiled.dtype.kind == "f":  # XLA may fuse a softmax differently in one program
        np.testing.assert_allclose(compiled, eager, rtol=1e-6)
    else:
        np.testing.assert_array_equal(compiled, eager)
    return compiled, eager


def assert_like_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **tol: float) -> Any:
    expected = reference(model, feeds)["y"]
    got, _ = run_both(model, feeds)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape
    if got.dtype == object:
        assert got.tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(got, expected, **(tol or {"rtol": 1e-6, "atol": 1e-6}))
    return got


# ---------------------------------------------------------------------------------------------
# LabelEncoder


STRINGS = np.array([["a", "b", "zz"], ["c", "a", ""]], dtype=object)


@pytest.mark.parametrize("ml_opset", [2, 4])
def test_label_encoder_strings_to_ints_with_and_without_default(ml_opset: int) -> None:
    attrs = {"keys_strings": ["a", "b", "c"], "values_int64s": [10, 11, 12]}
    inputs = {"x": (STR, [2, 3])}
    out = (I64, [2, 3])
    no_default = assert_like_ort(
        ml_model("LabelEncoder", inputs, out, attrs, ml_opset=ml_opset), {"x": STRINGS}
    )
    assert no_default.tolist() == [[10, 11, -1], [12, 10, -1]]
    attrs["default_int64"] = 42
    got = assert_like_ort(
        ml_model("LabelEncoder", inputs, out, attrs, ml_opset=ml_opset), {"x": STRINGS}
    )
    assert got.tolist() == [[10, 11, 42], [12, 10, 42]]


def test_label_encoder_ints_to_strings_with_default() -> None:
    attrs = {"keys_int64s": [3, 1, 2], "values_strings": ["three", "one", "two"]}
    inputs = {"x": (I64, [5])}
    out = (STR, [5])
    x = np.array([1, 2, 3, 4, -1], np.int64)
    got = assert_like_ort(ml_model("LabelEncoder", inputs, out, attrs, ml_opset=2), {"x": x})
    assert got.tolist() == ["one", "two", "three", "_Unused", "_Unused"]
    attrs["default_string"] = "?"
    got = assert_like_ort(ml_model("LabelEncoder", inputs, out, attrs, ml_opset=2), {"x": x})
    assert got.tolist() == ["one", "two", "three", "?", "?"]


def test_label_encoder_v1_classes_both_directions() -> None:
    classes = {"classes_strings": ["cat", "dog", "eel"]}
    to_int = ml_model(
        "LabelEncoder", {"x": (STR, [4])}, (I64, [4]), {**classes, "default_int64": -7}, ml_opset=1
    )
    words = np.array(["dog", "eel", "cow", "cat"], dtype=object)
    assert assert_like_ort(to_int, {"x": words}).tolist() == [1, 2, -7, 0]
    to_str = ml_model(
        "LabelEncoder",
        {"x": (I64, [4])},
        (STR, [4]),
        {**classes, "default_string": "none"},
        ml_opset=1,
    )
    got = assert_like_ort(to_str, {"x": np.array([2, 0, 5, 1], np.int64)})
    assert got.tolist() == ["eel", "cat", "none", "dog"]


def test_label_encoder_tensor_attributes_keep_the_value_type() -> None:
    attrs = {
        "keys_tensor": numpy_helper.from_array(np.array([1, 5, 9], np.int64)),
        "values_tensor": numpy_helper.from_array(np.array([-1.5, -5, -9], np.float64)),
        "default_tensor": numpy_helper.from_array(np.array([300], np.float64)),
    }
    model = ml_model("LabelEncoder", {"x": (I64, [6])}, (F64, [6]), attrs, ml_opset=4)
    x = np.array([9, 5, 1, 0, 9, 2], np.int64)
    got = assert_like_ort(model, {"x": x})
    assert got.dtype == np.float64
    assert got.tolist() == [-9, -5, -1.5, 300, -9, 300]
    # int16 values (onnxruntime has no kernel for them): the output is int16 too
    attrs["values_tensor"] = numpy_helper.from_array(np.array([-1, -5, -9], np.int16))
    attrs["default_tensor"] = numpy_helper.from_array(np.array([300], np.int16))
    model = ml_model("LabelEncoder", {"x": (I64, [6])}, (TensorProto.INT16, [6]), attrs, ml_opset=4)
    got, _ = run_both(model, {"x": x})
    assert got.dtype == np.int16
    assert got.tolist() == [-9, -5, -1, 300, -9, 300]


def test_label_encoder_float_keys_match_nan() -> None:
    attrs = {
        "keys_floats": [0.5, float("nan"), 2.0],
        "values_floats": [1.0, 99.0, 3.0],
        "default_float": -2.0,
    }
    model = ml_model("LabelEncoder", {"x": (F32, [5])}, (F32, [5]), attrs, ml_opset=4)
    x = np.array([0.5, np.nan, 2.0, 3.0, -0.0], np.float32)
    got = assert_like_ort(model, {"x": x})
    assert got.tolist() == [1.0, 99.0, 3.0, -2.0, -2.0]


def test_label_encoder_repeated_key_takes_the_last_value() -> None:
    # the spec (ai.onnx.ml 4): "If a key is repeated, the last key takes precedence";
    # onnxruntime 1.32 keeps the first, so this follows the spec text
    attrs = {"keys_int64s": [1, 2, 1], "values_int64s": [10, 20, 30]}
    model = ml_model("LabelEncoder", {"x": (I64, [3])}, (I64, [3]), attrs, ml_opset=4)
    got, _ = run_both(model, {"x": np.array([1, 2, 3], np.int64)})
    assert got.tolist() == [30, 20, -1]


def test_numeric_label_encoder_is_traced_and_string_output_breaks_the_graph() -> None:
    numeric = ml_model(
        "LabelEncoder",
        {"x": (I64, [4])},
        (I64, [4]),
        {"keys_int64s": [2, 4], "values_int64s": [20, 40]},
        ml_opset=2,
        pre=[helper.make_node("Add", ["x", "x"], ["x2"])],
        node_input=["x2"],
    )
    compiled = rt.compile(numeric)
    got = compiled({"x": np.array([1, 2, 3, 0], np.int64)})["y"]
    assert np.asarray(got).tolist() == [20, 40, -1, -1]
    assert not compiled.graph_break  # one jax program, the map included
    # a computed value mapped to strings: the node runs on the host, as a break
    to_strings = ml_model(
        "LabelEncoder",
        {"x": (I64, [4])},
        (STR, [4]),
        {"keys_int64s": [2, 4], "values_strings": ["two", "four"]},
        ml_opset=2,
        pre=[helper.make_node("Add", ["x", "x"], ["x2"])],
        node_input=["x2"],
    )
    feeds = {"x": np.array([1, 2, 3, 0], np.int64)}
    got = assert_like_ort(to_strings, feeds)
    assert got.tolist() == ["two", "four", "_Unused", "_Unused"]


# ---------------------------------------------------------------------------------------------
# Binarizer, ArrayFeatureExtractor


def test_binarizer_threshold_matches_onnxruntime() -> None:
    x = (rng.standard_normal((3, 4, 5)) * 2).astype(np.float32)
    x.flat[0] = 0.25  # equal to the threshold: not above it, so 0
    model = ml_model(
        "Binarizer", {"x": (F32, [3, 4, 5])}, (F32, [3, 4, 5]), {"threshold": 0.25}, ml_opset=1
    )
    got = assert_like_ort(model, {"x": x})
    assert got.flat[0] == 0
    assert got.tolist() == (x > 0.25).astype(np.float32).tolist()


@pytest.mark.parametrize(
    ("elem", "dtype", "threshold"),
    [(F64, np.float64, -1.0), (I64, np.int64, 2.0)],
)
def test_binarizer_other_types_and_nan(elem: int, dtype: Any, threshold: float) -> None:
    # onnxruntime implements only float (and rejects NaN); the spec maps every value that is
    # not greater than the threshold, NaN included, to 0
    x = np.array([threshold - 1, threshold, threshold + 1, 7], dtype)
    if dtype == np.float64:
        x[3] = np.nan
    model = ml_model(
        "Binarizer", {"x": (elem, [4])}, (elem, [4]), {"threshold": threshold}, ml_opset=1
    )
    got, _ = run_both(model, {"x": x})
    assert got.dtype == dtype
    assert got.tolist() == [0, 0, 1, 0 if dtype == np.float64 else 1]


def test_binarizer_default_threshold() -> None:
    model = ml_model("Binarizer", {"x": (F32, [3])}, (F32, [3]), {}, ml_opset=1)
    got = assert_like_ort(model, {"x": np.array([-1.0, 0.0, 1e-6], np.float32)})
    assert got.tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("shape", "indices"),
    [([3, 5], [4, 0, 4]), ([2, 3, 4], [[1], [3]]), ([6], [5, 2])],
)
def test_array_feature_extractor_picks_from_the_last_axis(shape: list[int], indices: Any) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    y = np.array(indices, np.int64)
    model = ml_model(
        "ArrayFeatureExtractor",
        {"x": (F32, shape), "i": (I64, list(y.shape))},
        (F32, None),
        {},
        ml_opset=1,
    )
    got = assert_like_ort(model, {"x": x, "i": y})
    np.testing.assert_array_equal(
        got.reshape(-1, y.size), x.reshape(-1, shape[-1])[:, y.reshape(-1)]
    )


def test_array_feature_extractor_on_strings() -> None:
    x = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    model = ml_model(
        "ArrayFeatureExtractor",
        {"x": (STR, [2, 3]), "i": (I64, [2])},
        (STR, None),
        {},
        ml_opset=1,
    )
    got = assert_like_ort(model, {"x": x, "i": np.array([2, 0], np.int64)})
    assert got.tolist() == [["c", "a"], ["f", "d"]]


# ---------------------------------------------------------------------------------------------
# tree ensembles: random forests written in both encodings


def random_forest(
    n_trees: int, n_features: int, n_targets: int, depth: int, *, targets_per_leaf: int = 1
) -> list[list[dict[str, Any]]]:
    """Trees as lists of nodes (the root first); a node is interior or a leaf."""
    trees = []
    for _ in range(n_trees):
        nodes: list[dict[str, Any]] = []

        def grow(level: int, nodes: list[dict[str, Any]] = nodes) -> int:
            index = len(nodes)
            if level == depth or (level > 0 and rng.random() < 0.25):
                picked = rng.choice(n_targets, targets_per_leaf, replace=False)
                weights = rng.standard_normal(targets_per_leaf).round(3)
                nodes.append({"leaf": list(zip(picked.tolist(), weights.tolist(), strict=True))})
                return index
            node: dict[str, Any] = {
                "feature": int(rng.integers(n_features)),
                "split": round(float(rng.standard_normal()), 2),
                "mode": int(rng.integers(6)),
                "missing": int(rng.integers(2)),
            }
            nodes.append(node)
            node["true"] = grow(level + 1, nodes)
            node["false"] = grow(level + 1, nodes)
            return index

        grow(0)
        trees.append(nodes)
    return trees


def v5_attrs(trees: list[list[dict[str, Any]]], n_targets: int, dtype: Any) -> dict[str, Any]:
    """TreeEnsemble (ai.onnx.ml 5): interior nodes and leaves in separate lists."""
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "featureids",
            "splits",
            "modes",
            "missing",
            "true",
            "trueleaf",
            "false",
            "falseleaf",
        )
    }
    leaf_targets: list[int] = []
    leaf_weights: list[float] = []
    roots = []
    for nodes in trees:
        interior = {}  # index in the tree -> position among all interior nodes
        leaves = {}
        for i, node in enumerate(nodes):
            if "leaf" in node:
                ((target, weight),) = node["leaf"]
                leaves[i] = len(leaf_targets)
                leaf_targets.append(target)
                leaf_weights.append(weight)
            else:
                interior[i] = len(cols["featureids"]) + len(interior)
        roots.append(interior[0])
        for node in nodes:
            if "leaf" in node:
                continue
            cols["featureids"].append(node["feature"])
            cols["splits"].append(node["split"])
            cols["modes"].append(node["mode"])
            cols["missing"].append(node["missing"])
            for side in ("true", "false"):
                child = node[side]
                cols[side].append(leaves[child] if child in leaves else interior[child])
                cols[side + "leaf"].append(int(child in leaves))
    return {
        "tree_roots": roots,
        "nodes_featureids": cols["featureids"],
        "nodes_splits": numpy_helper.from_array(np.array(cols["splits"], dtype)),
        "nodes_modes": numpy_helper.from_array(np.array(cols["modes"], np.uint8)),
        "nodes_missing_value_tracks_true": cols["missing"],
        "nodes_truenodeids": cols["true"],
        "nodes_trueleafs": cols["trueleaf"],
        "nodes_falsenodeids": cols["false"],
        "nodes_falseleafs": cols["falseleaf"],
        "leaf_targetids": leaf_targets,
        "leaf_weights": numpy_helper.from_array(np.array(leaf_weights, dtype)),
        "n_targets": n_targets,
    }


MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def v1_attrs(trees: list[list[dict[str, Any]]], prefix: str) -> dict[str, Any]:
    """TreeEnsembleRegressor/Classifier: every node (leaves too) by (tree id, node id)."""
    a: dict[str, list[Any]] = {}
    for t, nodes in enumerate(trees):
        for i, node in enumerate(nodes):
            a.setdefault("nodes_treeids", []).append(t)
            a.setdefault("nodes_nodeids", []).append(i)
            leaf = "leaf" in node
            a.setdefault("nodes_featureids", []).append(0 if leaf else node["feature"])
            a.setdefault("nodes_values", []).append(0.0 if leaf else node["split"])
            a.setdefault("nodes_modes", []).append("LEAF" if leaf else MODES[node["mode"]])
            a.setdefault("nodes_missing_value_tracks_true", []).append(
                0 if leaf else node["missing"]
            )
            a.setdefault("nodes_truenodeids", []).append(0 if leaf else node["true"])
            a.setdefault("nodes_falsenodeids", []).append(0 if leaf else node["false"])
            for target, weight in node.get("leaf", []):
                a.setdefault(f"{prefix}_treeids", []).append(t)
                a.setdefault(f"{prefix}_nodeids", []).append(i)
                a.setdefault(f"{prefix}_ids", []).append(target)
                a.setdefault(f"{prefix}_weights", []).append(weight)
    return a


def features(n: int, n_features: int, dtype: Any) -> np.ndarray:
    x = rng.standard_normal((n, n_features)).round(2).astype(dtype)
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values take the tracked branch
    return x


def softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_zero(s: np.ndarray) -> np.ndarray:
    """Softmax over the non-zero scores of a row; zeros stay zero."""
    e = np.where(s != 0, np.exp(s - s.max(axis=1, keepdims=True)), 0)
    return e / e.sum(axis=1, keepdims=True)


TRANSFORMS = {1: softmax, 2: lambda s: 1 / (1 + np.exp(-s)), 3: softmax_zero}


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_aggregates_and_post_transforms(aggregate: int) -> None:
    trees = random_forest(n_trees=7, n_features=4, n_targets=3, depth=4)
    attrs = v5_attrs(trees, 3, np.float32)
    attrs.update(aggregate_function=aggregate)
    x = features(64, 4, np.float32)

    def model(transform: int) -> onnx.ModelProto:
        attrs["post_transform"] = transform
        shapes = ({"x": (F32, [64, 4])}, (F32, [64, 3]))
        return ml_model("TreeEnsemble", *shapes, attrs, ml_opset=5)

    scores = assert_like_ort(model(0), {"x": x}, rtol=1e-5, atol=1e-6)
    compiled = rt.compile(model(0))
    compiled({"x": x})
    assert not compiled.graph_break  # the whole ensemble is one jax program
    # onnxruntime 1.32 applies TreeEnsemble's post_transform codes 1 and 2 the wrong way
    # round (LOGISTIC for 1, SOFTMAX for 2; microsoft/onnxruntime#26596 and #24862), so the
    # transforms are checked against the spec's definitions applied to its raw scores
    for transform, fn in TRANSFORMS.items():
        got, _ = run_both(model(transform), {"x": x})
        np.testing.assert_allclose(got, fn(scores.astype(np.float64)), rtol=1e-5, atol=1e-7)


def test_tree_ensemble_double_probit_and_set_membership() -> None:
    # one tree: x0 in {1, 4, 7}? then x1 <= 0.5? (leaves 0, 1) else leaf 2
    attrs = {
        "tree_roots": [0],
        "nodes_featureids": [0, 1],
        "nodes_modes": numpy_helper.from_array(np.array([6, 0], np.uint8)),
        "nodes_splits": numpy_helper.from_array(np.array([0.0, 0.5])),
        "membership_values": numpy_helper.from_array(np.array([1.0, 4.0, 7.0])),
        "nodes_truenodeids": [1, 0],
        "nodes_trueleafs": [0, 1],
        "nodes_falsenodeids": [2, 1],
        "nodes_falseleafs": [1, 1],
        "leaf_targetids": [0, 0, 0],
        "leaf_weights": numpy_helper.from_array(np.array([0.1, 0.6, 0.9])),
        "n_targets": 1,
        "post_transform": 4,
    }
    model = ml_model("TreeEnsemble", {"x": (F64, [5, 2])}, (F64, [5, 1]), attrs, ml_opset=5)
    x = np.array([[4, 0], [4, 1], [5, 0], [np.nan, 0], [7, -3]], np.float64)
    # onnxruntime's probit approximates erfinv to about 1e-4; Ember's is exact
    got = assert_like_ort(model, {"x": x}, rtol=1e-3, atol=1e-3)
    probit = {0.1: -1.2815515655446004, 0.6: 0.2533471031357997, 0.9: 1.2815515655446004}
    expected = [probit[w] for w in (0.1, 0.6, 0.9, 0.9, 0.1)]
    np.testing.assert_allclose(got[:, 0], expected, rtol=1e-12)


@pytest.mark.parametrize("aggregate", ["AVERAGE", "SUM", "MIN", "MAX"])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_tree_ensemble_regressor_matches_onnxruntime(aggregate: str, transform: str) -> None:
    # every leaf scores every target, as in scikit-learn's forests (onnxruntime leaves out
    # the base value of a target no leaf reached)
    trees = random_forest(n_trees=5, n_features=3, n_targets=3, depth=3, targets_per_leaf=3)
    attrs = v1_attrs(trees, "target")
    attrs.update(
        n_targets=3,
        base_values=[0.5, -0.25, 0.0],
        aggregate_function=aggregate,
        post_transform=transform,
    )
    model = ml_model(
        "TreeEnsembleRegressor", {"x": (F32, [32, 3])}, (F32, [32, 3]), attrs, ml_opset=3
    )
    assert_like_ort(model, {"x": features(32, 3, np.float32)}, rtol=1e-5, atol=1e-6)


def test_tree_ensemble_regressor_double_input_single_target() -> None:
    trees = random_forest(n_trees=4, n_features=2, n_targets=1, depth=5)
    attrs = v1_attrs(trees, "target")
    attrs.update(n_targets=1, aggregate_function="AVERAGE")
    model = ml_model(
        "TreeEnsembleRegressor", {"x": (F64, [40, 2])}, (F32, [40, 1]), attrs, ml_opset=1
    )
    assert_like_ort(model, {"x": features(40, 2, np.float64)}, rtol=1e-6, atol=1e-6)


def classifier_model(attrs: dict[str, Any], label_type: int, rows: int) -> onnx.ModelProto:
    node = helper.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "y"], domain=ML, name="ml_node", **attrs
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F32, [rows, 3])],
        [
            helper.make_tensor_value_info("label", label_type, [rows]),
            helper.make_tensor_value_info("y", F32, [rows, None]),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(ML, 3)]
    )
    model.ir_version = 9
    return model


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("label_type", [I64, STR])
def test_tree_ensemble_classifier_labels_and_scores(transform: str, label_type: int) -> None:
    trees = random_forest(n_trees=6, n_features=3, n_targets=4, depth=3, targets_per_leaf=4)
    attrs = v1_attrs(trees, "class")
    attrs["post_transform"] = transform
    attrs["base_values"] = [0.1, 0.0, -0.2, 0.3]
    if label_type == STR:
        attrs["classlabels_strings"] = ["ant", "bee", "cat", "dog"]
    else:
        attrs["classlabels_int64s"] = [10, 20, 30, 40]
    model = classifier_model(attrs, label_type, 48)
    feeds = {"x": features(48, 3, np.float32)}
    expected = reference(model, feeds)
    for got in (rt.compile(model)(feeds), rt.run(model, feeds)):
        assert np.asarray(got["label"]).tolist() == expected["label"].tolist()
        np.testing.assert_allclose(np.asarray(got["y"]), expected["y"], rtol=1e-5, atol=1e-6)


def test_tree_ensemble_classifier_with_two_classes_is_refused_with_a_way_out() -> None:
    trees = random_forest(n_trees=2, n_features=3, n_targets=1, depth=2)
    attrs = v1_attrs(trees, "class")
    attrs["classlabels_int64s"] = [0, 1]
    model = classifier_model(attrs, I64, 2)
    with pytest.raises(rt.NodeError, match=r"'ml_node' \(TreeEnsembleClassifier\).*2 classes"):
        rt.run(model, {"x": np.zeros((2, 3), np.float32)})


# ---------------------------------------------------------------------------------------------
# error paths: the NodeError names the node and says what to fix


def test_label_encoder_with_two_key_lists_names_the_node_and_the_fix() -> None:
    model = ml_model(
        "LabelEncoder",
        {"x": (I64, [2])},
        (I64, [2]),
        {"keys_int64s": [1], "keys_strings": ["a"], "values_int64s": [5]},
        ml_opset=2,
    )
    with pytest.raises(rt.NodeError) as info:
        rt.run(model, {"x": np.array([1, 2], np.int64)})
    message = str(info.value)
    assert "'ml_node' (LabelEncoder)" in message
    assert "keys_int64s and keys_strings" in message
    assert "exactly one of keys_floats, keys_int64s, keys_strings, keys_tensor" in message


@pytest.mark.parametrize("kind", ["target", "class"])
def test_tree_ensemble_base_values_of_the_wrong_count_are_a_node_error(kind: str) -> None:
    trees = random_forest(n_trees=2, n_features=3, n_targets=3, depth=2)
    attrs = v1_attrs(trees, kind)
    attrs["base_values"] = [0.5, 0.5]
    if kind == "target":
        attrs["n_targets"] = 3
        model = ml_model(
            "TreeEnsembleRegressor", {"x": (F32, [2, 3])}, (F32, [2, 3]), attrs, ml_opset=3
        )
        want = r"\(TreeEnsembleRegressor\).*2 base_values for 3 targets; give one per target"
    else:
        attrs["classlabels_int64s"] = [0, 1, 2]
        model = classifier_model(attrs, I64, 2)
        want = r"\(TreeEnsembleClassifier\).*2 base_values for 3 classes; give one per class"
    with pytest.raises(rt.NodeError, match=want):
        rt.run(model, {"x": np.zeros((2, 3), np.float32)})


def test_tree_ensemble_unknown_aggregate_function_is_a_node_error() -> None:
    trees = random_forest(n_trees=1, n_features=2, n_targets=1, depth=2)
    attrs = v5_attrs(trees, 1, np.float32)
    attrs["aggregate_function"] = 7
    model = ml_model("TreeEnsemble", {"x": (F32, [3, 2])}, (F32, [3, 1]), attrs, ml_opset=5)
    with pytest.raises(
        rt.NodeError,
        match=r"'ml_node' \(TreeEnsemble\).*aggregate_function=7.*"
        r"0 \(AVERAGE\), 1 \(SUM\), 2 \(MIN\), 3 \(MAX\); fix the attribute",
    ):
        rt.compile(model)({"x": np.zeros((3, 2), np.float32)})


def test_tree_ensemble_cycle_is_reported() -> None:
    attrs = {
        "tree_roots": [0],
        "nodes_featureids": [0, 0],
        "nodes_modes": numpy_helper.from_array(np.array([0, 0], np.uint8)),
        "nodes_splits": numpy_helper.from_array(np.array([0.0, 0.0], np.float32)),
        "nodes_truenodeids": [1, 0],
        "nodes_trueleafs": [0, 0],
        "nodes_falsenodeids": [0, 0],
        "nodes_falseleafs": [1, 1],
        "leaf_targetids": [0],
        "leaf_weights": numpy_helper.from_array(np.array([1.0], np.float32)),
    }
    model = ml_model("TreeEnsemble", {"x": (F32, [1, 1])}, (F32, [1, 1]), attrs, ml_opset=5)
    with pytest.raises(rt.NodeError, match="form a cycle"):
        rt.run(model, {"x": np.zeros((1, 1), np.float32)})


def test_array_feature_extractor_index_out_of_range() -> None:
    model = ml_model(
        "ArrayFeatureExtractor",
        {"x": (F32, [2, 3])},
        (F32, None),
        {},
        ml_opset=1,
        pre=[
            helper.make_node(
                "Constant", [], ["i"], value=numpy_helper.from_array(np.array([1, 3], np.int64))
            )
        ],
        node_input=["x", "i"],
    )
    with pytest.raises(rt.NodeError, match=r"index 3 is outside the last axis of X \(size 3\)"):
        rt.run(model, {"x": np.zeros((2, 3), np.float32)})


# ---------------------------------------------------------------------------------------------
# the ONNX backend suite's cases


def test_onnx_suite_ml_cases_pass_and_random_cases_say_why_they_fail() -> None:
    from ember.runtime import conformance

    cases = [
        c
        for _, c in conformance._load_cases(("node",))
        if c.name.startswith("test_ai_onnx_ml_") or c.name == "test_bernoulli"
    ]
    results = {c.name: conformance.run_case("node", c, "compile", 60) for c in cases}
    ml = {n: r for n, r in results.items() if n.startswith("test_ai_onnx_ml_")}
    assert len(ml) >= 8, list(ml)
    assert all(r.ok for r in ml.values()), [r.message for r in ml.values()]
    bernoulli = results["test_bernoulli"]
    assert not bernoulli.ok
    assert bernoulli.message.startswith("expected outputs are random draws of Bernoulli")


def test_tree_ensemble_feature_beyond_the_input_is_a_node_error() -> None:
    trees = random_forest(n_trees=2, n_features=5, n_targets=1, depth=3)
    attrs = v5_attrs(trees, 1, np.float32)
    attrs["nodes_featureids"] = [4] * len(attrs["nodes_featureids"])
    model = ml_model("TreeEnsemble", {"x": (F32, [3, 2])}, (F32, [3, 1]), attrs, ml_opset=5)
    with pytest.raises(rt.NodeError, match="compares feature 4, but X has 2 features"):
        rt.compile(model)({"x": np.zeros((3, 2), np.float32)})
