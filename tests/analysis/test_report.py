"""`ember report` and `ember.analysis.report`, on traces the real runtime recorded.

The session's sweep (conftest: lengths 17, 23, 31, 17, 23, 23 with a cache of 2) thrashes;
the bus trace has a failed call, a JAX retrace and tensor memory. This module adds the
token filter twice with one disk cache (cold, then warm), and the tiny JAX training loop
whose eager ops JAX compiles itself, each recorded in a fresh process as a user's job
would run, once, by tests/data/make_traces.py.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ember.analysis import connect, ingest
from ember.analysis.report import Finding, RunReport, findings, report, resolve_run, short_path
from ember.cli.analysis import report_lines
from ember.cli.main import app
from tests.analysis.traces import (
    REPO,
    cache_line,
    checked_in,
    meta_line,
    record_bus_trace,
    write_lines,
)
from tests.recordings import SWEEP

runner = CliRunner()


@pytest.fixture(scope="module")
def report_db(tmp_path_factory: pytest.TempPathFactory, sweep_trace: Path) -> Path:
    d = tmp_path_factory.mktemp("report")
    # recorded by the real runtime once (tests/data/make_traces.py)
    traces = [sweep_trace, *(checked_in(f"{n}.jsonl", d) for n in ("disk-cold", "disk-warm"))]
    traces.append(checked_in("train.jsonl", d))
    # two runs whose ids share a start, for the ambiguous --run prefix
    traces.append(record_bus_trace(d / "bus-a.jsonl", run_id="bus-aaaa"))
    traces.append(record_bus_trace(d / "bus-b.jsonl", run_id="bus-bbbb"))
    db = d / "report.duckdb"
    summary = ingest(traces, db)
    assert summary.rejected == 0, [f.message for f in summary.files]
    return db


@pytest.fixture(scope="module")
def reports(report_db: Path) -> dict[str, RunReport]:
    with connect(report_db, read_only=True) as con:
        return {r.run.name: r for r in report(con)}


def _texts(r: RunReport, kind: str) -> list[str]:
    return [f.text for f in r.findings if f.kind == kind]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _report(db: Path, *args: str, columns: int = 100):
    return runner.invoke(app, ["report", "--db", str(db), *args], env={"COLUMNS": str(columns)})


# ------------------------------------------------------------------ the Python API


def test_headline_numbers_of_the_thrashing_sweep(reports):
    s = reports["token_filter"].run  # no scenario tag: the model tag names it
    assert (s.run_id, s.short_id, s.phase) == ("sweep", "sweep", "infer")
    assert s.calls == len(SWEEP)
    assert s.failed_calls == 0
    # position 0 misses 5 times and position 27 (after the NonZero break) 6 times
    assert (s.compiles, s.jax_compiles) == (11, 0)
    assert (s.hits, s.misses, s.evictions) == (1, 11, 7)
    assert (s.disk_hits, s.disk_misses) == (0, 0)
    # on the CPU the readings are the process's RSS and JAX's live arrays: RSS is named
    assert s.peak_source == "RSS"
    assert s.peak_bytes > 2**20
    assert s.p50_ns is not None
    assert s.p99_ns >= s.p50_ns


def test_recompile_sentence_names_the_dim_and_its_sizes_in_order(reports):
    text = next(t for t in _texts(reports["token_filter"], "recompile") if "position 0 " in t)
    assert text.startswith("position 0 compiled 5 times in 6 lookups (")
    assert "input_ids dim 1 changed 4 times (17 -> 23 -> 31 -> 17 -> 23)" in text
    assert "2 of them after an eviction" in text
    rec = next(f for f in reports["token_filter"].findings if f.data.get("position") == 0)
    assert rec.data["sizes"] == [17, 23, 31, 17, 23]
    assert rec.cost_ns > 0  # the time of the 4 recompiles


def test_thrash_sentence_gives_the_cache_size_that_fixes_it(reports):
    thrash = reports["token_filter"].findings
    pos0 = next(f for f in thrash if f.kind == "thrash" and f.data["position"] == 0)
    assert pos0.text.startswith(
        "position 0 thrashed: 2 segments were compiled again after eviction (2 wasted compiles, "
    )
    assert pos0.text.endswith("; cache_size 2 -> 3 removes them (cache_what_if)")
    assert (pos0.data["cache_size"], pos0.data["cache_size_that_fixes"]) == (2, 3)


def test_findings_come_most_costly_first(reports):
    for r in reports.values():
        costs = [f.cost_ns for f in r.findings if f.kind != "errors"]
        assert costs == sorted(costs, reverse=True), r.run.name
    # a failed call leads, whatever it cost
    assert [f.kind for f in reports["tiny"].findings] == [
        "errors",
        "jit_retrace",
        "memory",
        "latency",
    ]


def test_buckets_say_how_often_padding_would_compile(reports):
    texts = _texts(reports["disk-cold"], "buckets")
    # 8, 12, 16 pad to 8, 16: two programs instead of three
    assert texts == ["position 0: padding input_ids dim 1 to 8/16 would compile twice instead of 3"]
    # position 27 varies too, but its tensors come out of the graph break (tokens,
    # kept_idx): the caller cannot pad them, so no padding advice names them


def test_compiled_three_times_and_evictions_that_cost_nothing(reports):
    cold = reports["disk-cold"]
    text = next(t for t in _texts(cold, "recompile") if t.startswith("position 0 "))
    # the fourth call (8 again) hits: 3 compiles in 4 lookups, numbers in call order
    assert text.startswith("position 0 compiled 3 times in 4 lookups (")
    assert "input_ids dim 1 changed twice (8 -> 12 -> 16)" in text
    assert (cold.run.hits, cold.run.misses, cold.run.evictions) == (2, 6, 0)
    assert _texts(cold, "evictions") == []
    assert _texts(cold, "thrash") == []


def test_disk_cache_compares_the_warm_run_with_the_cold_one(reports):
    cold, warm = reports["disk-cold"].run, reports["disk-warm"].run
    assert (cold.disk_hits, cold.disk_misses) == (0, 6)
    assert (warm.disk_hits, warm.disk_misses) == (6, 0)
    (text,) = _texts(reports["disk-warm"], "disk_cache")
    assert re.fullmatch(
        r"disk cache: 6/6 segments loaded from disk; compile time \S+ m?s vs \S+ m?s "
        r"in run disk-col \(disk-cold\)",
        text,
    ), text
    assert _texts(reports["disk-cold"], "disk_cache") == []  # nothing came from disk


def test_a_load_from_the_disk_cache_is_not_a_compile(reports, report_db):
    """Lengths 8, 12, 16, 8: the cold run compiles three calls, the warm run loads those
    three from disk; the second call at 8 is warm in both."""
    cold, warm = reports["disk-cold"].run, reports["disk-warm"].run
    assert (cold.compiling_calls, cold.loaded_calls, cold.warm_calls) == (3, 0, 1)
    assert (warm.compiling_calls, warm.loaded_calls, warm.warm_calls) == (0, 3, 1)
    out = _flat(_report(report_db, "--run", "disk-w").output)
    assert re.search(
        r"over the 1 warm call \(all 4, 3 of which loaded from the disk cache: p50 ", out
    ), out


def test_jax_eager_op_compiles_are_counted_and_grouped_apart(reports):
    train = reports["jax-training"]
    s = train.run
    assert (s.phase, s.calls, s.steps) == ("train", 0, 12)
    # grad_step twice (batch 32 then 16) and sgd once are the user's; the rest are
    # JAX's own compiles of eager ops (_normal, _reduce_sum, convert_element_type...)
    assert s.compiles == 3
    assert s.jax_compiles >= 2
    (retrace,) = _texts(train, "jit_retrace")
    assert retrace.startswith("grad_step retraced once (")
    reasons, advice = retrace.split("; x dim 0, y dim 0 went from ")
    assert reasons.endswith("): x dim 0: 32 -> 16; y dim 0: 32 -> 16")
    # the batch shrank once: padding it (or dropping the last batch) keeps one program
    assert advice == (
        "32 to 16: padding to 32 (or dropping a ragged last batch) would need 1 compile "
        "instead of 2"
    )
    # JAX's own compiles are one line of their own, never recompile sentences
    (grouped,) = _texts(train, "outside_jit")
    assert re.match(r"JAX compiled \d+ primitives run outside jit: .*_normal", grouped)
    assert f"({s.jax_compiles} compiles, " in grouped
    others = " ".join(f.text for f in train.findings if f.kind != "outside_jit")
    assert "_normal" not in others
    assert "same key" not in " ".join(f.text for f in train.findings)


def test_memory_and_errors_and_latency_sentences(reports):
    bus = reports["tiny"]  # the two bus runs share a name; either has the same sentences
    (mem,) = _texts(bus, "memory")
    assert mem.startswith("peak memory 9.5 MiB RSS (the whole process; CPU runs have no")
    assert "(during step #1)" in mem
    assert "tensors 6.8 KiB (parameter 3.9 KiB, activation 2.9 KiB)" in mem
    assert _texts(bus, "errors") == [
        "1 call failed: ValueError: input_ids: expected int64, got float32"
    ]
    (slow,) = _texts(bus, "latency")
    assert slow.startswith("slowest shape: input_ids[1,5]:int64 p99 ")
    sweep = reports["token_filter"]
    (mem,) = _texts(sweep, "memory")
    # the reading the recorder tied to a call names that call, counted from 1
    assert re.search(r"at \d+\.\d s into the run \(during call #[1-6]\)", mem), mem
    (slow,) = _texts(sweep, "latency")
    assert re.fullmatch(r"slowest shape: input_ids\[1,\d+\]:int64 p99 .+ calls?\)", slow)


def test_limit_and_findings_api(report_db):
    with connect(report_db, read_only=True) as con:
        one = report(con, "sweep", limit=2)
        flat = findings(con, "disk-warm", limit=3)
        assert resolve_run(con, "disk-w") == "disk-warm"
    assert [r.run.run_id for r in one] == ["sweep"]
    assert len(one[0].findings) == 2
    assert len(flat) == 3
    assert all(isinstance(f, Finding) for f in flat)
    assert flat[0].kind == "disk_cache"  # the most costly: the compile time it saved


def test_short_path_cuts_from_the_left():
    assert short_path("/very/long/path/to/models/light_squeezenet.onnx", 25) == (
        "…/light_squeezenet.onnx"
    )
    assert short_path("model.onnx", 30) == "model.onnx"
    assert len(short_path("x" * 100, 20)) == 20


# ------------------------------------------------------------------ the CLI


def test_cli_prints_a_headline_and_sentences(report_db):
    result = _report(report_db, "--run", "sweep")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "token_filter  sweep  infer  cpu"
    out = _flat(result.output)
    assert "6 calls · 11 compiles (" in out
    assert "cache 1 hits/11 misses/7 evictions · peak " in out
    assert " MiB RSS · call p50 " in out
    assert "position 0 compiled 5 times in 6 lookups" in out
    assert "• position 0 thrashed: 2 segments were compiled again after eviction" in out
    # position 0 thrashes with cache size 2; a cache of 3 would fix it
    assert "cache_size 2 -> 3 removes them (cache_what_if)" in out
    assert "input_ids dim 1 changed 4 times (17 -> 23 -> 31 -> 17 -> 23)" in out
    assert "peak memory" in out
    assert "slowest shape" in out
    assert "bus-aaaa" not in out  # one run only


def test_cli_training_headline_counts_jax_compiles(report_db):
    out = _flat(_report(report_db).output)
    assert re.search(
        r"jax-training \w{8} train cpu 12 steps \(forward 6, optimizer 6\) · "
        r"3 compiles \([^)]+\) · "
        r"\d+ jax compiles \(",
        out,
    ), out
    assert "disk cache 6 hits/0 misses" in out


def test_no_line_is_wider_than_the_terminal(report_db):
    for columns in (80, 60):
        result = _report(report_db, columns=columns)
        assert result.exit_code == 0, result.output
        wide = [line for line in result.output.splitlines() if len(line) > columns]
        assert wide == [], wide
        assert not any(line != line.rstrip() for line in result.output.splitlines())
    # every run has its headline; no full 32-character id is printed
    out = _report(report_db, columns=80).output
    for name in ("token_filter", "disk-cold", "disk-warm", "jax-training", "tiny"):
        assert re.search(rf"^{re.escape(name)}  \S+  ", out, re.M), name
    assert not re.search(r"[0-9a-f]{32}", out)


# a unit, or an arrow, that must stay on the line of the number before it
_UNIT_START = re.compile(r"\s*(?:(?:[KMGT]i)?B|s|ms|µs|ns|times|->)(?:\W|$)")


def _split_numbers(text: str) -> list[tuple[str, str]]:
    """Pairs of lines where a number ends one line and its unit or arrow starts the next."""
    lines = text.splitlines()
    return [
        (a, b)
        for a, b in itertools.pairwise(lines)
        if re.search(r"\d$", a) and _UNIT_START.match(b)
    ]


def test_numbers_stay_with_their_units_and_arrows_at_any_width(report_db):
    # the lines the command prints at each width (the reports read once; the command
    # itself at two widths below and in test_no_line_is_wider_than_the_terminal)
    with connect(report_db, read_only=True) as con:
        runs = report(con)
    for columns in range(30, 101):
        output = "\n".join(line.plain for r in runs for line in report_lines(r, columns))
        assert _split_numbers(output) == [], columns
        assert max(len(line) for line in output.splitlines()) <= columns
        if columns >= 33:  # "(17 -> ... -> 23);" (29 characters) fits after the indent
            assert "(17 -> 23 -> 31 -> 17 -> 23)" in output, columns
    printed = _report(report_db, columns=47).output
    assert printed.splitlines() == [line.plain for r in runs for line in report_lines(r, 47)]
    out = _flat(_report(report_db, "--run", "sweep", columns=30).output)
    assert "input_ids dim 1 changed 4 times (17 -> 23 -> 31 -> 17 -> 23)" in out


def test_wrap_keeps_sizes_durations_and_changes_whole():
    from ember.analysis.format import wrap

    text = "peak 12.3 MiB RSS · call p50 412 ms · dim 1 changed (17 -> 23 -> 31)"
    assert wrap(text, 12) == [
        "peak",
        "12.3 MiB RSS",
        "· call p50",
        "412 ms · dim",
        "1 changed",
        "(17 -> 23 ->",
        "31)",
    ]
    assert wrap(text, 40, "  • ", "    ") == [
        "  • peak 12.3 MiB RSS · call p50 412 ms",
        "    · dim 1 changed (17 -> 23 -> 31)",
    ]
    # a run of changes longer than the line breaks after an arrow, never inside a number
    assert wrap("sizes 1000 -> 2000 -> 3000 -> 4000", 16) == [
        "sizes 1000 ->",
        "2000 -> 3000 ->",
        "4000",
    ]


def test_run_accepts_a_unique_prefix(report_db):
    result = _report(report_db, "--run", "disk-w")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("disk-warm  disk-war  infer")
    assert "disk-cold  " not in result.output


def test_run_prefix_errors_say_what_to_do(report_db):
    ambiguous = _report(report_db, "--run", "bus-")
    assert ambiguous.exit_code == 1
    text = _flat(ambiguous.output)
    assert (
        "--run 'bus-' is ambiguous: it starts 2 run ids: bus-aaaa (tiny), bus-bbbb (tiny)" in text
    )
    assert "give more characters of the run id" in text
    unknown = _report(report_db, "--run", "zzz")
    assert unknown.exit_code == 1
    text = _flat(unknown.output)
    assert "no run 'zzz' (not a run id, nor the start of one); runs: sweep, disk-col" in text
    assert 'ember query "FROM runs"' in text


def _export(db: Path, run: str, out: Path):
    return runner.invoke(
        app, ["export", "--db", str(db), "--chrome", str(out), "--run", run], env={"COLUMNS": "100"}
    )


def test_export_takes_a_run_prefix_like_report(report_db, tmp_path):
    out = tmp_path / "warm.json"
    result = _export(report_db, "disk-w", out)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["otherData"]["run_id"] == "disk-warm"
    assert doc["traceEvents"][0]["args"]["name"].endswith("(disk-warm)")


def test_export_run_prefix_errors_are_the_reports(report_db, tmp_path):
    out = tmp_path / "none.json"
    ambiguous = _export(report_db, "bus-", out)
    assert ambiguous.exit_code == 1
    text = _flat(ambiguous.output)
    assert f"{report_db}: --run 'bus-' is ambiguous: it starts 2 run ids: bus-aaaa (tiny), " in text
    assert "bus-bbbb (tiny); give more characters of the run id" in text
    unknown = _export(report_db, "zzz", out)
    assert unknown.exit_code == 1
    text = _flat(unknown.output)
    assert "no run 'zzz' (not a run id, nor the start of one); runs: sweep, disk-col" in text
    assert not out.exists()


def test_report_of_an_empty_database(tmp_path):
    db = tmp_path / "empty.duckdb"
    with connect(db):
        pass
    result = _report(db)
    assert result.exit_code == 0, result.output
    assert "no runs in" in _flat(result.output)
    assert "ember ingest" in result.output


def test_a_run_of_values_reads_as_a_sequence():
    from ember.analysis.format import sequence

    assert sequence(list(range(8, 20))) == "8 -> 9 -> ... -> 18 -> 19"
    assert sequence([10, 4, 9]) == "10 -> 4 -> 9"  # call order, numbers not text


def test_rejected_lines_are_summed_up_per_file(tmp_path):
    trace = write_lines(
        tmp_path / "bad.jsonl",
        [meta_line(run_id="r1"), cache_line(1000), '{"kind": "cache", "ts_ns": "soon"}'],
    )
    db = tmp_path / "bad.duckdb"
    ingest([trace], db)
    result = _report(db, "--run", "r1", columns=80)
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    assert "ingest rejected 1 line(s) of " in out
    assert "bad.jsonl: first at line 3: " in out
    assert all(len(line) <= 80 for line in result.output.splitlines())


def test_recompiles_page_groups_primitives_run_outside_jit_apart(report_db, reports, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from ember.dashboard.db import DB_ENV

    monkeypatch.setenv(DB_ENV, str(report_db))
    train = reports["jax-training"].run
    app = REPO / "dashboard" / "pages" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=60)
    at.query_params["run"] = train.run_id
    at.run()
    at.switch_page("recompiles.py").run()
    assert not at.exception, [e.message for e in at.exception]
    (info,) = [i.value for i in at.info if "run outside jit" in i.value]
    assert info.startswith(f"JAX compiled {train.jax_primitives} primitives run outside jit: ")
    assert "_normal" in info
    assert f"({train.jax_compiles} compiles, " in info
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Compiles"], metrics["Recompiles"]) == ("3", "1")  # grad_step, sgd
    reasons = next(f.value for f in at.dataframe if "change" in f.value.columns)
    assert list(reasons["change"]) == ["jit:shape"]  # no 'other · same key' line


def test_a_disk_cache_that_missed_is_a_finding_with_its_cost(reports):
    cold = reports["disk-cold"]
    (missed,) = [f for f in cold.findings if f.kind == "disk_miss"]
    total = cold.run.disk_misses
    assert total == cold.run.compiles > 0
    assert cold.run.disk_hits == 0
    assert missed.text.startswith(f"disk cache missed {total} of {total} compiled segments (")
    assert "a first run fills the cache" in missed.text
    assert 0 < missed.cost_ns <= cold.run.compile_ns
    assert not [f for f in reports["disk-warm"].findings if f.kind == "disk_miss"]


def test_the_headline_says_1_compile_not_1_compiles():
    # a model compiled once at load (`ember run onnx:light/squeezenet`) was "1 compiles"
    from dataclasses import fields

    from ember.analysis.report import RunSummary
    from ember.cli.analysis import _headline

    # every column of run_summary: NULL where it may be, else 0
    row = {f.name: None if "None" in str(f.type) else 0 for f in fields(RunSummary)}
    del row["step_labels"]
    base = RunSummary(**row | {"run_id": "r" * 32, "name": "m", "phase": "infer", "model": "m"})
    one = replace(base, calls=1, steps=1, compiles=1, compile_ns=553_000_000)
    assert _headline(one) == "1 call · 1 step · 1 compile (553 ms)"
    assert _headline(replace(one, recompiles=1, eager_compiles=1, jax_compiles=1)) == (
        "1 call · 1 step · 1 compile (553 ms, 1 recompile) · 1 eager segment · 1 jax compile (0 ns)"
    )
    two = replace(one, calls=2, steps=2, compiles=2, recompiles=2, eager_compiles=2)
    assert _headline(two) == (
        "2 calls · 2 steps · 2 compiles (553 ms, 2 recompiles) · 2 eager segments"
    )


def test_a_model_that_failed_to_load_is_the_finding(tmp_path):
    # the run of `ember run empty.onnx` said "0 compiles · nothing to report"
    from ember.recorder import record
    from ember.runtime import LoadError, load

    (tmp_path / "empty.onnx").write_bytes(b"")
    trace = tmp_path / "t.jsonl"
    with record(trace, run_id="failed-load"), pytest.raises(LoadError):
        load(tmp_path / "empty.onnx")
    db = tmp_path / "t.duckdb"
    ingest([trace], db)
    with connect(db, read_only=True) as con:
        [r] = report(con, "failed-load")
    assert [(f.kind, f.text) for f in r.findings] == [
        (
            "errors",
            f"the model failed to load: LoadError: {tmp_path / 'empty.onnx'}: the file is "
            "empty (0 bytes), not an ONNX model",
        )
    ]
