"""The SQL views, on traces the real runtime recorded (a sequence-length sweep)."""

from __future__ import annotations

import itertools
import json

import pytest

from ember.analysis import VIEW_NAMES, connect, ingest
from ember.analysis.db import view_sql
from tests.analysis.databases import ingested, query_rows
from tests.analysis.traces import checked_in, meta_line, write_lines
from tests.recordings import SWEEP


def test_every_sql_file_is_a_view():
    # a view added to analysis/sql must be in VIEW_NAMES (which the DuckDB file, the lake
    # and the Spark parity test read)
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "analysis" / "sql"
    files = sorted(p.stem for p in folder.glob("*.sql") if p.stem != "macros")
    assert sorted(VIEW_NAMES) == files


def test_every_view_has_a_header_that_says_what_a_row_is():
    for name in VIEW_NAMES:
        head = view_sql(name).lstrip()
        assert head.startswith(f"-- {name}: one row per"), name


def test_recompiles_name_the_input_dim_and_sizes(con):
    rows = con.sql(
        "SELECT compile_index, change, arg, dim, old_value, new_value, after_eviction, reason "
        "FROM recompiles WHERE run_id = 'sweep' AND position = 0 ORDER BY compile_index"
    ).to_dicts()
    # one compile per call (cache_size 2 < 3 lengths): the first is not a recompile
    assert [r["compile_index"] for r in rows] == [2, 3, 4, 5]
    assert [(r["arg"], r["dim"], r["old_value"], r["new_value"]) for r in rows] == [
        ("input_ids", 1, str(a), str(b)) for a, b in itertools.pairwise(SWEEP[:5])
    ]
    assert rows[0]["reason"] == "input_ids dim 1: 17 -> 23"
    assert rows[1]["reason"] == "input_ids dim 1: 23 -> 31"
    assert [r["after_eviction"] for r in rows] == [False, False, True, True]
    assert rows[2]["change"] == "after_eviction"
    assert rows[2]["reason"] == "re-compile after eviction: input_ids dim 1: 31 -> 17"


def test_evictions_and_thrash(con):
    ev = con.sql(
        "SELECT shapes_text, cache_size, hits, recompiled FROM evictions "
        "WHERE run_id = 'sweep' AND position = 0 ORDER BY ts_ns"
    ).to_dicts()
    assert [e["shapes_text"] for e in ev] == [
        "input_ids[1,17]:int64",
        "input_ids[1,23]:int64",
        "input_ids[1,31]:int64",
    ]
    assert all(e["cache_size"] == 2 for e in ev)
    assert [e["recompiled"] for e in ev] == [True, True, False]
    thrash = con.sql(
        "SELECT shapes_text, compiles, wasted_compiles, keys_at_position FROM cache_thrash "
        "WHERE run_id = 'sweep' AND position = 0 ORDER BY shapes_text"
    ).to_dicts()
    assert thrash == [
        {
            "shapes_text": "input_ids[1,17]:int64",
            "compiles": 2,
            "wasted_compiles": 1,
            "keys_at_position": 3,
        },
        {
            "shapes_text": "input_ids[1,23]:int64",
            "compiles": 2,
            "wasted_compiles": 1,
            "keys_at_position": 3,
        },
    ]
    per_position = con.sql(
        "SELECT keys, wasted, cache_size, fixes, keys_at_position FROM thrash_positions "
        "WHERE run_id = 'sweep' AND position = 0"
    ).rows()
    assert per_position == [(2, 2, 2, 3, 3)]


def test_cache_what_if_shows_the_size_that_removes_the_recompiles(con):
    rows = con.sql(
        "SELECT cache_size, compiles, recompiles, is_actual, actual_compiles, fixes_thrash, "
        "smallest_size_without_recompiles FROM cache_what_if "
        "WHERE run_id = 'sweep' AND position = 0 ORDER BY cache_size"
    ).to_dicts()
    # 17 23 31 17 23 23: size 1 and 2 compile all but the repeated 23; size 3 keeps all
    assert [(r["cache_size"], r["compiles"]) for r in rows] == [(1, 5), (2, 5), (3, 3)]
    assert [r["is_actual"] for r in rows] == [False, True, False]
    assert rows[1]["actual_compiles"] == 5  # the replay of the real size matches the run
    assert [r["fixes_thrash"] for r in rows] == [False, False, True]
    assert [r["smallest_size_without_recompiles"] for r in rows] == [3, 3, 3]


