"""The job views (job_ranks, jobs, rank_compiles, rank_divergence) over the traces of a
Slurm job's ranks: one rank missing, one rank that compiled a program the others did not,
one that missed the persistent cache where the others loaded. The real multi-process JAX job
is in ``tests/cli/test_record_distributed.py``; the torch ranks in ``test_torch_trace.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ember.schemas import SCHEMA_ID
from tests.analysis.databases import ingested, query_rows
from tests.analysis.traces import write_lines

WALL = 1_764_403_200_000_000_000
MS = 1_000_000


def _meta(n: int, host: str, **job: object) -> str:
    return json.dumps(
        {
            "kind": "meta",
            "schema": SCHEMA_ID,
            "run_id": f"rank-{n}",
            "wall_time_ns": WALL + n * MS,
            "host": host,
            "pid": 100 + n,
            **job,
        }
    )


def _jit(span_id: int, ts: int, fun: str, ms: int, **end: object) -> list[str]:
    start = {
        "kind": "span_start",
        "ts_ns": ts,
        "span_id": span_id,
        "parent_id": None,
        "name": "jit",
        "span_kind": "jit",
        "attrs": {"fun_name": fun},
    }
    stop = {
        "kind": "span_end",
        "ts_ns": ts + ms * MS,
        "span_id": span_id,
        "duration_ns": ms * MS,
        "status": "ok",
        "span_kind": "jit",
        # defined_at: the user's function, not one of JAX's own (jit_functions)
        "attrs": {"fun_name": fun, "defined_at": "train.py:10", **end},
    }
    return [json.dumps(start), json.dumps(stop)]


@pytest.fixture(scope="module")
def job_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ranks 0, 1 and 3 of a 4-rank Slurm job (rank 2 never wrote a trace). Every rank
    compiles train_step once (100 ms); rank 3 compiles it again for a new batch size (a
    retrace, 900 ms) and compiles eval_step, which no other rank does; rank 1 misses the
    persistent cache for init where the others load it."""
    tmp = tmp_path_factory.mktemp("job")
    slurm = {"job_id": "slurm:77.0", "world_size": 4, "job_source": "slurm"}
    traces = []
    for rank in (0, 1, 3):
        lines = [_meta(rank, f"node{rank // 2}", rank=rank, **slurm)]
        lines += _jit(1, 1 * MS, "init", 10, persistent_cache="miss" if rank == 1 else "hit")
        lines += _jit(2, 50 * MS, "train_step", 100)
        if rank == 3:
            reason = "x dim 0: 64 -> 61"
            lines += _jit(3, 400 * MS, "train_step", 900, retrace_reason=reason)
            lines += _jit(4, 2000 * MS, "eval_step", 30)
        traces.append(write_lines(tmp / f"rank{rank}.jsonl", lines))
    # a run of no job: in none of the views
    lines = [_meta(9, "laptop"), *_jit(1, MS, "train_step", 5)]
    traces.append(write_lines(tmp / "alone.jsonl", lines))
    return ingested(tmp, traces)


def test_jobs_counts_the_ranks_seen_and_names_the_missing_one(job_db: Path) -> None:
    rows = query_rows(
        job_db,
        "SELECT job_id, ranks_seen, runs, world_size, ranks_missing, missing_ranks, hosts, "
        "compiles, compile_ns, started_at < ended_at FROM jobs",
    )
    assert rows == [
        ("slurm:77.0", 3, 3, 4, 1, [2], ["node0", "node1"], 8, 1260 * MS, True),
    ]
    ranks = query_rows(job_db, "SELECT rank, run_id, host, job_source FROM job_ranks ORDER BY 1")
    assert ranks == [
        (0, "rank-0", "node0", "slurm"),
        (1, "rank-1", "node0", "slurm"),
        (3, "rank-3", "node1", "slurm"),
    ]


def test_rank_compiles_puts_each_ranks_compiles_of_a_program_side_by_side(job_db: Path) -> None:
    rows = query_rows(
        job_db,
        "SELECT rank, compiles, loads, disk_misses, compile_ns, reasons FROM rank_compiles "
        "WHERE program = 'train_step' ORDER BY rank",
    )
    assert rows == [
        (0, 1, 0, 0, 100 * MS, None),
        (1, 1, 0, 0, 100 * MS, None),
        (3, 2, 0, 0, 1000 * MS, ["x dim 0: 64 -> 61"]),
    ]
    init = query_rows(
        job_db,
        "SELECT rank, loads, disk_misses FROM rank_compiles WHERE program = 'init' ORDER BY rank",
    )
    assert init == [(0, 1, 0), (1, 0, 1), (3, 1, 0)]


def test_rank_divergence_names_the_rank_its_cause_and_what_the_others_waited(
    job_db: Path,
) -> None:
    rows = query_rows(
        job_db,
        "SELECT program, divergence, ranks, divergent_ranks, fewest_compiles, most_compiles, "
        "slowest_rank, slowest_compile_ns, median_compile_ns, waited_ns, reason "
        "FROM rank_divergence ORDER BY program",
    )
    assert rows == [
        # 30 ms on rank 3, 0 on the median rank
        ("eval_step", "compiled on some ranks only", 3, [3], 0, 1, 3, 30 * MS, 0, 30 * MS, None),
        (
            "init",
            "persistent-cache misses on some ranks only",
            3,
            [1],
            1,
            1,
            0,
            10 * MS,
            10 * MS,
            0,
            None,
        ),
        (
            "train_step",
            "recompiled on some ranks only",
            3,
            [3],
            1,
            2,
            3,
            1000 * MS,
            100 * MS,
            900 * MS,
            "x dim 0: 64 -> 61",
        ),
    ]


def test_the_report_names_the_divergent_rank_its_cause_and_the_wait(job_db: Path) -> None:
    from ember.analysis import connect
    from ember.analysis.report import report

    with connect(job_db, read_only=True) as con:
        (rank3,) = report(con, "rank-3", limit=20)
        (rank1,) = report(con, "rank-1", limit=20)
        (rank0,) = report(con, "rank-0", limit=20)
    texts = [f.text for f in rank3.findings if f.kind == "rank_divergence"]
    # the costliest first: the recompile the others waited 0.9 s for
    assert texts == [
        "rank 3 of job slurm:77.0 recompiled train_step (x dim 0: 64 -> 61) and the other 2 "
        "ranks did not; they waited ~900 ms for rank 3 (its compile time minus the median "
        "rank's): compile the same shapes on every rank (pad or bucket the batch)",
        "rank 3 of job slurm:77.0 compiled eval_step and the other 2 ranks did not; they "
        "waited ~30 ms for rank 3 (its compile time minus the median rank's): compile the same "
        "shapes on every rank (pad or bucket the batch)",
    ]
    assert [f.text for f in rank1.findings if f.kind == "rank_divergence"] == [
        "rank 1 of job slurm:77.0 missed the persistent cache for init and the other 2 ranks "
        "did not; they lost no time to it: give every rank the same persistent cache (one "
        "jax_compilation_cache_dir)"
    ]
    assert [f for f in rank0.findings if f.kind == "rank_divergence"] == []
