"""``EmberBackend``: the runtime as an ``onnx.backend.base.Backend``.

``prepare(model)`` loads and compiles the model (``mode="compile"``, the default) or keeps it
for eager interpretation (``mode="eager"``: node by node on JAX arrays; ``mode="numpy"``:
node by node on numpy arrays, as the runtime runs short segments and subgraphs on the CPU,
``xla_cpu.eager_on_numpy``); ``run`` takes inputs in graph-input order (or a dict) and
returns numpy outputs in graph-output order, as the ONNX backend tests expect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from ember.runtime.graph.ir import Graph, run_nodes
from ember.runtime.jit.compiled import CompiledModel
from ember.runtime.jit.compiled import compile as compile_model
from ember.runtime.jit.compiled import run as run_model_eager
from ember.runtime.ops import each_tensor

from .inputs import check_inputs
from .model import Model, load

__all__ = ["MODES", "EmberBackend", "EmberBackendRep", "to_numpy"]

MODES = ("compile", "eager", "numpy")
"""How a prepared model runs: compiled, node by node on JAX, node by node on numpy."""


def to_numpy(value: Any) -> Any:
    """Outputs as the ONNX tests compare them: numpy arrays, lists for sequences."""
    return each_tensor(value, np.asarray)


def _run_on_numpy(model: Model, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """The model's nodes one by one on the checked inputs as given (numpy)."""
    import jax

    env: dict[str, Any] = dict(model.graph.initializers)
    env.update(check_inputs(model, feeds))
    with jax.enable_x64(True):
        run_nodes(model.graph, env)
    return {n: env[n] for n in model.output_names}


class EmberBackendRep(BackendRep):
    def __init__(self, model: Model, mode: str = "compile") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.model = model
        self.mode = mode
        self.compiled: CompiledModel | None = compile_model(model) if mode == "compile" else None

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        names = self.model.input_names
        if isinstance(inputs, Mapping):
            return dict(inputs)
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            inputs = [inputs]
        if len(inputs) > len(names):
            raise ValueError(f"{len(inputs)} inputs given, the model takes {len(names)}: {names}")
        return dict(zip(names, inputs, strict=False))

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        feeds = self._feeds(inputs)
        if self.compiled is not None:
            outputs = self.compiled(feeds)
        elif self.mode == "numpy":
            outputs = _run_on_numpy(self.model, feeds)
        else:
            outputs = run_model_eager(self.model, feeds)
        names = self.model.output_names
        return namedtupledict("Outputs", names)(*[to_numpy(outputs[n]) for n in names])


class EmberBackend(Backend):
    """ONNX models on JAX through Ember (``mode="compile"``, ``"eager"`` or ``"numpy"``)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(
        cls, model: onnx.ModelProto | Model, device: str = "CPU", **kwargs: Any
    ) -> EmberBackendRep:
        loaded = model if isinstance(model, Model) else load(model)
        return EmberBackendRep(loaded, mode=kwargs.get("mode", "compile"))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        import jax

        opset = int(kwargs.get("opset_version") or onnx.defs.onnx_opset_version())
        graph = Graph.from_node(node, opset)
        names = [n for n in node.input if n]
        if isinstance(inputs, Mapping):
            values = dict(inputs)
        else:
            values = dict(zip(names, inputs, strict=False))
        with jax.enable_x64(True):
            env: dict[str, Any] = {n: jax.numpy.asarray(v) for n, v in values.items()}
            run_nodes(graph, env)
            return tuple(to_numpy(env[n]) for n in node.output if n)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        d = Device(device)
        if d.type == DeviceType.CPU:
            return True
        import jax

        return any(dev.platform == "gpu" for dev in jax.devices())
