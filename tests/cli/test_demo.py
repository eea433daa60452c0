"""`ember demo`: the tour records its five runs and the report's numbers come from them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ember.analysis import connect

pytestmark = pytest.mark.slow


def test_demo_records_ingests_and_reports(tmp_path):
    out = tmp_path / "ember-demo"
    done = subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    db = connect(out / "ember.duckdb", read_only=True)
    by_scenario = {
        row["scenario"]: row
        for row in db.sql(
            """
            SELECT json_extract_string(r.tags, '$.scenario') AS scenario,
                count(*) FILTER (WHERE c.action = 'miss') AS misses,
                count(*) FILTER (WHERE c.action = 'evict') AS evictions
            FROM runs r LEFT JOIN cache c USING (run_id)
            GROUP BY ALL
            """
        ).iter_rows(named=True)
    }
    assert set(by_scenario) == {
        "growing-sequence",
        "disk-cache-cold",
        "disk-cache-warm",
        "light-batch-sweep",
        "jax-training",
    }
    # 12 lengths x 2 segments, each new; 4 kept per position, so 8 evictions per position
    assert (
        by_scenario["growing-sequence"]["misses"],
        by_scenario["growing-sequence"]["evictions"],
    ) == (24, 16)
    disk = dict(
        db.sql(
            """
            SELECT json_extract_string(r.tags, '$.scenario'), count(*)
            FROM span_end s JOIN runs r USING (run_id)
            WHERE s.span_kind = 'segment_compile'
              AND json_extract_string(s.attrs, '$.disk_cache') = 'hit'
            GROUP BY ALL
            """
        ).iter_rows()
    )
    assert disk == {"disk-cache-warm": 24}
    # a load from the disk cache is not a compile: the warm run's first call of each length
    # loaded its programs, its second was warm
    calls = {
        name: (compiling, loaded, warm)
        for name, compiling, loaded, warm in db.sql(
            "SELECT name, compiling_calls, loaded_calls, warm_calls FROM run_summary "
            "WHERE name LIKE 'disk-cache-%'"
        ).iter_rows()
    }
    assert calls == {"disk-cache-cold": (12, 0, 12), "disk-cache-warm": (0, 12, 12)}
    report = " ".join(done.stdout.split())
    assert "position 0 compiled 12 times" in report
    assert "disk cache: 24/24 segments loaded from disk" in report
    assert "over the 12 warm calls (all 24, 12 of which loaded from the disk cache: " in report
    assert "grad_step retraced once" in report
    assert "x dim 0: 32 -> 16" in report
    assert f"ember dashboard --db {out / 'ember.duckdb'}" in report
