"""Name a retrace's arguments the way the program wrote them.

JAX explains a cache miss in terms of the function it traced. For ``jax.jit`` and Flax's
``nnx.jit`` that is the user's function and the names are right, except for static
arguments, which JAX names by position (``[0][2]``). ``equinox.filter_jit`` traces a wrapper
of its own: the arrays are ``dynamic_nodonate['rest'][0]`` and everything else is one
static blob holding the whole pytree structure. And the call site JAX reports is the
framework's (``flax/nnx/transforms/compilation.py``), not the program's.

``call_context()`` is called while JAX explains a miss (from its logger, on the tracing
thread) and reads the frames on the stack: JAX's ``_infer_params`` frame (the traced
function, its signature and the call's arguments) and, for equinox, the ``_call`` frame of
``filter_jit`` (the user's arguments before equinox split them). ``rename`` rewrites the
parsed explanation's argument names with them (``x``, ``batch['x']``, ``model.act``),
and for equinox works out which static values changed by comparing the call's
non-array leaves with those of the function's earlier traces (``scale: 2.0 -> 3``).
Frames are read only on a cache miss, never on a cached call.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import sys
import sysconfig
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import jax
import numpy as np

from . import jax_explain

__all__ = ["CallContext", "PmapCall", "call_context", "pmap_call", "pmap_changes", "rename"]

_STATIC_POSITIONAL = re.compile(r"^arg (?P<i>\d+)$")
_EQX_DYNAMIC = re.compile(
    r"^dynamic_(?:no)?donate\['(?P<part>first|rest|fun)'\]\[(?P<i>\d+)\](?P<rest>.*)$"
)
_VALUE_TEXT_MAX = 80
# the equinox static values of each function's earlier traces (for the closest one)
_EQX_SEEN: dict[int, list[dict[str, str]]] = {}
_EQX_LOCK = threading.Lock()
_EQX_KEEP = 64  # earlier traces kept per function


@dataclass
class CallContext:
    """The call JAX is tracing, read from the stack."""

    signature: inspect.Signature | None = None
    """The traced function's signature (``jax.jit``: the user's; ``nnx.jit``: the user's)."""
    eqx_args: tuple[Any, ...] | None = None
    """``equinox.filter_jit``: the user's positional arguments, keywords, signature."""
    eqx_kwargs: dict[str, Any] = field(default_factory=dict)
    eqx_key: int = 0
    called_at: str | None = None
    """The program's own frame that made the call (``train.py:40 (main)``)."""
    defined_at: str | None = None
    """Where the user's function is (``train.py:12``), when JAX named a wrapper's."""


@functools.cache
def _stdlib_dir() -> str:
    return sysconfig.get_paths()["stdlib"] + os.sep


def _library_dirs() -> tuple[str, ...]:
    """The folders of JAX, the frameworks and Ember: their frames are not the program's."""
    dirs = []
    for name in ("jax", "jaxlib", "flax", "equinox", "optax", "ember", "ember.recorder"):
        module = sys.modules.get(name)
        if (path := getattr(module, "__file__", None)) is not None:
            dirs.append(os.path.dirname(path) + os.sep)
    return tuple(dirs)


def _is_library(filename: str, dirs: tuple[str, ...]) -> bool:
    """A frame of a library (or of Python's own, its site-packages excepted)."""
    if filename.startswith("<") or filename.startswith(dirs):
        return True
    return filename.startswith(_stdlib_dir()) and "site-packages" not in filename


def call_context(frame: FrameType | None = None) -> CallContext:
    """Read the call being traced from the stack (see the module's docstring)."""
    ctx = CallContext()
    frame = frame or sys._getframe(1)
    dirs = _library_dirs()
    jit_seen = False
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if not jit_seen and code.co_name == "_infer_params" and filename.endswith("pjit.py"):
            jit_seen = True
            ctx.signature = getattr(frame.f_locals.get("ji"), "fun_signature", None)
        elif code.co_name == "_call" and filename.endswith(os.path.join("equinox", "_jit.py")):
            _read_equinox_frame(frame, ctx)
        elif ctx.called_at is None and not _is_library(filename, dirs):
            ctx.called_at = f"{filename}:{frame.f_lineno} ({code.co_name})"
            break
        frame = frame.f_back
    return ctx


