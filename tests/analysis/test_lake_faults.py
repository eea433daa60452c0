"""The Delta lake under faults: ingesters killed (SIGKILL) at random points, ingesters racing on
overlapping and byte-identical files, damaged data files and log entries; and the lake commands
(optimize, vacuum, check, upgrade). Ingesters run as their own processes (spawned, never forked:
delta-rs refuses a forked runtime)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from ember.analysis.lake.admin import check, optimize, upgrade
from ember.analysis.lake.ingest import INGESTS, LAKE_TABLES, connect_lake, ingest_lake, lake_columns
from ember.analysis.lake.table import LakeError
from tests.analysis.lake_parity import differences
from tests.analysis.traces import cache_line, meta_line, run_span, write_lines

REPO = Path(__file__).resolve().parents[2]
EMBER = [sys.executable, "-m", "ember.cli.main"]

# an ingester that commits in batches of 2 files: many commits to be killed between
_INGESTER = """
import sys
from ember.analysis.lake import ingest as lake_ingest
lake_ingest.BATCH_FILES = 2
lake_ingest.ingest_lake(sys.argv[2:], sys.argv[1])
"""


def _traces(folder: Path, n: int, prefix: str = "run") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    start, end = run_span()
    out = []
    for i in range(n):
        lines = [meta_line(f"{prefix}-{i:02d}"), json.dumps(start)]
        lines += [cache_line(10 + j, "miss" if j % 5 == 0 else "hit") for j in range(20)]
        lines.append(json.dumps({**end, "ts_ns": 40}))
        out.append(write_lines(folder / f"t{i:02d}.jsonl", lines))
    return out


def _ingester(lake: Path, files: list[Path]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _INGESTER, str(lake), *map(str, files)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_a_commit(lake: Path, p: subprocess.Popen, deadline: float) -> None:
    """Return once the ingester has committed a batch (or ended, or the deadline passed).
    Random moments missed the window between commits on a slow host (20 of 20 trials)."""
    while time.perf_counter() < deadline and p.poll() is None:
        try:
            if _committed(lake) >= 1:
                return
        except Exception:  # a log half written: look again
            pass
        time.sleep(0.005)


def _committed(lake: Path) -> int:
    if not DeltaTable.is_deltatable(str(lake / INGESTS)):
        return 0
    return DeltaTable(str(lake / INGESTS)).to_pyarrow_table().num_rows


def test_ingesters_killed_at_random_points_then_run_again_give_the_lake_of_no_crash(tmp_path):
    files = _traces(tmp_path / "traces", 10)
    ref = tmp_path / "ref"
    t0 = time.perf_counter()
    p = _ingester(ref, files)
    assert p.wait(timeout=300) == 0, p.stderr.read() if p.stderr else ""
    full = time.perf_counter() - t0
    rng = random.Random(24)
    midway = 0
    with connect_lake(ref) as want:
        assert want.sql("SELECT count(*) AS n FROM runs")["n"][0] == 10
        # ten trials at random moments, and up to ten more, each killed just after the
        # first commit, while no kill has landed between a batch's commits (on a loaded or
        # slow machine the moments shift: the check below is that one did)
        for trial in range(20):
            if trial >= 10 and midway:
                break
            lake = tmp_path / f"crash{trial}"
            p = _ingester(lake, files)
            if trial < 10:
                time.sleep(rng.uniform(0.2, full))
            else:  # no kill has landed midway yet: kill right after the first batch's commit
                _wait_for_a_commit(lake, p, deadline=time.perf_counter() + 2 * full)
            p.kill()
            p.wait(timeout=60)
            midway += 0 < _committed(lake) < len(files)
            results = ingest_lake(files, lake).files
            assert {r.status for r in results} <= {"ok", "unchanged"}, trial
            with connect_lake(lake) as got:
                # the runs and rows of every table (the views are made of them)
                assert differences(want, got, (*LAKE_TABLES, "ingested_files")) == [], trial
            shutil.rmtree(lake)
    assert midway >= 1  # some kills landed between a batch's commits


def _racers(lake: Path, parts: list[list[Path]]) -> list[subprocess.CompletedProcess]:
    procs = [
        subprocess.Popen(
            [*EMBER, "ingest", *map(str, part), "--lake", str(lake)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for part in parts
    ]
    return [
        subprocess.CompletedProcess(p.args, p.wait(timeout=300), *p.communicate()) for p in procs
    ]


def test_two_and_three_ingesters_of_overlapping_and_identical_files_store_every_run_once(tmp_path):
    a = _traces(tmp_path / "a", 12)
    b = tmp_path / "b"  # byte-identical copies at other paths
    shutil.copytree(tmp_path / "a", b)
    c = _traces(tmp_path / "c", 18)[6:]  # other runs, and copies of a's last six
    for n, parts in ((2, [a, sorted(b.glob("*.jsonl"))]), (3, [a, sorted(b.glob("*.jsonl")), c])):
        lake = tmp_path / f"lake{n}"
        ingest_lake(a[:1], lake)  # the tables exist before the racers start
        done = _racers(lake, parts)
        assert [r.returncode for r in done] == [0] * n, [r.stderr for r in done]
        with connect_lake(lake) as con:
            runs = con.sql("SELECT run_id, count(*) AS n FROM runs GROUP BY run_id").rows()
            want = 12 if n == 2 else 18
            assert sorted(runs) == [(f"run-{i:02d}", 1) for i in range(want)], n
            assert con.sql("SELECT count(*) AS n FROM cache")["n"][0] == want * 20
            assert con.sql("SELECT count(*) AS n FROM spans")["n"][0] == want
        out = " ".join(r.stdout for r in done)
        assert "refused" not in out.replace("0 refused", "")


def test_a_truncated_data_file_is_a_clear_error_and_check_repair_and_reingest_mend_it(tmp_path):
    files = _traces(tmp_path / "traces", 3)
    lake = tmp_path / "lake"
    ingest_lake(files, lake)
    part = Path(DeltaTable(str(lake / "cache")).file_uris()[0])
    part.write_bytes(part.read_bytes()[:100])
    q = subprocess.run(
        [*EMBER, "query", "--db", str(lake), "SELECT count(*) FROM cache_lookups"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    err = " ".join(q.stderr.split())
    assert q.returncode == 1, q.stderr
    assert "Traceback" not in q.stderr, q.stderr
    assert str(part) in err.replace(" ", "") or part.name in err
    assert "ember lake check" in err
    # ingest of other files goes on (appends do not read old files)
    more = _traces(tmp_path / "more", 1, prefix="more")
    assert ingest_lake(more, lake).files[0].status == "ok"
    c = subprocess.run(
        [*EMBER, "lake", "check", str(lake)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert c.returncode == 1
    assert part.name in c.stdout.replace("\n", "")
    report = check(lake, repair=True)
    assert len(report.damaged_files) == 1
    assert report.repaired
    assert check(lake).ok
    results = ingest_lake([*files, *more], lake).files
    # the runs of the damaged file again (the three of one batch share a file: one date)
    assert [r.status for r in results] == ["ok", "ok", "ok", "unchanged"]
    with connect_lake(lake) as con:
        assert con.sql("SELECT count(*) AS n FROM cache")["n"][0] == 4 * 20
        assert con.sql("SELECT count(*) AS n FROM runs")["n"][0] == 4


def test_a_damaged_log_entry_is_a_clear_error_for_readers_and_ingesters(tmp_path):
    files = _traces(tmp_path / "traces", 2)
    lake = tmp_path / "lake"
    ingest_lake(files, lake)
    last = sorted((lake / "cache" / "_delta_log").glob("*.json"))[-1]
    last.write_text('{"add": {"path": ')
    for args in (
        ["query", "--db", str(lake), "SELECT 1"],
        ["ingest", *map(str, _traces(tmp_path / "more", 1, "more")), "--lake", str(lake)],
        ["lake", "check", str(lake)],
    ):
        r = subprocess.run([*EMBER, *args], capture_output=True, text=True, cwd=REPO, timeout=120)
        text = " ".join((r.stdout + r.stderr).split())
        assert r.returncode == 1, args
        assert "Traceback" not in r.stderr, r.stderr
        assert "cache/_delta_log" in text.replace(" ", ""), text


def test_optimize_compacts_and_vacuum_removes_what_no_snapshot_needs_rows_unchanged(tmp_path):
    lake = tmp_path / "lake"
    data = _traces(tmp_path / "traces", 1)[0].read_bytes().splitlines(keepends=True)
    grow = tmp_path / "grow.jsonl"
    for cut in (5, 10, 15, len(data)):  # one run in four ingests: four files per table
        grow.write_bytes(b"".join(data[:cut]))
        ingest_lake([grow], lake)
    with connect_lake(lake) as con:
        before = {t: con.sql(f"SELECT * FROM {t}").rows() for t in ("cache", "cache_lookups")}
    assert len(DeltaTable(str(lake / "cache")).file_uris()) == 4
    done = optimize(lake)
    assert done["cache"] == {"removed": 4, "added": 1}
    assert len(DeltaTable(str(lake / "cache")).file_uris()) == 1
    with connect_lake(lake) as con:
        after = {t: con.sql(f"SELECT * FROM {t}").rows() for t in ("cache", "cache_lookups")}
    assert after == before
    assert len(before["cache"]) == 20
    on_disk = len(list((lake / "cache").glob("run_date=*/*.parquet")))
    v = subprocess.run(
        [*EMBER, "lake", "vacuum", str(lake), "--retain", "0"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert v.returncode == 0, v.stderr
    assert len(list((lake / "cache").glob("run_date=*/*.parquet"))) == 1 < on_disk
    with connect_lake(lake) as con:
        assert con.sql("SELECT * FROM cache").rows() == before["cache"]


def test_optimize_merges_runs_ingested_one_piece_each(tmp_path):
    # one trace per job: each ingest is one run in one file per table; the tables are
    # partitioned by date, so a day's runs become one file (partitioned by run, as lakes
    # made before 2026-12-02 are, 6 files stayed 6)
    lake = tmp_path / "lake"
    files = _traces(tmp_path / "traces", 5)
    start, end = run_span()
    # a run whose span is still open: its end comes after the compaction
    growing = write_lines(tmp_path / "grow.jsonl", [meta_line("grow"), json.dumps(start)])
    for f in [*files, growing]:
        ingest_lake([f], lake)
    with connect_lake(lake) as con:
        before = con.sql("SELECT * FROM cache_lookups ORDER BY run_id, ts_ns").rows()
    assert len(DeltaTable(str(lake / "span_start")).file_uris()) == 6
    done = optimize(lake)
    assert done["span_start"] == {"removed": 6, "added": 1}
    assert done["runs"] == {"removed": 6, "added": 1}
    assert len(DeltaTable(str(lake / "span_start")).file_uris()) == 1
    with connect_lake(lake) as con:
        assert con.sql("SELECT * FROM cache_lookups ORDER BY run_id, ts_ns").rows() == before
        assert len(before) == 5 * 20
    # the span_end's start is found in the merged file (not refused as one without it)
    with open(growing, "a") as f:
        f.write(json.dumps({**end, "ts_ns": 50}) + "\n")
    r = ingest_lake([growing], lake).files[0]
    assert (r.status, r.continued, r.records, r.rejected) == ("ok", True, 1, 0)
    assert [r.status for r in ingest_lake([*files, growing], lake).files] == ["unchanged"] * 6
    with connect_lake(lake) as con:
        assert con.sql("SELECT count(*) AS n FROM spans WHERE run_id = 'grow'")["n"][0] == 1


def _old_lake(new: Path, old: Path) -> None:
    """The lake ``new`` written in the old format (Parquet parts + _manifest entries), with an
    orphaned part (a killed ingester's) that the old readers read and upgrade must not."""
    import pyarrow.parquet as pq

    (old / "_manifest").mkdir(parents=True)
    for i, row in enumerate(
        r for r in DeltaTable(str(new / INGESTS)).to_pyarrow_table().to_pylist()
    ):
        parts = []
        for table in LAKE_TABLES:
            t = DeltaTable(str(new / table)).to_pyarrow_table()
            import pyarrow as pa

            mask = pa.array(
                [x == row["ingest"] for x in t.column("_ingest").to_pylist()], pa.bool_()
            )
            t = t.filter(mask)
            if not t.num_rows:
                continue
            keep = [c for c in lake_columns(table) if c not in ("run_id", "_ingest")]
            rel = f"{table}/run_date={row['run_date']}/run_id={row['run_id']}/k{i}-0-x.parquet"
            (old / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t.select(keep), old / rel)
            parts.append(rel)
        entry = {
            **{k: row[k] for k in ("file", "run_id", "run_date", "status", "message", "start")},
            **{k: row[k] for k in ("offset_bytes", "base_line", "lines", "records", "rejected")},
            **{k: row[k] for k in ("digest", "schema_version", "size", "mtime_ns", "engine")},
            "key": f"k{i}",
            "generation": "g1",
            "host": "h",
            "first_line_hash": row["fid"],
            "ingested_at": row["ingested_at"].timestamp(),
            "parts": parts,
        }
        (old / "_manifest" / f"k{i}-0-x.json").write_text(json.dumps(entry))
    orphan = old / "runs" / "run_date=2025-11-29" / "run_id=run-00" / "k0-9-y.parquet"
    shutil.copy(next((old / "runs").rglob("k0-0-x.parquet")), orphan)


def test_upgrade_copies_an_old_lake_without_its_orphans_once(tmp_path):
    files = _traces(tmp_path / "traces", 3)
    new = tmp_path / "new"
    ingest_lake(files, new)
    old = tmp_path / "old"
    _old_lake(new, old)
    r = subprocess.run(
        [*EMBER, "ingest", str(files[0]), "--lake", str(old)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert r.returncode == 1
    assert "ember lake upgrade" in " ".join(r.stderr.split())
    up = tmp_path / "up"
    assert upgrade(old, up) == 3
    assert upgrade(old, up) == 0  # again: nothing twice
    with connect_lake(new) as a, connect_lake(up) as b:
        assert differences(a, b) == []
        assert b.sql("SELECT count(*) AS n FROM runs")["n"][0] == 3
    assert [r.status for r in ingest_lake(files, up).files] == ["unchanged"] * 3


# an ingester that stops inside its work folder (the moment a kill finds one there)
_SLOW_INGESTER = """
import sys, time
from ember.analysis.ingest import read as ingest_read
from ember.analysis.lake import ingest as lake_ingest
real = ingest_read.stage

def stage(*args, **kw):
    out = real(*args, **kw)
    print("staged", flush=True)
    time.sleep(60)
    return out

lake_ingest.stage = stage
lake_ingest.ingest_lake(sys.argv[2:], sys.argv[1])
"""


def test_the_work_folder_of_an_ingester_killed_with_sigkill_is_removed_by_the_next(tmp_path):
    import os
    import signal

    files = _traces(tmp_path / "traces", 2)
    lake, tmp = tmp_path / "lake", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    p = subprocess.Popen(
        [sys.executable, "-c", _SLOW_INGESTER, str(lake), *map(str, files)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    assert p.stdout.readline() == "staged\n"
    [work] = [d for d in tmp.iterdir() if d.name.startswith("ember-lake-")]
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert work.is_dir()  # a SIGKILL runs no cleanup
    os.utime(work, (time.time() - 60, time.time() - 60))  # older than a starting ingest's
    r = subprocess.run(
        [*EMBER, "ingest", *map(str, files), "--lake", str(lake)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert not work.exists()
    assert list(tmp.iterdir()) == []
    with connect_lake(lake) as con:
        assert con.sql("SELECT count(*) AS n FROM runs")["n"][0] == 2


def _vacuum_cli(lake: Path, retain: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EMBER, "lake", "vacuum", str(lake), "--retain", retain],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_vacuum_takes_fractional_hours_up_and_counts_only_files_it_removed(tmp_path):
    lake = tmp_path / "lake"
    data = _traces(tmp_path / "traces", 1)[0].read_bytes().splitlines(keepends=True)
    grow = tmp_path / "grow.jsonl"
    for cut in (5, 10, len(data)):
        grow.write_bytes(b"".join(data[:cut]))
        ingest_lake([grow], lake)
    optimize(lake)
    on_disk = len(list((lake / "cache").glob("run_date=*/*.parquet")))
    assert on_disk == 4  # three compacted away seconds ago, one live
    v = _vacuum_cli(lake, "0.9")  # was int(0.9) == 0: the compacted files were deleted
    assert v.returncode == 0, v.stderr
    assert "removed 0 file(s)" in v.stdout
    assert len(list((lake / "cache").glob("run_date=*/*.parquet"))) == on_disk
    first = _vacuum_cli(lake, "0")
    assert first.returncode == 0, first.stderr
    assert "removed 0 file(s)" not in first.stdout
    assert len(list((lake / "cache").glob("run_date=*/*.parquet"))) == 1
    again = _vacuum_cli(lake, "0")  # nothing left to remove: said so, not the old count
    assert again.returncode == 0, again.stderr
    assert "removed 0 file(s)" in again.stdout


def test_a_garbage_or_future_lake_marker_is_a_clear_error_naming_the_file(tmp_path):
    lake = tmp_path / "lake"
    ingest_lake(_traces(tmp_path / "traces", 1), lake)
    marker = lake / "_ember_lake.json"
    for content, says in (
        ("not json{", "not a lake marker"),
        ('{"format": "ember-delta-lake", "version": 99}', "lake version 99"),
        ('{"format": "other", "version": 1}', "not an Ember lake marker"),
    ):
        marker.write_text(content)
        for argv in (["lake", "vacuum", str(lake)], ["lake", "check", str(lake)]):
            r = subprocess.run(
                [*EMBER, *argv], capture_output=True, text=True, cwd=REPO, timeout=120
            )
            assert r.returncode != 0, (argv, content)
            out = r.stdout + r.stderr
            assert "_ember_lake.json" in out, out
            assert says in out, out
            assert "Traceback" not in out
        with pytest.raises(LakeError, match=says):  # an ingest appends nothing to it
            ingest_lake(_traces(tmp_path / "more", 1), lake)


# an ingester whose machine's clock is 2 h behind (its ingest ids say it started 2 h ago)
# and that waits, rows written, before its _ingests commit (before it checks its lease,
# where it has one) until the test says go
_SLOW_SKEWED_INGESTER = """
import sys, time
from pathlib import Path
from ember.analysis.lake import commit, ingest as lake_ingest
real_id, real_append = commit.new_ingest_id, lake_ingest.append_rows
def skewed_id():
    return f"{time.time_ns() - 2 * 3600 * 10**9:016x}" + real_id()[16:]
def slow_append(root, table, pieces):
    real_append(root, table, pieces)
    if table == "cache":  # its cache rows are written: repair sees them as orphans
        Path(sys.argv[3]).touch()
        while not Path(sys.argv[4]).exists():
            time.sleep(0.05)
commit.new_ingest_id = skewed_id
lake_ingest.append_rows = slow_append
s = lake_ingest.ingest_lake([sys.argv[2]], sys.argv[1])
print(" ".join(f.status for f in s.files))
"""


def _slow_ingester(lake: Path, trace: Path, staged: Path, go: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _SLOW_SKEWED_INGESTER, str(lake), str(trace), str(staged), str(go)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, p: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the ingester never staged its rows"
        time.sleep(0.05)


def test_repair_keeps_the_rows_of_a_live_ingest_whose_clock_is_two_hours_behind(tmp_path):
    (trace,) = _traces(tmp_path / "traces", 1)
    lake = tmp_path / "lake"
    ingest_lake(_traces(tmp_path / "first", 1, prefix="first"), lake)  # the lake exists
    staged, go = tmp_path / "staged", tmp_path / "go"
    p = _slow_ingester(lake, trace, staged, go)
    try:
        _wait_for(staged, p)
        r = subprocess.run(
            [*EMBER, "lake", "check", "--repair", str(lake)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "deleted" not in r.stdout, r.stdout
    finally:
        go.touch()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert out.split() == ["ok"]
    with connect_lake(lake) as con:
        assert con.sql("SELECT count(*) AS n FROM cache WHERE run_id = 'run-00'")["n"][0] == 20
        assert con.sql("SELECT count(*) AS n FROM spans WHERE run_id = 'run-00'")["n"][0] == 1
    assert check(lake).orphan_rows == {}


def test_an_ingest_whose_staged_rows_repair_removed_fails_and_marks_nothing(tmp_path):
    (trace,) = _traces(tmp_path / "traces", 1)
    lake = tmp_path / "lake"
    ingest_lake(_traces(tmp_path / "first", 1, prefix="first"), lake)
    staged, go = tmp_path / "staged", tmp_path / "go"
    p = _slow_ingester(lake, trace, staged, go)
    try:
        _wait_for(staged, p)
        # --grace 0: every uncommitted ingest counts as abandoned, this live one too
        r = subprocess.run(
            [*EMBER, "lake", "check", "--repair", "--grace", "0", str(lake)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "deleted" in r.stdout, r.stdout
    finally:
        go.touch()
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0
    assert f"LakeError: {lake}: `ember lake check --repair` judged this ingest" in err, err
    assert "run the ingest again" in err
    assert [f.status for f in ingest_lake([trace], lake).files] == ["ok"]
    with connect_lake(lake) as con:
        assert con.sql("SELECT count(*) AS n FROM cache WHERE run_id = 'run-00'")["n"][0] == 20
