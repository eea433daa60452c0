"""``ember ingest``, ``ember query``, ``ember report``, ``ember export``, ``ember import``."""

from __future__ import annotations

import enum
import re
import time
from datetime import datetime
from pathlib import Path

import duckdb
import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ember.analysis import DatabaseBusyError, connect, expand_paths
from ember.analysis import format as fmt
from ember.analysis.candle import CandleImportError, import_candle
from ember.analysis.db import DEFAULT_DB, INGEST_WAIT_S, QUERY_WAIT_S, DatabasePathError
from ember.analysis.export import export_chrome, export_parquet
from ember.analysis.format import plural, short_path, wrap
from ember.analysis.ingest import FileResult, IngestInterrupted, IngestSummary, ingest, ingest_file
from ember.analysis.lake import connect_lake, ingest_lake
from ember.analysis.report import RunReport, RunSummary, rejected_summary
from ember.analysis.report import report as run_report
from ember.analysis.torch_trace import (
    TorchImportError,
    TorchImportResult,
    convert_for_ingest,
    find_logs,
    import_torch_trace,
    work_trace,
)
from ember.analysis.trends import ChangePoint, describe
from ember.analysis.trends import changes_since as trend_changes

from . import tables
from .app import app, console, err_console, fail, write_out

DB_OPTION = typer.Option(
    DEFAULT_DB, "--db", help="The DuckDB database file, or a lake folder (`ember ingest --lake`)."
)


class Engine(enum.StrEnum):
    duckdb = "duckdb"
    spark = "spark"


def open_database(db: Path, read_only: bool, wait: float | None = None):
    try:
        if db.is_dir() or re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:/", str(db)):  # a lake
            return connect_lake(db)
        return connect(db, read_only=read_only, wait=wait)
    except DatabaseBusyError as exc:
        raise fail(str(exc)) from None
    except (FileNotFoundError, DatabasePathError) as exc:
        raise fail(str(exc)) from None
    except duckdb.IOException as exc:
        if "not a valid DuckDB database file" not in str(exc):
            raise
        raise fail(
            f"{db} is not an Ember database (DuckDB cannot read it); give the file "
            "`ember ingest --db` wrote, or a lake folder"
        ) from None


@app.command("ingest")
def ingest_command(
    paths: list[str] = typer.Argument(..., help="Trace files, folders (*.jsonl inside) or globs."),
    db: Path = DB_OPTION,
    wait: float = typer.Option(
        INGEST_WAIT_S,
        "--wait",
        min=0,
        help="Seconds to wait while other processes read or write the database.",
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Check every line with pydantic too (slower): also rejects unknown fields.",
    ),
    lake: Path | None = typer.Option(
        None,
        "--lake",
        help="Write a Delta Lake trace lake in this folder instead of the DuckDB file "
        "(many ingesters may write one lake at once).",
    ),
    engine: Engine = typer.Option(
        Engine.duckdb, "--engine", help="Who reads the traces into the lake (with --lake)."
    ),
    master: str = typer.Option(
        "local[2]", "--master", help="The Spark master (with --engine spark): local[N], spark://..."
    ),
) -> None:
    """Read traces into the database: validated, each file once (a grown file continues).

    A torch.compile TORCH_TRACE log (or a folder of them) is converted first
    (`ember import torch-trace`), into a temporary folder: the log's folder is not written.

    A log that cannot be converted is said and the rest go on (exit 1 at the end).
    """
    files, refused_logs = _trace_files(paths)
    if engine is Engine.spark and lake is None:
        raise fail("--engine spark writes a lake: give --lake DIR")
    if lake is not None:
        _ingest_lake(files, lake, engine, master, strict)
    else:
        _ingest_database(files, db, wait, strict)
    if refused_logs:
        raise typer.Exit(1)


def _trace_files(paths: list[str]) -> tuple[list[Path], int]:
    """The trace files to ingest, TORCH_TRACE logs converted, and how many logs could not
    be; a clear error when there is no file."""
    try:
        converted, refused = _convert_torch_logs(paths)
        files = expand_paths(converted)
    except FileNotFoundError as exc:
        raise fail(f"{exc}; give trace files (.jsonl), folders or globs") from None
    if not files:
        raise fail(f"no trace files (*.jsonl) in {', '.join(paths)}; give trace files or folders")
    return files, refused


