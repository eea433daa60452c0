"""A job is many processes: a real 2-process ``jax.distributed`` job on this machine's CPUs
(coordinator on 127.0.0.1, gloo collectives) runs under ``ember record --`` per process as it
does bare, and its two traces are one job in which rank_divergence names the rank that got a
different batch shape; a program that configures JAX itself (platform, ``XLA_FLAGS``) after
importing it sees the same devices recorded and bare: the recorder never starts JAX's backend
first."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from ember.analysis import connect
from ember.analysis.report import report
from ember.schemas import validate_file
from tests.analysis.databases import ingested, query_rows

PROGRAMS = Path(__file__).parent / "programs"
DISTRIBUTED = PROGRAMS / "distributed_train.py"
CONFIGURES_JAX = PROGRAMS / "configures_jax.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(program: Path, args: list[str], out: Path | None) -> list[str]:
    if out is None:
        return [sys.executable, str(program), *args]
    ember = [sys.executable, "-m", "ember.cli.main", "record", "--out", str(out)]
    return [*ember, "--", "python", str(program), *args]


def run_job(
    tmp_path: Path, out: Path | None, world: int = 2, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Every rank of ``distributed_train.py`` at once (under ``ember record --out OUT`` when
    ``out`` is given), to their end."""
    port = str(_free_port())
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    env.pop("EMBER_TRACE", None)
    ranks = [
        subprocess.Popen(
            _command(DISTRIBUTED, [port, str(rank), str(world)], out),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    done = []
    for rank, child in enumerate(ranks):
        try:
            stdout, stderr = child.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            raise
        done.append(subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr))
        assert child.returncode == 0, f"rank {rank}: {stderr}"
    return done


def test_a_jax_distributed_job_runs_under_ember_record_as_it_does_bare(tmp_path: Path) -> None:
    bare = run_job(tmp_path, None)
    recorded = run_job(tmp_path, tmp_path / "out")
    for rank in (0, 1):
        assert recorded[rank].stdout == bare[rank].stdout
        assert f"rank {rank} of 2 step 2: [384.0, 366.0]" in recorded[rank].stdout
    traces = sorted((tmp_path / "out").glob("distributed_train-*.jsonl"))
    assert len(traces) == 2
    for trace in traces:
        assert validate_file(trace).ok
    # each trace names its rank in the job, as JAX knows it once the program started it
    processes = sorted((_process_record(t) for t in traces), key=lambda p: p["rank"])
    assert [(p["rank"], p["world_size"], p["job_source"]) for p in processes] == [
        (0, 2, "jax.distributed"),
        (1, 2, "jax.distributed"),
    ]
    assert processes[0]["job_id"] == processes[1]["job_id"]
    assert processes[0]["job_id"].startswith("jax:127.0.0.1:")
    assert processes[0]["local_device_ids"] != processes[1]["local_device_ids"]
    assert len(processes[0]["devices"]) == 2
    # one job of two ranks, and the rank that got a different batch shape is named
    db = ingested(tmp_path, traces)
    job = processes[0]["job_id"]
    assert query_rows(db, "SELECT job_id, ranks_seen, world_size, ranks_missing FROM jobs") == [
        (job, 2, 2, 0)
    ]
    (row,) = query_rows(
        db,
        "SELECT program, divergence, divergent_ranks, slowest_rank, reason, waited_ns, "
        "slowest_compile_ns, median_compile_ns FROM rank_divergence",
    )
    program, divergence, ranks, slowest, reason, waited, slowest_ns, median_ns = row
    assert (program, divergence, ranks, reason) == (
        "train_step",
        "recompiled on some ranks only",
        [1],
        "x dim 0: 64 -> 61",
    )
    # rank 1 compiled train_step twice, rank 0 once; the slowest is the one that spent the
    # most time (compile times are measured, not fixed), and with two ranks the median is
    # their mean
    per_rank = query_rows(
        db,
        "SELECT rank, compiles, compile_ns FROM rank_compiles WHERE program = 'train_step' "
        "ORDER BY rank",
    )
    assert [(r, n) for r, n, _ in per_rank] == [(0, 1), (1, 2)]
    assert (slowest, slowest_ns) == max(((r, ns) for r, _, ns in per_rank), key=lambda x: x[1])
    assert median_ns == round((per_rank[0][2] + per_rank[1][2]) / 2)
    assert waited == slowest_ns - median_ns
    # and the report of rank 1's run says so
    (rank1_run,) = query_rows(db, "SELECT run_id FROM job_ranks WHERE rank = 1")[0]
    with connect(db, read_only=True) as con:
        (rank1,) = report(con, rank1_run, limit=20)
    (finding,) = (f for f in rank1.findings if f.kind == "rank_divergence")
    assert finding.text.startswith(
        f"rank 1 of job {job} recompiled train_step (x dim 0: 64 -> 61) and the other rank "
        "did not; it "
    )


def _process_record(trace: Path) -> dict:
    (process,) = (
        json.loads(line) for line in trace.read_text().splitlines() if '"process"' in line
    )
    return process


def test_a_program_that_configures_jax_itself_sees_the_same_devices(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    env.pop("EMBER_TRACE", None)
    outputs = []
    for out in (None, tmp_path / "out"):
        done = subprocess.run(
            _command(CONFIGURES_JAX, [], out),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == "3 cpu 4.0\n"
    (trace,) = (tmp_path / "out").glob("configures_jax-*.jsonl")
    assert validate_file(trace).ok


def test_ember_record_job_names_the_job(tmp_path: Path) -> None:
    script = tmp_path / "one.py"
    script.write_text("import jax\nprint(float(jax.jit(lambda x: x + 1)(1.0)))\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    for name in ("EMBER_TRACE", "EMBER_JOB", "RANK", "SLURM_JOB_ID", "OMPI_COMM_WORLD_RANK"):
        env.pop(name, None)
    ember = [sys.executable, "-m", "ember.cli.main", "record", "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [*ember, "--job", "nightly 7", "--", "python", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "2.0\n"
    (trace,) = (tmp_path / "out").glob("one-*.jsonl")
    meta = json.loads(trace.read_text().splitlines()[0])
    assert (meta["job_id"], meta["job_source"], meta["backend"]) == ("nightly 7", "ember", None)
    assert _process_record(trace)["job_id"] == "nightly 7"
    db = ingested(tmp_path, [trace])
    assert query_rows(db, "SELECT job_id, rank, backend FROM job_ranks") == [
        ("nightly 7", None, "cpu")
    ]
    empty = [*ember, "--job", " ", "--", "python", str(script)]
    refused = subprocess.run(empty, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert refused.returncode == 2
    assert "--job takes a non-empty NAME" in refused.stderr