# Views whose rows on the recorded traces are known whole: what a row says, the query, and
# the rows it must give
VIEW_ROWS = {
    "compile_payback_counts_the_reuses_before_eviction": (
        "SELECT compile_index, shapes_text, reuses, evicted_ns IS NOT NULL AS evicted, paid_back"
        " FROM compile_payback WHERE run_id = 'sweep' AND position = 0 ORDER BY compile_index",
        [
            (1, "input_ids[1,17]:int64", 0, True, False),
            (2, "input_ids[1,23]:int64", 0, True, False),
            (3, "input_ids[1,31]:int64", 0, True, False),
            (4, "input_ids[1,17]:int64", 0, False, False),
            (5, "input_ids[1,23]:int64", 1, False, True),  # the last call reused it
        ],
    ),
    "shape_buckets_pad_the_sequence_length": (
        "SELECT sizes, pow2_sizes, saved_compiles FROM shape_buckets "
        "WHERE run_id = 'sweep' AND position = 0 AND arg = 'input_ids' AND dim = 1",
        [([17, 23, 31], [32], 2)],
    ),
    "hub_files": (
        "SELECT source, repo, path, what, hits, downloads, info_fetched, bytes, checks "
        "FROM hub_files WHERE run_id = 'bus-run' ORDER BY source",
        [
            ("hf://acme/tiny", "acme/tiny", None, "repo_info", 0, 0, 1, None, None),
            (
                "hf://acme/tiny/config.json",
                "acme/tiny",
                "config.json",
                "file",
                1,
                0,
                0,
                1234,
                ["etag"],
            ),
            (
                "hf://acme/tiny/onnx/model.onnx",
                "acme/tiny",
                "onnx/model.onnx",
                "file",
                0,
                1,
                0,
                5_000_000,
                None,
            ),
        ],
    ),
    "hub_totals": (
        "SELECT files, bytes, hits, downloads, info_saved, failures FROM hub_totals "
        "WHERE run_id = 'bus-run'",
        [(2, 5_001_234, 1, 1, 0, 0)],
    ),
    "jit_retraces_are_recompiles_with_jax_reason": (
        "SELECT fun_name, compile_index, change, arg, old_value, new_value, after_eviction, "
        "reason FROM recompiles WHERE run_id = 'bus-run'",
        [
            (
                "loss_fn",
                2,
                "jit:shape",
                "x",
                "f32[8,3]",
                "f32[16,3]",
                False,
                "x shape: f32[8,3] -> f32[16,3]",
            ),
        ],
    ),
}


@pytest.mark.parametrize("case", VIEW_ROWS)
def test_view_rows(con, case):
    sql, want = VIEW_ROWS[case]
    assert con.sql(sql).rows() == want


def test_call_latency_per_input_shape(con):
    rows = con.sql(
        "SELECT shapes_text, calls, compiling_calls, p50_warm_ns IS NOT NULL, errors, "
        "p50_ns <= p90_ns AND p90_ns <= p99_ns AND p99_ns <= max_ns "
        "FROM call_latency WHERE run_id = 'sweep' ORDER BY shapes_text"
    ).rows()
    assert rows[0] == ("input_ids[1,17]:int64", 2, 2, False, 0, True)
    assert rows[2] == ("input_ids[1,31]:int64", 1, 1, False, 0, True)
    # the last call of length 23 hits position 0; position 27 compiles again only when the
    # number of kept tokens (data-dependent) is new, so it may or may not compile
    shapes, calls, compiling, has_warm, errors, ordered = rows[1]
    assert (shapes, calls, errors, ordered) == ("input_ids[1,23]:int64", 3, 0, True)
    assert compiling in (2, 3)
    assert has_warm == (compiling == 2)
    failed = con.sql("SELECT calls, errors FROM call_latency WHERE run_id = 'bus-run'").rows()
    assert failed == [(1, 1)]


