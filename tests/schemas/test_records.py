"""Every record kind round-trips; invalid records are rejected naming the field."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ember.schemas import RECORD, RECORD_KINDS, SCHEMA_ID, SPAN_KINDS, explain
from ember.schemas.jsonschema import render, schema_path
from ember.schemas.records import SPAN_ATTRS

SHAPES = [{"name": "x", "shape": [1, 17], "dtype": "int64"}]

# one valid example of every record kind (and every span kind, start and end)
POINT_EXAMPLES = {
    "meta": {
        "kind": "meta",
        "schema": SCHEMA_ID,
        "run_id": "r1",
        "wall_time_ns": 1_700_000_000_000_000_000,
        "host": "h",
        "pid": 42,
        "versions": {"jax": "0.10.2"},
        "backend": "cpu",
        "devices": ["TFRT_CPU_0"],
        "entrypoint": "train.py",
        "phase": "train",
        "tags": {"model": "bert"},
        "sync": False,
    },
    "cache": {
        "kind": "cache",
        "ts_ns": 10,
        "action": "evict",
        "span_id": 3,
        "source": "m.onnx",
        "position": 4,
        "shapes": SHAPES + [{"name": "s", "sequence": [{"shape": [2], "dtype": "float32"}]}],
        "key": "0123456789abcdef",
        "statics": [{"name": "k", "value": [1, 2]}],
        "cache_size": 2,
    },
    "hub": {
        "kind": "hub",
        "ts_ns": 11,
        "action": "hit",
        "source": "hf://o/r/model.onnx",
        "revision": "main",
        "check": "etag",
        "bytes": 1234,
    },
    "op": {
        "kind": "op",
        "ts_ns": 12,
        "span_id": 1,
        "op_name": "MatMul",
        "inputs": ["a", "b"],
        "output": "c",
        "shape": [2, 3],
        "dtype": "float32",
        "device": "cpu",
        "duration_ns": 100,
        "storage_bytes": 24,
        "input_storage_bytes": 48,
        "step": "forward",
    },
    "tensor": {
        "kind": "tensor",
        "ts_ns": 13,
        "tensor_id": "t1",
        "shape": [2],
        "dtype": "float32",
        "device": "cpu",
        "requires_grad": True,
        "storage_bytes": 8,
        "category": "parameter",
    },
    "memory": {
        "kind": "memory",
        "ts_ns": 14,
        "tensor_id": "t1",
        "op_name": "MatMul",
        "device": "cpu",
        "bytes": 8,
        "action": "alloc",
        "shape": [2],
        "dtype": "float32",
        "category": "activation",
    },
    "device_memory": {
        "kind": "device_memory",
        "ts_ns": 15,
        "device": "cuda:0",
        "source": "memory_stats",
        "used_bytes": 10,
        "peak_bytes": 20,
        "reserved_bytes": 30,
        "free_bytes": 40,
        "limit_bytes": 50,
    },
    "gradient": {
        "kind": "gradient",
        "ts_ns": 16,
        "event_id": "g1",
        "step": 3,
        "root": "params",
        "key": "dense/w",
        "state": "present",
        "norm": 0.5,
    },
    "edge": {"kind": "edge", "ts_ns": 17, "from_span": "a", "to_span": "b", "duration_ns": 9},
    "process": {
        "kind": "process",
        "ts_ns": 18,
        "backend": "cpu",
        "devices": ["cpu:0", "cpu:2048"],
        "local_device_ids": [2048],
        "job_id": "jax:127.0.0.1:4711",
        "rank": 1,
        "world_size": 2,
        "job_source": "jax.distributed",
    },
}

SPAN_START_ATTRS = {
    "load": {"source": "m.onnx"},
    "compile": {"source": "m.onnx", "compiler": "jax.jit"},
    "call": {"source": "m.onnx", "shapes": SHAPES},
    "run": {"source": None},
    "segment_compile": {"source": "m.onnx", "position": 0, "shapes": SHAPES, "key": "ab"},
    "segment": {"source": "m.onnx", "position": 0, "stop": 5, "compiled": True, "key": "ab"},
    "break": {"source": "m.onnx", "position": 5, "node": "nz", "op_type": "NonZero"},
    "hub_download": {"source": "hf://o/r/f.onnx", "revision": "main"},
    "hub_info": {"source": "hf://o/r", "revision": "main"},
    "op": {"op_kind": "function", "measured": True},
    "step": {"step": "backward", "index": 2},
    "user": {"attrs": {"lr": 0.1}},
    "jit": {"fun_name": "train_step"},
}
SPAN_END_EXTRA = {
    "load": {"node_count": 12, "opset": 21},
    "compile": {"graph_break": True},
    "call": {"dispatch_ns": 200_000},
    "break": {"host_transfer_ns": 1_000, "subgraph_ns": 5_000},
    "step": {"dispatch_ns": 300},
    "segment_compile": {
        "stop": "end",
        "compiled": True,
        "disk_cache": "miss",
        "reason": None,
        "host_values": ["shape_0"],
        "memory": {"argument_bytes": 8, "output_bytes": 8, "temp_bytes": 0},
        "cost": {"flops": 10.0, "bytes_accessed": 16.0},
    },
    "hub_download": {"bytes": 99},
    "hub_info": {"result": "saved"},
    "jit": {
        "tracing_ns": 1,
        "lowering_ns": 2,
        "backend_compile_ns": 3,
        "persistent_cache": "hit",
        "retrace_reason": "x dim 0: 32 -> 16",
        "changes": [{"arg": "x", "what": "shape", "old": "f32[32,4]", "new": "f32[16,4]"}],
        "outside_jit": False,
        "jax_explanation": "TRACING CACHE MISS at ...",
    },
}


def span_examples():
    for kind in SPAN_KINDS:
        start = {
            "kind": "span_start",
            "ts_ns": 1,
            "span_id": 7,
            "parent_id": None,
            "name": f"ember.{kind}",
            "span_kind": kind,
            "attrs": SPAN_START_ATTRS[kind],
        }
        end = {
            "kind": "span_end",
            "ts_ns": 2,
            "span_id": 7,
            "duration_ns": 1,
            "status": "ok",
            "span_kind": kind,
            "attrs": {**SPAN_START_ATTRS[kind], **SPAN_END_EXTRA.get(kind, {})},
        }
        yield f"span_start/{kind}", start
        yield f"span_end/{kind}", end


ALL_EXAMPLES = dict(POINT_EXAMPLES) | dict(span_examples())


def test_examples_cover_every_kind():
    kinds = {v["kind"] for v in ALL_EXAMPLES.values()}
    assert kinds == set(RECORD_KINDS)
    assert set(SPAN_START_ATTRS) == set(SPAN_KINDS) == set(SPAN_ATTRS)


@pytest.mark.parametrize("name", sorted(ALL_EXAMPLES))
def test_round_trip(name):
    data = ALL_EXAMPLES[name]
    model = RECORD.validate_json(json.dumps(data))
    assert model.kind == data["kind"]
    line = RECORD.dump_json(model, by_alias=True, exclude_none=True)
    again = RECORD.validate_json(line)
    assert again == model
    # nothing given is lost on the way (None and absent mean the same)
    assert json.loads(line) | strip_none(data) == json.loads(line)


def strip_none(value):
    if isinstance(value, dict):
        return {k: strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_none(v) for v in value]
    return value


def errors_of(data) -> str:
    with pytest.raises(ValidationError) as info:
        RECORD.validate_python(data)
    return explain(info.value)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"position": "four"}, "position", "valid integer"),
        ({"action": "flush"}, "action", "'hit', 'miss' or 'evict'"),
        ({"ts_ns": -1}, "ts_ns", "greater than or equal to 0"),
        ({"shapes": [{"name": "x", "shape": [-1]}]}, "shapes.0.shape.0", "greater than"),
        ({"bogus": 1}, "bogus", "unknown field"),
    ],
)
def test_invalid_record_names_the_field(change, field, words):
    message = errors_of({**POINT_EXAMPLES["cache"], **change})
    assert message.startswith(f"{field}: ")
    assert words in message


def test_missing_field_is_named():
    data = dict(POINT_EXAMPLES["memory"])
    del data["bytes"]
    assert errors_of(data) == "bytes: missing required field"


def test_unknown_kind_lists_the_kinds():
    message = errors_of({"kind": "mystery", "ts_ns": 1})
    assert "unknown kind 'mystery'" in message
    assert "'cache'" in message


def test_span_attrs_are_typed_per_span_kind():
    data = dict(ALL_EXAMPLES["span_end/segment_compile"])
    data["attrs"] = {**data["attrs"], "stop": "later"}
    message = errors_of(data)
    assert message.startswith("attrs.stop")
    data["attrs"] = {**data["attrs"], "stop": 12}
    assert RECORD.validate_python(data).attrs.stop == 12


def test_unknown_span_kind():
    data = {**ALL_EXAMPLES["span_start/load"], "span_kind": "teleport"}
    assert "unknown span_kind 'teleport'" in errors_of(data)


def test_committed_json_schema_matches_the_models():
    committed = schema_path().read_text(encoding="utf-8")
    assert committed == render(), (
        "schemas/json is stale: run `python -m ember.schemas.jsonschema` and commit it"
    )


def test_json_schema_accepts_every_example():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(render()))
    for name, data in ALL_EXAMPLES.items():
        errors = list(validator.iter_errors(data))
        assert not errors, (name, errors[:1])
    assert list(validator.iter_errors({"kind": "cache", "ts_ns": "x"}))
