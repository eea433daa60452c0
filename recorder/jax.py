"""The JAX bridge: record any JAX program's compiles, steps and gradients.

``ember.recorder.jax`` is imported on first use (``ember.recorder`` itself never imports
JAX). It has three parts:

- ``CompileWatcher`` (``watch_compiles()``) listens to ``jax.monitoring`` and turns each
  compile into a ``jit`` span: the function's name, its tracing, lowering
  (``jaxpr_to_mlir_module``) and backend-compile durations, the persistent-cache result,
  and why JAX traced it again. The reason comes from JAX's own cache-miss explanations
  (the ``jax_explain_cache_misses`` option, switched on while watching and restored
  after), parsed into typed ``ArgChange`` records: which argument, what changed (shape,
  dtype, weak type, structure), old and new type.
- ``record_gradients(step, grads)`` writes one ``gradient`` record per leaf of a pytree
  of gradients: its key (the pytree path), its state (present, zero, non_finite,
  missing) and its L2 norm.
- ``ProfileSession(path, phase="train")`` opens a recording with both, and ``step()``
  spans for the forward, backward and optimizer parts of a training step.

The parts live in five modules: ``jax_explain.py`` reads why JAX compiled again (its
cache-miss explanations, primitives outside ``jit``), ``jax_names.py`` names a retrace's
arguments as the program wrote them (static parameters, ``equinox.filter_jit``'s pytree
paths, ``jax.pmap``'s function), ``jax_compiles.py`` turns compiles into ``jit`` spans
(the ``jax.monitoring`` listeners and ``CompileWatcher``), ``jax_steps.py`` makes the
top-level calls of jitted functions ``step`` spans (``jit_steps``, what ``ember record``
uses), and this one records gradients and steps and is the front: every name in
``__all__`` is importable from here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal

import jax
import numpy as np

from . import bus
from . import events as E
from .jax_compiles import CompileWatcher, watch_compiles
from .jax_explain import (
    PRIMITIVE_REASON,
    Explanation,
    PrimitiveCall,
    parse_explanation,
    primitive_call,
    primitive_changes,
)
from .recorder import Recorder, check_step_label, record

__all__ = [
    "PRIMITIVE_REASON",
    "CompileWatcher",
    "Explanation",
    "PrimitiveCall",
    "ProfileSession",
    "StepHandle",
    "gradient_records",
    "parse_explanation",
    "primitive_call",
    "primitive_changes",
    "record_gradients",
    "watch_compiles",
]


# ---------------------------------------------------------------- gradients


def _key_part(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def gradient_records(grads: Any) -> list[dict[str, Any]]:
    """``{key, state, norm}`` for each leaf of a gradient pytree, in pytree order.

    ``key`` is the pytree path joined by ``/`` (``layers/0/w``); ``state`` is
    ``non_finite`` (a NaN or inf anywhere; then ``norm`` is None), ``zero`` (all zeros),
    ``present``, or ``missing`` for a ``None`` leaf. ``norm`` is the L2 norm, computed on
    the host in float64.
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(grads, is_leaf=lambda x: x is None)
    values = jax.device_get([leaf for _, leaf in leaves])
    out: list[dict[str, Any]] = []
    for (path, _), value in zip(leaves, values, strict=True):
        key = "/".join(_key_part(p) for p in path) or "<root>"
        if value is None:
            out.append({"key": key, "state": "missing", "norm": None})
            continue
        arr = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            out.append({"key": key, "state": "non_finite", "norm": None})
            continue
        norm = math.sqrt(float(np.sum(np.square(arr))))
        out.append({"key": key, "state": "zero" if norm == 0.0 else "present", "norm": norm})
    return out


def record_gradients(
    step: int | None, grads: Any, *, root: str = "params", phase: str = "train"
) -> list[dict[str, Any]]:
    """Emit one ``gradient`` record per leaf of ``grads`` (see ``gradient_records``).

    ``root`` names the pytree (``params``); ``step`` is the training step's index.
    Returns the records' fields.
    """
    recs = gradient_records(grads)
    for i, r in enumerate(recs):
        bus.emit(
            E.GRADIENT,
            None,
            {
                "event_id": f"{phase}-grad-{root}-{step if step is not None else 'x'}-{i}",
                "step": step,
                "root": root,
                **r,
            },
        )
    return recs


