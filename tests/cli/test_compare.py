"""`ember compare`, the CI gate, on recorded runs (each in its own process, as a CI job
would): a baseline at one input shape, the same workload recorded again at the same time on
this shared, busy machine, and a candidate whose shapes vary per call (`ember run --sweep`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from ember.analysis import connect, ingest
from ember.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
NEW_LENGTHS = ",".join(str(n) for n in range(8, 28))  # 20 calls, each at a new length


WIDTH = 128


def _model(path: Path) -> Path:
    """x: float32[batch, seq, 128] -> four (MatMul, Tanh) -> sum: one segment, no break."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)
    w = numpy_helper.from_array(w.astype(np.float32), "w")
    nodes, x = [], "x"
    for i in range(4):
        nodes += [
            helper.make_node("MatMul", [x, "w"], [f"m{i}"]),
            helper.make_node("Tanh", [f"m{i}"], [f"h{i}"]),
        ]
        x = f"h{i}"
    nodes.append(helper.make_node("ReduceSum", [x], ["out"], keepdims=0))
    graph = helper.make_graph(
        nodes,
        "stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", WIDTH])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _ember_run(model: Path, trace: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "ember.cli.main", "run", str(model), "--record", str(trace)]
    return subprocess.Popen(
        [*cmd, *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _wait(*procs: subprocess.Popen) -> None:
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()


# The baseline's workload, recorded by two processes at once: each loads and compiles the
# model, then waits for the other, so that both make their calls at the same time and see
# the same busy machine. (Recorded one after the other on this shared 2-core machine, the
# same workload's p50 moved by up to 4x between runs: a drift of the machine, not call to
# call noise, and no test on two runs can tell it from a regression.)
CALLS = 100


def _same_workload(model: Path, folder: Path, *traces: Path) -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    ready = [folder / f"{t.stem}.ready" for t in traces]
    # each recording on cores of its own: two processes whose XLA threads share the same two
    # cores got unequal shares (one run's p50 48 % over the other's in a CI run: a "regression")
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // len(traces)
    own = [",".join(map(str, cores[i * share : (i + 1) * share])) for i in range(len(traces))]
    if not share:
        own = [""] * len(traces)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.recordings.same_workload",
                str(model),
                str(t),
                str(r),
                str(o),
                c,
                str(WIDTH),
                str(CALLS),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for t, r, o, c in zip(traces, ready, reversed(ready), own, strict=True)
    ]
    _wait(*procs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gate")
    model = _model(folder / "stack.onnx")
    paths = {k: folder / f"{k}.jsonl" for k in ("base", "again", "candidate")}
    _same_workload(model, folder, paths["base"], paths["again"])
    sweep = ["--input", f"x=4x8x{WIDTH}", "--sweep", f"x:1={NEW_LENGTHS}", "--calls", "1"]
    _wait(_ember_run(model, paths["candidate"], *sweep, "--tag", "branch=feature"))
    return paths


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder without a pyproject.toml: the default rules apply."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def gate(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["compare", *map(str, args)], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_a_candidate_whose_shapes_vary_per_call_fails_naming_the_new_cause(runs, here):
    code, out = gate(runs["base"], runs["candidate"])
    assert code == 1, out
    assert "FAIL" in out
    assert "new: `x` dim 1 changed on every call at position 0" in out
    assert "recompiles 0 -> 19 (+19): beyond +0" in out


def test_the_same_run_against_itself_passes(runs, here):
    code, out = gate(runs["base"], runs["base"])
    assert code == 0, out
    assert "PASS" in out
    assert "new:" not in out


def test_the_same_workload_recorded_twice_passes_under_the_default_rules(runs, here):
    # Every count rule passes: the same workload compiles, evicts and fails alike. The
    # latency rule is evaluated on the same number of calls, but its verdict is not asserted:
    # it depends on the machine between the two recordings (on a slower host under xdist the
    # second run was 59 % slower, p = 2e-27, and the rule was right to say so), which would be
    # a timed assert. Its statistics are tested on fixed samples in tests/analysis/test_compare.py.
    code, out = gate(runs["base"], runs["again"], "--json")
    doc = json.loads(out)
    assert doc["rules_from"] == "defaults"
    counts = [r for r in doc["rules"] if r["metric"] not in ("p50_ns", "peak_bytes")]
    assert len(counts) == 5
    assert all(r["status"] == "pass" for r in counts), json.dumps(doc["rules"], indent=1)
    latency = next(r for r in doc["rules"] if r["metric"] == "p50_ns")
    assert latency["status"] in ("pass", "fail")
    assert code == (1 if latency["status"] == "fail" else 0)
    p50 = next(m for m in doc["metrics"] if m["metric"] == "p50_ns")
    assert p50["latency"]["n_base"] == CALLS + 1 == p50["latency"]["n_candidate"]


def test_markdown_and_junit_from_the_command(runs, here):
    junit = here / "reports" / "ember.xml"
    code, out = gate(runs["base"], runs["candidate"], "--format", "markdown", "--junit", junit)
    assert code == 1
    assert out.startswith("### Ember compare — FAIL: ")
    # names and messages are escaped for Markdown (see tests/analysis/test_compare.py)
    assert (
        "| recompiles\\>\\+0 | ❌ fail | recompiles 0 \\-\\> 19 \\(\\+19\\)\\: beyond \\+0 |" in out
    )
    assert "- new: \\`x\\` dim 1 changed on every call at position 0" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert "recompiles>+0" in cases
    assert "new_recompile_causes>0" in cases
    failure = cases["recompiles>+0"].find("failure")
    assert "`x` dim 1 changed on every call" in failure.text
    assert cases["new_breaks>0"].find("failure") is None  # no break in this model
    assert int(suite.get("failures")) == sum(
        1 for c in cases.values() if c.find("failure") is not None
    )


def test_run_ids_and_the_latest_run_with_a_tag_from_a_database(runs, here):
    db = here / "ci.duckdb"
    summary = ingest([runs["base"], runs["candidate"], runs["again"]], db)
    ids = {Path(f.path).stem: f.run_id for f in summary.files}
    code, out = gate(ids["base"][:8], ids["candidate"][:10], "--db", db, "--json")
    assert code == 1
    assert json.loads(out)["base"]["run_id"] == ids["base"]
    # the latest run tagged branch=main
    with connect(db, read_only=True) as con:
        started = dict(con.sql("SELECT run_id, started_at FROM runs").iter_rows())
    latest = max((ids["base"], ids["again"]), key=started.__getitem__)
    code, out = gate(ids["candidate"], "--baseline-tag", "branch=main", "--db", db, "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["base"]["run_id"] == latest
    assert "latest run tagged branch=main" in doc["base"]["origin"]
    # a trace file as the candidate against a database of baselines
    code, out = gate(runs["again"], "--baseline-tag", "branch=main", "--db", db, "--json")
    doc = json.loads(out)
    assert doc["candidate"]["run_id"] == ids["again"]
    assert doc["base"]["run_id"] == ids["base"]  # the candidate itself is never its baseline


def test_a_baseline_from_a_lake(runs, here):
    lake = here / "lake"
    result = runner.invoke(app, ["ingest", str(runs["base"]), "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    code, out = gate(runs["candidate"], "--baseline-tag", "branch=main", "--db", lake, "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["base"]["origin"].startswith(str(lake))
    assert any(c["name"] == "`x` dim 1" for c in doc["new_causes"])
    # the baselines elsewhere than --db (which a trace-file candidate never opens)
    code, out = gate(
        runs["candidate"], "--baseline-tag", "branch=main", "--baseline-db", lake, "--json"
    )
    assert code == 1
    assert json.loads(out)["base"]["run_id"] == doc["base"]["run_id"]


def test_rules_from_pyproject(runs, here):
    (here / "pyproject.toml").write_text(
        '[tool.ember.gate]\nfail-on = ["new_breaks>0", "calls<10"]\n', encoding="utf-8"
    )
    code, out = gate(runs["base"], runs["candidate"], "--json")
    doc = json.loads(out)
    assert doc["rules_from"].endswith("pyproject.toml [tool.ember.gate]")
    assert [(r["rule"], r["status"]) for r in doc["rules"]] == [
        ("new_breaks>0", "pass"),
        ("calls<10", "pass"),
    ]
    assert code == 0
    code, _ = gate(runs["base"], runs["candidate"], "--fail-on", "recompiles>0")  # wins
    assert code == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nosuchrun", "{candidate}", "--db", "{db}"], "no run 'nosuchrun'"),
        (["{base}", "missing.jsonl"], "missing.jsonl: no such trace file"),
        (["{base}", "{candidate}", "--fail-on", "recompiles=>0"], "cannot read the rule"),
        (["{base}", "{candidate}", "--fail-on", "recompile>0"], "no metric 'recompile'"),
        (["{base}", "{candidate}", "--fail-on", "calls>[bold]"], "rule 'calls>[bold]'"),
        (["{base}", "{candidate}", "--fail-on", ""], "--fail-on: no rules in ''; write 'none'"),
        (["{candidate}"], "no baseline"),
        (["{candidate}", "--baseline-tag", "branch"], "expected KEY=VALUE"),
        (["{candidate}", "--baseline-tag", "branch=nope", "--db", "{db}"], "no run tagged"),
        (["{base}", "{candidate}", "--db", "{db}", "--config", "nope.toml"], "no such file"),
    ],
)
def test_bad_input_exits_2_and_says_what_to_do(runs, here, args, says):
    db = here / "one.duckdb"
    ingest([runs["base"]], db)
    filled = [a.format(db=db, **{k: str(v) for k, v in runs.items()}) for a in args]
    code, out = gate(*filled)
    assert code == 2, out
    assert says in " ".join(out.split())
