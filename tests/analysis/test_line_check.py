"""The compiled line check (``ingest.line_check``, msgspec) agrees with the pydantic models.

It is generated from them; what must hold is that it is never looser: a line it accepts is a
line pydantic accepts (ingest stores what it accepts without asking pydantic). It may refuse
what pydantic's lax modes take: pydantic then decides.
"""

from __future__ import annotations

import json
import typing

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ember.analysis.ingest import line_check as fast
from ember.schemas import RECORD
from ember.schemas import records as R
from ember.schemas.records import MAX_NESTING, MAX_RUN_NS
from tests.schemas.test_records import ALL_EXAMPLES

EXAMPLES = sorted(ALL_EXAMPLES)


def _pydantic_ok(line: bytes) -> bool:
    try:
        data = json.loads(line)
        RECORD.validate_python(data)
    except (ValidationError, ValueError, RecursionError):
        return False
    return True


def _fast_ok(line: bytes) -> bool:
    record = json.loads(line)
    return fast.decode_line(line, meta_ok=record.get("kind") == "meta") is not None


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_record_is_accepted_by_both(name):
    line = json.dumps(ALL_EXAMPLES[name]).encode()
    assert _pydantic_ok(line)
    assert _fast_ok(line)


def _models() -> list[type]:
    out: list[type] = [R.Meta, R.Cache, R.Hub, R.Op, R.Tensor, R.Memory, R.DeviceMemory]
    out += [R.Gradient, R.Edge, R.StaticValue, R.ArgShape, R.DiskKey, R.JitEndAttrs]
    for pair in R.SPAN_ATTRS.values():
        out += list(pair)
    return out


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_each_struct_has_its_models_fields_required_as_there(model):
    struct = fast.struct_of(model)
    fields = {info.alias or name: info.is_required() for name, info in model.model_fields.items()}
    info = msgspec.structs.fields(struct)
    assert {f.encode_name: f.required for f in info} == fields
    assert struct.__struct_config__.forbid_unknown_fields


WRONG = {
    "ts_ns": [1.5, 2.0, "7", True, -1, MAX_RUN_NS + 1, 2**64],
    "span_id": [1.5, "7", False, 2**63],
    "position": [1.0, "0", None],
    "action": ["bogus", 1],
    "shapes": [{}, [{"name": 1}], [{"name": "x", "shape": [1.5]}], [{"name": "x", "colour": 1}]],
    "statics": [[{"name": "x"}], [{"value": 1}], [{"name": "x", "value": 1, "y": 2}]],
    "colour": ["red"],
}


@pytest.mark.parametrize(("field", "value"), [(f, v) for f, vs in WRONG.items() for v in vs])
def test_a_wrong_value_is_refused_by_both(field, value):
    record = dict(ALL_EXAMPLES["cache"]) | {field: value}
    line = json.dumps(record).encode()
    assert not _pydantic_ok(line)
    assert not _fast_ok(line)


def test_inside_a_spans_attrs_and_across_span_kinds_too():
    start = dict(ALL_EXAMPLES["span_start/segment"])
    for attrs in (
        {**start["attrs"], "colour": 1},  # unknown inside attrs
        {**start["attrs"], "position": 1.5},
        {**start["attrs"], "compiler": "xla"},  # a field of another span kind
        {k: v for k, v in start["attrs"].items() if k != "compiled"},  # required
    ):
        line = json.dumps(start | {"attrs": attrs}).encode()
        assert not _pydantic_ok(line), attrs
        assert not _fast_ok(line), attrs
    assert not _fast_ok(json.dumps(start | {"span_kind": "nope"}).encode())


def test_a_second_meta_is_refused_unless_first():
    meta = json.dumps(ALL_EXAMPLES["meta"]).encode()
    cache = json.dumps(ALL_EXAMPLES["cache"]).encode()
    assert fast.check_lines(meta + b"\n" + cache + b"\n", meta_ok=True) == (2, [])
    assert fast.check_lines(cache + b"\n\n  \n" + meta + b"\n", meta_ok=True) == (2, [1])
    assert fast.check_lines(meta + b"\n", meta_ok=False) == (1, [0])


@pytest.mark.parametrize("depth", [2, MAX_NESTING - 6, MAX_NESTING - 2, MAX_NESTING, 500])
def test_deep_any_values_go_to_pydantic(depth):
    # a static value and a user attribute are the only values of any depth: one that may
    # pass the limit is refused here and judged by parse_line's exact rule
    value = json.loads("[" * depth + "1" + "]" * depth)
    cache = dict(ALL_EXAMPLES["cache"]) | {"statics": [{"name": "v", "value": value}]}
    user = dict(ALL_EXAMPLES["span_start/user"]) | {"attrs": {"attrs": {"v": value}}}
    for record in (cache, user):
        line = json.dumps(record).encode()
        accepted = fast.decode_line(line) is not None
        assert accepted == (depth <= MAX_NESTING - 6)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
    | st.sampled_from(["hit", "miss", "ok", "end", "int64", "call"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: typing.Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


def _set(record: typing.Any, path: tuple, value: typing.Any, drop: bool) -> typing.Any:
    if not path:
        return value
    head, *rest = path
    copy = dict(record) if isinstance(record, dict) else list(record)
    if drop and not rest and isinstance(copy, dict):
        del copy[head]
        return copy
    copy[head] = _set(copy[head], tuple(rest), value, drop)
    return copy


@settings(max_examples=600, deadline=None)
@given(name=st.sampled_from(EXAMPLES), data=st.data(), value=_JSON, drop=st.booleans())
def test_never_looser_than_pydantic(name, data, value, drop):
    # any field at any depth of any example retyped (or dropped): what msgspec accepts,
    # pydantic accepts
    record = ALL_EXAMPLES[name]
    path = data.draw(st.sampled_from(_paths(record)[1:]))
    line = json.dumps(_set(record, path, value, drop)).encode()
    if _fast_ok(line):
        assert _pydantic_ok(line), line
