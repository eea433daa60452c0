"""Every page with Streamlit's AppTest, on traces recorded by the real runtime and ingested
by ember.analysis (conftest.py): the values the pages show, the URL state, the login."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ember.analysis import format as fmt
from ember.analysis.db import connect
from tests.dashboard.apptest import APP, as_text, metrics, open_page, shown_table, table, texts
from tests.dashboard.traces import ALLOCS, BREAK_SWEEP, DISTINCT

PEAK_TENSORS = sum(nbytes for _, nbytes in ALLOCS)  # all live at once, then freed


def lru_compiles(keys: list[int], size: int) -> int:
    """Compiles an LRU cache of ``size`` costs for this key sequence (the reference)."""
    cache: list[int] = []
    compiles = 0
    for key in keys:
        if key in cache:
            cache.remove(key)
        else:
            compiles += 1
            if len(cache) == size:
                cache.pop(0)
        cache.append(key)
    return compiles


SMALLEST_SIZE = min(s for s in range(1, 9) if lru_compiles(BREAK_SWEEP, s) == len(DISTINCT))


def test_bytes_read_as_in_the_text_report() -> None:
    from ember.dashboard.ui import fmt_bytes

    sizes = [615 * 2**20, 9.5 * 2**20, 7000, 64, 3 * 2**30]
    assert [fmt_bytes(n) for n in sizes] == ["615 MiB", "9.5 MiB", "6.8 KiB", "64 B", "3.0 GiB"]
    assert [fmt_bytes(n) for n in sizes] == [fmt.size(n) for n in sizes]
    assert fmt_bytes(None) == "–"


def test_tables_format_their_numbers_by_column_name_until_they_are_too_big() -> None:
    import polars as pl

    from ember.dashboard.ui import MAX_STYLED_CELLS, styled

    frame = pl.DataFrame(
        {
            "position": [3, 27],
            "compile_ms": [1077.5275, 0.25],
            "peak_bytes": [6308352, None],
            "hit_rate": [0.873, 1.0],
            "t_s": [3.21549, 12.0],
            "shapes": ["x[1,16]", "x[1,24]"],
        }
    )
    text = styled(frame).to_string(delimiter="|").splitlines()
    assert text[1].split("|")[1:] == ["3", "1.1 s", "6.0 MiB", "87%", "3.215", "x[1,16]"]
    assert text[2].split("|")[1:] == ["27", "250 µs", "–", "100%", "12", "x[1,24]"]
    big = pl.DataFrame({"compile_ms": [1.0] * (MAX_STYLED_CELLS + 1)})
    assert styled(big) is big  # pandas' Styler refuses frames this big: shown raw
    text_only = frame.select("shapes")
    assert styled(text_only) is text_only  # nothing to format


# ---------------------------------------------------------------- Runs


def test_runs_page_lists_every_run_with_its_counts(app_env: Path) -> None:
    at = open_page()
    assert [t.value for t in at.title] == ["Runs"]
    runs = table(at, "run_id", "calls", "tags").set_index("run_id")
    # on the CPU the headline peak is the process's RSS (run_summary.peak_source)
    assert set(runs["peak_source"].dropna()) == {"RSS"}
    assert metrics(at) == {
        "Runs": "3",
        "Calls": f"{2 * len(BREAK_SWEEP)}",
        "Compiles": "20",  # 12 with cache_size=2, 8 with cache_size=8
        "Loads": "0",  # no persistent cache
        "Evictions": "8",
        "Largest peak memory": fmt.size(runs["peak_bytes"].max()),
    }
    assert set(runs.index) == {"small-cache", "big-cache", "hub"}
    small, big = runs.loc["small-cache"], runs.loc["big-cache"]
    assert (small["calls"], small["compiles"], small["evictions"]) == (8, 12, 8)
    assert (big["calls"], big["compiles"], big["evictions"]) == (8, 8, 0)
    assert small["hit_rate"] == pytest.approx(0.25)
    assert big["hit_rate"] == pytest.approx(0.5)
    assert small["model"] == "tiny-break"
    assert '"cache":"2"' in small["tags"]
    assert small["peak_tensor_bytes"] == PEAK_TENSORS  # tensor accounting, by source
    assert small["peak_bytes"] == small["peak_rss_bytes"] > PEAK_TENSORS
    assert small["recompiles"] == 10
    assert big["recompiles"] == 6
    text = shown_table(at, "run_id", "calls", "tags").set_index("run_id")
    assert text.loc["small-cache", "peak_tensor_bytes"] == "1.5 MiB"
    assert text.loc["small-cache", "compile_ms"].endswith((" ms", " s"))
    assert runs.loc["hub", "calls"] == 0


def test_runs_filters_come_from_and_go_to_the_url(app_env: Path) -> None:
    at = open_page(find='"cache":"8"')
    assert metrics(at)["Runs"] == "1"
    assert table(at, "run_id", "calls", "tags")["run_id"].tolist() == ["big-cache"]

    at = open_page(model="tiny-break,no-such-model", phase="infer")
    assert at.multiselect(key="ember_ms_model").value == ["tiny-break"]
    assert metrics(at)["Runs"] == "3"

    at.text_input(key="ember_runs_q").input("small").run()
    assert at.query_params["find"] == "small"
    assert table(at, "run_id", "calls", "tags")["run_id"].tolist() == ["small-cache"]


def test_selected_run_lives_in_the_url_and_survives_a_page_change(app_env: Path) -> None:
    at = open_page(run="big-cache")
    assert at.selectbox(key="ember_sel_run").value == "big-cache"
    # the picker shows a readable name (model tag, start time, id prefix), the URL the id
    shown = at.selectbox(key="ember_sel_run").format_func("big-cache")
    assert shown.startswith("tiny-break · ")
    assert shown.endswith(" · big-cach")
    at.switch_page("cache.py").run()
    # Streamlit clears the URL on a page change; the selection is written back.
    assert at.query_params["run"] == "big-cache"
    assert metrics(at)["Evictions"] == "0"

    at.selectbox(key="ember_sel_run").select("small-cache").run()
    assert at.query_params["run"] == "small-cache"
    assert metrics(at)["Evictions"] == "8"


def test_unknown_run_in_the_link_falls_back_with_a_warning(app_env: Path) -> None:
    at = open_page(run="deleted-run")
    assert "run=deleted-run from the link is not in this database" in as_text(texts(at.warning))
    assert at.query_params["run"] == at.selectbox(key="ember_sel_run").value != "deleted-run"


def test_a_short_run_id_in_the_link_selects_the_run(app_env: Path) -> None:
    # the pages show the first characters of a run id; a link with them works
    at = open_page("cache.py", run="small")
    assert "from the link" not in texts(at.warning)
    assert at.selectbox(key="ember_sel_run").value == "small-cache"
    assert at.query_params["run"] == "small-cache"  # the URL then carries the whole id
    assert metrics(at)["Evictions"] == "8"
    compare = open_page("compare.py", run="small", other="big")
    assert compare.query_params["other"] == "big-cache"
    assert metrics(compare)["Compiles (B)"] == "8"


def test_an_ambiguous_start_in_the_link_lists_the_runs_it_could_be() -> None:
    def page() -> None:
        from ember.dashboard import state

        labels = {"e57e161d9a": "sweep · e57e161d", "e57e99aa00": "disk · e57e99aa"}
        state.select_param("Run", "run", ["7bd0c2ff11", *labels], labels=labels)

    at = AppTest.from_function(page)
    at.query_params["run"] = "e57e"
    at.run()
    assert as_text(texts(at.warning)) == (
        "run=e57e from the link starts 2 ids: sweep · e57e161d; disk · e57e99aa. "
        "Showing sweep · e57e161d; give more characters to pick one."
    )
    assert at.selectbox(key="ember_sel_run").value == "e57e161d9a"


def test_each_page_opens_on_the_newest_run_with_data_for_it(app_env: Path) -> None:
    # the newest run (hub) has no memory and no cache lookups, like the demo's training run
    at = open_page()
    assert at.selectbox(key="ember_sel_run").value == "hub"
    assert "each page opens on the newest run that has data for it" in texts(at.caption)
    for page, what in (("memory.py", "memory records"), ("cache.py", "cache lookups")):
        at.switch_page(page).run()
        assert not at.exception, [e.message for e in at.exception]
        picker = at.selectbox(key="ember_sel_run")
        assert picker.value == "big-cache"  # recorded after small-cache
        assert at.query_params["run"] == "big-cache"
        note = as_text(texts(at.caption))
        assert f"the newest run with {what}; 1 newer run(s) have none (tiny-break · " in note
        assert " · hub)" in note
        assert "recorded no memory" not in texts(at.info)
        assert at.get("vega_lite_chart")
        # the picker says which runs have nothing for this page
        assert [o for o in picker.options if o.endswith(f"(no {what})")] == [
            o for o in picker.options if "· hub" in o
        ]
    # the Hub page opens on the hub run, the only one with Hub files
    at.switch_page("hub.py").run()
    assert at.selectbox(key="ember_sel_run").value == "hub"


def test_a_run_picked_by_link_or_by_hand_stays_even_without_data(app_env: Path) -> None:
    at = open_page("memory.py", run="hub")
    assert at.selectbox(key="ember_sel_run").value == "hub"
    assert "Run hub recorded no memory" in texts(at.info)
    at = open_page("memory.py")
    assert at.selectbox(key="ember_sel_run").value == "big-cache"
    at.selectbox(key="ember_sel_run").select("hub").run()
    at.switch_page("cache.py").run()
    assert at.selectbox(key="ember_sel_run").value == "hub"
    assert "looked nothing up" in texts(at.info)
    assert "the newest run with" not in texts(at.caption)


def test_memory_of_a_run_with_device_readings_only_is_shown_over_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ember.analysis.ingest.database import ingest
    from ember.dashboard.db import DB_ENV

    meta = {"kind": "meta", "schema": "ember.trace/1", "run_id": "readings", "pid": 1}
    meta |= {"wall_time_ns": 1_764_403_200_000_000_000, "host": "test"}
    readings = [
        {
            "kind": "device_memory",
            "ts_ns": i * 1_000_000,
            "device": "cpu:0",
            "source": "live_arrays",
            "used_bytes": (i + 1) * 2**20,
            "rss_bytes": 300 * 2**20 + i * 2**20,
        }
        for i in range(5)
    ]
    trace = tmp_path / "readings.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in [meta, *readings]))
    db = tmp_path / "readings.duckdb"
    assert ingest([trace], db).rejected == 0
    monkeypatch.setenv(DB_ENV, str(db))
    at = open_page("memory.py")
    shown = metrics(at)
    assert shown["Peak of live tensors"] == "–"
    assert (shown["Peak device memory used"], shown["Peak process RSS"]) == ("5.0 MiB", "304 MiB")
    assert not at.info  # not "recorded no memory"
    assert at.multiselect(key="ember_memory_series").value == ["used"]
    assert at.multiselect(key="ember_memory_series").options == ["rss", "used"]
    (chart,) = at.get("vega_lite_chart")  # the readings over time, in the unit of the peak
    assert json.loads(chart.proto.spec)["encoding"]["y"]["title"] == "MiB"


# ---------------------------------------------------------------- Recompiles


def test_recompiles_page_shows_reasons_what_if_and_buckets(app_env: Path) -> None:
    at = open_page("recompiles.py", run="small-cache")
    cards = metrics(at)
    assert cards.pop("Compile time")  # a duration: how long this machine took
    assert cards == {
        "Compiles": "12",
        "Recompiles": "10",
        "After eviction": "4",
        "Distinct keys": str(2 * len(DISTINCT)),
    }
    reasons = table(at, "change", "arg", "recompiles", "example")
    counts = {(r.change, r.arg): r.recompiles for r in reasons.itertuples()}
    # per position: 24, 32 and 40 are new lengths; 24 and 16 come back after eviction
    assert counts == {
        ("shape", "x"): 3,
        ("shape", "nz"): 3,
        ("after_eviction", "x"): 2,
        ("after_eviction", "nz"): 2,
    }
    detail = table(at, "reason", "after_eviction", "t_s")
    x_reasons = detail[detail["position"] == 0]["reason"].tolist()
    assert x_reasons[0] == "x dim 1: 16 -> 24"
    assert x_reasons[2].startswith("re-compile after eviction: ")

    advice = table(at, "smallest_size_without_recompiles").set_index("position")
    assert advice["cache_size_used"].tolist() == [2, 2]
    assert advice["smallest_size_without_recompiles"].tolist() == [SMALLEST_SIZE] * 2
    assert advice["compiles_recorded"].tolist() == [lru_compiles(BREAK_SWEEP, 2)] * 2

    buckets = table(at, "pow2_buckets", "saved_compiles")
    assert buckets["saved_compiles"].tolist() == [1, 1]
    assert "powers of two turns 4 sizes into 3 buckets" in texts(at.info)

    breaks = table(at, "op_type", "runs")
    assert breaks["op_type"].tolist() == ["NonZero"]
    assert breaks["runs"].tolist() == [len(BREAK_SWEEP)]


def test_recompiles_page_of_a_run_without_compiles(app_env: Path) -> None:
    at = open_page("recompiles.py", run="hub")
    assert metrics(at)["Compiles"] == "0"
    assert "compiled nothing" in texts(at.info)


# ---------------------------------------------------------------- Cache


def test_cache_page_shows_hit_rate_thrashing_and_payback(app_env: Path) -> None:
    at = open_page("cache.py", run="small-cache")
    assert metrics(at) == {
        "Hit rate": "25%",
        "Hits": "4",
        "Misses": "12",
        "Evictions": "8",
        "Thrashing positions": "2",
    }
    positions = table(at, "hits", "misses", "evicted_then_recompiled")
    assert positions["evictions"].tolist() == [4, 4]
    assert positions["evicted_then_recompiled"].tolist() == [2, 2]
    thrash = table(at, "wasted_compiles", "shapes_text")
    assert sorted(thrash["shapes_text"]) == [
        "nz[2,16]:int64",
        "nz[2,24]:int64",
        "x[1,16]:float32",
        "x[1,24]:float32",
    ]
    assert f"a cache of {SMALLEST_SIZE} per position would compile each key once" in texts(
        at.warning
    )
    assert len(table(at, "hits_before_eviction")) == 8
    payback = table(at, "reuses", "paid_back")
    assert len(payback) == 12
    assert int(payback["reuses"].sum()) == 4


def test_cache_page_with_a_big_enough_cache(app_env: Path) -> None:
    at = open_page("cache.py", run="big-cache")
    assert metrics(at)["Hit rate"] == "50%"
    assert metrics(at)["Thrashing positions"] == "0"
    assert "No key was compiled again after an eviction." in texts(at.success)


# ---------------------------------------------------------------- Memory


def test_memory_page_shows_peaks_and_static_memory(app_env: Path) -> None:
    at = open_page("memory.py", run="small-cache")
    shown = metrics(at)
    assert shown["Peak of live tensors"] == "1.5 MiB"
    # the recording process's own RSS: whatever the machine gave it (1.2 GiB on one host,
    # hundreds of MiB on another), shown as the view's number in bytes' units
    with connect(app_env, read_only=True) as con:
        row = con.sql("SELECT peak_rss_bytes FROM run_summary WHERE run_id = 'small-cache'")
    rss = int(row["peak_rss_bytes"][0])
    assert rss > 0
    assert shown["Peak process RSS"] == fmt.size(rss)
    # the stacked chart's axis in the peak's unit, not 1,572,864 bytes
    stacked = json.loads(at.get("vega_lite_chart")[0].proto.spec)["layer"][0]["encoding"]
    assert stacked["y"]["title"] == stacked["y"]["field"] == "MiB"
    # bytes per category as a person reads them, largest first (not a MAP's text)
    assert "activation 1.5 MiB, parameter 4.0 KiB" in texts(at.caption)
    static = table(at, "argument_bytes", "temp_bytes")
    assert len(static) == 12
    assert (static["argument_bytes"] > 0).all()
    # the table keeps numbers (it sorts by value) and shows them with units
    static_text = shown_table(at, "argument_bytes", "temp_bytes")
    assert static_text["argument_bytes"].tolist() == [fmt.size(n) for n in static["argument_bytes"]]
    assert static_text["compile_ms"].tolist() == [
        fmt.duration_ms(ms) for ms in static["compile_ms"]
    ]
    assert all(t.endswith((" ms", " s", " µs")) for t in static_text["compile_ms"])
    peaks = table(at, "series", "peak_bytes", "samples").set_index("series")
    assert peaks.loc["tensors", "peak_bytes"] == PEAK_TENSORS
    assert {"tensors", "rss", "used"} <= set(peaks.index)
    assert len(at.get("vega_lite_chart")) == 2  # stacked categories, device readings


def test_memory_page_of_a_run_without_memory(app_env: Path) -> None:
    at = open_page("memory.py", run="hub")
    assert "recorded no memory" in texts(at.info)


# ---------------------------------------------------------------- Hub


def test_hub_page_shows_hits_downloads_and_the_saved_metadata_fallback(app_env: Path) -> None:
    at = open_page("hub.py", run="hub")
    shown = metrics(at)
    assert {k: shown[k] for k in ("Files", "Cache hits", "Downloads")} == {
        "Files": "2",
        "Cache hits": "4",
        "Downloads": "2",
    }
    assert shown["Saved-metadata fallbacks"] == "1"
    assert "Ember used its saved copy" in texts(at.warning)
    files = table(at, "path", "bytes", "checks", "downloads").set_index("path")
    assert sorted(files.index) == ["config.json", "onnx/model.onnx"]
    assert files.loc["config.json", "bytes"] == len(b'{"model_type": "tiny-break"}')
    assert files.loc["onnx/model.onnx", "checks"] == "etag"
    # the same words for bytes as `ember report` (one formatter: ember.analysis.format)
    assert shown["Bytes"] == fmt.size(int(files["bytes"].sum()))
    checks = table(at, "check", "hits")
    assert checks["check"].tolist() == ["etag"]
    assert checks["hits"].tolist() == [4]
    info = table(at, "info_fetched", "info_saved")
    assert (info["info_fetched"].tolist(), info["info_saved"].tolist()) == ([2], [1])


def test_hub_page_of_a_run_without_the_hub(app_env: Path) -> None:
    at = open_page("hub.py", run="small-cache")
    assert "used nothing from the Hub" in texts(at.info)


# ---------------------------------------------------------------- Calls


def test_calls_page_shows_percentiles_by_shape(app_env: Path) -> None:
    at = open_page("calls.py", run="small-cache", windows="10")
    shown = metrics(at)
    assert (shown["Calls"], shown["Errors"]) == ("8", "0")
    assert all(shown[p].endswith(("ms", "s")) for p in ("p50", "p90", "p99"))
    assert at.select_slider(key="ember_calls_windows").value == 10
    by_shape = table(at, "shapes", "p50_ms", "p99_ms")
    assert by_shape["calls"].sum() == len(BREAK_SWEEP)
    calls_per_length = {BREAK_SWEEP.count(n) for n in DISTINCT}
    assert set(by_shape["calls"]) == calls_per_length
    assert (by_shape["p50_ms"] <= by_shape["p99_ms"]).all()


def test_calls_page_with_a_windows_param_that_is_not_a_number_warns_and_uses_the_default(
    app_env: Path,
) -> None:
    at = open_page("calls.py", run="small-cache", windows="abc")
    assert not at.exception
    assert any("abc" in w.value and "windows" in w.value for w in at.warning)
    assert at.select_slider(key="ember_calls_windows").value == 50
    assert at.query_params["windows"] == "50"


# ---------------------------------------------------------------- Compare


def test_compare_page_shows_the_differences(app_env: Path) -> None:
    at = open_page("compare.py", run="small-cache", other="big-cache")
    shown = metrics(at)
    assert shown["Compiles (B)"] == "8"
    assert shown["Evictions (B)"] == "0"
    assert shown["Cache hit rate (B)"] == "50%"
    diff = table(at, "measure", "run A", "B - A").set_index("measure")
    assert (diff.loc["Compiles", "run A"], diff.loc["Compiles", "run B"]) == ("12", "8")
    assert diff.loc["Compiles", "B - A"] == -4
    assert diff.loc["Evictions", "B - A"] == -8
    assert diff.loc["Cache hit rate", "B - A"] == pytest.approx(0.25)
    # B - A reads in each measure's unit, as the tiles do (it printed 0.25 and 0.01937)
    text = shown_table(at, "measure", "B - A").set_index("measure")["B - A"]
    assert (text["Compiles"], text["Evictions"]) == ("-4", "-8")
    assert text["Cache hit rate"] == "+25.0 pp"
    assert re.fullmatch(r"[+-]\d[\d.]* (ns|µs|ms|s)|0", text["Call p50"]), text["Call p50"]
    assert re.fullmatch(r"[+-]\d[\d.]* (ns|µs|ms|s)|0", text["Compile time"])
    assert re.fullmatch(r"[+-]\d[\d.]* (B|KiB|MiB|GiB)|0|–", text["Peak memory"])
    assert at.metric[3].label == "Cache hit rate (B)"
    assert "run A: 25%" in at.metric[3].help
    per_position = table(at, "compiles_a", "difference")
    assert per_position["difference"].tolist() == [-2, -2]
    latency = table(at, "p50_ms_a", "p50_ms_b")
    assert len(latency) == len(DISTINCT)
    assert at.query_params["other"] == "big-cache"


# ---------------------------------------------------------------- Trends


def test_trends_page_charts_each_metric_of_a_series(app_env: Path) -> None:
    at = open_page("trends.py")
    assert at.title[0].value == "Trends"
    assert [b.label for b in at.selectbox][-2:] == ["Series by", "Series"]
    assert at.selectbox[-2].value == "model"
    captions = texts(at.caption)
    assert "runs, 0 change points" in captions  # a few runs: too short to tell a change
    by_tag = open_page("trends.py", by="no-such-tag")
    assert "no-such-tag" not in by_tag.query_params.get("by", "")


# ---------------------------------------------------------------- SQL console


def test_sql_console_runs_a_select_over_a_view_from_the_url(app_env: Path) -> None:
    sql = "SELECT run_id, count(*) AS evictions FROM evictions GROUP BY ALL"
    at = open_page("sql.py", sql=sql)
    result = table(at, "run_id", "evictions")
    assert result.to_dict("records") == [{"run_id": "small-cache", "evictions": 8}]
    csv = at.get("download_button")[0]
    assert csv.proto.label == "Download CSV"
    assert "1 rows" in texts(at.caption)


def test_sql_console_refuses_a_write_typed_in(app_env: Path) -> None:
    at = open_page("sql.py")
    at.text_area(key="ember_sql_text").input("DELETE FROM runs").run()
    at.button(key="ember_sql_run").click().run()
    assert "Refused: the SQL console is read-only: DELETE" in as_text(texts(at.error))
    at.text_area(key="ember_sql_text").input("SELECT * FROM read_csv('/etc/passwd')").run()
    at.button(key="ember_sql_run").click().run()
    assert "reading or writing files is disabled" in texts(at.error)


# ---------------------------------------------------------------- errors and login


def test_missing_database_says_what_to_do(tmp_path: Path, monkeypatch) -> None:
    from ember.dashboard.db import DB_ENV

    monkeypatch.setenv(DB_ENV, str(tmp_path / "nope.duckdb"))
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert "no such database" in as_text(texts(at.error))
    assert "ember ingest TRACES --db" in as_text(texts(at.error))


AUTH = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "x" * 32,
    "client_id": "ember",
    "client_secret": "s",
    "server_metadata_url": "https://id.example.com/.well-known/openid-configuration",
}


def test_login_is_required_when_auth_is_configured(app_env: Path) -> None:
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH
    at.user = {"is_logged_in": False}
    at.run()
    assert "This dashboard needs a login." in texts(at.info)
    assert [b.label for b in at.button] == ["Log in"]
    assert not at.metric  # nothing of the database is shown


def test_logged_in_user_of_an_allowed_domain_sees_the_pages(app_env: Path) -> None:
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH
    at.secrets["ember"] = {"allowed_domains": ["example.com"]}
    at.user = {"is_logged_in": True, "email": "ana@example.com", "name": "Ana"}
    at.run()
    assert metrics(at)["Runs"] == "3"
    assert "Logged in as Ana" in texts(at.sidebar.caption)

    at.user = {"is_logged_in": True, "email": "eve@elsewhere.org", "name": "Eve"}
    at.run()
    assert "eve@elsewhere.org is not allowed here" in texts(at.error)
    assert not at.metric


# ---------------------------------------------------------------- the Parquet export


@pytest.fixture(scope="module")
def parquet_export(dashboard_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ember.analysis.db import connect
    from ember.analysis.export import export_parquet

    folder = tmp_path_factory.mktemp("export")
    with connect(dashboard_db, read_only=True) as con:
        export_parquet(con, folder)
    return folder


def test_pages_read_a_parquet_export_like_the_database(
    parquet_export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ember.dashboard.db import DB_ENV

    monkeypatch.setenv(DB_ENV, str(parquet_export))
    at = open_page()
    assert metrics(at)["Runs"] == "3"
    assert metrics(at)["Evictions"] == "8"
    at.switch_page("recompiles.py").run()
    at.selectbox(key="ember_sel_run").select("small-cache").run()
    assert metrics(at)["Recompiles"] == "10"
    assert metrics(at)["After eviction"] == "4"
    at.switch_page("hub.py").run()
    at.selectbox(key="ember_sel_run").select("hub").run()
    assert metrics(at)["Saved-metadata fallbacks"] == "1"


def test_console_on_a_parquet_export_reads_only_that_folder(parquet_export: Path) -> None:
    from ember.dashboard.console import ConsoleRefused, run_console_query
    from ember.dashboard.db import db_version

    version = db_version(parquet_export)
    got = run_console_query(version, "SELECT count(*) AS n FROM evictions").frame
    assert got["n"].to_list() == [8]
    for sql, message in [
        ("SELECT * FROM read_csv('/etc/passwd')", "reading or writing files is disabled"),
        (f"COPY runs TO '{parquet_export}/x.csv'", "COPY is refused"),
        ("SET enable_external_access = true", "settings are locked"),
    ]:
        with pytest.raises(ConsoleRefused, match=message):
            run_console_query(version, sql)
    assert not (parquet_export / "x.csv").exists()


def test_the_app_never_imports_jax(dashboard_db: Path) -> None:
    # docs/design/architecture.md: dashboard/ never imports jax. A fresh process opens every page.
    import os
    import subprocess
    import sys

    script = f"""
import sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({str(APP)!r}, default_timeout=60).run()
for page in ["recompiles", "cache", "memory", "hub", "calls", "compare", "trends", "sql"]:
    at.switch_page(page + ".py").run()
    assert not at.exception, [e.message for e in at.exception]
print("jax" in sys.modules)
"""
    from ember.dashboard.db import DB_ENV

    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, DB_ENV: str(dashboard_db)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "False"
