"""DuckDB column types derived from the pydantic models, so ``schemas/`` stays the one truth.

``duckdb_type(annotation)`` maps one pydantic field annotation to a DuckDB type;
``TABLE_COLUMNS`` gives, per record kind, the columns of its table (name -> type), and
``READ_COLUMNS`` the union of them all, which is what ingest asks ``read_json`` to read
(one typed pass over a file, whatever kinds it mixes).

Mapping: ``int`` -> BIGINT, ``float`` -> DOUBLE, ``bool`` -> BOOLEAN, ``str`` and
``Literal[...]`` of strings -> VARCHAR, ``list[X]`` -> ``X[]``, a model -> STRUCT of its
fields, ``dict`` and ``Any`` -> JSON, ``X | None`` -> X (every column is nullable; the
checks of required fields are generated separately, see ``required_checks``). A union
of different types (``int | Literal["end"]``) is VARCHAR. Spans: the start and end of
every span kind share one table each; their ``attrs`` is one STRUCT with the union of
the attribute fields of all span kinds (the same name always has the same type, which
``_merge_struct`` checks). ``READ_COLUMNS`` reads as JSON a field two kinds type
differently (``step``) and a strict field (``ts_ns``), whose JSON type the checks look at.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union

from pydantic import BaseModel, Strict
from pydantic.fields import FieldInfo

from ember.schemas import records as R

_T = TypeVar("_T")

__all__ = [
    "KIND_MODELS",
    "READ_COLUMNS",
    "READ_TYPES",
    "TABLE_COLUMNS",
    "TABLE_TYPES",
    "duckdb_type",
    "literal_values",
    "model_columns",
    "per_record_kind",
    "struct_sql",
    "transform_structure",
]

_SCALARS: dict[Any, str] = {int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN", str: "VARCHAR"}

# a type is either a string (scalar or JSON), ("list", inner) or ("struct", {name: type})
DuckType = Any


def strip_optional(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return strip_optional(args[0])
        return Union[tuple(args)]  # noqa: UP007
    return annotation


def unwrap_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def duckdb_type(annotation: Any) -> DuckType:
    """The DuckDB type of one pydantic field annotation (as a nested description)."""
    annotation = strip_optional(unwrap_annotated(annotation))
    annotation = unwrap_annotated(annotation)
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if annotation is Any:
        return "JSON"
    origin = typing.get_origin(annotation)
    if origin is Literal:
        values = typing.get_args(annotation)
        if all(isinstance(v, bool) for v in values):
            return "BOOLEAN"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return "BIGINT"
        return "VARCHAR"
    if origin in (list, tuple, set, frozenset):
        return ("list", duckdb_type(typing.get_args(annotation)[0]))
    if origin is dict:
        return "JSON"
    if origin in (Union, types.UnionType):
        inner = {_type_sql(duckdb_type(a)) for a in typing.get_args(annotation)}
        return inner.pop() if len(inner) == 1 else "VARCHAR"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("struct", model_columns(annotation))
    raise TypeError(f"no DuckDB type for the schema annotation {annotation!r}")


def _field_name(name: str, info: FieldInfo) -> str:
    return info.alias or name


def model_columns(model: type[BaseModel]) -> dict[str, DuckType]:
    """``{json field name: DuckDB type}`` of a model, in declaration order."""
    return {
        _field_name(name, info): duckdb_type(info.annotation)
        for name, info in model.model_fields.items()
    }


def _type_sql(t: DuckType) -> str:
    if isinstance(t, str):
        return t
    if t[0] == "list":
        return f"{_type_sql(t[1])}[]"
    return struct_sql(t[1])


def struct_sql(fields: dict[str, DuckType]) -> str:
    """``STRUCT("a" BIGINT, ...)`` of a field dict."""
    return "STRUCT(" + ", ".join(f'"{k}" {_type_sql(v)}' for k, v in fields.items()) + ")"


def _merge_struct(into: dict[str, DuckType], fields: dict[str, DuckType], where: str) -> None:
    for name, t in fields.items():
        old = into.get(name)
        if old is None:
            into[name] = t
        elif old != t:
            if isinstance(old, tuple) and isinstance(t, tuple) and old[0] == t[0] == "struct":
                _merge_struct(old[1], t[1], f"{where}.{name}")
            elif _type_sql(old) != _type_sql(t):
                raise TypeError(
                    f"{where}.{name} has two types: {_type_sql(old)} and {_type_sql(t)}"
                )


def span_columns(which: int) -> dict[str, DuckType]:
    base = R._SpanStartBase if which == 0 else R._SpanEndBase
    cols = model_columns(base)
    cols["span_kind"] = "VARCHAR"
    attrs: dict[str, DuckType] = {}
    for kind, pair in R.SPAN_ATTRS.items():
        _merge_struct(attrs, model_columns(pair[which]), f"span {kind} attrs")
    cols["attrs"] = ("struct", attrs)
    return cols


KIND_MODELS: dict[str, type[BaseModel]] = {
    "meta": R.Meta,
    "cache": R.Cache,
    "hub": R.Hub,
    "op": R.Op,
    "tensor": R.Tensor,
    "memory": R.Memory,
    "device_memory": R.DeviceMemory,
    "gradient": R.Gradient,
    "edge": R.Edge,
    "process": R.Process,
}
"""The model of each record kind other than spans (whose models depend on span_kind)."""


def per_record_kind(span: Callable[[int], _T], other: Callable[[str], _T]) -> dict[str, _T]:
    """Record kind -> ``span(0)`` for span_start, ``span(1)`` for span_end (their models
    depend on span_kind), ``other(kind)`` for the rest; in ``RECORD_KINDS`` order."""
    spans = {"span_start": 0, "span_end": 1}
    return {kind: span(spans[kind]) if kind in spans else other(kind) for kind in R.RECORD_KINDS}


def _kind_columns() -> dict[str, dict[str, DuckType]]:
    """Record kind -> its columns, built anew (``_read_types`` merges into them in place)."""
    return per_record_kind(span_columns, lambda kind: model_columns(KIND_MODELS[kind]))


TABLE_TYPES: dict[str, dict[str, DuckType]] = _kind_columns()
"""Record kind -> {column: type description} of its table (before the ingest columns)."""

TABLE_COLUMNS: dict[str, dict[str, str]] = {
    kind: {k: _type_sql(v) for k, v in cols.items()} for kind, cols in TABLE_TYPES.items()
}
"""Record kind -> {column: DuckDB type} of its table (before the ingest columns)."""


def transform_structure(t: DuckType) -> str:
    """The structure ``json_transform(json, structure)`` turns JSON text of type ``t`` with."""

    def walk(t: DuckType) -> Any:
        if isinstance(t, str):
            return t
        if t[0] == "list":
            return [walk(t[1])]
        return {k: walk(v) for k, v in t[1].items()}

    return json.dumps(walk(t), separators=(",", ":"))


def _is_strict(annotation: Any, metadata: list[Any]) -> bool:
    """Whether a field (through ``X | None`` and ``Annotated``) is a strict scalar."""
    if any(isinstance(m, Strict) and m.strict for m in metadata):
        return True
    ann = annotation
    while True:
        if typing.get_origin(ann) is typing.Annotated:
            args = typing.get_args(ann)
            if any(isinstance(m, Strict) and m.strict for m in args[1:]):
                return True
            ann = args[0]
            continue
        stripped = strip_optional(ann)
        if stripped is ann:
            return False
        ann = stripped


def strict_fields() -> set[str]:
    """Top-level fields pydantic checks strictly (the integers: a JSON integer, not ``true``
    or ``1.5``). A list of integers (``shape``) is staged as JSON text by DuckDB's ingest
    (``checks.STRUCT_COLUMNS``), whose structure tells an integer from a fraction."""
    models: list[type[BaseModel]] = [R._SpanStartBase, R._SpanEndBase, *KIND_MODELS.values()]
    out = set()
    for model in models:
        for name, info in model.model_fields.items():
            if _is_strict(info.annotation, list(info.metadata)):
                out.add(_field_name(name, info))
    return out


def _merged_types() -> dict[str, DuckType]:
    merged: dict[str, DuckType] = {}
    for cols in _kind_columns().values():
        # the same field name in two kinds must have one type; when not (e.g. ``step``:
        # a number for gradients, a name for ops) the read type is VARCHAR and the
        # table of each kind casts it back
        for name, t in cols.items():
            old = merged.get(name)
            if old is None:
                merged[name] = t
            elif _type_sql(old) != _type_sql(t):
                if isinstance(old, tuple) and isinstance(t, tuple) and old[0] == t[0] == "struct":
                    _merge_struct(old[1], t[1], name)
                else:
                    merged[name] = "JSON"
    return merged


def _read_types() -> dict[str, DuckType]:
    merged = _merged_types()
    # a strict field (an integer) is read as JSON too: a typed read
    # would take ``true`` as 1 and round 1.5 to 2 (and -0.4 to 0, past the check of >= 0),
    # and the checks (``checks.py``) must see the JSON type to refuse them
    for name in strict_fields():
        merged[name] = "JSON"
    return merged


READ_TYPES: dict[str, DuckType] = _read_types()
"""``READ_COLUMNS`` as type descriptions (``"JSON"``, ``("list", t)``, ``("struct", {...})``)."""

READ_COLUMNS: dict[str, str] = {k: _type_sql(v) for k, v in READ_TYPES.items()}
"""The union of every kind's columns: the ``columns`` of the one typed read of a trace (the
``_stage`` read, Spark's, and ``bench_ingest.py``'s raw read)."""


def literal_values(annotation: Any) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal`` field (through Optional), else None."""
    annotation = strip_optional(unwrap_annotated(annotation))
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    return None


def field_defaults(kind: str) -> dict[str, Any]:
    """Top-level fields of a record kind whose default is not None (pydantic fills them in;
    DuckDB reads a missing field as NULL, so ingest fills them in too)."""
    if kind == "span_start":
        model: type[BaseModel] = R._SpanStartBase
    elif kind == "span_end":
        model = R._SpanEndBase
    else:
        model = KIND_MODELS[kind]
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.is_required() or name == "kind":
            continue
        value = info.get_default(call_default_factory=True)
        if value is not None:
            out[info.alias or name] = value
    return out


def sql_literal(value: Any, duck_type: str) -> str:
    """``value`` as a DuckDB literal of ``duck_type``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if duck_type == "JSON":
        import json

        return "'" + json.dumps(value).replace("'", "''") + "'::JSON"
    if isinstance(value, list) and not value:
        return f"CAST([] AS {duck_type})"
    raise TypeError(f"no SQL literal for the default {value!r} ({duck_type})")
