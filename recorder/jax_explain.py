"""Why JAX compiled again: its cache-miss explanations and primitives run outside ``jit``, as
typed ``ArgChange`` records and one line for a person.

``parse_explanation`` reads the ``TRACING CACHE MISS`` text JAX logs when
``jax_explain_cache_misses`` is on: which function, whether it was ever traced, and what
differed from the closest key it had seen (argument shape, dtype, weak type, pytree
structure, tracing context), as ``x dim 0: 32 -> 16`` and ``{arg, what, old, new}`` dicts.

JAX gives no explanation for a single primitive compiled outside ``jit`` (``broadcast_in_dim``
for ``jnp.ones``): ``primitive_call`` takes what it is being compiled for (argument types and
parameters) from JAX's ``apply_primitive`` frame, and ``primitive_changes`` compares two such
calls (``primitive outside jit broadcast_in_dim: shape: (3,) -> (4,)``).

The compile watcher in ``jax_compiles.py`` attaches these to ``jit`` spans.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import jax

__all__ = [
    "DOC_LINK",
    "EXPLAIN_PREFIX",
    "PRIMITIVE_REASON",
    "UNKNOWN_REASON",
    "Explanation",
    "PrimitiveCall",
    "parse_explanation",
    "primitive_call",
    "primitive_changes",
    "type_change",
]

EXPLAIN_PREFIX = "TRACING CACHE MISS"
"""How JAX's cache-miss explanations start."""

# ---------------------------------------------------------------- cache-miss explanations

_NEVER_SEEN = re.compile(r"never seen function:\s*\n\s*(?P<name>.+?) id=\d+")
_FOR_FUN = re.compile(r"^\s*for (?P<name>.+?)(?: defined at .*)?$", re.M)
_TYPE_DIFF = re.compile(r"^\s*\* at (?P<arg>.+?), now (?P<new>.+) and before (?P<old>.+)$")
_TREE_DIFF = re.compile(
    r"^\s*\* at input path (?P<arg>.*?), now (?P<new>.+) and before (?P<old>.+?)"
    r"(?:, so (?P<why>.+))?$"
)
# "TRACING CACHE MISS at FILE:LINE:COL (CALLER) [costing 1.2 ms] [because]:" and
# "f id=... defined at FILE:LINE" / "for f defined at FILE:LINE"
_CALLED_AT = re.compile(r"^TRACING CACHE MISS at (?P<at>.+?)(?: costing [^:]*?)?(?: because)?:\s*$")
_DEFINED_AT = re.compile(r"defined at (?P<at>\S+)")
_CTX_DIFF = re.compile(r"^\s*\* (?P<arg>.+?) differs: now (?P<new>.+) and before (?P<old>.+)$")
_JAX_TYPE = re.compile(r"^(?P<dtype>[a-z]+[0-9a-z_]*)\[(?P<dims>[^\]]*)\]")
_SHORT_DTYPE = re.compile(r"^(bf|f|i|u|c)(\d+)$")
_DTYPE_PREFIX = {"bf": "bfloat", "f": "float", "i": "int", "u": "uint", "c": "complex"}
_WEAK = re.compile(r"\{weak_type=(True|False)\}")
# JAX appends a link to its weak-type docs to the last line of the explanation
DOC_LINK = re.compile(r"https?://\S+$", re.M)


def _numpy_dtype(short: str) -> str:
    m = _SHORT_DTYPE.match(short)
    return _DTYPE_PREFIX[m.group(1)] + m.group(2) if m else short


def _split_type(text: str) -> tuple[str, list[str]] | None:
    m = _JAX_TYPE.match(text.strip())
    if m is None:
        return None
    dims = [d.strip() for d in m.group("dims").split(",") if d.strip()]
    return _numpy_dtype(m.group("dtype")), dims


def _type_only(text: str) -> str:
    """``f32[2,3]`` of ``f32[2,3]({})``: the type, without what JAX writes after it."""
    m = _JAX_TYPE.match(text.strip())
    return m.group(0) if m else text.strip()


