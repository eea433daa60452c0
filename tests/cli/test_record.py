"""``ember record -- python train.py``: an unmodified JAX program recorded into a trace per
process, whose retraces `recompiles` names with their reasons; a program that raises or is
sent SIGTERM still leaves a valid trace."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ember.analysis import connect
from ember.cli.record import child_command
from ember.record import Program, UsageError, parse_args, trace_path
from ember.schemas import validate_file
from tests.analysis.databases import ingested
from tests.cli.conftest import wait_until_ready

TRAIN = Path(__file__).parent / "programs" / "train.py"


def _ember_record(tmp_path: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "ember.cli.main", "record", "--out", str(tmp_path / "out")]
    return subprocess.Popen(
        [*cmd, "--", "python", str(TRAIN), *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[call-overload]
    )


def _only_trace(tmp_path: Path) -> Path:
    (trace,) = (tmp_path / "out").glob("*.jsonl")
    return trace


def _git_repo(path: Path) -> str:
    def git(*args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
        env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
        return subprocess.run(
            ["git", *args], cwd=path, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q")
    (path / "README").write_text("x")
    git("add", "README")
    git("commit", "-q", "-m", "init")
    return git("rev-parse", "HEAD")


def test_an_unmodified_program_records_its_retrace_with_the_reason(tmp_path):
    commit = _git_repo(tmp_path)
    child = _ember_record(tmp_path, "--lr", "0.1")
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert "args ['--lr', '0.1']" in out  # the program's own options reach it untouched
    trace = _only_trace(tmp_path)
    meta = json.loads(trace.read_text().splitlines()[0])
    assert meta["pid"] != child.pid  # the recording process is the program's, not the CLI's
    # the program, its start, host and pid, and a random part
    assert re.fullmatch(
        rf"train-\d{{8}}-\d{{6}}-[\w.-]+-{meta['pid']}-[0-9a-f]{{8}}\.jsonl", trace.name
    )
    assert meta["entrypoint"].endswith("train.py --lr 0.1")
    assert meta["tags"]["command"] == meta["entrypoint"]
    assert meta["tags"]["git_commit"] == commit
    assert validate_file(trace).ok

    with connect(ingested(tmp_path, [trace]), read_only=True) as con:
        rows = con.sql(
            "SELECT arg, old_value, new_value, reason FROM recompiles "
            "WHERE fun_name = 'train_step' AND NOT outside_jit"
        ).rows()
        readings = con.sql("SELECT count(*) FROM memory_timeline").item()
        internal = dict(con.sql("SELECT fun_name, internal FROM jit_functions").rows())
    assert rows == [("x", "8", "16", "x dim 0: 8 -> 16")]  # the dimension named
    assert readings >= 2  # a reading at the start and at the end at least
    # the program's functions are its own jit, not "primitives run outside jit"
    assert internal["train_step"] is False
    assert internal["evaluate"] is False
    assert internal["broadcast_in_dim"] is True


def test_a_program_that_raises_leaves_a_valid_trace_and_its_traceback(tmp_path):
    child = _ember_record(tmp_path, "--fail")
    _, err = child.communicate(timeout=300)
    assert child.returncode == 1
    assert "RuntimeError: the data loader broke" in err
    trace = _only_trace(tmp_path)
    assert validate_file(trace).ok
    kinds = [json.loads(line)["kind"] for line in trace.read_text().splitlines()]
    assert kinds[0] == "meta"
    assert kinds.count("span_start") == kinds.count("span_end") >= 2


def test_sigterm_closes_the_trace(tmp_path):
    ready = tmp_path / "ready"
    child = _ember_record(tmp_path, "--hang", str(ready))
    wait_until_ready(child, ready)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM, err
    trace = _only_trace(tmp_path)
    # printed after the recording closed: SIGTERM's default action would skip it (and the
    # writer's last second of buffered lines)
    assert f"ember.record: trace {trace}" in err
    assert validate_file(trace).ok
    lines = trace.read_text().splitlines()
    assert sum('"span_kind":"jit"' in line for line in lines) >= 4  # 2 compiles, start+end


def test_options_before_the_program_are_embers_and_after_it_the_programs(tmp_path):
    p = parse_args(["--out", "d", "--tag", "team=a", "t.py", "--out", "x"], environ={})
    assert (p.target, p.args, p.out, p.tags, p.module) == (
        "t.py",
        ["--out", "x"],
        Path("d"),
        {"team": "a"},
        False,
    )
    m = parse_args(["-m", "pkg.train", "-v"], environ={"EMBER_TRACE": "env_dir"})
    assert (m.target, m.args, m.module, m.out, m.command) == (
        "pkg.train",
        ["-v"],
        True,
        Path("env_dir"),
        "python -m pkg.train -v",
    )
    with pytest.raises(UsageError, match="no program to run"):
        parse_args(["--out", "d"], environ={})
    with pytest.raises(UsageError, match="--tag takes NAME=VALUE"):
        parse_args(["--tag", "x", "t.py"], environ={})
    path = trace_path(Path("o"), Program("../my train!.py"), pid=42)
    assert path.parent == Path("o").absolute()  # a child in another folder writes here too
    assert path.name.startswith("my_train-")
    assert "-42-" in path.name
    # two processes of the same program, pid and second never get one name
    assert path != trace_path(Path("o"), Program("../my train!.py"), pid=42)


def test_ember_record_wants_a_python_command(tmp_path):
    cmd = child_command(["python3", "-u", "-X", "dev", "t.py", "-u"], tmp_path, "train", [])
    assert cmd == [
        sys.executable,
        "-u",
        "-X",
        "dev",
        "-m",
        "ember.record",
        "--out",
        str(tmp_path),
        "--phase",
        "train",
        "t.py",
        "-u",
    ]
    with pytest.raises(ValueError, match="runs a Python program"):
        child_command(["./train.sh"], tmp_path, "train", [])
    with pytest.raises(ValueError, match="no script, -m MODULE or -c CODE"):
        child_command(["python", "-u"], tmp_path, "train", [])
