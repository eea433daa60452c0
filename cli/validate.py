"""``ember validate FILE...``: check trace files against the schema."""

from __future__ import annotations

from pathlib import Path

import typer

from ember.schemas import validate_file

from .app import app, console, err_console, fail


@app.command()
def validate(
    files: list[Path] = typer.Argument(..., help="Trace files (JSONL) to check."),
) -> None:
    """Check every line of each trace; print `ok` with counts, or `file:line: error`."""
    bad = 0
    for path in files:
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
