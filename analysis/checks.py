"""SQL checks generated from the pydantic models: what DuckDB's typed read does not check.

DuckDB's ``read_json`` with explicit column types checks that a value can become the
column's type, but not that a required field is present, that a ``Literal`` field holds
one of its values, that a non-negative int is not negative, or that a field belongs to
the record's kind (a ``position`` on a ``hub`` record). ``row_problem_sql()`` builds one
SQL expression over the staging table's columns that is NULL for a valid row and the
text of the first problem otherwise; ingest sends the rows where it is not NULL to
pydantic for the full explanation.

One job (the checks, rendered for DuckDB and, through sqlglot, for Spark), ~620 lines:
the row checks, the span-id checks, the nesting limit and the objects' structures.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ember.schemas import records as R

from .schema_types import (
    KIND_MODELS,
    READ_COLUMNS,
    READ_TYPES,
    DuckType,
    duckdb_type,
    literal_values,
    per_record_kind,
    strict_fields,
    strip_optional,
    unwrap_annotated,
)

__all__ = [
    "KIND_COLUMNS",
    "SCALAR_JSON_COLUMNS",
    "STRUCT_COLUMNS",
    "maybe_too_deep_sql",
    "row_invalid_sql",
    "row_problem_sql",
    "span_problems_sql",
    "structure_fits",
]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_literal(values: tuple[object, ...]) -> str:
    out = []
    for v in values:
        if isinstance(v, str):
            out.append("'" + v.replace("'", "''") + "'")
        else:
            out.append(str(v).upper() if isinstance(v, bool) else str(v))
    return ", ".join(out)


def _non_negative(info: FieldInfo) -> bool:
    metas = list(info.metadata)
    ann = strip_optional(info.annotation)
    if typing.get_origin(ann) is typing.Annotated:
        metas += list(typing.get_args(ann)[1:])
    return any(isinstance(m, annotated_types.Ge) and m.ge == 0 for m in metas)


def _list_item(annotation: object) -> object | None:
    ann = strip_optional(unwrap_annotated(annotation))
    if typing.get_origin(ann) is list:
        return typing.get_args(ann)[0]
    return None


def _model_of(annotation: object) -> type[BaseModel] | None:
    ann = strip_optional(unwrap_annotated(annotation))
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    return None


# ---------------------------------------------------------------- the keys inside objects


def _holds_object(t: DuckType) -> bool:
    if isinstance(t, str):
        return False
    return t[0] == "struct" or _holds_object(t[1])


STRUCT_COLUMNS: tuple[str, ...] = tuple(
    c for c, t in READ_TYPES.items() if _holds_object(t) or t == ("list", "BIGINT")
)
"""The read columns that hold objects (``attrs``, ``error``, ``shapes``, ``statics``), and the
lists of integers (``shape``: a typed read rounds ``[1.5]`` to ``[2]``, its JSON structure
says ``DOUBLE``).

