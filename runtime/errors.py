"""The errors the runtime raises: each names the file, node or input at fault and what to do."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = [
    "EmberRuntimeError",
    "ExternalDataError",
    "InputError",
    "LoadError",
    "NewerOpsetWarning",
    "NodeError",
    "UnsupportedOpsError",
]


class EmberRuntimeError(Exception):
    """Base class of the runtime's errors."""


class LoadError(EmberRuntimeError):
    """The model could not be read or is not a valid ONNX model."""


class ExternalDataError(LoadError):
    """An external data file is missing or lies outside the model's folder."""


class UnsupportedOpsError(EmberRuntimeError):
    """The graph uses ops the runtime does not implement.

    ``ops`` lists every ``(domain, op_type, opset)`` with the names of its nodes, so one
    error shows all the work a model needs instead of one op per attempt.
    """

    def __init__(self, ops: dict[tuple[str, str, int], list[str]], source: str | None = None):
        self.ops = ops
        where = f" in {source}" if source else ""
        lines = [f"{len(ops)} unsupported op(s){where}:"]
        for (domain, op_type, opset), nodes in sorted(ops.items()):
            shown = ", ".join(repr(n) for n in nodes[:5])
            more = f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""
            lines.append(f"  {domain or 'ai.onnx'}::{op_type} (opset {opset}): nodes {shown}{more}")
        folder = op_library_folder()
        where_ops = f", {folder}" if folder else ""
        lines.append(
            f"Implement them in the op library (package ember.runtime.ops{where_ops}; each op "
            "is a function registered with ember.runtime.ops.op) or convert the model to an "
            "opset whose ops are supported."
        )
        super().__init__("\n".join(lines))


def op_library_folder() -> Path | None:
    """The folder that holds ``ember.runtime.ops``, wherever ember is installed (a source
    checkout maps it to ``runtime/ops/``, an installed package has ``ember/runtime/ops/``);
    None if it cannot be found."""
    spec = importlib.util.find_spec("ember.runtime.ops")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class InputError(EmberRuntimeError, ValueError):
    """The inputs of a call do not match what the model expects."""


class NodeError(EmberRuntimeError):
    """An op failed while running; names the node, its op and its position."""


class NewerOpsetWarning(UserWarning):
    """The model uses an opset newer than the op library knows; it may still run."""