def _read_equinox_frame(frame: FrameType, ctx: CallContext) -> None:
    local = frame.f_locals
    wrapper = local.get("jit_wrapper")
    args, kwargs = local.get("args"), local.get("kwargs")
    if wrapper is None or not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return
    ctx.eqx_args, ctx.eqx_kwargs = args, kwargs
    ctx.signature = getattr(wrapper, "_signature", None)
    ctx.eqx_key = id(getattr(wrapper, "_cached", wrapper))
    try:
        fn = inspect.unwrap(wrapper.__wrapped__)
        code = fn.__code__
        ctx.defined_at = f"{code.co_filename}:{code.co_firstlineno}"
    except Exception:  # a callable without code (a Module's method): keep JAX's
        pass


# ---------------------------------------------------------------- names


def _param_names(sig: inspect.Signature | None, count: int) -> list[str]:
    names = [p.name for p in sig.parameters.values()] if sig is not None else []
    positional = [
        n
        for n, p in zip(names, (sig.parameters.values() if sig else []), strict=False)
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    var = next(
        (p.name for p in (sig.parameters.values() if sig else []) if p.kind == p.VAR_POSITIONAL),
        None,
    )
    out = []
    for i in range(count):
        if i < len(positional):
            out.append(positional[i])
        elif var is not None:
            out.append(f"{var}[{i - len(positional)}]")
        else:
            out.append(f"arg {i}")
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _VALUE_TEXT_MAX else text[: _VALUE_TEXT_MAX - 3] + "..."


def _leaves_with_names(
    args: tuple[Any, ...], kwargs: dict[str, Any], sig: inspect.Signature | None
) -> list[tuple[bool, str, Any]]:
    """``(of the first argument, name, leaf)`` for every leaf of the call, named by the
    parameter and the leaf's pytree path (``batch['x']``)."""
    names = _param_names(sig, len(args))
    out: list[tuple[bool, str, Any]] = []
    values = [*zip(names, args, strict=True), *kwargs.items()]
    for j, (name, value) in enumerate(values):
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            out.append((j == 0 and bool(args), name + jax.tree_util.keystr(path), leaf))
    return out


def _is_array(x: Any) -> bool:
    return isinstance(x, jax.Array | jax.ShapeDtypeStruct) or type(x).__module__ == "numpy"


def _eqx_dynamic_name(ctx: CallContext, path: str) -> str:
    """``dynamic_nodonate['rest'][0]`` -> the call's first array after its first argument
    (``x``); ``['first'][i]`` counts the first argument's arrays (``model.weight``)."""
    m = _EQX_DYNAMIC.match(path)
    if m is None or ctx.eqx_args is None:
        return path
    part, i = m.group("part"), int(m.group("i"))
    if part == "fun":
        return f"<the function's arrays>[{i}]{m.group('rest')}"
    leaves = _leaves_with_names(ctx.eqx_args, ctx.eqx_kwargs, ctx.signature)
    arrays = [(first, n) for first, n, leaf in leaves if _is_array(leaf)]
    wanted = [n for first, n in arrays if first == (part == "first")]
    return wanted[i] + m.group("rest") if i < len(wanted) else path


def _module_statics(value: Any, name: str, out: dict[str, str]) -> None:
    """The static fields of equinox Modules inside ``value`` (``model.act``): they are in
    the pytree's structure, not its leaves."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            child = getattr(value, f.name, None)
            if f.metadata.get("static"):
                out[f"{name}.{f.name}"] = _short(child)
            else:
                _module_statics(child, f"{name}.{f.name}", out)
    elif isinstance(value, list | tuple):
        for i, child in enumerate(value):
            _module_statics(child, f"{name}[{i}]", out)
    elif isinstance(value, dict):
        for k, child in value.items():
            _module_statics(child, f"{name}[{k!r}]", out)


def _eqx_statics(ctx: CallContext) -> dict[str, str]:
    """Every value ``filter_jit`` holds static in this call, by name."""
    assert ctx.eqx_args is not None
    out: dict[str, str] = {}
    for _, name, leaf in _leaves_with_names(ctx.eqx_args, ctx.eqx_kwargs, ctx.signature):
        if not _is_array(leaf):
            out[name] = _short(leaf)
    names = _param_names(ctx.signature, len(ctx.eqx_args))
    for name, value in [*zip(names, ctx.eqx_args, strict=True), *ctx.eqx_kwargs.items()]:
        _module_statics(value, name, out)
    return out


def _static_diff(now: dict[str, str], before: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {"arg": k, "what": "static", "old": before.get(k), "new": now.get(k)}
        for k in sorted(set(now) | set(before), key=lambda k: (k not in now, k))
        if now.get(k) != before.get(k)
    ]


def _eqx_static_changes(ctx: CallContext) -> list[dict[str, Any]] | None:
    """Remember this trace's statics; the changes from the closest earlier trace."""
    try:
        now = _eqx_statics(ctx)
    except Exception:  # an odd pytree: keep JAX's words
        return None
    with _EQX_LOCK:
        seen = _EQX_SEEN.setdefault(ctx.eqx_key, [])
        diffs = [_static_diff(now, before) for before in seen]
        seen.append(now)
        del seen[:-_EQX_KEEP]
    return min(diffs, key=len) if diffs else None


def _renamed(phrase: str, old: str, new: str) -> str:
    """``phrase`` with the argument ``old`` called ``new`` where a name stands (before a
    space or a colon)."""
    return re.sub(re.escape(old) + r"(?=[ :])", lambda _: new, phrase)


def rename(exp: jax_explain.Explanation, ctx: CallContext) -> jax_explain.Explanation:
    """``exp`` with its arguments named as the program wrote them (see the docstring)."""
    if ctx.called_at is not None and _is_library(exp.called_at or "", _library_dirs()):
        exp.called_at = ctx.called_at
    if ctx.defined_at is not None:
        exp.defined_at = ctx.defined_at
    if ctx.eqx_args is not None:
        statics = _eqx_static_changes(ctx)
        if statics and any(c["what"] == "static" for c in exp.changes):
            kept = [i for i, c in enumerate(exp.changes) if c["what"] != "static"]
            exp.phrases = [exp.phrases[i] for i in kept] + [
                f"static {c['arg']}: {c['old'] or '(none)'} -> {c['new'] or '(none)'}"
                for c in statics
            ]
            exp.changes = [exp.changes[i] for i in kept] + statics
    if exp.first or not exp.changes or len(exp.phrases) != len(exp.changes):
        return exp
    names = _param_names(ctx.signature, 64) if ctx.signature is not None else []
    for i, change in enumerate(exp.changes):
        old = change["arg"]
        m = _STATIC_POSITIONAL.match(old)
        if m and ctx.eqx_args is None and int(m.group("i")) < len(names):
            change["arg"] = names[int(m.group("i"))]
        elif ctx.eqx_args is not None and change["what"] != "static":
            change["arg"] = _eqx_dynamic_name(ctx, old)
        new = str(change["arg"])
        if new != old:  # the name where a phrase has it: `x dim 0`, `static k:`
            exp.phrases[i] = _renamed(exp.phrases[i], old, new)
    exp.reason = "; ".join(exp.phrases)
    return exp


# ---------------------------------------------------------------- pmap


@dataclass
class PmapCall:
    """A ``jax.pmap`` call being compiled: the user's function and its arguments' types.

    JAX 0.10 runs ``pmap`` as a ``jit`` of its own function ``_fun`` (in ``pmap.py``) and,
    that function not being the program's, explains none of its cache misses: the bridge
    reads the call from pmap's ``wrapped`` frame and compares it with the previous one.
    """

    name: str
    args: dict[str, str]
    called_at: str | None = None
    """The program's own frame that called the pmapped function (``train.py:40 (main)``)."""
    defined_at: str | None = None
    """Where the pmapped function is (``train.py:12``)."""


def pmap_call(frame: FrameType | None = None) -> PmapCall | None:
    """The ``jax.pmap`` call on this thread's stack, else None."""
    frame = frame or sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wrapped" and code.co_filename.endswith("pmap.py"):
            return _read_pmap_frame(frame)
        frame = frame.f_back
    return None


def _read_pmap_frame(frame: FrameType) -> PmapCall | None:
    local = frame.f_locals
    infer = local.get("infer_params")
    closure = getattr(infer, "__closure__", None)
    if closure is None:
        return None
    names = infer.__code__.co_freevars  # type: ignore[union-attr]
    cells = dict(zip(names, (c.cell_contents for c in closure), strict=True))
    fun = getattr(cells.get("wrapped_fun"), "f", None)
    if fun is None:
        return None
    try:
        sig: inspect.Signature | None = inspect.signature(fun)
    except (TypeError, ValueError):
        sig = None
    args, kwargs = tuple(local.get("args", ())), dict(local.get("kwargs", {}))
    types = {name: _type_text(leaf) for _, name, leaf in _leaves_with_names(args, kwargs, sig)}
    code = getattr(inspect.unwrap(fun), "__code__", None)
    return PmapCall(
        str(getattr(fun, "__name__", "pmap")),
        types,
        called_at=call_context(frame).called_at,
        defined_at=f"{code.co_filename}:{code.co_firstlineno}" if code is not None else None,
    )


def _type_text(leaf: Any) -> str:
    """An argument's type, and where it is: pmap compiles again for an argument that moved
    from the host (numpy) onto the devices (an earlier call's output) at the same type."""
    try:
        text = jax.typeof(leaf).str_short(short_dtypes=True)
    except Exception:  # not an array: its value
        return _short(leaf)
    if isinstance(leaf, np.ndarray):
        return f"{text} on the host"
    devices = len(getattr(getattr(leaf, "sharding", None), "device_set", ()))
    return f"{text} on {devices} devices" if devices > 1 else text


_PLACED = re.compile(r"^(?P<type>\S+) on (?:the )?(?P<where>host|\d+ devices)$")


def _placed(text: str) -> tuple[str, str]:
    """An argument's ``_type_text`` as (type, where): ``f32[4] on the host`` ->
    (``f32[4]``, ``host``); a value or an array on one device is (text, ``1 device``)."""
    m = _PLACED.match(text)
    return (m["type"], m["where"]) if m else (text, "1 device")


def pmap_changes(old: PmapCall, new: PmapCall) -> tuple[str, list[dict[str, Any]]]:
    """Why ``pmap`` compiled ``new``'s function again: a reason and ``ArgChange`` dicts."""
    changes: list[dict[str, Any]] = []
    phrases: list[str] = []
    for name in [*new.args, *(n for n in old.args if n not in new.args)]:
        before, after = old.args.get(name), new.args.get(name)
        if before == after:
            continue
        if before is None or after is None:
            changes.append({"arg": name, "what": "structure", "old": before, "new": after})
            phrases.append(f"{name}: {before or '(none)'} -> {after or '(none)'}")
            continue
        (new_type, new_where), (old_type, old_where) = _placed(after), _placed(before)
        if new_type == old_type:  # the same type now elsewhere: w placement: host -> 4 devices
            change: dict[str, Any] = {
                "arg": name,
                "what": "placement",
                "old": old_where,
                "new": new_where,
            }
            phrase = f"{name} placement: {old_where} -> {new_where}"
        else:
            change, phrase = jax_explain.type_change(name, new_type, old_type)
        changes.append(change)
        phrases.append(phrase)
    # no recorded difference: say so, and what would show the cause, rather than guess one
    return "; ".join(phrases) or jax_explain.UNKNOWN_REASON, changes
