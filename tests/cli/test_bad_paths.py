"""Every ``ember`` command given a bad path (missing, a folder, a FIFO, a file that is not
what it should be, a path under /proc) or an input too big to make: a clear message naming
the path, a non-zero exit and no traceback (issue 25, item 11)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ember.analysis import ingest
from ember.cli.main import app
from tests.analysis.traces import checked_in, symbolic_matmul
from tests.cli.test_analysis_commands import CANDLE_TRACE

DATA = Path(__file__).parent.parent / "data"
TRACE = str(DATA / "sweep.jsonl")
KINDS = ("missing", "folder", "fifo", "not-ember", "proc")


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A good database and model, and one bad path of each kind."""
    root = tmp_path_factory.mktemp("bad")
    db = root / "good.duckdb"
    run_id = ingest([DATA / "sweep.jsonl"], db).files[0].run_id
    os.mkfifo(root / "fifo")
    (root / "folder").mkdir()
    (root / "not-ember").write_bytes(b"\x00\x01 this is not a database, a trace or a model\n")
    return {
        "db": str(db),
        "run": run_id,
        "candle": str(checked_in(CANDLE_TRACE, root)),
        "model": str(symbolic_matmul(root / "model.onnx")),
        "out": str(root / "out"),
        "missing": str(root / "missing"),
        "folder": str(root / "folder"),
        "fifo": str(root / "fifo"),
        "not-ember": str(root / "not-ember"),
        "proc": "/proc/x/ember",
    }


# (command with BAD where the bad path goes, the kinds of path it is given)
READERS = [
    ("ingest BAD --db OUT.duckdb", KINDS),
    ("ingest TRACE --db BAD", ("folder", "fifo", "not-ember", "proc")),
    ("query --db BAD select 1", KINDS),
    ("report --db BAD", KINDS),
    ("trends --db BAD", KINDS),
    ("export --db BAD --parquet OUT", KINDS),
    ("compare BAD TRACE", KINDS),
    ("compare TRACE TRACE --config BAD", KINDS),
    ("compare --db BAD a b", KINDS),
    ("validate BAD", KINDS),
    ("import candle BAD --out OUT.jsonl", KINDS),
    ("run BAD --calls 1", KINDS),
    ("dashboard --db BAD", KINDS),
]
WRITERS = [
    ("export --db DB --parquet BAD", ("not-ember", "proc")),
    ("export --db DB --chrome BAD --run RUN", ("folder", "proc")),
    ("query --db DB -o BAD select 1", ("folder", "proc")),
    ("compare TRACE TRACE --junit BAD", ("folder", "proc")),
    ("import candle CANDLE --out BAD", ("folder", "proc")),
    ("run MODEL --calls 1 --record BAD", ("folder", "proc")),
]
CASES = [(cmd, kind) for cmd, kinds in READERS + WRITERS for kind in kinds]


class Hung(Exception):
    pass


def invoke(args: list[str], seconds: int = 120):
    """``ember ARGS`` in this process; a command blocked (on a FIFO) is interrupted."""

    def hung(*_):
        raise Hung(f"ember {' '.join(args)} still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        return CliRunner().invoke(app, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def assert_clear_error(result, bad: str) -> None:
    text = result.output + (result.stderr or "")
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{text}"
    )
    assert result.exit_code not in (0, None), text
    assert "Traceback" not in text
    named = (bad, Path(bad).name, str(Path(bad).parent))  # /proc/x: the folder it lacks
    assert any(n in " ".join(text.split()) for n in named), text


@pytest.mark.parametrize(("command", "kind"), CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_a_bad_path_is_a_clear_error(place, command, kind, monkeypatch):
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail(f"started a server: {a}"))
    bad = place[kind]
    words = {"BAD": bad, "TRACE": TRACE, **{k.upper(): v for k, v in place.items()}}
    args = [words.get(w, w.replace("OUT", place["out"] + "-" + kind)) for w in command.split()]
    if args[0] == "query":
        args = [*args[:-2], "select 1"]
    assert_clear_error(invoke(args), bad)


def test_an_input_too_big_to_make_is_a_clear_error(place):
    result = invoke(["run", place["model"], "--input", "x=99999999999x8", "--calls", "1"])
    assert_clear_error(result, "x=99999999999x8")


def test_an_error_keeps_a_long_path_whole_on_one_line(tmp_path):
    # rich wrapped the message at the terminal's width, inside the path ('lake.tx' / 't'),
    # so the path a user copies from the error was not the file's
    deep = tmp_path / ("a-folder-name-long-enough-to-wrap-" * 3)
    deep.mkdir()
    missing = deep / "no-such-trace.jsonl"
    result = CliRunner().invoke(
        app, ["ingest", str(missing), "--db", str(tmp_path / "x.duckdb")], env={"COLUMNS": "60"}
    )
    assert result.exit_code != 0
    assert str(missing) in result.output.splitlines()[0], result.output
