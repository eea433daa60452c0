"""TORCH_TRACE folders (one log a rank) through `ember import torch-trace` and `ember ingest`:
a refused log does not stop the others, the database is opened once for the folder, and
logs on read-only storage are ingested without writing beside them."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ember.analysis.ingest import database
from ember.cli import analysis as cli_analysis
from ember.cli.main import app
from tests.analysis.databases import query_rows

DATA = Path(__file__).parents[1] / "data" / "torch"
runner = CliRunner()
BAD = 'V1202 01:18:58.386000 384 x.py:1] {"frame_id": Infinity}\n'


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the converted traces go to, this test's own."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _job(tmp_path: Path, broken: bool = True) -> Path:
    """A TORCH_TRACE folder: two ranks, a copy of rank 0 (the same run), and (``broken``) a
    torch-looking log with no entry Ember can read."""
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(DATA / f"rank_{rank}.log", folder / f"rank_{rank}.log")
    shutil.copy(DATA / "rank_0.log", folder / "rank_0_copy.log")
    if broken:
        (folder / "broken.log").write_text(BAD)
    return folder


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every opening of the database by ingest, counted (the real ``connect`` opens it)."""
    opened: list[Path] = []
    for module in (database, cli_analysis):
        real = module.connect

        def counting(db, *args, _real=real, **kwargs):
            opened.append(Path(db))
            return _real(db, *args, **kwargs)

        monkeypatch.setattr(module, "connect", counting)
    return opened


def test_import_of_a_folder_goes_on_past_a_refused_copy_and_opens_the_database_once(
    tmp_path, monkeypatch
):
    # before: the copy's refusal (rank_0_copy.log sorts before rank_1.log) stopped the
    # import, rank 1 left out; and the database was opened once a log
    folder = _job(tmp_path, broken=False)
    db = tmp_path / "j.duckdb"
    opened = _count_opens(monkeypatch)
    r = runner.invoke(app, ["import", "torch-trace", str(folder), "--db", str(db)])
    assert r.exit_code == 1, r.output
    out = _flat(r.output)
    assert "rank_0_copy.log.ember.jsonl: refused: run torch-" in out
    assert "3 file(s), 6 records, 0 rejected, 1 refused" in out
    assert opened == [db]
    ranks = query_rows(db, "SELECT tags->>'rank' FROM runs ORDER BY 1")
    assert ranks == [("0",), ("1",)]


def test_import_of_a_folder_goes_on_past_a_log_that_cannot_be_converted(tmp_path):
    # before: TorchImportError for the broken log ended the import (`error: ...`)
    folder = _job(tmp_path)
    os.remove(folder / "rank_0_copy.log")
    db = tmp_path / "k.duckdb"
    r = runner.invoke(app, ["import", "torch-trace", str(folder), "--db", str(db)])
    assert r.exit_code == 1, r.output
    out = _flat(r.output)
    assert f"refused: {folder / 'broken.log'}: no TORCH_TRACE entry could be read" in out
    assert f"{folder / 'broken.log'}:1: a field holds what torch does not write" in out
    assert "2 file(s), 6 records, 0 rejected, 0 refused" in out
    assert query_rows(db, "SELECT count(*) FROM runs") == [(2,)]


def test_ingest_of_a_folder_goes_on_past_a_log_that_cannot_be_converted(tmp_path):
    folder = _job(tmp_path)
    os.remove(folder / "rank_0_copy.log")
    db = tmp_path / "i.duckdb"
    r = runner.invoke(app, ["ingest", str(folder), "--db", str(db)])
    assert r.exit_code == 1, r.output  # the broken log is said, and the exit says it
    out = _flat(r.output)
    assert f"refused: {folder / 'broken.log'}: no TORCH_TRACE entry could be read" in out
    assert "2 file(s), 6 records, 0 rejected, 0 refused" in out
    assert query_rows(db, "SELECT count(*) FROM runs") == [(2,)]


def _read_only(folder: Path) -> list[str]:
    for f in folder.iterdir():
        f.chmod(0o444)
    folder.chmod(0o555)
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("command", ["ingest", "import"])
def test_logs_on_read_only_storage_are_ingested_and_nothing_is_written_beside_them(
    tmp_path, private_tmp, command
):
    # before: `<log>.ember.jsonl` was written beside each log (a PermissionError on
    # read-only storage; root, who may write anyway, still finds the folder changed)
    folder = tmp_path / "ro"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(DATA / f"rank_{rank}.log", folder / f"rank_{rank}.log")
    listing = _read_only(folder)
    db = tmp_path / "ro.duckdb"
    args = (
        ["ingest", str(folder)] if command == "ingest" else ["import", "torch-trace", str(folder)]
    )
    try:
        r = runner.invoke(app, [*args, "--db", str(db)])
        again = runner.invoke(app, [*args, "--db", str(db)])
        assert sorted(p.name for p in folder.iterdir()) == listing
    finally:
        folder.chmod(0o755)
    assert r.exit_code == 0, r.output
    assert "2 file(s), 6 records, 0 rejected, 0 refused" in _flat(r.output)
    assert query_rows(db, "SELECT count(*) FROM runs") == [(2,)]
    assert again.exit_code == 0, again.output  # the same log again is the same trace
    assert _flat(again.output).count("unchanged (already ingested)") == 2
    (work,) = private_tmp.iterdir()
    assert stat.S_IMODE(work.stat().st_mode) == 0o700  # this user's only


def test_a_trace_an_older_ember_wrote_beside_the_log_is_ingested_from_there(tmp_path):
    # `ember import torch-trace` without --db still writes the trace beside the log: a
    # later `ember ingest` of the folder takes that trace, not a second copy of the run
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(DATA / "rank_0.log", folder / "rank_0.log")
    r = runner.invoke(app, ["import", "torch-trace", str(folder)])
    assert r.exit_code == 0, r.output
    beside = folder / "rank_0.log.ember.jsonl"
    assert beside.exists()
    db = tmp_path / "b.duckdb"
    r = runner.invoke(app, ["ingest", str(folder), "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "converted" not in r.output
    assert query_rows(db, "SELECT file FROM runs") == [(str(beside.resolve()),)]


def test_a_shared_temporary_folder_that_is_not_private_is_refused(tmp_path, private_tmp):
    uid = os.getuid()
    work = private_tmp / f"ember-torch-trace-{uid}"
    work.mkdir(mode=0o777)
    work.chmod(0o777)  # others may write: another user could plant traces there
    shutil.copy(DATA / "rank_0.log", tmp_path / "rank_0.log")
    r = runner.invoke(app, ["ingest", str(tmp_path / "rank_0.log"), "--db", str(tmp_path / "d")])
    assert r.exit_code == 1
    assert "is not a private folder of this user" in _flat(r.output)
