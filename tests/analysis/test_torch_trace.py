"""torch.compile TORCH_TRACE logs (tests/data/torch, written by real torch 2.13.0 on CPU)
imported into Ember: the views, the report, rejected lines, and parity with tlparse."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ember.analysis.torch_trace import import_torch_trace, parse_recompile_reason
from ember.cli.main import app
from tests.analysis.databases import query_rows

DATA = Path(__file__).parents[1] / "data" / "torch"
LOGS = ["recompile", "break", "limit", "train", "cached", "rank_0", "rank_1"]
runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def torch_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Every checked-in log imported and ingested; the run id of each scenario."""
    tmp = tmp_path_factory.mktemp("torch")
    db = tmp / "t.duckdb"
    runs = {}
    for name in LOGS:
        result = import_torch_trace(DATA / f"{name}.log", tmp / f"{name}.jsonl")
        assert result.rejected == [], result.rejected
        runs[name] = result.run_id
    r = runner.invoke(app, ["ingest", *(str(tmp / f"{n}.jsonl") for n in LOGS), "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "0 rejected, 0 refused" in _flat(r.output)
    return db, runs


@pytest.mark.parametrize("name", LOGS)
def test_each_checked_in_log_imports_with_nothing_rejected(tmp_path, name):
    result = import_torch_trace(DATA / f"{name}.log", tmp_path / "out.jsonl")
    assert result.rejected == []
    assert (
        result.compiles
        == {
            "recompile": 2,
            "break": 3,
            "limit": 3,
            "train": 2,
            "cached": 2,
            "rank_0": 1,
            "rank_1": 1,
        }[name]
    )


def test_recompile_reason_becomes_a_typed_shape_change(torch_db):
    db, runs = torch_db
    rows = query_rows(
        db,
        "SELECT fun_name, compile_index, change, arg, dim, old_value, new_value, reason "
        "FROM recompiles WHERE run_id = ?",
        runs["recompile"],
    )
    assert rows == [("scale", 2, "jit:shape", "x", 0, "8", "16", "x dim 0: 8 -> 16")]
    (span,) = query_rows(
        db,
        "SELECT end_attrs.retrace_reason, end_attrs.compile_id, end_attrs.guard_count, "
        "end_attrs.cache_size, end_attrs.defined_at FROM spans "
        "WHERE run_id = ? AND span_kind = 'jit' AND end_attrs.compile_id = '0/1'",
        runs["recompile"],
    )
    assert span[:4] == ("x dim 0: 8 -> 16", "0/1", 10, 1)
    assert span[4].endswith("make_logs.py:24")


def test_report_names_the_shape_that_recompiled(torch_db):
    db, runs = torch_db
    r = runner.invoke(app, ["report", "--db", str(db), "--run", runs["recompile"]])
    assert r.exit_code == 0, r.output
    assert "scale retraced once" in r.output
    assert "x dim 0: 8 -> 16" in r.output
    assert "2 compiles" in r.output


def test_report_says_the_compiles_torch_caches_saved(torch_db):
    db, runs = torch_db
    r = runner.invoke(app, ["report", "--db", str(db), "--run", runs["cached"]])
    assert r.exit_code == 0, r.output
    assert (
        "2 of 2 compiles came from torch's FX graph and AOTAutograd caches (on disk: an "
        "earlier compile of the same graphs); torch estimates they saved 60 s"
    ) in _flat(r.output)
    r = runner.invoke(app, ["report", "--db", str(db), "--run", runs["recompile"]])
    assert "caches" not in r.output


def test_report_says_a_graph_break_and_the_recompile_limit(torch_db):
    db, runs = torch_db
    r = runner.invoke(app, ["report", "--db", str(db), "--run", runs["break"]])
    out = _flat(r.output)
    assert "graph break in f at " in out
    assert "make_logs.py:38, reached from " in out
    assert (
        "make_logs.py:42 in graph_break (Data-dependent branching): Detected data-dependent" in out
    )
    r = runner.invoke(app, ["report", "--db", str(db), "--run", runs["limit"]])
    out = _flat(r.output)
    assert "g hit torch's recompile limit (2) and runs eagerly from then on" in out
    assert "the last guard that failed: 0/1: k == 1." in out


def test_torch_compiles_view(torch_db):
    db, runs = torch_db
    by_run: dict[str, list[tuple]] = {}
    for run_id, *row in query_rows(
        db,
        "SELECT run_id, rank, compile_id, fun_name, guard_count, cache_size, fx_graph_cache, "
        "aot_autograd_cache, failed, recompile_limit_hit, outcome FROM torch_compiles "
        "ORDER BY run_id, ts_ns",
    ):
        by_run.setdefault(run_id, []).append(tuple(row))
    # limit.log is trimmed (its FX cache artifacts dropped): the metrics' counts say miss
    assert by_run[runs["limit"]] == [
        (None, "0/0", "g", 9, 0, "miss", "miss", False, False, "compiled"),
        (None, "0/1", "g", 9, 1, "miss", "miss", False, False, "compiled"),
        (
            None,
            "0/2",
            "g",
            None,
            None,
            None,
            None,
            True,
            True,
            "recompile limit (2) reached: runs eagerly from now",
        ),
    ]
    assert by_run[runs["rank_1"]] == [
        (1, "0/0", "step", 11, 0, "miss", "miss", False, False, "compiled")
    ]
    assert by_run[runs["cached"]] == [
        (None, "0/0", "scale", 10, 0, "hit", "hit", False, False, "compiled from the caches"),
        (None, "0/1", "scale", 10, 1, "hit", "hit", False, False, "compiled from the caches"),
    ]


def test_fx_graph_and_aotautograd_cache_lookups_with_their_keys(torch_db):
    db, runs = torch_db
    lookups = {
        name: query_rows(
            db,
            "SELECT compile_id, l.cache, l.action, l.key, l.time_saved_ns "
            "FROM (SELECT compile_id, ts_ns, unnest(cache_lookups) AS l FROM torch_compiles "
            "WHERE run_id = ?) ORDER BY ts_ns, l.cache",
            runs[name],
        )
        for name in ("recompile", "cached", "train", "break")
    }
    first = lookups["recompile"]
    assert [(c, cache, action) for c, cache, action, _, _ in first] == [
        ("0/0", "aotautograd", "miss"),
        ("0/0", "fx_graph", "miss"),
        ("0/1", "aotautograd", "miss"),
        ("0/1", "fx_graph", "miss"),
    ]
    assert all(key and saved is None for *_, key, saved in first)
    # the second process looks up the same graphs: the keys the first one missed now hit
    again = lookups["cached"]
    assert [(c, cache, action, key) for c, cache, action, key, _ in again] == [
        (c, cache, "hit", key) for c, cache, _, key, _ in first
    ]
    # torch's time_saved_ms of each AOTAutograd hit (57451, 2665); the FX hits say none
    assert [ns for _, cache, _, _, ns in again] == [57_451_000_000, None, 2_665_000_000, None]
    # a backward compile looks up its own graph; a trimmed log's lookups keep no key
    assert [(c, cache, action) for c, cache, action, _, _ in lookups["train"]] == [
        ("0/0", "aotautograd", "miss"),
        ("0/0", "fx_graph", "miss"),
        ("0/0", "fx_graph", "miss"),
    ]
    assert [key is None for _, cache, _, key, _ in lookups["break"] if cache == "fx_graph"] == [
        True
    ] * 3


def test_compiles_have_phases_and_the_second_process_hits_the_fx_graph_cache(torch_db):
    db, runs = torch_db
    rows = query_rows(
        db,
        "SELECT run_id, compile_index, disk_cache FROM compiles "
        "WHERE fun_name = 'scale' ORDER BY run_id, compile_index",
    )
    by_run = {(run, i): cache for run, i, cache in rows}
    assert by_run[(runs["recompile"], 1)] == "miss"
    assert by_run[(runs["cached"], 1)] == "hit"
    assert by_run[(runs["cached"], 2)] == "hit"
    phases = query_rows(
        db,
        "SELECT end_attrs.tracing_ns, end_attrs.lowering_ns, end_attrs.backend_compile_ns, "
        "duration_ns FROM spans WHERE run_id = ? AND span_kind = 'jit' ORDER BY start_ns",
        runs["recompile"],
    )
    for dynamo, aot, inductor, whole in phases:
        assert dynamo > 0
        assert aot > 0
        assert inductor > 0
        assert dynamo + aot + inductor == pytest.approx(whole, abs=1000)


def test_a_graph_break_is_a_break_with_torch_reason(torch_db):
    db, runs = torch_db
    rows = query_rows(
        db,
        "SELECT source, position, node, op_type, reason FROM breaks WHERE run_id = ?",
        runs["break"],
    )
    assert len(rows) == 1
    source, position, node, op_type, reason = rows[0]
    assert (source, position, op_type) == ("f", 0, "Data-dependent branching")
    assert node.endswith("make_logs.py:38")
    assert "if my_tensor.sum() > 0" in reason
    (stack,) = query_rows(db, "SELECT user_stack FROM breaks WHERE run_id = ?", runs["break"])[0]
    assert [frame.rsplit("/", 1)[-1] for frame in stack] == [
        "make_logs.py:91 in <module>",
        "make_logs.py:87 in main",
        "make_logs.py:42 in graph_break",
        "make_logs.py:38 in f",
    ]
    # the two resume frames (one per branch) are two functions, not a recompile
    funs = query_rows(
        db, "SELECT fun_name FROM compiles WHERE run_id = ? ORDER BY ts_ns", runs["break"]
    )
    assert [f for (f,) in funs] == [
        "f",
        "torch_dynamo_resume_in_f_at_38",
        "torch_dynamo_resume_in_f_at_38 [frame 2]",
    ]
    assert query_rows(db, "SELECT count(*) FROM recompiles WHERE run_id = ?", runs["break"]) == [
        (0,)
    ]


def test_compare_fails_a_run_with_a_new_graph_break(torch_db):
    db, runs = torch_db
    r = runner.invoke(app, ["compare", "--db", str(db), runs["recompile"], runs["break"]])
    assert r.exit_code == 1, r.output
    out = _flat(r.output)
    assert "new_breaks>0 │ fail" in out
    assert "(Data-dependent branching): Detected data-dependent branching" in out
    back = runner.invoke(app, ["compare", "--db", str(db), runs["break"], runs["break"]])
    assert back.exit_code == 0, back.output


def test_compare_rules_on_recompiles_and_compile_time_of_torch_runs(torch_db):
    db, runs = torch_db

    def compare(base: str, candidate: str, rules: str) -> tuple[int, str]:
        r = runner.invoke(
            app, ["compare", "--db", str(db), runs[base], runs[candidate], "--fail-on", rules]
        )
        return r.exit_code, _flat(r.output)

    # a recompile the base did not have, named by its dimension
    code, out = compare("break", "recompile", "recompiles>+0")
    assert code == 1
    assert "recompiles>+0 │ fail │ recompiles 0 -> 1 (+1): beyond +0" in out
    assert "new: `x` dim 0 changed once at scale (e.g. x dim 0: 8 -> 16)" in out
    # the second process found both graphs in the FX graph cache: loads, not compiles (its
    # 4.3 s are load time). The first process as the candidate breaks a compile-time rule,
    # the cached one passes it and breaks a load-time rule instead
    code, out = compare("cached", "recompile", "compile_time>+50%")
    assert code == 1
    assert "compile_time>+50% │ fail │ compile_time 0 ns -> 61 s (+∞%): beyond +50%" in out
    code, out = compare("recompile", "cached", "compile_time>+50%")
    assert code == 0
    code, out = compare("recompile", "cached", "load_time>+50%")
    assert code == 1
    assert "load_time>+50% │ fail │ load_time 0 ns -> 4.3 s (+∞%): beyond +50%" in out
    # the recompile limit is a cause of its own
    code, out = compare("break", "limit", "new_recompile_causes>0")
    assert code == 1
    assert "new: torch's recompile limit reached (the frame runs eagerly) at g (once;" in out


def test_the_recompile_limit_is_a_failed_compile_that_falls_back_to_eager(torch_db):
    db, runs = torch_db
    rows = query_rows(
        db,
        "SELECT end_attrs.compile_id, status, end_attrs.recompile_limit, "
        "end_attrs.recompile_limit_hit, end_attrs.retrace_reason, start_attrs.fun_name "
        "FROM spans WHERE run_id = ? AND span_kind = 'jit' ORDER BY start_ns",
        runs["limit"],
    )
    assert rows == [
        ("0/0", "ok", None, None, None, "g"),
        ("0/1", "ok", None, None, "guard failed: 0/0: k == 0", "g"),
        ("0/2", "error", 2, True, "guard failed: 0/1: k == 1", "g"),
    ]
    # the recompiles view says so: torch's analogue of a re-compile after an eviction
    assert query_rows(
        db,
        "SELECT compile_index, change, reason FROM recompiles WHERE run_id = ? ORDER BY 1",
        runs["limit"],
    ) == [
        (2, "other", "guard failed: 0/0: k == 0"),
        (
            3,
            "recompile_limit",
            "recompile limit reached, runs eagerly from now: guard failed: 0/1: k == 1",
        ),
    ]


def test_backward_is_its_own_compile_and_makes_the_run_a_training_run(torch_db):
    db, runs = torch_db
    funs = query_rows(
        db, "SELECT fun_name FROM compiles WHERE run_id = ? ORDER BY 1", runs["train"]
    )
    assert funs == [("loss_fn",), ("loss_fn (backward)",)]
    assert query_rows(db, "SELECT phase FROM runs WHERE run_id = ?", runs["train"]) == [("train",)]


def test_each_rank_is_a_run_tagged_with_its_rank_and_job(torch_db):
    db, runs = torch_db
    rows = query_rows(
        db,
        "SELECT json_extract_string(tags, '$.rank'), json_extract_string(tags, '$.job') "
        "FROM runs WHERE run_id IN (?, ?) ORDER BY 1",
        runs["rank_0"],
        runs["rank_1"],
    )
    assert rows == [("0", "torch"), ("1", "torch")]


def test_the_ranks_of_a_torch_job_are_one_job_side_by_side(torch_db):
    db, runs = torch_db
    ranks = query_rows(
        db, "SELECT job_id, rank, run_id, job_source, backend FROM job_ranks ORDER BY rank"
    )
    assert ranks == [
        ("torch", 0, runs["rank_0"], "torch_trace", "torch.compile"),
        ("torch", 1, runs["rank_1"], "torch_trace", "torch.compile"),
    ]
    # the logs do not say the world size: nothing can be called missing
    assert query_rows(
        db, "SELECT job_id, ranks_seen, runs, world_size, ranks_missing, compiles FROM jobs"
    ) == [("torch", 2, 2, None, None, 2)]
    per_rank = query_rows(db, "SELECT rank, compiles FROM rank_compiles ORDER BY rank")
    assert per_rank == [(0, 1), (1, 1)]
    # both ranks compiled the same frame once: nothing diverged
    assert query_rows(db, "SELECT count(*) FROM rank_divergence") == [(0,)]


def test_parse_recompile_reason():
    assert parse_recompile_reason(
        "0/0: tensor 'x' size mismatch at index 1. expected 8, actual 16"
    ) == ("x dim 1: 8 -> 16", [{"arg": "x", "what": "shape", "old": "8", "new": "16", "dim": 1}])
    assert parse_recompile_reason(
        "0/0: tensor 'w' dtype mismatch. expected Float, actual Half"
    ) == ("w dtype: Float -> Half", [{"arg": "w", "what": "dtype", "old": "Float", "new": "Half"}])
    text = "0/0: k == 0    # return x * k  # make_logs.py:53 in g\nUser stack trace:\n  ..."
    assert parse_recompile_reason(text) == ("guard failed: 0/0: k == 0", [])


def _corrupt(tmp_path: Path) -> tuple[Path, int, int]:
    """recompile.log with one payload line edited and one line of garbage; their numbers."""
    lines = (DATA / "recompile.log").read_text(encoding="utf-8").split("\n")
    at = next(i for i, line in enumerate(lines) if "recompile_reasons" in line)
    lines[at + 1] = lines[at + 1].replace("actual 16", "actual 17")
    second = next(i for i, line in enumerate(lines) if i > 0 and not line.startswith("\t"))
    lines.insert(second, "this is not a log line")  # between two entries
    path = tmp_path / "recompile.log"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path, at + 2, second + 1  # the entry moved down one line; numbers from 1


def test_a_corrupted_payload_and_a_bad_line_are_rejected_and_the_rest_kept(tmp_path):
    path, entry_line, bad_line = _corrupt(tmp_path)
    result = import_torch_trace(path, tmp_path / "out.jsonl")
    assert len(result.rejected) == 2
    assert result.rejected[0].startswith(f"{path}:{bad_line}: not a TORCH_TRACE entry")
    assert result.rejected[1].startswith(f"{path}:{entry_line}: payload md5 ")
    assert result.compiles == 2  # the compiles are kept; the reason comes from the metrics


def test_a_log_read_in_small_pieces_reads_the_same(tmp_path, monkeypatch):
    # the reader cuts a log into pieces before entry lines; 4 KiB pieces (payloads of
    # generated code are bigger: a piece then grows until an entry starts) give the same
    # trace and the same rejected line numbers as one piece
    from ember.analysis import torch_trace

    path, entry_line, bad_line = _corrupt(tmp_path)
    whole = import_torch_trace(path, tmp_path / "whole.jsonl")
    monkeypatch.setattr(torch_trace, "_PIECE_BYTES", 4096)
    pieces = list(torch_trace._pieces(path))
    assert len(pieces) > 40
    assert all(not p.startswith("\t") for p in pieces)
    small = import_torch_trace(path, tmp_path / "small.jsonl")
    assert small.rejected == whole.rejected
    assert [r.split(": ", 1)[0] for r in small.rejected] == [
        f"{path}:{bad_line}",
        f"{path}:{entry_line}",
    ]
    assert (tmp_path / "small.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()


def test_cli_imports_a_folder_and_exits_1_on_rejected_lines(tmp_path):
    db = tmp_path / "c.duckdb"
    folder = tmp_path / "trace"
    folder.mkdir()
    shutil.copy(DATA / "limit.log", folder / "limit.log")
    r = runner.invoke(app, ["import", "torch-trace", str(folder), "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "3 compiles" in _flat(r.output)
    assert "0 rejected" in _flat(r.output)
    assert query_rows(db, "SELECT count(*) FROM compiles") == [(3,)]
    path, entry_line, _ = _corrupt(tmp_path)
    bad = runner.invoke(app, ["import", "torch-trace", str(path), "--out", str(tmp_path / "o")])
    assert bad.exit_code == 1
    assert f"{path}:{entry_line}: payload md5" in _flat(bad.output)


def test_cli_imports_into_a_lake(tmp_path):
    lake = tmp_path / "lake"
    r = runner.invoke(
        app,
        [
            "import",
            "torch-trace",
            str(DATA / "break.log"),
            "--out",
            str(tmp_path / "b.jsonl"),
            "--lake",
            str(lake),
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["report", "--db", str(lake)])
    assert r.exit_code == 0, r.output
    assert "graph break in f at " in _flat(r.output)


def _without(schema, column: str, field: str):
    import pyarrow as pa

    i = schema.get_field_index(column)
    kept = [f for f in schema.field(i).type if f.name != field]
    return schema.set(i, pa.field(column, pa.struct(kept)))


def test_a_lake_made_before_the_torch_fields_takes_a_torch_run(tmp_path, monkeypatch):
    # a lake whose tables an older Ember created (no break user_stack, no jit
    # torch_caches): the appends evolve them (delta-rs schema merge) instead of failing
    from ember.analysis.lake import table as lake_table

    real = lake_table.arrow_schema

    def older(table: str):
        schema = real(table)
        if table == "span_start":
            return _without(schema, "attrs", "user_stack")
        if table == "span_end":
            return _without(_without(schema, "attrs", "user_stack"), "attrs", "torch_caches")
        return schema

    lake = tmp_path / "lake"
    monkeypatch.setattr(lake_table, "arrow_schema", older)
    lake_table.create_lake(lake)
    monkeypatch.setattr(lake_table, "arrow_schema", real)
    out = tmp_path / "b.jsonl"
    r = runner.invoke(
        app,
        ["import", "torch-trace", str(DATA / "break.log"), "--out", str(out), "--lake", str(lake)],
    )
    assert r.exit_code == 0, r.output
    from ember.analysis.lake.ingest import connect_lake

    with connect_lake(lake) as con:
        stacks = con.execute("SELECT user_stack FROM breaks").fetchall()
        caches = con.execute(
            "SELECT count(*) FROM torch_compiles WHERE aot_autograd_cache = 'miss'"
        ).fetchall()
    assert [s[-1].rsplit("/", 1)[-1] for (s,) in stacks] == ["make_logs.py:38 in f"]
    assert caches == [(3,)]


def test_ingest_takes_a_torch_trace_folder_and_converts_each_log_once(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    folder = tmp_path / "trace"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(DATA / f"rank_{rank}.log", folder / f"rank_{rank}.log")
    (folder / "notes.log").write_text("not a torch log\n")
    db = tmp_path / "i.duckdb"
    r = runner.invoke(app, ["ingest", str(folder), "--db", str(db)])
    assert r.exit_code == 0, r.output
    out = _flat(r.output)
    assert out.count("converted from TORCH_TRACE (1 compiles, 0 rejected lines)") == 2
    assert "2 file(s), 6 records, 0 rejected" in out
    # the log's folder is not written: the traces are in the temporary folder
    assert sorted(p.name for p in folder.iterdir()) == ["notes.log", "rank_0.log", "rank_1.log"]
    assert out.count(str(tmp_path / "tmp")) >= 2
    again = runner.invoke(app, ["ingest", str(folder / "rank_0.log"), "--db", str(db)])
    assert again.exit_code == 0, again.output
    assert "converted" not in again.output  # its trace is newer than the log
    assert "unchanged (already ingested)" in _flat(again.output)


# ---------------------------------------------------------------- parity with tlparse


def _tlparse(log: Path, out: Path) -> tuple[dict[str, list[str]], list[str]]:
    """tlparse's compile directory (compile id -> artifact names) and failed compile ids."""
    tlparse = Path(sys.executable).parent / "tlparse"
    if not tlparse.exists():
        pytest.fail(f"{tlparse} missing: run `make .venv/.ember-test` (tlparse is in [test])")
    # --strict: every line known to tlparse too; not for a rank's log, where tlparse counts
    # the entry torch writes before the rank is known (torch_version) as another rank's
    strict = [] if log.name.startswith("rank_") else ["--strict"]
    subprocess.run(
        [str(tlparse), str(log), "-o", str(out), "--no-browser", "--overwrite", *strict],
        check=True,
        capture_output=True,
    )
    directory = json.loads((out / "compile_directory.json").read_text())
    artifacts = {
        cid.strip("[]"): [a["name"] for a in v["artifacts"]]
        for cid, v in directory.items()
        if cid != "[-/-]"
    }
    failures = (out / "failures_and_restarts.html").read_text()
    failed = re.findall(r"<td>\s*(?:<a[^>]*>)?\[(\d+/\d+)\]", failures)
    return artifacts, failed


@pytest.mark.parametrize("name", LOGS)
def test_compile_ids_recompiles_breaks_and_failures_equal_tlparse(tmp_path, name):
    artifacts, failed = _tlparse(DATA / f"{name}.log", tmp_path / "tl")
    result = import_torch_trace(DATA / f"{name}.log", tmp_path / "e.jsonl")
    ends = [
        json.loads(line)
        for line in (tmp_path / "e.jsonl").read_text().splitlines()
        if '"span_end"' in line
    ]
    forward = [
        e for e in ends if e["span_kind"] == "jit" and "(backward)" not in e["attrs"]["fun_name"]
    ]
    assert sorted(e["attrs"]["compile_id"] for e in forward) == sorted(artifacts)
    recompiled = sorted(
        c for c, names in artifacts.items() if any("recompile_reasons" in n for n in names)
    )
    assert (
        sorted(e["attrs"]["compile_id"] for e in forward if "retrace_reason" in e["attrs"])
        == recompiled
    )
    tl_breaks = sum(
        n.startswith("dynamo_graph_break_reason") for ns in artifacts.values() for n in ns
    )
    assert sum(e["span_kind"] == "break" for e in ends) == tl_breaks
    assert sorted(e["attrs"]["compile_id"] for e in forward if e["status"] == "error") == sorted(
        failed
    )
    assert result.rejected == []