def test_call_windows_cut_each_run_into_fixed_windows(con):
    spans = con.sql(
        "SELECT start_ns, duration_ns FROM spans WHERE run_id = 'sweep' AND span_kind = 'call' "
        "AND duration_ns IS NOT NULL ORDER BY start_ns"
    ).rows()
    rows = con.sql(
        "SELECT windows, win, t_s, calls, p50_ns, p90_ns, p99_ns FROM call_windows "
        "WHERE run_id = 'sweep' ORDER BY windows, win"
    ).rows()
    assert {r[0] for r in rows} == {10, 25, 50, 100, 200}
    lo, hi = spans[0][0], spans[-1][0]
    for n in (10, 25, 50, 100, 200):
        here = [r for r in rows if r[0] == n]
        assert sum(r[3] for r in here) == len(spans) == len(SWEEP)
        assert all(0 <= r[1] < n for r in here)
        assert all(r[4] <= r[5] <= r[6] for r in here)
        # each window's middle lies inside the run's span of call starts
        assert all(lo / 1e9 <= r[2] <= hi / 1e9 for r in here)
    # with 10 windows the first window holds the calls that started in the first tenth
    first = [d for s, d in spans if s < lo + (hi - lo) / 10]
    first_row = next(r for r in rows if r[0] == 10 and r[1] == 0)
    assert first_row[3] == len(first)
    assert first_row[6] <= max(first)
    assert first_row[4] >= min(first)


def test_recompile_reasons_group_a_runs_recompiles_by_what_changed(con):
    rows = con.sql(
        "SELECT change, arg, dim, recompiles, compile_ns, example FROM recompile_reasons "
        "WHERE run_id = 'sweep'"
    ).rows()
    every = con.sql(
        "SELECT change, arg, dim, compile_ns, reason FROM recompiles "
        "WHERE run_id = 'sweep' AND NOT outside_jit"
    ).rows()
    assert sum(r[3] for r in rows) == len(every) > 0
    for change, arg, dim, n, ns, example in rows:
        mine = [r for r in every if (r[0], r[1], r[2]) == (change, arg, dim)]
        assert n == len(mine)
        assert ns == sum(r[3] or 0 for r in mine)
        assert example == min(r[4] for r in mine)
    ids = con.sql("SELECT compiled_keys FROM run_summary WHERE run_id = 'sweep'").rows()
    keys = con.sql("SELECT count(DISTINCT key) FROM compiles WHERE run_id = 'sweep'").rows()
    assert ids == keys
    assert keys[0][0] > 0


def test_compiles_by_where_count_each_position(con):
    rows = dict(
        con.sql("SELECT \"where\", compiles FROM compiles_by_where WHERE run_id = 'sweep'").rows()
    )
    every = con.sql(
        "SELECT CAST(position AS VARCHAR), count(*) FROM compiles WHERE run_id = 'sweep' "
        "GROUP BY ALL"
    ).rows()
    assert rows == dict(every)
    assert sum(rows.values()) > len(rows) > 0
    assert rows["0"] == 5  # 17 23 31 17 23 23 through a cache of 2 (see cache_what_if)


def test_breaks_name_the_node_and_why(con):
    [row] = con.sql(
        "SELECT position, node, op_type, reason, runs FROM breaks WHERE run_id = 'sweep'"
    ).rows()
    assert row[1:3] == ("kept_positions", "NonZero")
    assert "NonZero" in row[3]
    assert row[4] == len(SWEEP)


def test_memory_timeline_accumulates_allocs_and_frees(con):
    rows = con.sql(
        "SELECT category, delta_bytes, bytes, device_bytes FROM memory_timeline "
        "WHERE run_id = 'bus-run' AND series = 'tensors' ORDER BY ts_ns"
    ).rows()
    assert [r[3] for r in rows] == [4000, 5000, 4000, 6000, 4000, 7000, 4000]
    assert rows[0] == ("parameter", 4000, 4000, 4000)
    assert rows[-1] == ("activation", -3000, 0, 4000)
    used = con.sql(
        "SELECT bytes FROM memory_timeline WHERE run_id = 'bus-run' AND series = 'used' "
        "ORDER BY ts_ns"
    )["bytes"].to_list()
    assert used == [5000, 6000, 7000]
    # the real runtime reads device memory after each call (live arrays and RSS on the CPU)
    sweep = con.sql(
        "SELECT series, source, count(*) FROM memory_timeline WHERE run_id = 'sweep' "
        "GROUP BY ALL ORDER BY series"
    ).rows()
    assert sweep == [("rss", "live_arrays", len(SWEEP)), ("used", "live_arrays", len(SWEEP))]


def test_tensor_samples_line_the_categories_up_on_one_grid(con):
    # a short series: the grid is every recorded time, each category carries its last value
    stacked = con.sql(
        "SELECT ts_ns, sum(bytes), count(*) FROM tensor_samples WHERE run_id = 'bus-run' "
        "GROUP BY ts_ns ORDER BY ts_ns"
    ).rows()
    assert [r[1] for r in stacked] == [4000, 5000, 4000, 6000, 4000, 7000, 4000]
    cats = con.sql(
        "SELECT count(DISTINCT category) FROM memory_timeline "
        "WHERE run_id = 'bus-run' AND series = 'tensors'"
    ).rows()[0][0]
    assert cats >= 2
    assert {r[2] for r in stacked} == {cats}


