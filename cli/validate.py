"""``ember validate FILE...``: check trace files against the schema."""

from __future__ import annotations

from pathlib import Path

import typer

from ember.schemas import validate_file

from .app import app, console, err_console, fail


@app.command()
def validate(
    files: list[Path] = typer.Argument(
        ..., help="Trace files (JSONL) to check, or folders (every *.jsonl inside)."
    ),
) -> None:
    """Check every line of each trace; print `ok` with counts, or `file:line: error`."""
    bad = 0
    for path in _traces(files):
        if not path.is_file():
            raise fail(f"{path}: no such file; give the path of a trace (.jsonl)")
        report = validate_file(path)
        if report.ok:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(report.counts.items()))
            console.print(f"{path}: ok, {report.records} records ({counts})", highlight=False)
        else:
            bad += 1
            for error in report.errors:
                err_console.print(str(error), highlight=False, markup=False)
            err_console.print(
                f"{path}: {len(report.errors)} invalid, {report.records} valid", highlight=False
            )
    if bad:
        raise typer.Exit(1)


def _traces(paths: list[Path]) -> list[Path]:
    """The files as given, a folder as its ``*.jsonl`` files (recursively), as ``ember
    ingest`` reads them; a folder without any is an error that says so."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
            if not found:
                raise fail(f"{path}: a folder without .jsonl files; give trace files or a folder")
            out += found
        else:
            out.append(path)
    return out
