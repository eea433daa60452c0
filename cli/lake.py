"""``ember lake optimize|vacuum|check|upgrade``: looking after a Delta trace lake."""

from __future__ import annotations

from pathlib import Path

import typer

from ember.analysis.lake import check, optimize, upgrade, vacuum

from .app import app, console, fail

lake_app = typer.Typer(
    name="lake", help="Look after a trace lake (`ember ingest --lake`).", no_args_is_help=True
)
app.add_typer(lake_app, name="lake")

LAKE = typer.Argument(..., help="The lake folder.")


@lake_app.command("optimize")
def optimize_command(lake: Path = LAKE) -> None:
    """Compact the small files of every table and checkpoint its log (safe during ingests)."""
    done = optimize(lake)
    for table, m in done.items():
        if m["removed"]:
            console.print(f"{table}: {m['removed']} file(s) -> {m['added']}", highlight=False)
    total = sum(m["removed"] for m in done.values())
    console.print(f"compacted {total} file(s) in {lake}", highlight=False)


@lake_app.command("vacuum")
def vacuum_command(
    lake: Path = LAKE,
    retain: float = typer.Option(
        168.0, "--retain", min=0.0, help="Hours of snapshots whose files stay (default a week)."
    ),
) -> None:
    """Delete the files no snapshot of the last RETAIN hours needs."""
    done = vacuum(lake, retain)
    console.print(f"removed {sum(done.values())} file(s) from {lake}", highlight=False)


@lake_app.command("check")
def check_command(
    lake: Path = LAKE,
    repair: bool = typer.Option(
        False, "--repair", help="Drop damaged files (their traces are read again) and orphan rows."
    ),
    grace: float = typer.Option(
        3600.0, "--grace", help="Seconds an orphan row is left alone (its commit may be coming)."
    ),
) -> None:
    """Check that every table's log and files can be read; count rows of no committed ingest."""
    report = check(lake, repair=repair, grace_s=grace)
    for line in report.damaged_logs:
        console.print(f"damaged log: {line}", highlight=False, soft_wrap=True)
    for line in report.damaged_files:
        console.print(f"damaged file: {line}", highlight=False, soft_wrap=True)
    for table, n in report.orphan_rows.items():
        console.print(f"{table}: {n} row(s) of no committed ingest (not read)", highlight=False)
    for line in report.repaired:
        console.print(f"repaired: {line}", highlight=False, soft_wrap=True)
    if report.ok or (repair and not report.damaged_logs):
        console.print(f"{lake}: ok" if report.ok else f"{lake}: repaired", highlight=False)
        return
    raise fail(f"{lake}: damaged; `ember lake check --repair {lake}` drops what cannot be read")


@lake_app.command("upgrade")
def upgrade_command(
    old: Path = typer.Argument(..., help="A lake of the old format (Parquet + _manifest/)."),
    new: Path = typer.Argument(..., help="The Delta lake to write (made if missing)."),
) -> None:
    """Copy an old-format lake into a Delta lake (the old one is only read)."""
    n = upgrade(old, new)
    console.print(f"copied {n} trace file(s) from {old} into {new}", highlight=False)
