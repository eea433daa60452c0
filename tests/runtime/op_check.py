"""Run one registered op the way the interpreter does and the same node through a reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from onnx import helper
from onnx.reference import ReferenceEvaluator

from ember.runtime.ops import lookup


def run_op(
    op_type: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any] | None = None,
    *,
    opset: int = 22,
    domain: str = "",
    jit: bool = True,
) -> tuple[np.ndarray, ...]:
    """Outputs of the registered op; host inputs stay numpy, the rest are traced under jit."""
    opdef = lookup(op_type, opset, domain)
    assert opdef is not None, f"{op_type} is not registered at opset {opset}"
    attrs = attrs or {}
    with jax.enable_x64(True):
        if opdef.value_shaped:  # the interpreter runs these on host values
            out = opdef.fn(*inputs, **attrs)
        elif not jit:
            args = [
                None if v is None else (v if i in opdef.host_inputs else jnp.asarray(v))
                for i, v in enumerate(inputs)
            ]
            out = opdef.fn(*args, **attrs)
        else:
            traced = [
                i for i, v in enumerate(inputs) if v is not None and i not in opdef.host_inputs
            ]

            def call(*values: Any) -> Any:
                args = list(inputs)
                for i, v in zip(traced, values, strict=True):
                    args[i] = v
                return opdef.fn(*args, **attrs)

            out = jax.jit(call)(*[jnp.asarray(inputs[i]) for i in traced])
    if not isinstance(out, tuple):
        out = (out,)
    return tuple(o if o is None or isinstance(o, list) else np.asarray(o) for o in out)


def reference_op(
    op_type: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any] | None = None,
    *,
    n_outputs: int = 1,
    opset: int = 22,
) -> list[np.ndarray]:
    """Outputs of ``onnx.reference.ReferenceEvaluator`` for the same single node."""
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph_inputs = [
        helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v)
        )
        for n, v in zip(names, inputs, strict=True)
        if n
    ]
    graph_outputs = [helper.make_tensor_value_info(n, 0, None) for n in outs]
    graph = helper.make_graph([node], "g", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: np.asarray(v) for n, v in zip(names, inputs, strict=True) if n}
    return ReferenceEvaluator(model).run(None, feeds)


def assert_matches(
    op_type: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any] | None = None,
    *,
    n_outputs: int = 1,
    opset: int = 22,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> tuple[np.ndarray, ...]:
    got = run_op(op_type, inputs, attrs, opset=opset)
    want = reference_op(op_type, inputs, attrs, n_outputs=n_outputs, opset=opset)
    for k, (g, w) in enumerate(zip(got[:n_outputs], want, strict=True)):
        assert g.dtype == w.dtype, f"{op_type} output {k}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{op_type} output {k}: shape {g.shape} != {w.shape}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op_type} output {k}")
    return got
