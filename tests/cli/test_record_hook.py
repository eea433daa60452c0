"""``EMBER_TRACE=DIR python train.py`` with the ``.pth`` hook (``ember record --install-hook``):
every process of the program that imports JAX records itself, one trace each, a
``multiprocessing`` spawn child included; a process without JAX writes nothing; a program
that raises still leaves valid traces. The hook is installed into this environment's
site-packages for the test and removed after it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ember import autorecord
from ember.analysis import connect
from ember.schemas import validate_file
from tests.analysis.databases import ingested
from tests.cli.conftest import ember_record, wait_until_ready

PROGRAM = Path(__file__).parent / "programs" / "spawn_train.py"


def _ember(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "record", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


# Once for the module: the tests only run programs with the hook in place (none installs,
# removes or edits it), so each did not need its own install and two uninstalls (~20 s a
# test on a loaded 2-core CI machine); the install and uninstall are checked here as before.
@pytest.fixture(scope="module")
def hook():
    if autorecord.hook_path().exists():
        pytest.skip(f"{autorecord.hook_path()} is installed already: not touching it")
    done = _ember("--install-hook")
    assert done.returncode == 0, done.stderr
    try:
        assert autorecord.hook_path().read_text() == autorecord.HOOK_LINE
        yield autorecord.hook_path()
    finally:
        removed = _ember("--uninstall-hook")
    assert removed.returncode == 0, removed.stderr
    assert not autorecord.hook_path().exists()
    assert "no hook at" in _ember("--uninstall-hook").stdout


def _run(tmp_path: Path, *args: str, trace: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EMBER_TRACE"}
    if trace:
        env["EMBER_TRACE"] = str(tmp_path / "out")
    return subprocess.run(
        [sys.executable, str(PROGRAM), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _metas(traces: list[Path]) -> list[dict]:
    return [json.loads(t.read_text().splitlines()[0]) for t in traces]


def test_the_program_and_its_spawn_child_each_write_a_trace(hook, tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no jax here" in done.stdout
    traces = sorted((tmp_path / "out").glob("*.jsonl"))
    assert len(traces) == 2, traces  # the subprocess without JAX wrote none
    assert all(validate_file(t).ok for t in traces)
    metas = _metas(traces)
    assert len({m["pid"] for m in metas}) == 2
    assert {m["tags"]["recorded_by"] for m in metas} == {"EMBER_TRACE"}
    with connect(ingested(tmp_path, traces), read_only=True) as con:
        reasons = con.sql(
            "SELECT fun_name, reason FROM recompiles WHERE NOT outside_jit ORDER BY fun_name"
        ).rows()
        steps = con.sql("SELECT step, steps FROM steps ORDER BY step").rows()
    assert reasons == [
        ("child_step", "x dim 0: 3 -> 6"),  # recorded in the spawn child
        ("parent_step", "x dim 0: 4 -> 8"),
    ]
    assert steps == [("child_step", 3), ("parent_step", 2)]

    # without EMBER_TRACE the hook does nothing
    quiet = _run(tmp_path / "out", trace=False)
    assert quiet.returncode == 0, quiet.stderr
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 2


def test_a_program_that_raises_leaves_valid_traces(hook, tmp_path):
    done = _run(tmp_path, "--fail")
    assert done.returncode == 1
    assert "RuntimeError: the parent failed after its child" in done.stderr
    traces = sorted((tmp_path / "out").glob("*.jsonl"))
    assert len(traces) == 2
    for trace in traces:
        assert validate_file(trace).ok
        kinds = [json.loads(line)["kind"] for line in trace.read_text().splitlines()]
        assert kinds.count("span_start") == kinds.count("span_end") >= 2


def test_sigterm_closes_a_hooked_trace(hook, tmp_path):
    ready = tmp_path / "ready"
    env = {**os.environ, "EMBER_TRACE": str(tmp_path / "out")}
    child = subprocess.Popen(
        [sys.executable, str(PROGRAM), "--hang", str(ready)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until_ready(child, ready)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM, err
    (trace,) = (tmp_path / "out").glob("*.jsonl")
    assert validate_file(trace).ok
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    # the two compiles of parent_step, written before the process ended
    compiles = [
        r
        for r in records
        if r["kind"] == "span_end"
        and r["span_kind"] == "jit"
        and r["attrs"]["fun_name"] == "parent_step"
    ]
    assert len(compiles) == 2


def test_a_process_ember_record_runs_is_recorded_once(hook, tmp_path):
    # `ember record` sets EMBER_TRACE for its child: the hook must not record it twice
    done = ember_record(tmp_path, PROGRAM, out=tmp_path / "out")
    assert done.returncode == 0, done.stderr
    traces = sorted((tmp_path / "out").glob("*.jsonl"))
    recorders = sorted(m["tags"].get("recorded_by", "ember.record") for m in _metas(traces))
    # the program by ember.record (once), its spawn child by the hook
    assert recorders == ["EMBER_TRACE", "ember.record"], recorders
    assert all(validate_file(t).ok for t in traces)