def test_peak_memory_says_when_and_by_category(con):
    peak = con.sql(
        "SELECT p.peak_bytes, p.by_category, s.span_kind, s.start_attrs.index AS step, "
        "p.peak_at = s.started_at + to_microseconds(CAST((p.peak_ts_ns - s.start_ns) / 1000 "
        "AS BIGINT)) AS about_then "
        "FROM peak_memory p JOIN spans s ON s.run_id = p.run_id AND s.span_id = p.span_id "
        "WHERE p.run_id = 'bus-run' AND p.series = 'tensors'"
    ).rows()
    # the peak is reached inside the third forward step (index 2): parameter + activation
    assert peak[0][:4] == (7000, {"activation": 3000, "parameter": 4000}, "step", 2)


def test_spans_have_absolute_times_and_show_open_spans(tmp_path):
    start = {
        "kind": "span_start",
        "ts_ns": 2_000_000_000,
        "span_id": 1,
        "name": "ember.compile",
        "span_kind": "compile",
        "attrs": {"compiler": "jax.jit"},
    }
    path = write_lines(tmp_path / "crash.jsonl", [meta_line("crash"), json.dumps(start)])
    db = ingested(tmp_path, [path])
    rows = query_rows(db, "SELECT status, end_ns, CAST(started_at AS VARCHAR) FROM spans")
    # the process died inside the compile: the span is open; 2 s after the anchor
    assert rows == [("open", None, "2025-11-29 08:00:02")]


def test_recompile_reasons_for_dtype_static_value_and_new_argument(tmp_path):
    """Cache events as the runtime emits them (through the bus and the real recorder)."""
    from ember.recorder import bus, record

    def miss(shapes, statics):
        with bus.span("ember.call", {"source": "m.onnx", "shapes": shapes}):
            bus.emit(
                "ember.cache.miss",
                {"count": 1},
                {"source": "m.onnx", "position": 4, "shapes": shapes, "statics": statics},
            )

    x32 = [{"name": "x", "shape": [2, 3], "dtype": "float32"}]
    x16 = [{"name": "x", "shape": [2, 3], "dtype": "float16"}]
    perm = [{"name": "perm", "value": [0, 1]}]
    path = tmp_path / "kinds.jsonl"
    with record(path, run_id="kinds"):
        miss(x32, perm)
        miss(x16, perm)  # dtype
        miss(x16, [{"name": "perm", "value": [1, 0]}])  # a static value
        miss(x16 + [{"name": "mask", "shape": [2], "dtype": "bool"}], [])  # a new input
    rows = query_rows(
        ingested(tmp_path, [path]),
        "SELECT change, arg, old_value, new_value, reason FROM recompiles ORDER BY ts_ns",
    )
    assert rows == [
        ("dtype", "x", "float32", "float16", "x dtype: float32 -> float16"),
        ("static", "perm", "[0,1]", "[1,0]", "static perm: [0,1] -> [1,0]"),
        ("new_arg", "mask", None, "[2]:bool", "mask: new argument [2]:bool"),
    ]


