"""Ember's runtime: ONNX models on JAX, with the events of Transmuter's telemetry (docs/design).

``load(source)`` reads a model (path, bytes, ``ModelProto`` or Hub source), ``compile(model)``
turns it into a ``CompiledModel`` of ``jax.jit`` segments with a per-position cache, and
``run(model, inputs)`` interprets it eagerly. ``ember.runtime.graph`` is the interpreter
(``interpret``, ``run_nodes``) that the op tests and profile mode build on.
"""

from ember.runtime.jit.compiled import CompiledModel, compile, run

from .errors import (
    EmberRuntimeError,
    ExternalDataError,
    InputError,
    LoadError,
    NewerOpsetWarning,
    NodeError,
    UnsupportedOpsError,
)
from .model import Model, TensorSpec, load
from .profile import profile

__all__ = [
    "CompiledModel",
    "EmberRuntimeError",
    "ExternalDataError",
    "InputError",
    "LoadError",
    "Model",
    "NewerOpsetWarning",
    "NodeError",
    "TensorSpec",
    "UnsupportedOpsError",
    "compile",
    "load",
    "profile",
    "run",
]
