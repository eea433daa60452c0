"""A load is not a compile: a JAX program run twice with a persistent compilation cache
(``JAX_COMPILATION_CACHE_DIR``) compiles on the first run and loads on the second, and every
surface (run_summary, jit_functions, recompiles, recompile_causes, ``ember report``,
``ember compare``) says so, in counts that equal JAX's own ``JAX_LOG_COMPILES`` lines.

JAX's log lines come from a bare run of the same program with the same cache (``--log``
turns them on in the program): each "Compiling jit(f)" line is a program the run needed,
each "Persistent compilation cache hit" line a load."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ember.analysis import connect
from tests.analysis.databases import ingested
from tests.cli.conftest import ember_record

RAGGED = Path(__file__).parent / "programs" / "ragged.py"
_COMPILING = re.compile(r"^Compiling (?:jit|pmap)\((?P<name>[^)]*)\)", re.M)
_HIT = re.compile(r"^Persistent compilation cache hit for '(?:jit|pmap)_(?P<name>[^']*)'", re.M)


def _env(cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "JAX_COMPILATION_CACHE_DIR": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def _jax_log(cache: Path) -> tuple[Counter[str], Counter[str]]:
    """(programs needed, programs loaded) per function, from JAX's log of a bare run."""
    done = subprocess.run(
        [sys.executable, str(RAGGED), "--log"],
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    needed = Counter(m["name"] for m in _COMPILING.finditer(done.stderr))
    loaded = Counter(m["name"] for m in _HIT.finditer(done.stderr))
    return needed, loaded


def _record(tmp_path: Path, cache: Path, out: str) -> Path:
    done = ember_record(tmp_path, RAGGED, out=tmp_path / out, env=_env(cache))
    assert done.returncode == 0, done.stderr
    (trace,) = (tmp_path / out).glob("ragged-*.jsonl")
    return trace


def _ember(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ember.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("loads")
    bare_cold = _jax_log(tmp / "bare-cache")
    bare_warm = _jax_log(tmp / "bare-cache")
    cold = _record(tmp, tmp / "cache", "cold")
    warm = _record(tmp, tmp / "cache", "warm")
    db = ingested(tmp, [cold, warm])
    ids = [json.loads(t.read_text().splitlines()[0])["run_id"] for t in (cold, warm)]
    return {"db": db, "cold": ids[0], "warm": ids[1], "jax_cold": bare_cold, "jax_warm": bare_warm}


def _summary(db: Path, run_id: str) -> dict[str, object]:
    with connect(db, read_only=True) as con:
        [row] = con.sql("SELECT * FROM run_summary WHERE run_id = ?", [run_id]).to_dicts()
    return row


def _jit_calls(db: Path, run_id: str) -> list[tuple[object, ...]]:
    with connect(db, read_only=True) as con:
        return con.execute(
            "SELECT fun_name, calls, hits, misses, compiles, loads FROM jit_calls "
            "WHERE run_id = ? ORDER BY fun_name",
            [run_id],
        ).fetchall()


def test_the_warm_run_loads_every_program_and_compiles_none(two_runs):
    db, warm = two_runs["db"], two_runs["warm"]
    needed, loaded = two_runs["jax_warm"]
    assert needed == loaded  # JAX itself: every program it needed was a cache hit
    s = _summary(db, warm)
    assert (s["compiles"], s["recompiles"], s["jax_compiles"]) == (0, 0, 0)
    assert s["loads"] == loaded["update"] == 2  # the 128 and the ragged 104 batch
    assert s["loads"] + s["jax_loads"] == s["disk_hits"] == sum(loaded.values())
    assert s["disk_misses"] == 0
    with connect(db, read_only=True) as con:
        funs = {
            name: (compiles, loads)
            for name, compiles, loads in con.execute(
                "SELECT fun_name, compiles, loads FROM jit_functions WHERE run_id = ?", [warm]
            ).fetchall()
        }
        outcomes = con.execute(
            "SELECT DISTINCT outcome FROM compiles WHERE run_id = ?", [warm]
        ).fetchall()
        causes = con.execute("SELECT count(*) FROM recompile_causes WHERE run_id = ?", [warm])
        assert causes.fetchone() == (0,)
        retrace = con.execute(
            "SELECT retraces, recompiles, loads FROM jit_retraces WHERE run_id = ?", [warm]
        ).fetchall()
    assert funs == {name: (0, n) for name, n in loaded.items()}
    assert outcomes == [("load",)]
    assert retrace == [(1, 0, 1)]  # traced again for the ragged batch, and loaded
    # 16 calls of `update` (2 epochs of 8 batches): the 2 that loaded a program missed JAX's
    # in-memory cache, the other 14 were served from it
    assert _jit_calls(db, warm) == [("update", 16, 14, 2, 0, 2)]
    assert (s["hits"], s["misses"], s["hit_rate"]) == (14, 2, 14 / 16)


def test_the_cold_run_compiles_what_jax_logged(two_runs):
    db, cold = two_runs["db"], two_runs["cold"]
    needed, loaded = two_runs["jax_cold"]
    assert not loaded
    s = _summary(db, cold)
    assert (s["compiles"], s["recompiles"], s["loads"], s["jax_loads"]) == (2, 1, 0, 0)
    # the recorder reads the platform after the program started JAX (its process record),
    # not at the start: the summary still names it
    assert s["backend"] == "cpu"
    assert s["compiles"] + s["jax_compiles"] == s["disk_misses"] == sum(needed.values())
    # every call JAX did not log a compile for was served from its in-memory cache
    assert _jit_calls(db, cold) == [("update", 16, 16 - needed["update"], 2, 2, 0)]
    assert (s["hits"], s["misses"]) == (14, 2)
    with connect(db, read_only=True) as con:
        [(n, also)] = con.execute(
            "SELECT n, also FROM recompile_causes WHERE run_id = ? AND fun_name = 'update'",
            [cold],
        ).fetchall()
    # one recompile, once, with the other input it changed (its dimension named)
    assert (n, also) == (1, ["y dim 0"])


def test_the_report_says_loads_not_compiles(two_runs):
    done = _ember("report", "--db", str(two_runs["db"]), "--run", two_runs["warm"])
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "0 compiles · 2 loads" in text
    assert "jax compile" not in text  # the primitives were loaded too: "2 jax loads"
    assert "2 jax loads" in text
    assert "JAX compiled" not in text
    assert "loaded from the persistent cache, not compiled" in text


def test_compare_counts_one_recompile_once(two_runs):
    db = str(two_runs["db"])
    # the warm run as base: the cold one adds one recompile (x and y changed together)
    done = _ember("compare", two_runs["warm"], two_runs["cold"], "--db", db, "--format", "json")
    result = json.loads(done.stdout)
    metrics = {m["metric"]: m for m in result["metrics"]}
    assert metrics["new_recompile_causes"]["candidate"] == 1
    assert (metrics["loads"]["base"], metrics["loads"]["candidate"]) == (2, 0)
    assert (metrics["compiles"]["base"], metrics["compiles"]["candidate"]) == (0, 2)


def test_the_report_advises_on_the_ragged_last_batch(two_runs):
    db, cold = str(two_runs["db"]), two_runs["cold"]
    with connect(two_runs["db"], read_only=True) as con:
        buckets = con.execute(
            "SELECT arg, dim, sizes, compiles, pow2_sizes, saved_compiles, ragged "
            "FROM jit_shape_buckets WHERE run_id = ? AND fun_name = 'update' ORDER BY arg",
            [cold],
        ).fetchall()
    assert buckets == [
        ("x", 0, [104, 128], 2, [128], 1, True),
        ("y", 0, [104, 128], 2, [128], 1, True),
    ]
    done = _ember("report", "--db", db, "--run", cold)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert (
        "x dim 0, y dim 0 went from 128 to 104: padding to 128 (or dropping a ragged last "
        "batch) would need 1 compile instead of 2"
    ) in text