def type_change(arg: str, new: str, old: str) -> tuple[dict[str, Any], str]:
    """An ``ArgChange`` dict and a phrase such as ``x dim 0: 32 -> 16``. A shape change of one
    dimension names it (``dim``; old and new are then its sizes), as torch's changes do; any
    other keeps the whole types (``f32[8,3]``), the one notation of shapes."""
    change: dict[str, Any] = {"arg": arg, "what": "other", "old": old, "new": new}
    weak = _WEAK.search(new), _WEAK.search(old)
    if weak[0] and weak[1]:
        change["what"] = "weak_type"
        return change, f"{arg} weak_type: {weak[1].group(1)} -> {weak[0].group(1)}"
    n, o = _split_type(new), _split_type(old)
    if n is None or o is None:
        return change, f"{arg}: {old} -> {new}"
    (n_dtype, n_dims), (o_dtype, o_dims) = n, o
    phrases = []
    if n_dtype != o_dtype:
        change["what"] = "dtype"
        phrases.append(f"{arg} dtype: {o_dtype} -> {n_dtype}")
    if n_dims != o_dims:
        change["what"] = "shape" if n_dtype == o_dtype else change["what"]
        differ = [i for i, (a, b) in enumerate(zip(o_dims, n_dims, strict=False)) if a != b]
        if len(n_dims) != len(o_dims):  # the whole types, in the one notation: f32[8,3]
            phrases.append(f"{arg} shape: {_type_only(old)} -> {_type_only(new)}")
        else:
            phrases += [f"{arg} dim {i}: {o_dims[i]} -> {n_dims[i]}" for i in differ]
        one = differ[0] if len(differ) == 1 and len(n_dims) == len(o_dims) else None
        if change["what"] == "shape" and one is not None and o_dims[one].isdigit():
            if n_dims[one].isdigit():  # one dimension's size (as torch names it): named
                change.update(dim=one, old=o_dims[one], new=n_dims[one])
    if not phrases:  # same dtype and dims: sharding or memory kind differ
        phrases.append(f"{arg}: {old} -> {new}")
    return change, "; ".join(phrases)


_STATIC_VAL = re.compile(r"Static\(val=(?P<val>.*)\)$")
_POSITIONAL = re.compile(r"^\[0\]\[(?P<i>\d+)\]$")
_KEYWORD = re.compile(r"^\[1\]\[['\"](?P<k>.+)['\"]\]$")


def _static_change(path: str, new: str, old: str) -> tuple[dict[str, Any], str] | None:
    """A static argument whose value changed (JAX wraps it as ``Static(val=...)``):
    ``static arg 1: 2 -> 3``; None for any other pytree difference."""
    n, o = _STATIC_VAL.search(new), _STATIC_VAL.search(old)
    if n is None or o is None:
        return None
    pos, kw = _POSITIONAL.match(path), _KEYWORD.match(path)
    arg = f"arg {pos.group('i')}" if pos else kw.group("k") if kw else path
    change = {"arg": arg, "what": "static", "old": o.group("val"), "new": n.group("val")}
    return change, f"static {arg}: {o.group('val')} -> {n.group('val')}"


@dataclass
class Explanation:
    """JAX's explanation of one tracing-cache miss, parsed.

    ``first`` is True when JAX had never traced the function (not a retrace); then
    ``reason`` is None. Otherwise ``reason`` is one line for a person and ``changes``
    are the typed differences from the closest key JAX had seen.
    """

    fun_name: str
    first: bool
    reason: str | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    called_at: str | None = None
    """The call that traced it (``file.py:12:8 (test_step)``), when JAX says."""
    defined_at: str | None = None
    """Where the function is defined (``file.py:3``), when JAX says."""
    phrases: list[str] = field(default_factory=list)
    """``reason``'s parts, one per change (``reason`` is them joined by ``; ``)."""


def _locations(text: str) -> tuple[str | None, str | None]:
    """Where the traced call is and where the function is defined, as JAX wrote them."""
    called = _CALLED_AT.match(text.split("\n", 1)[0])
    defined = _DEFINED_AT.search(text)
    return (called.group("at") if called else None, defined.group("at") if defined else None)