# ---------------------------------------------------------------- a session


class StepHandle:
    """What ``ProfileSession.step`` yields: say which values the step computes."""

    __slots__ = ("results", "span")

    def __init__(self, span: bus.SpanHandle) -> None:
        self.span = span
        self.results: list[Any] | None = None

    def wait_for(self, *values: Any) -> None:
        """The step's results (pytrees): a synced step ends when these are ready."""
        self.results = [*(self.results or []), *values]

    @property
    def span_id(self) -> int:
        return self.span.span_id

    def set(self, **metadata: Any) -> None:
        """Stop metadata of the span (see ``bus.SpanHandle.set``)."""
        self.span.set(**metadata)

    def measure(self, **measurements: Any) -> None:
        """Stop measurements of the span (see ``bus.SpanHandle.measure``)."""
        self.span.measure(**measurements)


class ProfileSession:
    """A recording of a JAX program: compiles, steps, gradients, in one trace file.

    ::

        with ProfileSession("train.jsonl", phase="train", model="mlp") as session:
            for i, batch in enumerate(data):
                with session.step("forward", i):
                    loss, grads = grad_fn(params, batch)
                session.record_gradients(i, grads)
                with session.step("optimizer", i):
                    params, opt_state = update(params, opt_state, grads)

    Keyword arguments other than the named ones become the run's tags. Device memory is
    the runtime's business (the recorder does not import it): add
    ``ember.runtime.memory.MemorySampler(0.1)`` around the loop for a memory timeline.
    """

    def __init__(
        self,
        path: Any,
        *,
        phase: Literal["infer", "train"] = "train",
        entrypoint: str | None = None,
        explain: bool = True,
        sync: bool = True,
        **tags: Any,
    ) -> None:
        if phase not in ("infer", "train"):
            raise ValueError(f"ProfileSession: phase must be 'train' or 'infer', got {phase!r}")
        self.phase = phase
        self.sync = sync
        self._record = record(path, phase=phase, entrypoint=entrypoint, sync=sync, **tags)
        self.recorder: Recorder = self._record.__enter__()
        try:
            self.compiles = CompileWatcher(explain=explain).start()
        except BaseException:
            self._record.__exit__(None, None, None)
            raise
        self._closed = False

    @property
    def path(self) -> Any:
        return self.recorder.path

    def step(
        self,
        step: str,
        index: int | None = None,
        *,
        sync: bool | None = None,
    ) -> AbstractContextManager[StepHandle]:
        """A ``step`` span named ``step`` around the block: any label (``train``, ``eval``,
        or candle-graph's ``forward``, ``backward``, ``optimizer``), ``index`` its number.

        With ``sync`` (default: the session's) the span ends when the step's results are
        ready: the values given to ``handle.wait_for(...)``, or, when none were given,
        every live JAX array (``jax.live_arrays()``). The end then carries ``dispatch_ns``,
        the time until the block's work was dispatched. Without it the span ends when the
        block returns, which for JAX's asynchronous dispatch is dispatch time.
        """
        check_step_label(step, "ProfileSession.step")
        return self._step(step, index, self.sync if sync is None else sync)

    @contextmanager
    def _step(self, step: str, index: int | None, sync: bool) -> Iterator[StepHandle]:
        with bus.span(E.STEP, {"step": step, "index": index}) as span:
            handle = StepHandle(span)
            yield handle
            if sync:
                dispatched = time.monotonic_ns()
                jax.block_until_ready(
                    handle.results if handle.results is not None else jax.live_arrays()
                )
                if span.start:
                    span.set(dispatch_ns=dispatched - span.start)

    def record_gradients(
        self, step: int | None, grads: Any, *, root: str = "params"
    ) -> list[dict[str, Any]]:
        """One ``gradient`` record per parameter (see ``record_gradients``)."""
        return record_gradients(step, grads, root=root, phase=self.phase)

    def close(self) -> None:
        """Stop recording; ``TraceWriteError`` if records could not be written."""
        self._close(None, None, None)

    def _close(self, *exc: Any) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.compiles.stop()
        finally:
            # with the block's exception, so that a failed trace does not hide it
            self._record.__exit__(*exc)

    def __enter__(self) -> ProfileSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close(*exc)
