"""Automatic steps: the top-level calls of a program's jitted and pmapped functions are its
steps.

A JAX training loop calls one jitted function per step (``train_step``), sometimes a few
(``eval_step`` every N steps). ``jit_steps()`` makes each such call a ``step`` span without
any change to the program: while it is open, ``jax.jit`` and ``jax.pmap`` return their usual
function wrapped in ``JitStep``, whose calls made at the top level (not while JAX traces
something, not inside another step) are ``step`` spans labelled with the function's name, or
with the label ``labels`` gives that name (``{"train_step": "train"}``), numbered by the
function's call count (0, 1, ...) and naming the function (``fun_name``): a step without a
``jit`` span inside was served from JAX's in-memory cache, a hit. ``flax.nnx.jit`` and
``equinox.filter_jit`` call ``jax.jit`` underneath and are covered the same way; functions
jitted before the block (JAX's own ``jax.random`` helpers) are not.

A step span ends when the call returns, which for JAX's asynchronous dispatch is when the
work was dispatched, unless ``sync`` is on: then it ends when the call's outputs are ready
(``block_until_ready`` on them), which serialises the program's dispatch with its
computation. Everything else about the function (``lower``, ``trace``, ``eval_shape``,
attributes, use as a method) is the jitted function's own.
"""

from __future__ import annotations

import functools
import itertools
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import jax

from . import bus
from . import events as E
from .recorder import check_step_label

__all__ = ["JitStep", "jit_steps"]

try:  # whether JAX is tracing something now: a call inside it is not a step
    from jax._src.core import trace_state_clean as _top_level
except ImportError:  # pragma: no cover - another JAX layout: every call counts

    def _top_level() -> bool:
        return True


_state = threading.local()  # .depth: how many steps are open in this thread


class JitStep:
    """A jitted function whose top-level calls are ``step`` spans (see the module)."""

    __slots__ = ("__wrapped__", "_calls", "_fun_name", "_label", "_sync")

    def __init__(
        self, jitted: Callable[..., Any], label: str, sync: bool, fun_name: str | None = None
    ) -> None:
        self.__wrapped__ = jitted
        self._label = label
        self._fun_name = fun_name or label
        self._sync = sync
        self._calls = itertools.count()  # next() is atomic: no lock on the call path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(_state, "depth", 0) or not _top_level():
            return self.__wrapped__(*args, **kwargs)
        _state.depth = 1
        try:
            attrs = {"step": self._label, "index": next(self._calls), "fun_name": self._fun_name}
            with bus.span(E.STEP, attrs):
                out = self.__wrapped__(*args, **kwargs)
                if self._sync:
                    jax.block_until_ready(out)
                return out
        finally:
            _state.depth = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        # a jitted method: bound like the function it wraps
        return self if obj is None else types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"JitStep({self.__wrapped__!r}, label={self._label!r})"


def _name_of(fun: Any) -> str:
    return str(getattr(fun, "__name__", None) or type(fun).__name__)


def _wrapping(
    original: Callable[..., Any], labels: Mapping[str, str], sync: bool
) -> Callable[..., Any]:
    """``jax.jit`` or ``jax.pmap`` as it is, its functions wrapped in ``JitStep``."""

    def step_of(made: Callable[..., Any], fun: Any) -> JitStep:
        name = _name_of(fun)
        return JitStep(made, labels.get(name, name), sync, name)

    @functools.wraps(original)
    def transform(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        if not args:  # jax.jit(static_argnums=...) as a decorator factory
            return lambda fun: step_of(made(fun), fun)
        return step_of(made, args[0])

    return transform


@contextmanager
def jit_steps(labels: Mapping[str, str] | None = None, *, sync: bool = False) -> Iterator[None]:
    """While open, ``jax.jit`` and ``jax.pmap`` return ``JitStep`` functions (see the
    module's docstring).

    ``labels`` maps a function's name to its step's label (``{"train_step": "train"}``);
    other functions are labelled with their own name.
    """
    labels = dict(labels or {})
    for label in labels.values():
        check_step_label(label, "jit_steps")
    original_jit, original_pmap = jax.jit, jax.pmap
    jit, pmap = _wrapping(original_jit, labels, sync), _wrapping(original_pmap, labels, sync)
    jax.jit, jax.pmap = jit, pmap
    try:
        yield
    finally:
        # the program may have put its own: only ours are taken back
        if jax.jit is jit:
            jax.jit = original_jit
        if jax.pmap is pmap:
            jax.pmap = original_pmap