A typed read skips the keys it was not asked for inside an object, so ingest reads these
columns as JSON text, checks their keys and JSON types with ``structure_fits`` (once per
distinct ``json_structure``), and turns them into their STRUCT types with ``json_transform``.
"""


_depth = 0
_TYPE_WORDS = {"BIGINT": "an integer", "VARCHAR": "a string"}


def _field_problems(
    expr: str,
    model: type[BaseModel],
    where: str,
    skip: frozenset[str] = frozenset(),
    text: bool = False,
) -> list[tuple[str, str]]:
    """(condition that is TRUE when wrong, message) for each field of ``model`` at ``expr``.

    ``expr`` is a SQL expression of the struct (or ``""`` for top-level columns). ``text``:
    the ``STRUCT_COLUMNS`` are JSON text; only their presence is checked here (their keys
    and types are ``structure_fits``'s, once per distinct value).
    """
    out: list[tuple[str, str]] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in skip:
            continue
        col = f"{expr}.{_q(key)}" if expr else _q(key)
        label = f"{where}{key}"
        if text and not expr and key in STRUCT_COLUMNS:
            if info.is_required():
                out.append((f"{col} IS NULL", f"{label}: missing required field"))
            continue
        if not expr and READ_COLUMNS.get(key) == "JSON" and duckdb_type(info.annotation) != "JSON":
            json_problems, typed = _json_read_problems(col, label, info, text)
            out += json_problems
            if typed is None:
                continue
            col = typed
        out += _value_problems(col, label, info)
        out += _list_problems(col, label, info)
        sub = _model_of(info.annotation)
        if sub is not None:
            inner = _field_problems(col, sub, f"{label}.")
            for c, m in inner:
                out.append((f"({col} IS NOT NULL AND {c})", m))
    return out


def _json_read_problems(
    col: str, label: str, info: FieldInfo, text: bool
) -> tuple[list[tuple[str, str]], str | None]:
    """The problems of a field two kinds type differently (``step``), which is read as
    JSON: its JSON type is checked here; returns them and the SQL of its value as the
    field's type, for the checks that follow (None: no more checks, its text says all)."""
    want = duckdb_type(info.annotation)
    if want == "BIGINT" and text:
        return [(_int_text_invalid(col, info), f"{label}: not a valid integer")], None
    json_types = {"BIGINT": "'BIGINT', 'UBIGINT'", "VARCHAR": "'VARCHAR'"}[want]
    out = [
        (
            f"{col} IS NOT NULL AND json_type({col}) NOT IN ({json_types}, 'NULL')",
            f"{label}: wrong type (expected {_TYPE_WORDS[want]})",
        )
    ]
    if want != "BIGINT":
        return out, f"json_extract_string({col}, '$')"
    # an integer over 2**63 - 1 (JSON's UBIGINT) does not fit the column
    out.append(
        (
            f"json_type({col}) = 'UBIGINT' AND TRY_CAST({col} AS BIGINT) IS NULL",
            f"{label}: out of range (a 64-bit integer)",
        )
    )
    return out, f"TRY_CAST({col} AS BIGINT)"


def _value_problems(col: str, label: str, info: FieldInfo) -> list[tuple[str, str]]:
    """A field's own value: present when required, one of its literals, its bounds."""
    out: list[tuple[str, str]] = []
    if info.is_required() and info.annotation is not typing.Any:
        out.append((f"{col} IS NULL", f"{label}: missing required field (or wrong type)"))
    values = literal_values(info.annotation)
    if values is not None and all(isinstance(v, str) for v in values):
        # ``int | Literal["end"]``: the int part is checked by the typed read
        out.append(
            (
                f"{col} NOT IN ({sql_literal(values)})",
                f"{label}: not one of {', '.join(values)}",
            )
        )
    if _non_negative(info):
        out.append((f"{col} < 0", f"{label}: must be >= 0"))
    return out + _bound_problems(col, label, info)


def _list_problems(col: str, label: str, info: FieldInfo) -> list[tuple[str, str]]:
    """A list field's items: each model item's fields (one condition over the list, with
    a lambda variable named by the nesting depth), or each number's bound."""
    global _depth
    item = _list_item(info.annotation)
    if item is None:
        return []
    inner_model = _model_of(item)
    if inner_model is not None:
        _depth += 1
        var = f"x{_depth}"
        inner = _field_problems(var, inner_model, f"{label}[].")
        _depth -= 1
        if not inner:
            return []
        bad = " OR ".join(f"coalesce({c}, false)" for c, _ in inner)
        return [
            (
                f"list_bool_or(list_transform({col}, lambda {var}: {bad}))",
                f"{label}: an item is invalid",
            )
        ]
    if typing.get_origin(unwrap_annotated(item)) is typing.Annotated or _non_negative_item(item):
        return [
            (
                f"list_bool_or(list_transform({col}, lambda v: v < 0))",
                f"{label}: values must be >= 0",
            )
        ]
    return []


def _int_text_invalid(col: str, info: FieldInfo) -> str:
    """SQL that is TRUE when a strict integer field staged as JSON text by DuckDB (``col``)
    is wrong: not a JSON integer, over 64 bits, negative where it must not be, past its
    bounds, or missing where required. The same rule as the JSON-type checks of
    ``row_problem_sql``, at a fifth of their cost (no JSON parse: one integer cast of the
    text): DuckDB writes a staged JSON number back as an integer's digits only when it is
    one (``1.0`` stays ``1.0``, ``1e3`` becomes ``1000.0``); a string, ``true`` or a list
    does not cast."""
    text = f"CAST({col} AS VARCHAR)"
    value = f"TRY_CAST({text} AS BIGINT)"
    bad = [f"{value} IS NULL", *(f"contains({text}, '{c}')" for c in ".eE")]
    if _non_negative(info):
        bad.append(f"{value} < 0")
    bad += [c for c, _ in _bound_problems(value, "", info)]
    required = "true" if info.is_required() and info.annotation is not typing.Any else "false"
    return f"(CASE WHEN {col} IS NULL THEN {required} ELSE coalesce({' OR '.join(bad)}, true) END)"


def _bound_problems(col: str, label: str, info: FieldInfo) -> list[tuple[str, str]]:
    """The upper bounds of an integer field other than the 64-bit limit (which the column's
    type checks): ``ts_ns``, ``duration_ns`` and ``wall_time_ns`` (``records.MAX_RUN_NS``)."""
    metas = _constraints(info.annotation, list(info.metadata))
    ann = strip_optional(unwrap_annotated(info.annotation))
    metas += _constraints(ann, [])
    out = []
    for m in metas:
        if isinstance(m, annotated_types.Le) and m.le != R.INT64_MAX:
            out.append((f"{col} > {m.le}", f"{label}: must be <= {m.le}"))
        elif isinstance(m, annotated_types.Lt):
            out.append((f"{col} >= {m.lt}", f"{label}: must be < {m.lt}"))
    return list(dict.fromkeys(out))


def _non_negative_item(item: object) -> bool:
    if typing.get_origin(item) is typing.Annotated:
        return any(
            isinstance(m, annotated_types.Ge) and m.ge == 0 for m in typing.get_args(item)[1:]
        )
    return False


def _case(conds: list[tuple[str, str]]) -> str:
    if not conds:
        return "NULL"
    whens = " ".join(
        f"WHEN coalesce({c}, false) THEN '{m.replace(chr(39), chr(39) * 2)}'" for c, m in conds
    )
    return f"CASE {whens} ELSE NULL END"


def _kind_columns() -> dict[str, frozenset[str]]:
    out = {
        kind: frozenset(info.alias or n for n, info in model.model_fields.items())
        for kind, model in KIND_MODELS.items()
    }
    out["span_start"] = frozenset(R._SpanStartBase.model_fields) | {"span_kind", "attrs"}
    out["span_end"] = frozenset(R._SpanEndBase.model_fields) | {"span_kind", "attrs"}
    return out


KIND_COLUMNS: dict[str, frozenset[str]] = _kind_columns()
"""The top-level fields each kind may have."""

SCALAR_JSON_COLUMNS: frozenset[str] = frozenset(strict_fields())
"""The top-level columns staged as JSON only for the checks to see their JSON type (strict
scalars: the integers, ``step``). A list or object there is refused by their type check
(or as a field of another kind) whatever its depth, so the nesting check skips them."""


def _foreign_columns(kind: str) -> list[tuple[str, str]]:
    # a field of another kind on this record: pydantic calls it an unknown field
    return [
        (f"{_q(c)} IS NOT NULL", f"{c}: unknown field for a '{kind}' record")
        for c in READ_COLUMNS
        if c not in KIND_COLUMNS[kind]
    ]


def _span_problems(which: int) -> str:
    base = R._SpanStartBase if which == 0 else R._SpanEndBase
    kind = "span_start" if which == 0 else "span_end"
    common = _field_problems("", base, "", skip=frozenset({"kind"}))
    whens = []
    all_attr_fields: set[str] = set()
    for pair in R.SPAN_ATTRS.values():
        all_attr_fields |= set(pair[which].model_fields)
    for span_kind, pair in R.SPAN_ATTRS.items():
        model = pair[which]
        conds = [("attrs IS NULL", "attrs: missing required field")]
        conds += _field_problems("attrs", model, "attrs.")
        conds += [
            (f"attrs.{_q(f)} IS NOT NULL", f"attrs.{f}: unknown field for a '{span_kind}' span")
            for f in sorted(all_attr_fields - set(model.model_fields))
        ]
        whens.append(f"WHEN '{span_kind}' THEN {_case(conds)}")
    span_case = (
        f"CASE span_kind {' '.join(whens)} "
        f"ELSE 'span_kind: missing, or not one of {', '.join(R.SPAN_KINDS)}' END"
    )
    return f"coalesce({_case(common + _foreign_columns(kind))}, {span_case})"


def _record_problems(kind: str) -> str:
    """SQL: NULL when a row of ``kind`` (not a span) is valid, else its first problem."""
    conds = _field_problems("", KIND_MODELS[kind], "", skip=frozenset({"kind"}))
    return _case(conds + _foreign_columns(kind))


def row_problem_sql() -> str:
    """SQL over the staging columns: NULL when the row is valid, else the first problem."""
    problems = per_record_kind(_span_problems, _record_problems)
    whens = [f"WHEN '{kind}' THEN {expr}" for kind, expr in problems.items()]
    return (
        f"CASE kind {' '.join(whens)} "
        f"ELSE 'kind: missing, or not one of {', '.join(R.RECORD_KINDS)}' END"
    )


def _span_attr_owners() -> dict[str, dict[str, set[str]]]:
    """attrs field -> {'span_start': span kinds that have it, 'span_end': ...}."""
    owners: dict[str, dict[str, set[str]]] = {}
    for span_kind, pair in R.SPAN_ATTRS.items():
        for which, kind in ((0, "span_start"), (1, "span_end")):
            for f in pair[which].model_fields:
                owners.setdefault(f, {"span_start": set(), "span_end": set()})[kind].add(span_kind)
    return owners


def row_invalid_sql(text: bool = False) -> str:
    """SQL over the staging columns: TRUE when the row breaks the schema (else FALSE).

    ``text``: the ``STRUCT_COLUMNS`` are JSON text (DuckDB's stage): only their presence is
    checked here; what they hold is checked once per distinct value, their keys and types
    by ``structure_fits`` (the DuckDB ingest checks each line with ``ingest.line_check``
    instead).

    The same checks as ``row_problem_sql`` without the messages (pydantic gives those),
    and with the "field of another kind" checks written per column (a field, and the
    kinds that may have it) rather than per kind, which keeps the expression small:
    DuckDB binds it in milliseconds, so a small file does not pay for its size.
    """
    whens = []
    for kind in R.RECORD_KINDS:
        if kind in ("span_start", "span_end"):
            which = 0 if kind == "span_start" else 1
            base = R._SpanStartBase if which == 0 else R._SpanEndBase
            common = _field_problems("", base, "", skip=frozenset({"kind"}), text=text)
            per_span = []
            for span_kind, pair in R.SPAN_ATTRS.items():
                conds = [("attrs IS NULL", "")]
                if not text:
                    conds += _field_problems("attrs", pair[which], "attrs.")
                per_span.append(f"WHEN '{span_kind}' THEN ({' OR '.join(c for c, _ in conds)})")
            expr = (
                f"({' OR '.join(c for c, _ in common)}) "
                f"OR CASE span_kind {' '.join(per_span)} ELSE true END"
            )
        else:
            conds = _field_problems("", KIND_MODELS[kind], "", skip=frozenset({"kind"}), text=text)
            expr = " OR ".join(c for c, _ in conds) or "false"
        whens.append(f"WHEN '{kind}' THEN coalesce({expr}, false)")
    fields = f"CASE kind {' '.join(whens)} ELSE true END"
    foreign = []
    for col in READ_COLUMNS:
        owners = [k for k, cols in KIND_COLUMNS.items() if col in cols]
        if len(owners) < len(KIND_COLUMNS):
            foreign.append(
                f"({_q(col)} IS NOT NULL AND kind NOT IN ({sql_literal(tuple(owners))}))"
            )
    # (as text, a field of another span kind is an unknown key to ``structure_fits``)
    for field, by_kind in {} if text else _span_attr_owners().items():
        allowed = " OR ".join(
            f"(kind = '{k}' AND span_kind IN ({sql_literal(tuple(sorted(kinds)))}))"
            for k, kinds in by_kind.items()
            if kinds
        )
        foreign.append(f"(attrs.{_q(field)} IS NOT NULL AND NOT ({allowed}))")
    return f"({fields}) OR coalesce({' OR '.join(foreign)}, false)"


def _maybe_deep(expr: str, t: DuckType, max_nesting: int, level: int) -> str | None:
    """SQL that is TRUE when a JSON value at ``expr`` (``level`` deep in the record, whose
    own object is level 1) may take the record over ``max_nesting`` levels; None when the
    type holds no JSON value."""
    if t == "JSON":
        # the record nests (level - 1) + the value's depth; the value's depth is at most
        # its count of opening brackets
        brackets = max_nesting - level + 2
        text = f"CAST({expr} AS VARCHAR)"
        count = f"strlen({text}) - strlen(replace(replace({text}, '[', ''), '{{', ''))"
        # strlen first: a short value cannot hold many brackets, and it costs nothing
        return f"(strlen({text}) >= {2 * brackets} AND {count} >= {brackets})"
    if isinstance(t, str):
        return None
    if t[0] == "list":
        var = f"d{level}"
        inner = _maybe_deep(var, t[1], max_nesting, level + 1)
        if inner is None:
            return None
        return f"list_bool_or(list_transform({expr}, lambda {var}: coalesce({inner}, false)))"
    parts = [
        c
        for name, ft in t[1].items()
        if (c := _maybe_deep(f"{expr}.{_q(name)}", ft, max_nesting, level + 1)) is not None
    ]
    return " OR ".join(parts) or None


def maybe_too_deep_sql(max_nesting: int, types: dict[str, DuckType] | None = None) -> str:
    """SQL over the staging columns: TRUE for a row that may nest deeper than
    ``max_nesting`` (``ember.schemas.records.MAX_NESTING``).

    The typed read takes a JSON value (a static value, a user attribute) of any depth. Only
    those values can nest deeply (every other field has a fixed shape, a few levels deep),
    and a value nested d deep has at least d opening brackets: the few rows with that many
    are checked line by line with ``parse_line``, which has the exact rule. ``types`` are
    the columns' types (by default ``READ_TYPES``; a column staged as JSON text is one
    value whose depth its brackets bound).
    """
    parts = [
        c
        for name, t in (READ_TYPES if types is None else types).items()
        if (c := _maybe_deep(_q(name), t, max_nesting, 2)) is not None
    ]
    return "coalesce(" + " OR ".join(parts) + ", false)" if parts else "false"


# What each JSON type (as ``json_structure`` names it) may become. ``DOUBLE`` holds every
# number beyond UBIGINT and ``HUGEINT`` a list of both signs (pydantic decides those); an
# integer in (2**63, 2**64) is ``UBIGINT``: the 64-bit limit is checked on the text
# (ingest_read). A negative integer is ``BIGINT``, so a non-negative field takes ``UBIGINT``.
_INTS = frozenset({"UBIGINT", "BIGINT"})
_JSON_TYPES: dict[Any, frozenset[str]] = {
    int: _INTS,
    float: _INTS | {"DOUBLE"},
    bool: frozenset({"BOOLEAN"}),
    str: frozenset({"VARCHAR"}),
}
# "ANY" | frozenset of JSON types | ("list", Accept) | ("dict",) | ("union", (Accept, ...))
# | ("struct", {key: (Accept, required, nullable)})
Accept = Any


def _constraints(annotation: Any, metadata: list[Any]) -> list[Any]:
    out = list(metadata)
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        out += args[1:]
        annotation = args[0]
    flat = []
    for m in out:
        flat += [m, *getattr(m, "metadata", [])] if isinstance(m, FieldInfo) else [m]
    return flat


def _accept(annotation: Any, metadata: list[Any] | None = None) -> Accept:
    """What JSON a field of this annotation may hold, by JSON type (a shape, not values)."""
    non_negative = any(
        isinstance(m, annotated_types.Ge) and m.ge >= 0
        for m in _constraints(annotation, metadata or [])
    )
    ann = strip_optional(unwrap_annotated(annotation))
    non_negative |= any(
        isinstance(m, annotated_types.Ge) and m.ge >= 0 for m in _constraints(ann, [])
    )
    ann = unwrap_annotated(ann)
    if ann is int and non_negative:
        return frozenset({"UBIGINT"})
    if ann in _JSON_TYPES:
        return _JSON_TYPES[ann]
    if ann is typing.Any:
        return "ANY"
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        return frozenset().union(*(_JSON_TYPES[type(v)] for v in typing.get_args(ann)))
    if origin in (list, tuple, set, frozenset):
        return ("list", _accept(typing.get_args(ann)[0]))
    if origin is dict or ann is dict:
        return ("dict",)
    if origin in (typing.Union, types.UnionType):
        return ("union", tuple(_accept(a) for a in typing.get_args(ann)))
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ("struct", _model_accept(ann))
    raise TypeError(f"no JSON shape for the schema annotation {ann!r}")


def _nullable(annotation: Any) -> bool:
    ann = unwrap_annotated(annotation)
    if ann is typing.Any:
        return True
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return any(a is type(None) or _nullable(a) for a in typing.get_args(ann))
    return ann is type(None)


def _model_accept(model: type[BaseModel]) -> dict[str, tuple[Accept, bool, bool]]:
    return {
        info.alias or name: (
            _accept(info.annotation, list(info.metadata)),
            info.is_required(),
            _nullable(info.annotation),
        )
        for name, info in model.model_fields.items()
    }


def _fits(accept: Accept, got: Any) -> bool:
    """Whether a non-null value of structure ``got`` fits ``accept``."""
    if accept == "ANY":
        return True
    if isinstance(accept, frozenset):
        return isinstance(got, str) and got in accept
    if accept[0] == "union":
        return any(_fits(a, got) for a in accept[1] if a is not None)
    if accept[0] == "list":
        return isinstance(got, list) and all(g == "NULL" or _fits(accept[1], g) for g in got)
    if accept[0] == "dict":
        return isinstance(got, dict) or got == "JSON"
    # an object; "JSON" is an empty one ({}): every field must be optional
    fields = accept[1]
    if got == "JSON":
        got = {}
    if not isinstance(got, dict):
        return False
    for key, (inner, required, nullable) in fields.items():
        value = got.get(key)
        if value is None:
            if required:
                return False
        elif value == "NULL":
            if not nullable:
                return False
        elif not _fits(inner, value):
            return False
    return all(k in fields for k in got)


def _top_level_accepts() -> dict[tuple[str, str | None], dict[str, tuple[Accept, bool, bool]]]:
    out: dict[tuple[str, str | None], dict[str, tuple[Accept, bool, bool]]] = {}
    for kind, model in KIND_MODELS.items():
        out[(kind, None)] = _model_accept(model)
    bases: tuple[tuple[str, type[BaseModel]], ...] = (
        ("span_start", R._SpanStartBase),
        ("span_end", R._SpanEndBase),
    )
    for which, (kind, base) in enumerate(bases):
        for span_kind, pair in R.SPAN_ATTRS.items():
            out[(kind, span_kind)] = _model_accept(base) | {
                "attrs": (("struct", _model_accept(pair[which])), True, False)
            }
    return out


_ACCEPTS = _top_level_accepts()


def structure_fits(kind: str | None, span_kind: str | None, column: str, structure: Any) -> bool:
    """Whether the value of top-level field ``column`` whose ``json_structure`` is
    ``structure`` (parsed) fits its field in a record of ``kind`` (and ``span_kind``): only
    known keys, required fields present, null only where allowed, the JSON types the field
    takes, non-negative integers where it must be.

    False sends the row to pydantic, which decides (and explains); True for a record of an
    unknown kind or span kind, which the SQL checks reject anyway. A column the kind does
    not have fits only when null (the SQL checks see the non-null ones as well)."""
    key = (kind or "", span_kind if kind in ("span_start", "span_end") else None)
    fields = _ACCEPTS.get(key)
    if fields is None:
        return True
    field = fields.get(column)
    if structure is None or structure == "NULL":
        # missing or null: the SQL checks see a required top-level field
        return True
    return field is not None and _fits(field[0], structure)


# ---------------------------------------------------------------- span ids


_AGAIN = "' (span ids are unique in a run; were two traces concatenated?)'"


def span_problems_sql(stage: str, order: str, prior: str, file: str | None = None) -> str:
    """SQL of the rows whose span id breaks the rules: ``(<file>, <order>, reason)``.

    Span ids are unique in a run. Rejected: a second span_start of an id (in the file, or
    after the rows of its run already stored) and a second span_end of an id (in the file,
    or any end of an id whose end its run already stored), which is what concatenated
    traces have; and a span_end before any span_start of its id, which counts for nothing
    after (the end of a span that starts later is its first). A file ingested as it grows
    thus stores what one ingest of the whole file stores.

    One rendering for every engine (DuckDB runs it as it is, Spark through
    ``spark_sql.to_spark``): ``stage`` is the staged rows (``kind``, ``span_id``,
    ``order``), ``order`` their order in the file, ``prior`` the span records already
    stored for the run (``kind``, 'span_start' or 'span_end', ``span_id``, and ``file``),
    ``file`` the column that tells the files of a batch apart (None: one file). Equality
    joins on the first row of each id: comparing every start of an id with every end of it
    was quadratic in the copies of a duplicated id. The ends are joined with their id's
    first start once (``ends``), for both the second ends and the ends without a start.
    """
    keys = f"{file}, " if file else ""
    on = (lambda a, b: f" AND {a}.{file} = {b}.{file}") if file else (lambda a, b: "")
    fx = f"x.{file}, " if file else ""
    fe = f"e.{file}, " if file else ""
    return f"""
WITH ends AS (
    -- every end, and whether a start of its id came before it (here or stored)
    SELECT {fe}e.{order}, e.span_id,
        p.span_id IS NOT NULL OR coalesce(s.first < e.{order}, false) AS started
    FROM {stage} AS e
    LEFT JOIN (
        SELECT {keys}span_id, min({order}) AS first FROM {stage}
        WHERE kind = 'span_start' GROUP BY {keys}span_id
    ) AS s ON s.span_id = e.span_id{on("s", "e")}
    LEFT JOIN (
        SELECT DISTINCT {keys}span_id FROM {prior} WHERE kind = 'span_start'
    ) AS p ON p.span_id = e.span_id{on("p", "e")}
    WHERE e.kind = 'span_end'
)
SELECT {fx}x.{order},
    'a second ' || x.kind || ' of span_id ' || x.span_id || {_AGAIN} AS reason
FROM {stage} AS x
LEFT JOIN (
    -- the ids started more than once: their first start (a hash aggregate: a valid file
    -- has none to join)
    SELECT {keys}'span_start' AS kind, span_id, min({order}) AS first FROM {stage}
    WHERE kind = 'span_start' GROUP BY {keys}span_id HAVING count(*) > 1
    UNION ALL
    -- the ids ended more than once after a start: their first such end
    SELECT {keys}'span_end' AS kind, span_id, min({order}) FROM ends
    WHERE started GROUP BY {keys}span_id HAVING count(*) > 1
) AS d ON d.kind = x.kind AND d.span_id = x.span_id{on("d", "x")}
LEFT JOIN (SELECT DISTINCT {keys}kind, span_id FROM {prior}) AS p
    -- a start or an end its run already stored: this one is a second one
    ON p.kind = x.kind AND p.span_id = x.span_id{on("p", "x")}
WHERE x.{order} > d.first OR p.span_id IS NOT NULL
UNION ALL
-- an end with no start before it, here or stored before this file
SELECT {keys}{order}, 'span_end without a span_start (span_id ' || span_id || ')' AS reason
FROM ends WHERE NOT started
"""
