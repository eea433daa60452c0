"""Recording never stops or loses the program (issue 52, class 1): trace names that no two
processes share (containers that all run as pid 1 and start in the same second), a folder
that cannot take a trace, ``python -c``, and children that run in another folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ember.record import Program, create_trace
from ember.schemas import validate_file


def _ember_record(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "record", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "EMBER_TRACE"},
    )


def test_processes_of_one_pid_and_second_never_share_a_trace(tmp_path):
    # pid 1 in every container of a pod, all started in the same second, one shared folder:
    # each gets its own file, and a finished trace already there is left as it is
    program = Program("train.py")
    finished = create_trace(tmp_path, program)
    finished.write_text("another run's trace\n")
    paths = {create_trace(tmp_path, program) for _ in range(50)}
    assert len(paths) == 50
    assert finished not in paths
    assert finished.read_text() == "another run's trace\n"
    assert all(p.parent == tmp_path and p.stat().st_size == 0 for p in paths)


def test_python_c_is_recorded_and_children_get_an_absolute_trace_folder(tmp_path):
    code = "import os, sys; print('child sees', os.environ['EMBER_TRACE'], sys.argv)"
    done = _ember_record(tmp_path, "--out", "rel", "--", "python", "-c", code, "a1")
    assert done.returncode == 0, done.stderr
    # the program ran as `python -c` runs it; a child in another folder records into the
    # same folder, so the trace folder it is handed is absolute
    assert f"child sees {tmp_path / 'rel'} ['-c', 'a1']" in done.stdout
    (trace,) = (tmp_path / "rel").glob("python-c-*.jsonl")
    assert validate_file(trace).ok


def test_a_folder_that_cannot_take_the_trace_is_one_line_and_the_program_runs(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = _ember_record(
        tmp_path, "--out", str(blocker / "traces"), "--", "python", "-c", "print('ran')"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n"
    [line] = done.stderr.splitlines()
    assert line.startswith(f"ember.record: not recording: cannot write a trace in {blocker}")
    assert "the program runs unrecorded" in line


def test_ember_run_never_truncates_another_runs_trace(tmp_path):
    from tests.analysis.traces import symbolic_matmul

    model = symbolic_matmul(tmp_path / "m.onnx")
    other = tmp_path / "other.jsonl"
    other.write_text('{"kind": "meta"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "run", str(model), "--record", str(other)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2, done.stderr
    assert f"--record {other}: the file exists" in " ".join(done.stderr.split())
    assert other.read_text() == '{"kind": "meta"}\n'
