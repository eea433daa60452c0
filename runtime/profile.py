"""Profile mode: run a model node by node and record where the time and the bytes go.

``ember.runtime.profile(model, inputs)`` interprets the sorted graph one node at a time
(like ``ember.runtime.run``), waits for each result (``block_until_ready``) so each node's
time is its own, and emits, inside one ``ember.run`` span, the candle-graph records:

- ``op`` for each node: ``op_name`` (the ONNX op type), ``inputs`` (value names),
  ``output`` (its first output's name), shape/dtype/device of that output, ``duration_ns``,
  ``storage_bytes`` (all its outputs) and ``input_storage_bytes``; ``ts_ns`` is the start;
- ``tensor`` for each value the run holds: inputs, parameters (initializers) and every
  node output, with its category;
- ``memory`` ``alloc`` when a value comes to exist (inputs and parameters at the start,
  node outputs when the node ends) and ``free`` right after its last reader ends
  (liveness from the graph: a node reads its inputs and the outer values of its
  subgraphs). Graph outputs and parameters are never freed, so at the end the records net
  to the bytes of the parameters plus the outputs;
- ``edge`` for each producer -> consumer pair of nodes: from the producer's end to the
  consumer's start (how long the value waited), by node name.

Categories: ``input`` (graph inputs), ``parameter`` (initializers), ``output`` (graph
outputs), ``activation`` (node outputs read by a later node), ``temporary`` (node outputs
nothing reads, freed as soon as they exist).

Devices: a value computed by JAX is on its array's device (``cpu:0``, ``gpu:0``); a
value the interpreter keeps on the host (initializers, shape arithmetic) is on ``host``,
as in ``ember.runtime.run``, where the weights stay numpy arrays.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime.graph.ir import Graph, Node, run_node
from ember.runtime.jit.compiled import CompiledModel

from .inputs import as_model, check_inputs, to_device
from .memory import device_label
from .model import Model

__all__ = ["ProfileResult", "liveness", "profile", "value_bytes"]

HOST = "host"


@dataclass
class ProfileResult:
    """What a profile run returns: the outputs and the memory figures it recorded."""

    outputs: dict[str, Any]
    peak_bytes: int
    end_bytes: int
    node_count: int
    duration_ns: int
    # value name -> category, for every value the run held
    categories: dict[str, str] = field(default_factory=dict)


def value_bytes(value: Any) -> int:
    """Dense storage bytes of a value: an array, a scalar, a sequence (sum), or None (0)."""
    if value is None:
        return 0
    if isinstance(value, list):
        return sum(value_bytes(v) for v in value)
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return int(np.asarray(value).nbytes)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _describe(value: Any) -> tuple[list[int], str, str]:
    """(shape, dtype, device) labels of a value."""
    if isinstance(value, list):
        first = value[0] if value else None
        dtype = _describe(first)[1] if first is not None else "sequence"
        device = _describe(first)[2] if first is not None else HOST
        return [len(value)], dtype, device
    if value is None:
        return [], "none", HOST
    shape = [int(d) for d in np.shape(value)]
    dt = getattr(value, "dtype", None)
    dtype = np.dtype(dt).name if dt is not None else type(value).__name__
    devices = getattr(value, "devices", None)
    if callable(devices):
        ds = sorted(devices(), key=lambda d: d.id)
        return shape, dtype, device_label(ds[0]) if ds else HOST
    return shape, dtype, HOST


def liveness(graph: Graph) -> dict[str, int]:
    """Value name -> position of the last node that reads it (-1: nothing reads it)."""
    last: dict[str, int] = {}
    for name in (*graph.input_names, *graph.initializers):
        last[name] = -1
    for node in graph.nodes:
        for out in node.outputs:
            if out:
                last.setdefault(out, -1)
        for name in node.reads():
            last[name] = node.position
    return last


def _block(values: tuple[Any, ...]) -> None:
    import jax

    for v in values:
        if isinstance(v, list):
            _block(tuple(v))
        elif isinstance(v, jax.Array):
            v.block_until_ready()


class _Profiler:
    def __init__(self, graph: Graph, step: str | None) -> None:
        self.graph = graph
        self.step = step
        self.last_use = liveness(graph)
        self.outputs = set(graph.output_names)
        self.params = set(graph.initializers)
        self.categories: dict[str, str] = {}
        self.sizes: dict[str, tuple[int, list[int], str, str]] = {}
        self.live = 0
        self.peak = 0
        self.producer: dict[str, Node] = {}
        self.ended: dict[str, int] = {}  # node name -> monotonic ns at its end

    def _category(self, name: str, produced: bool) -> str:
        if name in self.outputs:
            return "output"
        if name in self.params:
            return "parameter"
        if not produced:
            return "input"
        return "activation" if self.last_use.get(name, -1) >= 0 else "temporary"

    def alloc(self, name: str, value: Any, produced: bool, op_name: str | None, now: int) -> int:
        nbytes = value_bytes(value)
        shape, dtype, device = _describe(value)
        category = self._category(name, produced)
        # a graph output that is also an input or initializer keeps its first category
        category = self.categories.setdefault(name, category)
        self.sizes[name] = (nbytes, shape, dtype, device)
        self.live += nbytes
        common = {"shape": shape, "dtype": dtype, "device": device, "category": category}
        bus.emit(
            E.PROFILE_TENSOR,
            {"monotonic_time": now},
            {"tensor_id": name, "storage_bytes": nbytes, **common},
        )
        bus.emit(
            E.PROFILE_MEMORY,
            {"monotonic_time": now},
            {
                "action": "alloc",
                "tensor_id": name,
                "bytes": nbytes,
                "op_name": op_name,
                **common,
            },
        )
        return nbytes

    def free(self, name: str, op_name: str | None, now: int) -> None:
        nbytes, shape, dtype, device = self.sizes.pop(name)
        self.live -= nbytes
        bus.emit(
            E.PROFILE_MEMORY,
            {"monotonic_time": now},
            {
                "action": "free",
                "tensor_id": name,
                "bytes": nbytes,
                "op_name": op_name,
                "shape": shape,
                "dtype": dtype,
                "device": device,
                "category": self.categories[name],
            },
        )

    def freeable(self, name: str) -> bool:
        return name in self.sizes and name not in self.outputs and name not in self.params

    def start(self, env: Mapping[str, Any]) -> None:
        now = time.monotonic_ns()
        for name in self.graph.initializers:
            self.alloc(name, env[name], False, None, now)
        for name in self.graph.input_names:
            if name in env and name not in self.sizes:
                self.alloc(name, env[name], False, None, now)
        self.peak = self.live
        for name in self.graph.input_names:
            if self.last_use.get(name, -1) < 0 and self.freeable(name):
                self.free(name, None, now)

    def node(self, node: Node, env: dict[str, Any]) -> None:
        reads = [n for n in node.inputs if n]
        t0 = time.monotonic_ns()
        outs = run_node(node, env)
        _block(outs)
        t1 = time.monotonic_ns()
        for name, value in zip(node.outputs, outs, strict=False):
            if name:
                env[name] = value
        # op record: the first output describes the op, storage counts all outputs
        produced = [(n, v) for n, v in zip(node.outputs, outs, strict=False) if n]
        first = produced[0][1] if produced else None
        shape, dtype, device = _describe(first)
        seen_inputs = dict.fromkeys(reads)
        bus.emit(
            E.PROFILE_OP,
            {"monotonic_time": t0},
            {
                "op_name": node.op_type,
                "inputs": list(node.inputs),
                "output": produced[0][0] if produced else None,
                "shape": shape,
                "dtype": dtype,
                "device": device,
                "duration_ns": t1 - t0,
                "storage_bytes": sum(value_bytes(v) for _, v in produced),
                "input_storage_bytes": sum(value_bytes(env.get(n)) for n in seen_inputs),
                "step": self.step,
            },
        )
        # data-flow edges, one per producer node
        producers = {self.producer[n].name for n in node.reads() if n in self.producer}
        for p in sorted(producers):
            bus.emit(
                E.EDGE,
                {"monotonic_time": t1},
                {"from_span": p, "to_span": node.name, "duration_ns": max(t0 - self.ended[p], 0)},
            )
        self.ended[node.name] = t1
        for name, value in produced:
            self.producer[name] = node
            self.alloc(name, value, True, node.op_type, t1)
        self.peak = max(self.peak, self.live)
        # frees: values whose last reader was this node, and outputs nothing reads
        for name in sorted(node.reads()):
            if self.last_use.get(name) == node.position and self.freeable(name):
                self.free(name, node.op_type, t1)
        for name, _ in produced:
            if self.last_use.get(name, -1) < 0 and self.freeable(name):
                self.free(name, node.op_type, t1)


def profile(
    model: Model | CompiledModel | Any,
    inputs: Mapping[str, Any] | None = None,
    /,
    *,
    step: Literal["forward", "backward", "optimizer"] | None = None,
    **kwargs: Any,
) -> ProfileResult:
    """Run ``model`` node by node and record op, tensor, memory and edge records.

    ``model`` is a ``Model``, a ``CompiledModel`` (its model is profiled, eagerly) or
    anything ``ember.runtime.load`` takes. ``inputs`` map input names to arrays, as for
    ``run``. ``step`` labels the op records (``forward`` in a training step). Records go
    to the open recordings (``ember.recorder.record``); without one the run still returns
    its outputs and memory figures. Errors are those of ``run``: ``InputError`` for wrong
    inputs, ``NodeError`` naming the node that failed.
    """
    import jax

    if isinstance(model, CompiledModel):
        model = model.model
    model = as_model(model)
    if inputs is None:
        inputs = kwargs
    elif kwargs:
        inputs = {**inputs, **kwargs}
    graph = model.graph
    with bus.span(E.RUN, {"source": model.source}):
        values = check_inputs(model, inputs)
        t_start = time.monotonic_ns()
        with jax.enable_x64(True):
            env: dict[str, Any] = dict(graph.initializers)
            for name, value in values.items():
                env[name] = to_device(value)
            _block(tuple(env[n] for n in values))
            prof = _Profiler(graph, step)
            prof.start(env)
            for node in graph.nodes:
                prof.node(node, env)
        outputs = {n: env[n] for n in graph.output_names}
    return ProfileResult(
        outputs=outputs,
        peak_bytes=prof.peak,
        end_bytes=prof.live,
        node_count=len(graph.nodes),
        duration_ns=time.monotonic_ns() - t_start,
        categories=dict(prof.categories),
    )
