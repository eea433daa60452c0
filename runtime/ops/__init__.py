"""The ONNX op library: each op is one small function, looked up by (domain, name, opset).

An op function takes the node's inputs as positional parameters (``None`` for an omitted
optional input) and its attributes as keyword parameters with the spec's defaults::

    @op("Gemm")
    def gemm(A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0): ...

Values are ``numpy.ndarray`` when they are known on the host (initializers, constants,
shape arithmetic folded from static shapes) and ``jax.Array`` (or a tracer) otherwise;
``xp(*values)`` picks ``numpy`` when every value is on the host, so an op fed only host
values returns a host value and shape arithmetic stays static inside ``jax.jit``. Results
keep the ONNX dtype of their inputs exactly; numpy's reductions and jax's small-integer
promotion are told the dtype explicitly. Ops with several outputs return a tuple.

Registration carries what graph analysis needs to find graph breaks:

- ``host_inputs``: indices of inputs whose *values* decide the output shape
  (``Reshape``'s shape, ``TopK``'s k). Fed by a computed value, the node is a break.
- ``value_shaped``: the output shape depends on the data itself (``NonZero``,
  ``Unique``), so the node always needs its inputs on the host.
- ``subgraphs``: the op takes graph attributes (``If``, ``Loop``, ``Scan``); they are
  given to the function as callables built by the interpreter.

Several versions of one op register with ``since``; ``lookup`` picks the newest version
that is not newer than the model's opset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "EMBER_DOMAIN",
    "RANDOM_OPS",
    "OpDef",
    "all_on_host",
    "each_tensor",
    "is_host",
    "lookup",
    "op",
    "registered",
    "xp",
]

EMBER_DOMAIN = "ai.ember"
"""The domain of ops that only Ember's own graph rewrites put in a graph
(``OneHotMatMul``; see ``ember.runtime.graph``)."""

RANDOM_OPS = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)
"""Ops that draw random numbers: two runs on the same inputs differ (never host-known
values, never moved out of a Loop, and the conformance cases that hold one say so)."""


@dataclass(frozen=True)
class OpDef:
    domain: str
    name: str
    since: int
    fn: Callable[..., Any]
    host_inputs: tuple[int, ...] = ()
    value_shaped: bool = False
    subgraphs: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[tuple[str, str], list[OpDef]] = {}


def op(
    name: str,
    *,
    since: int = 1,
    domain: str = "",
    host_inputs: tuple[int, ...] = (),
    value_shaped: bool = False,
    subgraphs: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the implementation of ``domain::name`` from opset ``since`` on."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        versions = _REGISTRY.setdefault((domain, name), [])
        versions.append(OpDef(domain, name, since, fn, host_inputs, value_shaped, subgraphs))
        versions.sort(key=lambda d: d.since)
        return fn

    return register


def lookup(name: str, opset: int, domain: str = "") -> OpDef | None:
    """The newest registered version of the op at or below ``opset``, or None."""
    _load_all()
    if domain == "ai.onnx":
        domain = ""
    best = None
    for d in _REGISTRY.get((domain, name), ()):
        if d.since <= opset:
            best = d
    return best


def registered() -> dict[tuple[str, str], list[OpDef]]:
    _load_all()
    return _REGISTRY


def is_host(value: Any) -> bool:
    """True for a value known on the host (numpy array or Python scalar)."""
    return isinstance(value, (np.ndarray, np.generic, int, float, bool))


def all_on_host(value: Any) -> bool:
    """True for an op value wholly on the host: a host tensor, every item of a sequence
    (a list), or None (an absent optional)."""
    if isinstance(value, list):
        return all(all_on_host(v) for v in value)
    return value is None or is_host(value)


def each_tensor(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert`` applied to an op value's tensors: a sequence (a list) item by item; None
    (an absent optional) stays None."""
    if isinstance(value, list):
        return [each_tensor(v, convert) for v in value]
    if value is None:
        return None
    return convert(value)


def xp(*values: Any) -> Any:
    """``numpy`` when every given value is on the host, else ``jax.numpy``."""
    if all(v is None or is_host(v) for v in values):
        return np
    import jax.numpy as jnp

    return jnp


_loaded = False


def _load_all() -> None:
    # Importing the op modules registers their ops; done on first lookup so that
    # ``import ember.runtime.ops`` stays cheap.
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
