"""Small models built with ``onnx.helper`` for the demo, the docs and the tests.

``token_filter_model()`` is the demo's model: it embeds ``input_ids`` (``int64[batch,
seq]``), runs a stack of dense layers, keeps the positions whose activation is positive
(``NonZero``: a graph break, its output shape depends on the data), and runs a second
stack on the kept positions. A call with a new sequence length compiles the first
segment again; a new number of kept positions compiles the second one again. That is
how a real decoder behaves when its prompt grows, and what Ember is there to show.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["LIGHT_MODELS", "token_filter_model", "train_tiny_mlp"]

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


def train_tiny_mlp(
    path: str | Path, *, steps: int = 6, batch_sizes: tuple[int, ...] = (32, 16), seed: int = 0
) -> Path:
    """Train a two-layer MLP with plain SGD for a few steps while recording it.

    The batch size changes once (``batch_sizes``), so the trace shows the ``jit``
    compiles of the step function, one retrace with its reason, step spans and gradient
    records in the ``train`` phase. Returns the trace path.
    """
    import jax
    import jax.numpy as jnp

    from ember.recorder.jax import ProfileSession

    key = jax.random.PRNGKey(seed)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {
        "dense1": {"w": jax.random.normal(k1, (8, 32)) * 0.3, "b": jnp.zeros(32)},
        "dense2": {"w": jax.random.normal(k2, (32, 1)) * 0.3, "b": jnp.zeros(1)},
    }

    def loss_fn(p, x, y):
        h = jnp.tanh(x @ p["dense1"]["w"] + p["dense1"]["b"])
        return jnp.mean((h @ p["dense2"]["w"] + p["dense2"]["b"] - y) ** 2)

    @jax.jit
    def grad_step(p, x, y):
        return jax.value_and_grad(loss_fn)(p, x, y)

    @jax.jit
    def sgd(p, g):
        return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    with ProfileSession(path, phase="train", model="tiny_mlp", scenario="jax-training") as s:
        for i in range(steps):
            batch = batch_sizes[0] if i < steps // 2 else batch_sizes[-1]
            x = jax.random.normal(jax.random.fold_in(k3, i), (batch, 8))
            y = jnp.sum(x, axis=1, keepdims=True)
            with s.step("forward", i):
                loss, grads = grad_step(params, x, y)
                loss.block_until_ready()
            s.record_gradients(i, grads)
            with s.step("optimizer", i):
                params = sgd(params, grads)
                jax.block_until_ready(params)
    return Path(path)