def _ingest_database(files: list[Path], db: Path, wait: float, strict: bool) -> None:
    """Ingest into the DuckDB file with a progress bar (for big ingests only); each file's
    result and the totals printed."""
    sizes = {p: p.stat().st_size for p in files}
    total = sum(sizes.values())
    progress = Progress(
        TextColumn("[bold]ingest[/]"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[file]}", markup=False),  # a file's name is text
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=total < (64 << 20) and len(files) < 50,
    )
    with progress:
        task = progress.add_task("ingest", total=total, file="")

        def done(result: FileResult) -> None:
            _print_file(result)
            path = Path(result.path)
            progress.update(task, advance=sizes.get(path, 0), file=path.name)

        # in batches: many small files go in together (one transaction a batch)
        try:
            summary = ingest(files, db, wait=wait, strict=strict, on_file=done)
        except DatabaseBusyError as exc:
            raise fail(str(exc)) from None
        except IngestInterrupted as exc:
            progress.stop()
            _print_interrupted(exc, db)
            raise typer.Exit(130) from None
    _print_totals(len(files), summary, str(db))


def _print_interrupted(exc: IngestInterrupted, db: Path) -> None:
    """What an interrupted ingest committed, and that running it again does the rest."""
    part = (
        f", and the first {exc.piece.bytes_read:,} bytes of {exc.piece.path}"
        if exc.piece is not None
        else ""
    )
    err_console.print(
        f"interrupted: {len(exc.summary.files)} of {exc.total} file(s) committed "
        f"({exc.summary.records:,} records){part} to {db}; the batch being read was "
        "rolled back; run the same command again to ingest the rest",
        highlight=False,
        markup=False,
    )


def _convert_torch_logs(paths: list[str]) -> tuple[list[str], int]:
    """``paths`` with their TORCH_TRACE logs converted, and how many logs could not be."""
    done = convert_for_ingest(paths)
    for result in done.results:
        for line in result.rejected:
            err_console.print(f"rejected: {line}", highlight=False, soft_wrap=True, markup=False)
        _say(
            f"{result.path}: converted from TORCH_TRACE ({result.compiles} compiles, "
            f"{len(result.rejected)} rejected lines)"
        )
    for why in done.refused:  # whole on one line: a path in it stays whole, to copy
        err_console.print(f"refused: {why}", highlight=False, soft_wrap=True, markup=False)
    return done.paths, len(done.refused)


def _ingest_lake(files: list[Path], lake: Path, engine: Engine, master: str, strict: bool) -> None:
    t0 = time.perf_counter()
    if engine is Engine.spark:
        try:
            from ember.analysis.lake import ingest_spark
        except ImportError as exc:
            raise fail(
                f"--engine spark needs PySpark ({exc}): pip install pyspark (and Java 17+: "
                "apt-get install -y openjdk-17-jre-headless)"
            ) from None
        summary = ingest_spark(files, lake, master=master, on_file=_print_file)
    else:
        summary = ingest_lake(files, lake, on_file=_print_file, strict=strict)
    summary.seconds = time.perf_counter() - t0
    _print_totals(len(files), summary, f"{lake} ({engine.value})")


def _print_totals(files: int, summary: IngestSummary, target: str) -> None:
    """The last line of an ingest; exit 1 when a file was refused."""
    refused = len(summary.refused)
    _say(
        f"{files} file(s), {summary.records:,} records, {summary.rejected:,} rejected, "
        f"{refused} refused, {fmt.duration(summary.seconds * 1e9)}, "
        f"{summary.records_per_second:,.0f} records/s -> {target}"
    )
    if refused:
        raise typer.Exit(1)


def _print_file(r: FileResult) -> None:
    if r.status == "refused":
        _say(f"{r.path}: refused: {r.message}", err=True)
    elif r.status == "unchanged":
        _say(f"{r.path}: unchanged (already ingested)")
    elif r.status == "busy":
        _say(f"{r.path}: skipped: {r.message}")
    else:
        how = " (continued)" if r.continued else " (replaced)" if r.replaced else ""
        line = f"{r.path}: {r.records:,} records, {r.rejected} rejected{how}"
        if r.message:
            line += f": {r.message}"
        _say(line)


def _say(text: str, err: bool = False) -> None:
    """A line of plain text, wrapped by ``_wrap`` (rich wrapped "0 rejected" as "0" at the
    end of one line and "rejected" on the next, after a long path)."""
    out = err_console if err else console
    for line in _wrap(text, "", "  "):
        out.print(line, highlight=False, markup=False, soft_wrap=True)


