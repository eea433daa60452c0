"""A compiled line check generated from the pydantic models (``records``): msgspec Structs.

Ingest checks every line of a trace. Pydantic (``RECORD``) explains a bad line best, but
parses and validates at ~0.3 M lines/s; the msgspec Structs here, generated from the same
models at import (``records`` stays the one truth; ``tests/analysis/test_line_check.py`` checks
that the two agree), check a whole chunk of lines in one C call (``Decoder.decode_lines``)
at several times that.

The rule: a line msgspec accepts is one pydantic accepts (the Structs are never looser:
unknown keys refused at every level, integers strict JSON integers within their bounds,
literals, required fields). msgspec may refuse a line pydantic takes (pydantic's lax
modes: ``"1.5"`` for a float, ``"yes"`` for a bool); a refused line goes to pydantic,
which decides and explains. What no model says is checked here too: a second ``meta``
(``check_lines``' ``meta_ok``) and the nesting limit (``MAX_NESTING``) of the values typed
``Any`` (a static value, a user attribute: every other field has a fixed shape).

Spans are discriminated twice (``kind``, then ``span_kind``); msgspec's tagged unions see
one tag, so a span's ``attrs`` is kept raw and checked by its span kind's Struct after.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal, Union

import annotated_types
import msgspec
from pydantic import BaseModel, Strict
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ember.schemas import records as R

__all__ = [
    "KIND_OF",
    "LINE",
    "SPAN_END",
    "SPAN_START",
    "check_lines",
    "decode_chunk",
    "decode_line",
    "non_blank",
    "struct_of",
]

# the constraints of the models, as msgspec.Meta's keywords (any other is an error here:
# a new kind of constraint in the models must be taught to this generator first)
_BOUNDS = {annotated_types.Ge: "ge", annotated_types.Le: "le", annotated_types.Lt: "lt"}
_SCALARS = (int, float, bool, str)


def _constraints(metadata: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        if isinstance(m, FieldInfo):
            out |= _constraints(list(m.metadata))
        elif isinstance(m, Strict):
            continue  # msgspec is strict: 1.5, "7" and true are not integers
        elif type(m) in _BOUNDS:
            key = _BOUNDS[type(m)]
            out[key] = getattr(m, key)
        else:
            raise TypeError(f"no msgspec constraint for {m!r} of the schema")
    return out


def _convert(annotation: Any, metadata: list[Any] | None = None) -> Any:
    """The msgspec type of one pydantic annotation (with its field's ``metadata``)."""
    meta = list(metadata or [])
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *more = typing.get_args(annotation)
        meta += more
    bounds = _constraints(meta)
    if annotation in _SCALARS:
        return Annotated[annotation, msgspec.Meta(**bounds)] if bounds else annotation
    if bounds:
        raise TypeError(f"bounds {bounds} on {annotation!r}, not a number")
    if annotation is Any or annotation is type(None):
        return annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return annotation
    if origin is list:
        return list[_convert(args[0])]  # type: ignore[misc]
    if origin is dict:
        return dict[_convert(args[0]), _convert(args[1])]  # type: ignore[misc]
    if origin in (Union, types.UnionType):
        return Union[tuple(_convert(a) for a in args)]  # noqa: UP007
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return struct_of(annotation)
    raise TypeError(f"no msgspec type for the schema annotation {annotation!r}")


def _default(info: FieldInfo) -> Any:
    if info.default_factory is not None:
        return msgspec.field(default_factory=info.default_factory)  # type: ignore[arg-type]
    if info.default is PydanticUndefined:
        return msgspec.NODEFAULT
    return info.default


def _renamed(info: FieldInfo) -> Any:
    assert info.alias is not None
    if info.default_factory is not None:
        return msgspec.field(name=info.alias, default_factory=info.default_factory)  # type: ignore[arg-type]
    if info.default is PydanticUndefined:
        return msgspec.field(name=info.alias)
    return msgspec.field(name=info.alias, default=info.default)


_STRUCTS: dict[tuple[type[BaseModel], str | None], type[msgspec.Struct]] = {}


def struct_of(
    model: type[BaseModel], tag: str | None = None, skip: frozenset[str] = frozenset()
) -> type[msgspec.Struct]:
    """The msgspec Struct of a pydantic model: its fields (JSON names, types, bounds,
    defaults), unknown fields refused. ``tag``: a member of the records' union on ``kind``
    (the ``kind`` field becomes the tag); ``skip``: fields left out (a span's ``span_kind``
    and ``attrs``, checked apart)."""
    key = (model, tag)
    if key in _STRUCTS and not skip:
        return _STRUCTS[key]
    fields: list[tuple[Any, ...]] = []
    for name, info in model.model_fields.items():
        json_name = info.alias or name
        if json_name in skip or (tag is not None and json_name == "kind"):
            continue
        typ = _convert(info.annotation, list(info.metadata))
        default = _default(info)
        if info.alias:
            fields.append((name, typ, _renamed(info)))
        elif default is msgspec.NODEFAULT:
            fields.append((name, typ))
        else:
            fields.append((name, typ, default))
    out = msgspec.defstruct(
        f"{model.__name__}Line",
        fields,
        forbid_unknown_fields=True,
        kw_only=True,
        tag_field="kind" if tag is not None else None,
        tag=tag,
        gc=False,
    )
    if not skip:
        _STRUCTS[key] = out
    return out


def _span_struct(base: type[BaseModel], kind: str) -> type[msgspec.Struct]:
    # ``span_kind`` (a string; its values are the keys of SPAN_ATTRS) and ``attrs``, raw:
    # checked by ``_ATTRS`` of the span kind after
    cls = struct_of(base, kind, skip=frozenset({"span_kind", "attrs"}))
    return msgspec.defstruct(
        f"{kind.title().replace('_', '')}Line",
        [("span_kind", str), ("attrs", msgspec.Raw)],
        bases=(cls,),
        forbid_unknown_fields=True,
        kw_only=True,
        tag_field="kind",
        tag=kind,
        gc=False,
    )


_SPAN_START = _span_struct(R._SpanStartBase, "span_start")
_SPAN_END = _span_struct(R._SpanEndBase, "span_end")
_KIND_STRUCTS = [
    struct_of(model, kind)
    for kind, model in (
        ("meta", R.Meta),
        ("cache", R.Cache),
        ("hub", R.Hub),
        ("op", R.Op),
        ("tensor", R.Tensor),
        ("memory", R.Memory),
        ("device_memory", R.DeviceMemory),
        ("gradient", R.Gradient),
        ("edge", R.Edge),
        ("process", R.Process),
    )
]
_META = _KIND_STRUCTS[0]
LINE: Any = Union[tuple([_SPAN_START, _SPAN_END, *_KIND_STRUCTS])]  # noqa: UP007
"""One line of a trace, as msgspec checks it (a span's attrs raw: ``check_lines``)."""

_DECODE = msgspec.json.Decoder(LINE)
# (span_start or span_end Struct, span kind) -> the decoder of its attrs
_ATTRS: dict[tuple[type[msgspec.Struct], str], msgspec.json.Decoder[Any]] = {
    (cls, span_kind): msgspec.json.Decoder(struct_of(pair[which]))
    for span_kind, pair in R.SPAN_ATTRS.items()
    for which, cls in ((0, _SPAN_START), (1, _SPAN_END))
}


# ---------------------------------------------------------------- nesting of Any values


def _any_paths(struct: type[msgspec.Struct]) -> tuple[str, ...]:
    """The fields of a Struct through which an ``Any`` value can be reached."""
    return tuple(
        f
        for f, t in zip(struct.__struct_fields__, _field_types(struct), strict=True)
        if _holds_any(t)
    )


def _field_types(struct: type[msgspec.Struct]) -> list[Any]:
    hints = typing.get_type_hints(struct, include_extras=True)
    return [hints[f] for f in struct.__struct_fields__]


def _holds_any(t: Any) -> bool:
    if t is Any:
        return True
    if isinstance(t, type) and issubclass(t, msgspec.Struct):
        return bool(_any_paths(t))
    return any(_holds_any(a) for a in typing.get_args(t) if a is not Ellipsis)


def _depth(value: Any) -> int:
    """How deeply lists, dicts and Structs nest in a decoded value (iteratively)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, msgspec.Struct):
            items: Any = [getattr(v, f) for f in v.__struct_fields__]
        elif isinstance(v, dict):
            items = v.values()
        elif isinstance(v, list):
            items = v
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((x, level + 1) for x in items if isinstance(x, (dict, list, msgspec.Struct)))
    return deepest


def _may_be_too_deep(obj: Any) -> bool:
    """Whether a decoded record or span attrs may nest past ``MAX_NESTING``: only its
    ``Any`` values can. The record counts as 1 and a span's attrs as 2, so a field's value
    is at most 2 below the record: a value that nests ``MAX_NESTING - 2`` deep or more goes
    to pydantic's exact rule (``parse_line``)."""
    for f in _ANY_PATHS[type(obj)]:
        value = getattr(obj, f)
        if value and _depth(value) + 2 > R.MAX_NESTING:
            return True
    return False


_ANY_PATHS: dict[type, tuple[str, ...]] = {
    s: p
    for s in [
        *_KIND_STRUCTS,
        *(struct_of(pair[w]) for pair in R.SPAN_ATTRS.values() for w in (0, 1)),
    ]
    if (p := _any_paths(s))
}


# ---------------------------------------------------------------- checking lines


def _records_ok(records: list[Any], meta_ok: bool) -> bool:
    """Whether decoded records are all accepted: their span attrs by their span kind's
    Struct (grouped, one ``decode_lines`` a group), their ``Any`` values not too deep, and
    no ``meta`` but the first when ``meta_ok``."""
    starts: dict[str, list[msgspec.Raw]] = {}  # span kind -> attrs, of span_start records
    ends: dict[str, list[msgspec.Raw]] = {}
    any_paths = _ANY_PATHS
    metas = 0
    # (the hot loop of the check: a record costs a few dict lookups, no call; the Any
    # fields' rule is ``_may_be_too_deep``'s, inlined)
    for r in records:
        cls = type(r)
        if cls is _SPAN_START or cls is _SPAN_END:
            by_kind = starts if cls is _SPAN_START else ends
            group = by_kind.get(r.span_kind)
            if group is None:
                group = by_kind[r.span_kind] = []
            group.append(r.attrs)
        elif cls is _META:
            metas += 1
        else:
            paths = any_paths.get(cls)
            if paths:
                for f in paths:
                    value = getattr(r, f)
                    if value and _depth(value) + 2 > R.MAX_NESTING:
                        return False
    if metas and not (meta_ok and metas == 1 and type(records[0]) is _META):
        return False
    return _attrs_ok(_SPAN_START, starts) and _attrs_ok(_SPAN_END, ends)


def _attrs_ok(cls: type, attrs: dict[str, list[msgspec.Raw]]) -> bool:
    """Whether the span attrs of records of ``cls`` (span_start or span_end), by span kind,
    are accepted by their span kind's Struct (one ``decode_lines`` a span kind)."""
    for span_kind, raws in attrs.items():
        decoder = _ATTRS.get((cls, span_kind))
        if decoder is None:
            return False
        try:
            # a line holds no raw newline, so neither do its attrs: one value a line
            decoded = decoder.decode_lines(b"\n".join(raws))
        except (msgspec.DecodeError, RecursionError):
            return False
        if len(decoded) != len(raws):
            return False  # (an attrs that is blank: never valid JSON)
        if decoded and type(decoded[0]) in _ANY_PATHS and any(map(_may_be_too_deep, decoded)):
            return False
    return True


def decode_chunk(chunk: bytes, meta_ok: bool = False) -> tuple[list[bytes], list[Any]] | None:
    """``(lines, records)``: the non-blank lines of ``chunk`` (whole JSONL lines) and their
    records, when msgspec accepts them all (the usual case: a few C calls); else None (then
    ``decode_line`` tells which). ``meta_ok``: the chunk's first line may be a ``meta``
    record (a file read from its start); any other ``meta`` is refused (one file is one
    run). A refused line is not necessarily invalid: pydantic decides (the module doc)."""
    try:
        records = _DECODE.decode_lines(chunk)
    except (msgspec.DecodeError, RecursionError):
        return None
    lines = [line for line in chunk.split(b"\n") if line and not line.isspace()]
    if len(lines) != len(records) or not _records_ok(records, meta_ok):
        return None
    return lines, records


def decode_line(line: bytes, meta_ok: bool = False) -> Any | None:
    """The record of one line when msgspec accepts it, else None."""
    try:
        record = _DECODE.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
    return record if _records_ok([record], meta_ok) else None


def non_blank(chunk: bytes) -> list[bytes]:
    """The lines of ``chunk`` that hold more than whitespace (as ingest counts its rows)."""
    return [line for line in chunk.split(b"\n") if line.strip()]


def check_lines(chunk: bytes, meta_ok: bool = False) -> tuple[int, list[int]]:
    """``(records, refused)``: how many non-blank lines ``chunk`` (whole JSONL lines) holds,
    and those msgspec does not accept, as indexes among them."""
    decoded = decode_chunk(chunk, meta_ok)
    if decoded is not None:
        return len(decoded[0]), []
    lines = non_blank(chunk)
    refused = [i for i, line in enumerate(lines) if decode_line(line, meta_ok and i == 0) is None]
    return len(lines), refused


KIND_OF: dict[type, str] = {
    cls: cls.__struct_config__.tag  # type: ignore[misc]
    for cls in (_SPAN_START, _SPAN_END, *_KIND_STRUCTS)
}
"""The record kind of each Struct ``decode_chunk`` and ``decode_line`` return."""
SPAN_START: type = _SPAN_START
SPAN_END: type = _SPAN_END
