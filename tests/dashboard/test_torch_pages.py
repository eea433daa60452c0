"""The dashboard on torch.compile runs: the checked-in TORCH_TRACE logs (tests/data/torch,
real torch 2.13.0) imported and ingested, the Runs, Recompiles and Compare pages opened with
Streamlit's AppTest, then once in headless Chromium (one dashboard server for all three)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.analysis.ingest.database import ingest
from ember.analysis.torch_trace import import_torch_trace
from tests.dashboard.apptest import as_text, metrics, open_page, table, texts
from tests.dashboard.browser import CHROMIUM, chromium, dashboard_server

DATA = Path(__file__).parents[1] / "data" / "torch"
LOGS = ["recompile", "break", "limit", "train", "cached", "rank_0", "rank_1"]


@pytest.fixture(scope="module")
def torch_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Every checked-in log imported and ingested; the run id of each scenario."""
    tmp = tmp_path_factory.mktemp("torch_dashboard")
    runs, traces = {}, []
    for name in LOGS:
        result = import_torch_trace(DATA / f"{name}.log", tmp / f"{name}.jsonl")
        assert result.rejected == []
        runs[name] = result.run_id
        traces.append(str(tmp / f"{name}.jsonl"))
    db = tmp / "torch.duckdb"
    summary = ingest(traces, db)
    assert all(f.status == "ok" and not f.rejected for f in summary.files)
    return db, runs


@pytest.fixture
def torch_env(torch_db, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    from ember.dashboard.db import DB_ENV

    monkeypatch.setenv(DB_ENV, str(torch_db[0]))
    return torch_db[1]


def test_runs_page_lists_each_torch_process_with_its_compiles(torch_env) -> None:
    at = open_page()
    assert metrics(at)["Runs"] == "7"
    assert metrics(at)["Compiles"] == "12"  # 2 + 3 + 3 + 2 + 0 + 1 + 1
    # the `cached` log's two programs came from the persistent cache: loads, not compiles
    assert metrics(at)["Loads"] == "2"
    runs = table(at, "run_id", "compiles", "recompiles", "backend").set_index("run_id")
    assert set(runs["backend"]) == {"torch.compile"}
    assert runs.loc[torch_env["limit"], ["compiles", "recompiles"]].tolist() == [3, 2]
    assert runs.loc[torch_env["train"], "phase"] == "train"
    assert '"rank":"1"' in runs.loc[torch_env["rank_1"], "tags"]


def test_recompiles_page_names_the_dimension_torch_recompiled_on(torch_env) -> None:
    at = open_page("recompiles.py", run=torch_env["recompile"])
    assert (metrics(at)["Compiles"], metrics(at)["Recompiles"]) == ("2", "1")
    reasons = table(at, "change", "arg", "dim", "recompiles", "example")
    assert reasons[["change", "arg", "dim", "recompiles", "example"]].values.tolist() == [
        ["jit:shape", "x", 0, 1, "x dim 0: 8 -> 16"]
    ]
    # the frame's dimension in the shape buckets (it said no dimension changed): two
    # powers of two already, so padding saves nothing and no advice is given
    buckets = table(at, "fun_name", "arg", "dim", "sizes", "saved_compiles", "ragged")
    assert buckets[["arg", "dim", "saved_compiles", "ragged"]].values.tolist() == [
        ["x", 0, 0, False]
    ]
    assert list(buckets["sizes"].iloc[0]) == [8, 16]
    assert "No input dimension changed between compiles." not in texts(at.caption)
    frames = table(at, "compile_id", "outcome", "fx_graph_cache", "aot_autograd_cache")
    assert frames[["compile_id", "outcome", "fx_graph_cache"]].values.tolist() == [
        ["0/0", "compiled", "miss"],
        ["0/1", "compiled", "miss"],
    ]


def test_recompiles_page_says_the_recompile_limit_sent_the_frame_to_eager(torch_env) -> None:
    at = open_page("recompiles.py", run=torch_env["limit"])
    (warning,) = [as_text(w.value) for w in at.warning]
    assert warning == (
        "g hit torch's recompile limit: it runs eagerly from then on (torch's eviction: each "
        "new input runs uncompiled). The last guard that failed: 0/1: k == 1"
    )
    detail = table(at, "reason", "change", "compile_index")
    assert detail["change"].tolist() == ["other", "recompile_limit"]
    frames = table(at, "compile_id", "outcome")
    assert frames["outcome"].tolist()[-1] == "recompile limit (2) reached: runs eagerly from now"


def test_recompiles_page_shows_a_graph_break_with_the_user_stack(torch_env) -> None:
    at = open_page("recompiles.py", run=torch_env["break"])
    assert metrics(at)["Recompiles"] == "0"
    (row,) = table(at, "node", "op_type", "user_stack").to_dict("records")
    assert row["op_type"] == "Data-dependent branching"
    assert row["node"].endswith("make_logs.py:38")
    assert [f.rsplit("/", 1)[-1] for f in row["user_stack"].split(" > ")] == [
        "make_logs.py:91 in <module>",
        "make_logs.py:87 in main",
        "make_logs.py:42 in graph_break",
        "make_logs.py:38 in f",
    ]


def test_compare_page_fails_a_run_with_a_new_graph_break(torch_env) -> None:
    at = open_page("compare.py", run=torch_env["recompile"], other=torch_env["break"])
    rules = table(at, "rule", "result").set_index("rule")["result"]
    assert rules["new_breaks>0"] == "fail"
    assert rules["recompiles>+0"] == "pass"  # 1 -> 0
    assert "FAIL: 1 of 7 rules broken" in texts(at.error)
    shown = as_text(texts(at.markdown))
    assert "new: break at " in shown
    assert "make_logs.py:38` (Data-dependent branching): Detected data-dependent" in shown
    assert "gone: `x` dim 0 changed once at scale (e.g. x dim 0: 8 -> 16)" in shown


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing")
def test_runs_recompiles_and_compare_of_torch_runs_in_chromium(torch_db) -> None:
    from playwright.sync_api import expect

    db, runs = torch_db
    pages = {
        # (a table's cells are drawn on a canvas: the texts here are headings, tiles, notes)
        "": ["Largest peak memory", "Compiles", "12", "Loads"],
        f"recompiles?run={runs['limit']}": [
            "torch.compile frames",
            "hit torch's recompile limit: it runs eagerly from then on",
        ],
        f"recompiles?run={runs['recompile']}": ["Why it compiled again", "torch.compile frames"],
        f"compare?run={runs['recompile']}&other={runs['break']}": [
            "Regression gate",
            "FAIL: 1 of 7 rules broken",
            "(Data-dependent branching): Detected data-dependent branching",
            "dim 0 changed once at scale",
        ],
    }
    with dashboard_server(db) as base, chromium() as browser:
        page = browser.new_page()
        for path, expected in pages.items():
            page.goto(f"{base}/{path}")
            for text in expected:
                expect(page.get_by_text(text, exact=False).first).to_be_visible(timeout=60_000)
            assert not page.get_by_test_id("stException").count(), f"exception on /{path}"


def test_trends_page_opens_on_torch_runs_which_have_no_model_tag(torch_env) -> None:
    at = open_page("trends.py")
    assert not at.exception
    assert "None" not in texts(at.markdown) + texts(at.caption) + texts(at.selectbox)