class Format(enum.StrEnum):
    table = "table"
    line = "line"
    markdown = "markdown"
    csv = "csv"
    json = "json"
    parquet = "parquet"


@app.command()
def query(
    sql: str = typer.Argument(..., help="One SQL query over the tables and views."),
    db: Path = DB_OPTION,
    format: Format = typer.Option(Format.table, "--format", "-f", help="Output format."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    max_rows: int = typer.Option(
        100,
        "--max-rows",
        min=1,
        help="Rows a table or line output shows (markdown, csv, json, parquet write them all).",
    ),
    wait: float = typer.Option(
        QUERY_WAIT_S,
        "--wait",
        min=0,
        help="Seconds to wait while an ingest writes the database.",
    ),
) -> None:
    """Run SQL on the database (read-only) and print the result."""
    if format is Format.parquet and output is None:
        raise fail("--format parquet writes a file: give --output FILE.parquet")
    with open_database(db, read_only=True, wait=wait) as con:
        try:
            # polars writes no BLOB (BinaryView) or MAP as CSV or JSON: DuckDB's text of them
            as_text = ("blob", "map") if format in (Format.csv, Format.json) else ()
            df = con.sql(sql, as_text=as_text)
        except duckdb.Error as exc:
            raise fail(f"{exc}\nThe tables and views: " + ", ".join(con.tables())) from None
    more = f", showing {max_rows} (see --max-rows, --format)" if df.height > max_rows else ""
    if format is Format.table:
        if output is not None:
            output.write_text(str(df))
        else:
            fitted = tables.fit_table(df.head(max_rows), console.width)
            console.print(fitted.table)
            console.print(f"{df.height} row(s){more}", style="dim", highlight=False)
            if fitted.note():
                console.print(fitted.note(), style="dim", highlight=False)
        return
    if format is Format.line:
        text = tables.line_text(df.head(max_rows))
        if output is not None:
            output.write_text(text)
        else:
            write_out(text)
            console.print(f"{df.height} row(s){more}", style="dim", highlight=False)
        return
    if format is Format.parquet:
        df.write_parquet(output)
        return
    if format is Format.csv:
        from ember.analysis.export import csv_text

        text = csv_text(df)
    elif format is Format.markdown:
        text = tables.markdown_text(df)
    else:
        text = df.write_json()
    if output is not None:
        output.write_text(text)
    else:
        write_out(text if text.endswith("\n") else text + "\n")


@app.command()
def report(
    db: Path = DB_OPTION,
    run: str | None = typer.Option(
        None, "--run", help="Only this run: its id or a unique start of it (8 characters)."
    ),
    limit: int = typer.Option(10, "--limit", min=1, help="Findings per run."),
    since: str | None = typer.Option(
        None,
        "--since",
        help="Only runs started since this date (2026-11-01), and the change points of the "
        "trends (`ember trends`) in that range.",
    ),
) -> None:
    """Per run: a headline of numbers, then the findings as sentences, most costly first."""
    start = since_time(since)
    with open_database(db, read_only=True) as con:
        try:
            runs = run_report(con, run, limit=limit, since=start)
        except (LookupError, ValueError) as exc:
            raise fail(f"{db}: {exc}") from None
        rejected = rejected_summary(con, runs[0].run.run_id if run is not None else None)
        changes = trend_changes(con.sql, since=start) if start is not None else None
    if not runs:
        console.print(f"no runs in {db}: ingest traces with `ember ingest`", highlight=False)
    for r in runs:
        _print_run(r)
    if changes is not None and start is not None:
        _print_changes(changes, start)
    for f in rejected:
        text = (
            f"ingest rejected {f['lines']} line(s) of {short_path(f['file'], 40)}: "
            f"first at line {f['first_line']}: {f['first_reason']}"
        )
        for i, line in enumerate(_wrap(text, "", "  ")):
            styled = Text(line)
            if i == 0:
                styled.stylize("yellow", 0, len("ingest rejected"))
            console.print(styled, soft_wrap=True)


def since_time(text: str | None) -> datetime | None:
    """``--since``'s value as a time (``2026-11-01``, ``2026-11-01T12:00``); bad text is an
    error that says what to write."""
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise fail(
            f"--since {text!r}: write a date (2026-11-01) or a time (2026-11-01T12:00)", 2
        ) from None


def _print_changes(changes: list[ChangePoint], since: datetime) -> None:
    """The change points of the trends since ``since``, one bullet each (``ember report``)."""
    head = f"Change points since {since:%Y-%m-%d %H:%M} (`ember trends` shows each history):"
    if not changes:
        head = f"No change points since {since:%Y-%m-%d %H:%M} (`ember trends`)."
    for line in _wrap(head, "", ""):
        console.print(Text(line, style="bold"), soft_wrap=True)
    for c in changes:
        for line in _wrap(f"{c.series}: {describe(c)}", "  • ", "    "):
            console.print(Text(line), soft_wrap=True)


def _headline(s: RunSummary) -> str:
    """The run's numbers in one line (rich wraps it at the console's width)."""
    parts = []
    if s.calls:
        parts.append(
            plural(s.calls, "call") + (f" ({s.failed_calls} failed)" if s.failed_calls else "")
        )
    if s.steps:
        labels = ", ".join(f"{name} {n}" for name, n in s.step_labels[:4])
        more = " ..." if len(s.step_labels) > 4 else ""
        parts.append(plural(s.steps, "step") + (f" ({labels}{more})" if labels else ""))
    detail = [fmt.duration(s.compile_ns)] if s.compiles else []
    if s.recompiles:
        detail.append(plural(s.recompiles, "recompile"))
    parts.append(plural(s.compiles, "compile") + (f" ({', '.join(detail)})" if detail else ""))
    if s.loads:  # a program read from a persistent cache is a load, not a compile
        parts.append(f"{plural(s.loads, 'load')} ({fmt.duration(s.load_ns)})")
    if s.eager_compiles:
        parts.append(plural(s.eager_compiles, "eager segment"))
    if s.jax_compiles:
        parts.append(f"{plural(s.jax_compiles, 'jax compile')} ({fmt.duration(s.jax_compile_ns)})")
    if s.jax_loads:
        parts.append(plural(s.jax_loads, "jax load"))
    if s.hits or s.misses or s.evictions:
        parts.append(f"cache {s.hits} hits/{s.misses} misses/{s.evictions} evictions")
    if s.disk_hits or s.disk_misses:
        parts.append(f"disk cache {s.disk_hits} hits/{s.disk_misses} misses")
    if s.peak_bytes is not None:
        parts.append(f"peak {fmt.size(s.peak_bytes)} {s.peak_source}")
    if s.p50_ns is not None:
        # a run's step latency is its main step's (latency_step): named, not a mix of two
        what = "call" if s.calls else f"{s.latency_step} step" if s.latency_step else "step"
        kind = " (dispatch only)" if s.latency_kind == "dispatch only" else ""
        text = fmt.latency(
            what,
            s.latency_spans,
            s.p50_ns,
            s.p99_ns,
            s.compiling_calls,
            s.warm_p50_ns,
            s.warm_p99_ns,
            s.warm_calls,
            s.loaded_calls,
        )
        parts.append(f"{what} {text}{kind}")
    return " · ".join(parts)


def _wrap(text: str, first: str, rest: str, width: int | None = None) -> list[str]:
    # wrapped here, not by rich: no trailing blanks, a hanging indent, never wider than
    # the console, a number never apart from its unit
    return wrap(text, max(console.width if width is None else width, 20), first, rest)


def report_lines(r: RunReport, width: int) -> list[Text]:
    """One run of ``ember report`` as the lines it prints at ``width`` columns: the name
    and id, the headline, each finding (a bullet, then a hanging indent), a blank line."""
    s = r.run
    out = []
    head = "  ".join(x for x in (s.name, s.short_id, s.phase, s.backend) if x)
    for i, line in enumerate(_wrap(head, "", "  ", width)):
        text = Text(line)
        if i == 0:
            text.stylize("bold", 0, len(s.name))
        out.append(text)
    out += [Text(line) for line in _wrap(_headline(s), "  ", "  ", width)]
    if not r.findings:
        out.append(Text("  nothing to report", style="dim"))
    for f in r.findings:
        for i, line in enumerate(_wrap(f.text, "  • ", "    ", width)):
            text = Text(line)
            if i == 0:
                text.stylize(_STYLE.get(f.kind, ""), 2, 3)
            out.append(text)
    out.append(Text(""))
    return out


def _print_run(r: RunReport) -> None:
    for line in report_lines(r, console.width):
        console.print(line, soft_wrap=True)


_STYLE = {
    "errors": "red",
    "thrash": "red",
    "recompile": "yellow",
    "jit_retrace": "yellow",
    "rank_divergence": "yellow",
}


@app.command("export")
def export_command(
    db: Path = DB_OPTION,
    chrome: Path | None = typer.Option(None, "--chrome", help="Write a Chrome/Perfetto trace."),
    run: str | None = typer.Option(
        None,
        "--run",
        help="The run to export (with --chrome): its id or a unique start of it (8 characters).",
    ),
    parquet: Path | None = typer.Option(
        None, "--parquet", help="Write tables and views as Parquet (hive partitions) here."
    ),
) -> None:
    """Export a run as Chrome trace JSON (ui.perfetto.dev), or everything as Parquet."""
    if chrome is None and parquet is None:
        raise fail("give --chrome FILE --run ID, or --parquet DIR")
    with open_database(db, read_only=True) as con:
        if chrome is not None:
            if run is None:
                raise fail("--chrome needs --run ID (one run per trace file)")
            try:
                n = export_chrome(con, run, chrome)
            except (LookupError, ValueError) as exc:
                raise fail(f"{db}: {exc}") from None
            console.print(
                f"{chrome}: {n} events; open it in https://ui.perfetto.dev", highlight=False
            )
        if parquet is not None:
            written = export_parquet(con, parquet)
            console.print(
                f"{parquet}: {len(written)} datasets, {sum(written.values()):,} rows "
                f"(partitioned by run_date, run_id)",
                highlight=False,
            )


import_app = typer.Typer(
    help="Convert other trace formats into Ember traces.", no_args_is_help=True
)
app.add_typer(import_app, name="import")


@import_app.command("candle")
def import_candle_command(
    file: Path = typer.Argument(..., help="A candle-graph trace/6 JSONL file."),
    out: Path | None = typer.Option(
        None, "--out", help="The Ember trace to write (default: FILE's name + .ember.jsonl)."
    ),
    db: Path | None = typer.Option(
        None, "--db", help="Also ingest the Ember trace into this database (one step)."
    ),
) -> None:
    """Convert a candle-graph trace/6 file into an Ember trace; with --db, ingest it too."""
    if not file.is_file():
        raise fail(f"{file}: no such file")
    try:
        result = import_candle(file, out)
    except CandleImportError as exc:
        raise fail(str(exc)) from None
    counts = ", ".join(f"{n} {k}" for k, n in sorted(result.counts.items()))
    for error in result.errors:
        err_console.print(error, highlight=False, markup=False, soft_wrap=True)
    left_out = f", {len(result.errors)} line(s) left out" if result.errors else ""
    console.print(
        f"{result.path}: {result.records} records ({counts}){left_out}, run {result.run_id}",
        highlight=False,
        soft_wrap=True,  # the path whole on one line, to copy
    )
    if db is not None:
        try:
            with connect(db, wait=10.0) as con:
                ingested = ingest_file(con, Path(result.path))
        except DatabaseBusyError as exc:
            raise fail(str(exc)) from None
        _print_file(ingested)
        if ingested.status == "refused":
            raise typer.Exit(1)
        console.print(
            f"-> {db}; see `ember report --db {db} --run {result.run_id[:8]}`",
            highlight=False,
            soft_wrap=True,
        )
    if result.errors:  # the rest is imported; the exit status says it is not all
        raise typer.Exit(1)


@import_app.command("torch-trace")
def import_torch_trace_command(
    paths: list[Path] = typer.Argument(
        ..., help="TORCH_TRACE logs, or folders of them (TORCH_TRACE=DIR: one log a rank)."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="The Ember trace to write, for one log (default: LOG's name + .ember.jsonl).",
    ),
    db: Path | None = typer.Option(
        None, "--db", help="Also ingest the Ember traces into this database (one step)."
    ),
    lake: Path | None = typer.Option(
        None, "--lake", help="Also ingest the Ember traces into this trace lake (a folder)."
    ),
) -> None:
    """Convert torch.compile TORCH_TRACE logs into Ember traces; with --db or --lake, ingest
    them too.

    A bad line or a payload whose md5 differs is rejected (file:line: why) and the rest
    kept; a log that cannot be converted is refused and the other logs go on. With --db or
    --lake (and no --out) the traces are written into a temporary folder, not beside the
    logs (read-only storage); the database is opened once for all of them. Exits 1 when
    any line was rejected or any log or trace refused.
    """
    logs = [log for p in paths for log in find_logs(p)]
    missing = [str(p) for p in paths if not p.exists()]
    if missing or not logs:
        raise fail(f"{', '.join(missing) or paths[0]}: no such file, or no *.log in the folder")
    if out is not None and len(logs) > 1:
        raise fail(f"--out names one file, and {len(logs)} logs were given; leave it out")
    rejected = refused = 0
    traces: list[Path] = []
    for log in logs:
        try:
            result = _import_log(log, out, elsewhere=db is not None or lake is not None)
        except (TorchImportError, OSError) as exc:
            refused += 1
            err_console.print(f"refused: {exc}", highlight=False, soft_wrap=True, markup=False)
            continue
        for line in result.rejected:
            err_console.print(f"rejected: {line}", highlight=False, soft_wrap=True, markup=False)
        rejected += len(result.rejected)
        console.print(
            f"{result.path}: {result.compiles} compiles, {result.records} records, "
            f"{len(result.rejected)} rejected, run {result.run_id}",
            highlight=False,
            soft_wrap=True,
        )
        traces.append(Path(result.path))
    if db is not None and traces:
        try:  # all at once: ingest opens the database once a batch of files, not a log
            summary = ingest(traces, db, wait=10.0, on_file=_print_file)
        except DatabaseBusyError as exc:
            raise fail(str(exc)) from None
        except IngestInterrupted as exc:
            _print_interrupted(exc, db)
            raise typer.Exit(130) from None
        _print_totals(len(traces), summary, str(db))
    if lake is not None and traces:
        summary = ingest_lake(traces, lake, on_file=_print_file)
        if summary.refused:
            raise typer.Exit(1)
    if rejected or refused:
        raise typer.Exit(1)


def _import_log(log: Path, out: Path | None, elsewhere: bool) -> TorchImportResult:
    """``log`` converted: into ``out``, the temporary folder (``elsewhere``: it is then
    ingested) or beside the log."""
    if out is None and elsewhere:
        out = work_trace(log)
    try:
        return import_torch_trace(log, out)
    except OSError as exc:
        if exc.filename is not None and Path(exc.filename) != log and out is None:
            raise OSError(
                f"{log}: cannot write its Ember trace {exc.filename} ({exc.strerror}); give "
                "--out FILE, or --db/--lake to ingest it without writing beside the log"
            ) from None
        raise


class Dialect(enum.StrEnum):
    duckdb = "duckdb"
    spark = "spark"


@app.command()
def views(
    dialect: Dialect = typer.Option(Dialect.duckdb, "--dialect", help="SQL dialect to print."),
) -> None:
    """Print the SQL views (DuckDB as written, or translated for Spark SQL with sqlglot)."""
    from ember.analysis.db import VIEW_NAMES, view_sql

    if dialect is Dialect.duckdb:
        write_out(view_sql("macros") + "\n")
        for name in VIEW_NAMES:
            body = view_sql(name).strip().rstrip(";")
            write_out(f"CREATE OR REPLACE VIEW {name} AS\n{body};\n\n")
        return
    from ember.analysis.lake import HAND_WRITTEN, spark_tables, spark_views

    write_out(
        "-- Ember's views for Spark SQL, translated from analysis/sql/*.sql by sqlglot\n"
        "-- (macros inlined). Hand-written parts: "
        + "; ".join(f"{v}: {', '.join(c)}" for v, c in HAND_WRITTEN.items())
        + ".\n-- First register the lake's stored rows as _lake_<table> views (the Delta table\n"
        "-- LAKE/<table>, rows whose _ingest is committed in LAKE/_ingests), or use\n"
        "-- ember.analysis.lake.spark.job.register_lake.\n"
        "-- Each view reads the ones before it, and Spark plans a view again inside every\n"
        "-- view (and a CTE at every use) that reads it. Run as plain temp views (as\n"
        "-- register_lake(spark, lake, computed=False) creates them), recompile_causes and\n"
        "-- run_summary, once the heaviest, took about 11 s each in a 1 GiB driver on the\n"
        "-- demo traces. The default register_lake computes each view once, in this order,\n"
        "-- and keeps its rows (localCheckpoint), so that no query plans them again.\n\n"
    )
    from ember.analysis.lake import LAKE_TABLES

    for name, sql in spark_tables({t: f"_lake_{t}" for t in LAKE_TABLES}).items():
        write_out(f"CREATE OR REPLACE TEMP VIEW {name} AS\n{sql};\n\n")
    for name, sql in spark_views().items():
        write_out(f"CREATE OR REPLACE TEMP VIEW {name} AS\n{sql};\n\n")
