"""`ember run`: a light model, a model with symbolic dims and a sweep, and bad input."""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from ember.analysis.report import trace_summary
from ember.cli.main import app
from ember.cli.run import summary_rows
from ember.runtime.workload import (
    WorkloadError,
    parse_input,
    parse_sweep,
    plan_shapes,
)
from ember.schemas import validate_file
from tests.analysis.traces import symbolic_matmul

runner = CliRunner()


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def ends(recs, span_kind):
    return [r for r in recs if r["kind"] == "span_end" and r["span_kind"] == span_kind]


@pytest.fixture(scope="module")
def symbolic_model(tmp_path_factory):
    """x: float32[3, n] -> Relu(w @ x), w the 3x3 identity."""
    return symbolic_matmul(tmp_path_factory.mktemp("models") / "symbolic.onnx")


def test_sweep_larger_than_the_cache_compiles_each_shape_and_evicts(symbolic_model, tmp_path):
    trace = tmp_path / "sweep.jsonl"
    result = runner.invoke(
        app,
        [
            "run",
            str(symbolic_model),
            "--sweep",
            "x:1=2,3,4,5",
            "--calls",
            "2",
            "--cache-size",
            "2",
            "--record",
            str(trace),
            "--tag",
            "team=search",
            "--no-sync",
        ],
    )
    assert result.exit_code == 0, result.output
    assert validate_file(trace).ok
    recs = records(trace)
    assert recs[0]["tags"] == {"team": "search", "model": str(symbolic_model)}
    # --no-sync: spans end at dispatch, the trace says so and no call carries dispatch_ns
    assert recs[0]["sync"] is False
    assert len(ends(recs, "call")) == 8
    assert all("dispatch_ns" not in r["attrs"] for r in ends(recs, "call"))
    compiles = [r for r in ends(recs, "segment_compile") if r["attrs"]["compiled"]]
    assert [c["attrs"]["shapes"][0]["shape"] for c in compiles] == [[3, 2], [3, 3], [3, 4], [3, 5]]
    cache = [(r["action"], r["shapes"][0]["shape"][1]) for r in recs if r["kind"] == "cache"]
    assert cache == [
        ("miss", 2),
        ("hit", 2),
        ("miss", 3),
        ("hit", 3),
        ("miss", 4),
        ("evict", 2),
        ("hit", 4),
        ("miss", 5),
        ("evict", 3),
        ("hit", 5),
    ]
    out = " ".join(result.output.split())
    assert "4 hits, 4 misses, 2 evictions" in out
    assert f"trace: {trace}" in result.output


