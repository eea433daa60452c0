"""A trace names its job, rank and world size from what launchers set, and its devices in a
``process`` record once JAX's backend has started (never starting it: see
``tests/cli/test_record_distributed.py`` for the real multi-process job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ember.recorder import record
from ember.recorder.job import JobIdentity, launcher_identity
from ember.schemas import validate_file

LAUNCHERS = {
    "torchrun": (
        {"RANK": "3", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "exp7", "LOCAL_RANK": "3"},
        JobIdentity("torchrun:exp7", 3, 8, "torchrun"),
    ),
    "torchrun without an rdzv id": (
        {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "none",
            "MASTER_ADDR": "10.0.0.5",
            "MASTER_PORT": "29500",
        },
        JobIdentity("torchrun:10.0.0.5:29500", 1, 2, "torchrun"),
    ),
    "slurm": (
        {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "16"},
        JobIdentity("slurm:4242.0", 5, 16, "slurm"),
    ),
    "slurm wins over the torch variables it set": (
        {"SLURM_JOB_ID": "9", "SLURM_PROCID": "2", "SLURM_NTASKS": "4", "RANK": "7"},
        JobIdentity("slurm:9", 2, 4, "slurm"),
    ),
    "openmpi": (
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"},
        JobIdentity(None, 1, 4, "openmpi"),
    ),
    "pmi": ({"PMI_RANK": "0", "PMI_SIZE": "2"}, JobIdentity(None, 0, 2, "pmi")),
    "ember --job names an mpi job": (
        {"PMI_RANK": "0", "PMI_SIZE": "2", "EMBER_JOB": "nightly"},
        JobIdentity("nightly", 0, 2, "pmi"),
    ),
    "ember --job alone": ({"EMBER_JOB": "nightly"}, JobIdentity("nightly", None, None, "ember")),
    "nothing": ({"HOME": "/root"}, JobIdentity()),
    "a rank that is not a number": ({"RANK": "x", "WORLD_SIZE": "2"}, JobIdentity()),
}


@pytest.mark.parametrize("case", LAUNCHERS)
def test_the_launchers_environment_names_the_job_and_rank(case: str) -> None:
    environ, want = LAUNCHERS[case]
    assert launcher_identity(environ) == want


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_meta_carries_the_launchers_job_and_the_devices_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jax

    jax.devices()  # the backend has started: the meta says the devices, nothing comes later
    for name in [k for k in os.environ if k.startswith(("SLURM_", "OMPI_", "PMI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r1")
    path = tmp_path / "t.jsonl"
    with record(path):
        pass
    assert validate_file(path).ok
    (meta,) = _lines(path)
    assert (meta["job_id"], meta["rank"], meta["world_size"], meta["job_source"]) == (
        "torchrun:r1",
        2,
        4,
        "torchrun",
    )
    assert meta["backend"] == jax.default_backend()
    assert meta["devices"] == [str(d) for d in jax.devices()]


def _run(code: str, env: dict[str, str] | None = None) -> str:
    env = {**{k: v for k, v in os.environ.items() if k != "EMBER_TRACE"}, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_devices_the_program_starts_later_come_in_a_process_record(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    code = (
        "import jax\n"
        "from ember.recorder.jax import ProfileSession\n"
        f"with ProfileSession({str(path)!r}):\n"
        "    jax.jit(lambda x: x + 1)(1.0)\n"
        "print([d.id for d in jax.local_devices()], jax.default_backend())\n"
    )
    local, backend = _run(code, {"JAX_PLATFORMS": "cpu"}).split()
    meta, *rest = _lines(path)
    assert (meta["backend"], meta["devices"]) == (None, [])
    (process,) = (r for r in rest if r["kind"] == "process")
    assert process["backend"] == backend == "cpu"
    assert str(process["local_device_ids"]) == local
    assert (process["rank"], process["world_size"], process["job_id"]) == (None, None, None)
    # written at the compile: before the jit span's end
    kinds = [r["kind"] for r in rest]
    assert kinds.index("process") < kinds.index("span_end")
    assert validate_file(path).ok


def test_a_program_that_never_starts_jax_has_no_process_record(tmp_path: Path) -> None:
    # a fresh interpreter that imports JAX but never uses it: nothing may start its backend
    path = tmp_path / "t.jsonl"
    code = (
        "import sys, jax\n"
        "from ember.recorder import record\n"
        "from ember.recorder.job import backend_started\n"
        "from ember.runtime.memory import MemorySampler\n"
        f"with record({str(path)!r}), MemorySampler(0.01):\n"
        "    import time; time.sleep(0.05)\n"
        "print(backend_started())\n"
    )
    assert _run(code) == "False\n"
    kinds = [r["kind"] for r in _lines(path)]
    assert kinds == ["meta"]