def test_the_analysis_layer_never_imports_jax():
    import subprocess
    import sys

    code = (
        "import sys, ember.analysis, ember.analysis.report, ember.analysis.export, "
        "ember.analysis.candle, ember.cli.analysis; print('jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_key_compiled_again_without_eviction_is_not_blamed_on_the_cache(tmp_path):
    from ember.recorder import bus, record

    shapes = [{"name": "x", "shape": [4], "dtype": "float32"}]
    path = tmp_path / "twice.jsonl"
    with record(path, run_id="twice"):
        for _ in range(2):  # two compiled models of the same source: two caches
            bus.emit(
                "ember.cache.miss",
                {"count": 1},
                {"source": "m.onnx", "position": 0, "shapes": shapes, "key": "k1"},
            )
    db = ingested(tmp_path, [path])
    rows = query_rows(db, "SELECT change, after_eviction, reason FROM recompiles")
    assert rows == [
        (
            "same_key",
            False,
            "compiled before and never evicted (another compiled model of the same source?): "
            "same key as the previous compile",
        )
    ]


def test_a_segment_compiled_with_the_model_is_ahead_of_time(tmp_path):
    # compiled for x[2,3] with the model (no cache lookup), three calls there, then x[4,3]
    db = tmp_path / "t.duckdb"
    ingest([checked_in("ahead.jsonl", tmp_path)], db)
    with connect(db, read_only=True) as con:
        compiles = con.sql(
            "SELECT position, compile_index, ahead_of_time, shapes_text, compile_ns > 0, "
            "compiled FROM compiles ORDER BY compile_index"
        ).rows()
        assert compiles == [
            (0, 1, True, "x[2,3]:float32", True, True),
            (0, 2, False, "x[4,3]:float32", True, True),
        ]
        # the calls at the compiled shape went straight to its program: one lookup, missed
        assert con.sql("SELECT action, count(*) FROM cache_lookups GROUP BY ALL").rows() == [
            ("miss", 1)
        ]
        assert con.sql("SELECT position, change, arg, dim, reason FROM recompiles").rows() == [
            (0, "shape", "x", 0, "x dim 0: 2 -> 4")
        ]


def test_recompile_causes_leave_out_segments_that_run_eagerly(tmp_path):
    # position 0 runs eagerly (compiled false), position 5 compiles; both see x's length
    # change. recompiles has both (with compiles' `compiled`); recompile_causes, what
    # compare counts, only the compiled one
    from tests.analysis.traces import cache_line, meta_line, write_lines

    def compile_span(span_id: int, ts: int, position: int, n: int, compiled: bool) -> list[str]:
        shapes = [{"name": "input_ids", "shape": [1, n], "dtype": "int64"}]
        start = {"position": position, "shapes": shapes}
        return [
            json.dumps(
                {
                    "kind": "span_start",
                    "ts_ns": ts,
                    "span_id": span_id,
                    "name": "c",
                    "span_kind": "segment_compile",
                    "attrs": start,
                }
            ),
            json.dumps(
                {
                    "kind": "span_end",
                    "ts_ns": ts + 1,
                    "span_id": span_id,
                    "duration_ns": 1,
                    "span_kind": "segment_compile",
                    "attrs": {**start, "compiled": compiled},
                }
            ),
        ]

    lines = [meta_line("eager")]
    for i, n in enumerate((17, 23)):
        for position, compiled in ((0, False), (5, True)):
            ts = 100 * i + 10 * position
            lines.append(cache_line(ts, "miss", position=position, n=n))
            lines += compile_span(len(lines), ts + 1, position, n, compiled)
    db = tmp_path / "t.duckdb"
    ingest([write_lines(tmp_path / "eager.jsonl", lines)], db)
    with connect(db, read_only=True) as con:
        assert con.sql(
            "SELECT position, compiled, change, arg FROM recompiles ORDER BY position"
        ).rows() == [(0, False, "shape", "input_ids"), (5, True, "shape", "input_ids")]
        assert con.sql("SELECT position, change, arg, dim, n FROM recompile_causes").rows() == [
            (5, "shape", "input_ids", 1, 1)
        ]


def test_disk_cache_misses_names_the_key_part_that_changed(con):
    rows = con.sql(
        "SELECT fun_name, position, changed, reason, jax, jaxlib, backend, model "
        "FROM disk_cache_misses WHERE run_id = 'bus-run'"
    ).to_dicts()
    assert rows == [
        {
            "fun_name": "loss_fn",
            "position": None,
            "changed": True,
            "reason": "jaxlib 0.10.1 -> 0.10.2",
            "jax": "0.10.2",
            "jaxlib": "0.10.2",
            "backend": "cpu",
            "model": None,
        }
    ]
    # the sweep recorded no disk cache: nothing missed one
    assert con.sql("SELECT count(*) AS n FROM disk_cache_misses WHERE run_id = 'sweep'")[
        "n"
    ].to_list() == [0]


def test_disk_cache_runs_has_a_row_only_for_runs_with_segment_compiles(con):
    # bus-run compiled only a jitted function (loss_fn): no segment, so no row
    assert (
        con.sql("SELECT count(*) AS n FROM compiles WHERE run_id = 'bus-run'")["n"].to_list()[0] > 0
    )
    assert con.sql(
        "SELECT count(*) AS n FROM compiles WHERE run_id = 'bus-run' AND position IS NOT NULL"
    )["n"].to_list() == [0]
    rows = con.sql("SELECT run_id, segments FROM disk_cache_runs ORDER BY run_id").rows()
    assert rows == [("sweep", 11)]