def parse_explanation(text: str) -> Explanation | None:
    """Parse a ``TRACING CACHE MISS`` log message; None for any other message."""
    if not text.startswith(EXPLAIN_PREFIX):
        return None
    called_at, defined_at = _locations(text)
    m = _NEVER_SEEN.search(text)
    if m:
        return Explanation(m.group("name").strip(), True, None, [], text, called_at, defined_at)
    m = _FOR_FUN.search(text)
    name = m.group("name").strip() if m else "<unknown>"
    _, sep, diff = text.partition("For the closest previous key:")
    diff = DOC_LINK.sub("", diff.strip() if sep else text)
    changes: list[dict[str, Any]] = []
    phrases: list[str] = []
    lines = diff.splitlines()
    head = lines[0].strip() if lines else ""
    for line in lines[1:]:
        if head.startswith("different input types"):
            t = _TYPE_DIFF.match(line)
            if t:
                change, phrase = type_change(t.group("arg"), t.group("new"), t.group("old"))
                changes.append(change)
                phrases.append(phrase)
        elif head.startswith("different input pytree"):
            t = _TREE_DIFF.match(line)
            static = _static_change(t.group("arg"), t.group("new"), t.group("old")) if t else None
            if static is not None:
                changes.append(static[0])
                phrases.append(static[1])
            elif t:
                arg = t.group("arg") or "<args>"
                changes.append(
                    {"arg": arg, "what": "structure", "old": t.group("old"), "new": t.group("new")}
                )
                phrases.append(f"{arg} structure: {t.group('why') or 'differs'}")
        elif head.startswith("Tracing context"):
            t = _CTX_DIFF.match(line)
            if t:
                arg = f"context:{t.group('arg')}"
                changes.append(
                    {"arg": arg, "what": "other", "old": t.group("old"), "new": t.group("new")}
                )
                phrases.append(f"{t.group('arg')}: {t.group('old')} -> {t.group('new')}")
    reason = "; ".join(phrases) if phrases else head.rstrip(":") or diff
    return Explanation(name, False, reason, changes, text, called_at, defined_at, phrases)


# ---------------------------------------------------------------- primitives outside jit

UNKNOWN_REASON = (
    "reason unknown: the same argument types as the previous compile; "
    "run with JAX_EXPLAIN_CACHE_MISSES=1 to see what JAX's cache key saw"
)
"""The reason of a compile for which nothing recorded differs from the previous one: Ember
names no cause it has no evidence for, and says what would reveal one."""

PRIMITIVE_REASON = "primitive outside jit"
"""The start of a ``retrace_reason`` of a JAX primitive compiled again outside ``jit``."""

_PARAM_TEXT_MAX = 80


@dataclass
class PrimitiveCall:
    """A JAX primitive being compiled because it ran outside ``jit`` (op by op).

    JAX compiles such a primitive once per argument types and parameters
    (``jax._src.dispatch.xla_primitive_callable``), and its tracing-cache explanations do
    not cover it; ``args`` (``f32[3]``) and ``params`` (their text) are what it was
    compiled for, taken from JAX's ``apply_primitive`` frame.
    """

    name: str
    args: list[str]
    params: dict[str, str]


def _short_text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _PARAM_TEXT_MAX else text[: _PARAM_TEXT_MAX - 3] + "..."


def _arg_type(value: Any) -> str:
    try:
        return jax.typeof(value).str_short(short_dtypes=True)
    except Exception:  # not an array-like: its Python type
        return type(value).__name__


def primitive_call(name: str) -> PrimitiveCall | None:
    """The primitive ``name`` being run outside jit on this thread's stack, else None."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "apply_primitive" and code.co_filename.endswith("dispatch.py"):
            local = frame.f_locals
            prim = local.get("prim")
            if getattr(prim, "name", None) == name:
                return PrimitiveCall(
                    name,
                    [_arg_type(a) for a in local.get("args", ())],
                    {str(k): _short_text(v) for k, v in (local.get("params") or {}).items()},
                )
        frame = frame.f_back
    return None


def primitive_changes(old: PrimitiveCall, new: PrimitiveCall) -> tuple[str, list[dict[str, Any]]]:
    """Why a primitive outside jit compiled again: a reason and typed ``ArgChange`` dicts."""
    changes: list[dict[str, Any]] = []
    phrases: list[str] = []
    if len(old.args) != len(new.args):
        changes.append(
            {
                "arg": "<args>",
                "what": "structure",
                "old": ", ".join(old.args),
                "new": ", ".join(new.args),
            }
        )
        phrases.append(f"{len(old.args)} -> {len(new.args)} arguments")
    else:
        for i, (o, n) in enumerate(zip(old.args, new.args, strict=True)):
            if o != n:
                change, phrase = type_change(f"arg{i}", n, o)
                changes.append(change)
                phrases.append(phrase)
    for k in sorted(set(old.params) | set(new.params)):
        before, after = old.params.get(k), new.params.get(k)
        if before != after:
            changes.append({"arg": k, "what": "static", "old": before, "new": after})
            phrases.append(f"{k}: {before} -> {after}")
    detail = "; ".join(phrases) if phrases else UNKNOWN_REASON
    return f"{PRIMITIVE_REASON} {new.name}: {detail}", changes
