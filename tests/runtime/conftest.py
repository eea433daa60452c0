"""Shared helpers of the runtime tests: event capture and onnxruntime as the reference."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ember.recorder import bus

RUNTIME_EVENTS = [
    f"ember.{name}.{phase}"
    for name in ("load", "compile", "call", "run", "segment.compile", "break")
    for phase in ("start", "stop", "exception")
] + ["ember.cache.hit", "ember.cache.miss", "ember.cache.evict"]

_ids = itertools.count()


class Events(list):
    """Captured ``(name, measurements, metadata)`` of the runtime's events."""

    def names(self, prefix: str = "ember.") -> list[str]:
        return [n for n, _, _ in self if n.startswith(prefix)]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [md for n, _, md in self if n == name]

    def clear_all(self) -> None:
        del self[:]


@pytest.fixture
def ember_events() -> Iterator[Events]:
    got = Events()
    handler_id = f"test-runtime-{next(_ids)}"
    bus.attach(handler_id, RUNTIME_EVENTS, lambda n, m, md: got.append((n, m, md)))
    try:
        yield got
    finally:
        bus.detach(handler_id)


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of onnxruntime's CPU provider, by name."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def make_model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto] | None = None,
    opset: int = 17,
    name: str = "g",
    check: bool = True,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    return model


def tensor(name: str, elem: int = TensorProto.FLOAT, shape: list[Any] | None = None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: Any) -> onnx.NodeProto:
    arr = np.asarray(value)
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(arr, name))
