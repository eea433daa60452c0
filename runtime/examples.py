"""Small models built with ``onnx.helper`` for the demo, the docs and the tests.

``token_filter_model()`` is the demo's model: it embeds ``input_ids`` (``int64[batch,
seq]``), runs a stack of dense layers, keeps the positions whose activation is positive
(``NonZero``: a graph break, its output shape depends on the data), and runs a second
stack on the kept positions. A call with a new sequence length compiles the first
segment again; a new number of kept positions compiles the second one again. That is
how a real decoder behaves when its prompt grows, and what Ember is there to show.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["token_filter_model", "LIGHT_MODELS"]

LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


def _dense_stack(prefix: str, x: str, width: int, layers: int, rng, inits, nodes) -> str:
    """``layers`` x (MatMul, Add, Tanh): three nodes a layer, so segments are long enough."""
    for i in range(layers):
        w = f"{prefix}_w{i}"
        b = f"{prefix}_b{i}"
        inits.append(
            numpy_helper.from_array(
                (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), w
            )
        )
        inits.append(
            numpy_helper.from_array((0.1 * rng.standard_normal(width)).astype(np.float32), b)
        )
        nodes += [
            helper.make_node("MatMul", [x, w], [f"{prefix}_mm{i}"], name=f"{prefix}_matmul{i}"),
            helper.make_node(
                "Add", [f"{prefix}_mm{i}", b], [f"{prefix}_add{i}"], name=f"{prefix}_add{i}"
            ),
            helper.make_node(
                "Tanh", [f"{prefix}_add{i}"], [f"{prefix}_h{i}"], name=f"{prefix}_tanh{i}"
            ),
        ]
        x = f"{prefix}_h{i}"
    return x


def token_filter_model(
    vocab: int = 64, width: int = 16, layers: int = 7, seed: int = 0
) -> onnx.ModelProto:
    """The demo model: embed, dense stack, NonZero (a break), dense stack on kept tokens.

    Inputs: ``input_ids`` int64 ``[batch, seq]``. Output: ``pooled`` float32 ``[width]``.
    """
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = [
        numpy_helper.from_array(rng.standard_normal((vocab, width)).astype(np.float32), "embed"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
        numpy_helper.from_array(np.array([-1, width], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(np.array([0.0], dtype=np.float32), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"),
    ]
    nodes: list[onnx.NodeProto] = [
        helper.make_node("Gather", ["embed", "input_ids"], ["emb"], name="embed_tokens"),
    ]
    h = _dense_stack("enc", "emb", width, layers, rng, inits, nodes)
    nodes += [
        # tokens whose mean activation is positive are kept: a data-dependent count
        helper.make_node("ReduceMean", [h], ["score"], axes=[-1], keepdims=0, name="score"),
        helper.make_node("Greater", ["score", "zero"], ["keep"], name="keep"),
        helper.make_node("Reshape", [h, "flat_shape"], ["tokens"], name="flatten_tokens"),
        helper.make_node("Reshape", ["keep", "minus_one"], ["keep_flat"], name="flatten_keep"),
        helper.make_node("NonZero", ["keep_flat"], ["kept_idx"], name="kept_positions"),
        helper.make_node("Squeeze", ["kept_idx", "axis0"], ["kept"], name="kept_list"),
        helper.make_node("Gather", ["tokens", "kept"], ["kept_tokens"], axis=0, name="gather_kept"),
    ]
    h2 = _dense_stack("dec", "kept_tokens", width, layers, rng, inits, nodes)
    nodes.append(
        helper.make_node("ReduceMean", [h2], ["pooled"], axes=[0], keepdims=0, name="pool")
    )
    graph = helper.make_graph(
        nodes,
        "token_filter",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [width])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