def test_light_model_compiles_once(tmp_path):
    trace = tmp_path / "light.jsonl"
    result = runner.invoke(
        app, ["run", "onnx:light/squeezenet", "--calls", "2", "--record", str(trace)]
    )
    assert result.exit_code == 0, result.output
    recs = records(trace)
    assert recs[0]["backend"] == "cpu"
    assert recs[0]["devices"]
    (compile_end,) = ends(recs, "compile")
    assert compile_end["attrs"]["graph_break"] is False
    # compiled once, at compile time, for the model's own input shape; calls hit it directly
    assert [r["attrs"]["compiled"] for r in ends(recs, "segment_compile")] == [True]
    # synced by default: each call span ends at its results and carries its dispatch time
    assert recs[0]["sync"] is True
    calls = ends(recs, "call")
    assert len(calls) == 2
    assert all(0 < c["attrs"]["dispatch_ns"] <= c["duration_ns"] for c in calls)
    assert not [r for r in recs if r["kind"] == "cache"]
    # so the summary says the cache was not looked up, not "0 hits, 0 misses" by "compiles 1"
    rows = dict(summary_rows(trace_summary(trace)))
    assert rows["compiles"].startswith("1 (")
    assert rows["cache"] == "not looked up: each call ran the program compiled with the model"
    assert [r["kind"] for r in recs].count("device_memory") >= 2


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--input", "x=3by4"], "expected NAME=SHAPE[:DTYPE]"),
        (["--input", "x=3x4:float99"], "unknown dtype 'float99'"),
        (["--input", "nope=3x4"], "no such input; the model expects: x: float32[3, n]"),
        (["--input", "x=3"], "1 dims given, the model's input has 2"),
        (["--sweep", "x=1,2"], "expected NAME:DIM=v1,v2"),
        (["--sweep", "x:7=1,2"], "the input has no dimension 7"),
        (["--tag", "novalue"], "expected key=value"),
        (["--calls", "0"], "give at least 1 call"),
    ],
)
def test_bad_arguments_say_what_is_expected(symbolic_model, tmp_path, args, words):
    result = runner.invoke(
        app, ["run", str(symbolic_model), *args, "--record", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 1
    assert words in " ".join(result.output.split())


def test_unknown_light_model_lists_the_shipped_ones(tmp_path):
    result = runner.invoke(app, ["run", "onnx:light/gpt5", "--record", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 1
    assert "no such light model" in result.output
    assert "squeezenet" in result.output


def test_not_a_model(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    result = runner.invoke(app, ["run", str(bad), "--record", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 1
    assert str(bad) in " ".join(result.output.split())


def test_a_trace_path_that_cannot_be_written_is_a_clear_error(symbolic_model, tmp_path):
    (tmp_path / "afile").write_text("x")
    trace = tmp_path / "afile" / "t.jsonl"
    result = runner.invoke(app, ["run", str(symbolic_model), "--record", str(trace)])
    assert result.exit_code == 1
    assert f"cannot write the trace {trace}: {tmp_path / 'afile'} is a file, not a folder" in (
        "".join(result.output.split("\n"))
    )


def test_shared_symbolic_dims_take_one_value():
    from ember.runtime import load

    graph = helper.make_graph(
        [helper.make_node("Add", ["ids", "mask"], ["s"])],
        "g",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("s", TensorProto.INT64, ["batch", "seq"])],
    )
    model = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    steps, defaults = plan_shapes(model, [parse_input("ids=2x5")], parse_sweep("mask:1=7,9"))
    assert [{n: s for n, (s, _) in st.items()} for st in steps] == [
        {"ids": (2, 7), "mask": (2, 7)},
        {"ids": (2, 9), "mask": (2, 9)},
    ]
    assert defaults == {}
    steps, defaults = plan_shapes(model)
    assert steps[0]["ids"][0] == (1, 8)
    assert defaults == {"batch": 1, "seq": 8}
    with pytest.raises(WorkloadError):
        parse_input("=3")


def test_tags_named_like_record_options_are_tags(symbolic_model, tmp_path):
    # they were passed to record() as its keyword arguments: sync=... was a TypeError
    # ("multiple values for keyword argument"), run_id=... replaced the run's id
    trace = tmp_path / "t.jsonl"
    tags = ["sync=yes", "run_id=mine", "phase=train", "flush_interval=soon", "team=a"]
    args = ["run", str(symbolic_model), "--input", "x=3x4", "--calls", "1"]
    args += ["--record", str(trace)] + [a for t in tags for a in ("--tag", t)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    meta = records(trace)[0]
    assert meta["tags"] == {
        "sync": "yes",
        "run_id": "mine",
        "phase": "train",
        "flush_interval": "soon",
        "team": "a",
        "model": str(symbolic_model),
    }
    assert meta["run_id"] != "mine"
    assert meta["phase"] == "infer"
    assert meta["sync"] is True


@pytest.mark.parametrize(
    ("name", "content"),
    [("empty.onnx", b""), ("bad.onnx", b"not a protobuf"), ("missing.onnx", None)],
    ids=["empty", "not-onnx", "missing"],
)
def test_a_load_error_names_the_model_once(tmp_path, monkeypatch, name, content):
    # the load error names the file itself; `ember run` printed it twice
    # ("error: empty.onnx: empty.onnx: the file is empty (0 bytes), not an ONNX model")
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / name).write_bytes(content)
    for i, given in enumerate((name, f"./{name}")):
        # a trace each: the first run's (which records the failure) is never overwritten
        result = runner.invoke(app, ["run", given, "--record", str(tmp_path / f"t{i}.jsonl")])
        assert result.exit_code == 1
        text = " ".join(result.output.split())
        assert text.startswith(f"error: {name}: "), text
        assert text.count(f"{name}:") == 1, text


def test_an_unknown_light_model_is_named_once(tmp_path):
    result = runner.invoke(app, ["run", "onnx:light/gpt5", "--record", str(tmp_path / "t.jsonl")])
    assert " ".join(result.output.split()).count("onnx:light/gpt5:") == 1, result.output


def test_a_model_that_fails_to_load_keeps_a_trace_that_says_so(tmp_path):
    model = tmp_path / "empty.onnx"
    model.write_bytes(b"")
    trace = tmp_path / "t.jsonl"
    result = runner.invoke(app, ["run", str(model), "--record", str(trace)], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert f"the trace records the failure: {trace}" in result.output
    [load] = ends(records(trace), "load")
    assert load["status"] == "error"
    assert "the file is empty" in load["error"]["reason"]


def test_a_call_that_fails_keeps_a_trace_that_says_so(symbolic_model, tmp_path):
    trace = tmp_path / "t.jsonl"
    args = ["run", str(symbolic_model), "--input", "x=4x5", "--record", str(trace)]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert "dim 0 must be 3" in result.output
    assert f"the trace records the failure: {trace}" in result.output
    assert trace_summary(trace)["failed_calls"] == 1


@pytest.mark.parametrize(
    "bad",
    [["--input", "nope=3x4"], ["--sweep", "x:9=1,2"]],
    ids=["unknown-input", "sweep-dim-out-of-range"],
)
def test_a_run_that_fails_on_its_arguments_leaves_no_trace(symbolic_model, tmp_path, bad):
    # the trace had the model's load and nothing that said the run failed
    trace = tmp_path / "t.jsonl"
    result = runner.invoke(app, ["run", str(symbolic_model), *bad, "--record", str(trace)])
    assert result.exit_code == 1
    assert result.output.strip().startswith("error: ")
    assert "trace" not in result.output
    assert not trace.exists()
