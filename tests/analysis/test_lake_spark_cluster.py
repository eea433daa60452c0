"""Spark on a standalone cluster: a master and a worker started from the PySpark install,
every port and UI on 127.0.0.1, stopped by the test. One worker of two cores: its executor is
a JVM of its own, which is what the test is about (a second worker and its executor, two
more JVMs, cost ~35 s of the test's 136 on a quiet 2-core machine).

``local[2]`` (test_lake_spark.py) runs the executors inside the driver's JVM, whose Python
workers are forked from the driver's interpreter with its ``sys.path``. A cluster's
executors are separate JVMs, each starting its own Python workers with the interpreter
``spark.pyspark.python`` names, in the worker's work folder: Ember must be importable
there from the interpreter's own install (the venv), not from the checkout the driver runs
in. The driver here runs in a fresh process (one SparkContext per process; the local
session of the other tests may be alive in this one) whose working folder is not the
checkout, and it keeps the checkout off the executors' path.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.analysis.lake_parity import bad_corpus, require_spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]

pyspark = require_spark()

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
REGISTER_TIMEOUT_S = 120  # ~20 s on a quiet machine
# the views checked row for row on the cluster (all of them are on local[2] in
# test_lake_spark.py; computing all 49 here took 5 minutes): the run summary, which reads
# most of the others, the recompiles and their causes, the hand-written stack distances
CLUSTER_VIEWS = ["cache_lookups", "recompiles", "cache_what_if", "run_summary", "rejected_files"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """A Spark daemon (``spark-class CLASS ARGS``) in its own process group: the executors
    a worker starts are in its group too, and go with it."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        # an executor that outlived its worker (its group is the worker's)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def _cluster_env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPARK_", "PYSPARK_")) and k != "PYTHONPATH"
    }
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(tmp / "local"),
        SPARK_DAEMON_MEMORY="256m",
    )
    return env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with one registered worker (2 cores, 1 GiB)."""
    tmp = tmp_path_factory.mktemp("spark-cluster")
    env = _cluster_env(tmp)
    port, ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    procs = [
        _daemon(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
            ],
            tmp / "master.log",
            env,
        )
    ]
    try:
        for i in (1,):
            work = tmp / f"worker{i}"
            work.mkdir()
            procs.append(
                _daemon(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        *("--host", "127.0.0.1", "--port", str(_free_port())),
                        *("--webui-port", str(_free_port()), "--work-dir", str(work)),
                        *("--cores", "2", "--memory", "1g", master),
                    ],
                    tmp / f"worker{i}.log",
                    env,
                )
            )
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while _alive_workers(ui) < 1:
            dead = [p.args[1] for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = {f.name: f.read_text()[-2000:] for f in sorted(tmp.glob("*.log"))}
                pytest.fail(f"the cluster did not start (exited: {dead}): {logs}")
            time.sleep(0.5)
        yield master
    finally:
        _stop(procs)


# The driver: the Spark ingest into a Delta lake and five views, on the cluster. It prints
# one JSON line. The checkout goes on its own sys.path (for the test helpers), not on the
# executors': they import Ember from the venv's install.
DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    master, traces, out = sys.argv[2], sys.argv[3:-1], sys.argv[-1]

    from ember.analysis import connect, ingest
    from ember.analysis.views import views_read_by
    from ember.analysis.lake import LAKE_TABLES, connect_lake
    from ember.analysis.lake.spark.job import ingest_spark, register_lake, spark_session
    from tests.analysis.lake_parity import differences, view_differences

    VIEWS = json.loads(os.environ["EMBER_TEST_VIEWS"])
    spark = spark_session(master, app="ember-cluster-test")
    sc = spark.sparkContext
    deadline = time.monotonic() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 2 and time.monotonic() < deadline:
        time.sleep(0.5)  # the executor (and the driver's block manager) registered

    def where(_):
        try:
            import ember.analysis.lake.spark.job as m
        except ImportError as exc:
            return (sys.executable, os.getpid(), os.getcwd(), repr(exc) + repr(sys.path))
        return (sys.executable, os.getpid(), os.getcwd(), m.__file__)

    workers = sorted(set(sc.parallelize(range(8), 8).map(where).collect()))

    t = {"start": time.monotonic()}
    summary = ingest_spark(traces, out + "/lake", master=master)
    t["ingest"] = time.monotonic()
    print("ingest", round(t["ingest"] - t["start"], 1), file=sys.stderr, flush=True)
    ingest(traces, out + "/t.duckdb")
    names = register_lake(spark, out + "/lake", computed=False, views=VIEWS)
    with connect(out + "/t.duckdb", read_only=True) as db, connect_lake(out + "/lake") as lake:
        diffs = differences(db, lake, (*LAKE_TABLES, "ingested_files"))
        t["tables"] = time.monotonic()
        print("tables", round(t["tables"] - t["start"], 1), file=sys.stderr, flush=True)
        diffs += view_differences(db, spark, VIEWS)
        t["views"] = time.monotonic()
        print("views", round(t["views"] - t["start"], 1), file=sys.stderr, flush=True)
    again = ingest_spark(traces, out + "/lake", master=master)
    t["again"] = time.monotonic()
    print("again", round(t["again"] - t["start"], 1), file=sys.stderr, flush=True)
    print(json.dumps({
        "executors": sc._jsc.sc().getExecutorMemoryStatus().size() - 1,
        "workers": workers,
        "driver_pid": os.getpid(),
        "files": [(f.status, f.records, f.rejected) for f in summary.files],
        "again": [f.status for f in again.files],
        "views": names,
        "needed": list(views_read_by(VIEWS)),
        "diffs": diffs,
        "seconds": {k: round(v - t["start"], 1) for k, v in t.items()},
    }))
    spark.stop()
    """
)


def test_spark_ingest_and_views_on_a_standalone_cluster(cluster, sweep_trace, tmp_path):
    traces = [str(sweep_trace), str(bad_corpus(tmp_path / "bad.jsonl"))]
    out = tmp_path / "out"
    out.mkdir()
    # no PYSPARK_PYTHON: the driver's own interpreter is what its executors start
    env = {**_cluster_env(tmp_path), "EMBER_TEST_VIEWS": json.dumps(CLUSTER_VIEWS)}
    log = tmp_path / "driver.log"
    with open(log, "wb") as err:
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(REPO), cluster, *traces, str(out)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=tmp_path,  # not the checkout: nothing is imported from the working folder
            start_new_session=True,
        )
        try:
            stdout, _ = driver.communicate(timeout=600)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(timeout=10)
    assert driver.returncode == 0, log.read_text()[-4000:]
    got = json.loads(stdout.strip().splitlines()[-1])
    # an executor JVM of its own, its Python workers the venv's interpreter, not the driver
    assert got["executors"] == 1
    pids = {pid for _, pid, _, _ in got["workers"]}
    assert got["driver_pid"] not in pids
    assert {exe for exe, _, _, _ in got["workers"]} == {sys.executable}
    assert all(not cwd.startswith(str(REPO)) for _, _, cwd, _ in got["workers"])
    assert {f for *_, f in got["workers"]} == {str(REPO / "analysis" / "lake" / "spark" / "job.py")}
    # the ingest, the same rows as the DuckDB file in every table and the five views
    assert got["files"] == [["ok", 98, 0], ["partial", 6, 8]]
    assert got["again"] == ["unchanged", "unchanged"]
    assert got["views"] == got["needed"]  # the five and the views they read
    assert got["diffs"] == []
    print("seconds since the driver's session started:", got["seconds"])
