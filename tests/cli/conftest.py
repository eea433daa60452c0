"""The analysis tests' recorded traces and their database (tests/analysis/conftest.py), for
the commands that read them (`ember ingest|query|report|export`); and the steps the
``ember record`` tests share: run a program under it, ingest the trace it wrote, wait for a
program to say it is ready for a signal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.analysis.conftest import bus_trace, sweep_trace, views_db
from tests.analysis.databases import ingested

__all__ = [
    "bus_trace",
    "ember_record",
    "record_and_ingest",
    "sweep_trace",
    "views_db",
    "wait_until_ready",
]


def ember_record(
    cwd: Path,
    program: Path | str,
    *args: str,
    out: Path | None = None,
    options: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``ember record [--out OUT] OPTIONS -- python PROGRAM ARGS`` run in ``cwd``; without
    ``out`` the folder is the one ``env`` names in ``EMBER_TRACE``."""
    where = ["--out", str(out)] if out is not None else []
    return subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "record", *where, *options]
        + ["--", "python", str(program), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def record_and_ingest(
    tmp_path: Path,
    program: Path | str,
    *args: str,
    options: Sequence[str] = (),
    out_from_env: bool = False,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run ``program`` under ``ember record`` in ``tmp_path`` (the trace folder
    ``tmp_path/out``, given as ``--out`` or, with ``out_from_env``, as ``EMBER_TRACE``); it
    must succeed and write one trace, named after the program. Returns the finished command
    and the database that trace was ingested into."""
    out = tmp_path / "out"
    env = {**os.environ, **(env or {})}
    if out_from_env:
        env["EMBER_TRACE"] = str(out)
    done = ember_record(
        tmp_path, program, *args, out=None if out_from_env else out, options=options, env=env
    )
    assert done.returncode == 0, done.stderr
    (trace,) = out.glob(f"{Path(program).stem}-*.jsonl")
    return done, ingested(tmp_path, [trace])


def wait_until_ready(child: subprocess.Popen[str], ready: Path, timeout: float = 300) -> None:
    """Wait for ``child`` to write ``ready`` (it is then set up to be sent a signal); fail,
    with its output, if it ends first or takes longer than ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)
