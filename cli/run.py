"""``ember run MODEL``: run any ONNX model on made-up inputs, record a trace, sum it up."""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ember.analysis import format as fmt
from ember.analysis.report import trace_summary

from .app import app, console, err_console, fail


def default_trace_path(source: str) -> Path:
    """``traces/<model>-<time>-<random>.jsonl`` for a model source: two runs started in the
    same second never write one file."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(source.rstrip("/")).stem) or "model"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("traces") / f"{stem}-{stamp}-{secrets.token_hex(4)}.jsonl"


def _naming(model: str, message: str) -> str:
    """``message`` led by the model, unless it names it already (a load error names the
    file: "m.onnx: the file is empty" was printed as "m.onnx: m.onnx: the file is empty")."""
    if any(message.startswith(f"{name}:") for name in (model, str(Path(model)))):
        return message
    return f"{model}: {message}"


def _records_failure(trace: Path) -> bool:
    """Whether ``trace`` has a span that ended in an error (a load, compile or call that
    raised): what ``ember report`` reads as "the model failed to load", "2 calls failed"."""
    import orjson

    try:
        with trace.open("rb") as f:
            for line in f:
                if b'"error"' in line and b'"span_end"' in line:
                    try:
                        rec = orjson.loads(line)
                    except orjson.JSONDecodeError:
                        continue
                    if rec.get("kind") == "span_end" and rec.get("status") == "error":
                        return True
    except OSError:
        return False
    return False


def _after_failure(trace: Path) -> None:
    """Keep the trace of a failed run when it records the failure, and say where it is;
    remove it when it does not (bad --input or --sweep: nothing ran that a trace explains)."""
    if _records_failure(trace):
        err_console.print(
            f"the trace records the failure: {trace} (`ember report` reads it)",
            soft_wrap=True,
            highlight=False,
        )
    else:
        with contextlib.suppress(OSError):  # never written (its folder is a file...)
            trace.unlink(missing_ok=True)


def summary_rows(row: dict[str, Any]) -> list[tuple[str, str]]:
    """The lines ``ember run`` prints, from a ``run_summary`` row."""
    failed = f" ({row['failed_calls']} failed)" if row["failed_calls"] else ""
    breaks = "yes" if row["graph_break"] else "no"
    if row["breaks"]:
        breaks += f" ({row['breaks']} break runs)"
    compiles = f"{row['compiles']} ({fmt.duration(row['compile_ns'])})"
    if row["recompiles"]:
        compiles += f", {row['recompiles']} recompiles"
    if row["eager_compiles"]:
        compiles += f", {row['eager_compiles']} eager segments"
    cache = f"{row['hits']} hits, {row['misses']} misses, {row['evictions']} evictions"
    if not (row["hits"] or row["misses"] or row["evictions"]):
        # a call at the shapes compile() compiled for goes straight to that program and
        # emits no cache events: "0 hits, 0 misses" next to "compiles 1" read as a contradiction
        cache = "not looked up"
        if row["compiles"] and not row["graph_break"]:
            cache += ": each call ran the program compiled with the model"
    if row["recompiled_after_eviction"]:
        cache += f" ({row['recompiled_after_eviction']} compiled again after eviction)"
    out = [
        ("calls", f"{row['calls']}{failed}"),
        ("graph breaks", breaks),
        ("compiles", compiles),
        ("cache", cache),
    ]
    if row["disk_hits"] or row["disk_misses"]:
        out.append(("disk cache", f"{row['disk_hits']} hits, {row['disk_misses']} misses"))
    if row["p50_ns"] is not None:
        out.append(
            (
                "latency",
                fmt.latency(
                    row["latency_of"],
                    row["latency_spans"],
                    row["p50_ns"],
                    row["p99_ns"],
                    row["compiling_calls"],
                    row["warm_p50_ns"],
                    row["warm_p99_ns"],
                    row["warm_calls"],
                    row["loaded_calls"],
                )
                + f" ({row['latency_kind']})",
            )
        )
    else:
        out.append(("latency", "n/a"))
    peak = (
        "n/a"
        if row["peak_bytes"] is None
        else f"{fmt.size(row['peak_bytes'])} {row['peak_source']}"
    )
    by_source = [
        f"{label} {fmt.size(row[col])}"
        for label, col in (
            ("tensors", "peak_tensor_bytes"),
            ("device", "peak_device_bytes"),
            ("live arrays", "peak_live_arrays_bytes"),
            ("RSS", "peak_rss_bytes"),
        )
        if row[col] is not None
    ]
    if by_source:
        peak += f" ({', '.join(by_source)})"
    if row["planned_peak_bytes"] is not None:
        peak += f"; {fmt.size(row['planned_peak_bytes'])} planned by XLA for the largest segment"
    out.append(("peak memory", peak))
    return out


def _parse_workload(
    inputs: list[str], sweep: str | None, tags: list[str]
) -> tuple[list[Any], Any, dict[str, str]]:
    """The --input overrides, the --sweep and the --tag values, or the error that names the
    one that does not parse."""
    from ember.runtime.workload import WorkloadError, parse_input, parse_sweep, parse_tag

    try:
        overrides = [parse_input(t) for t in inputs]
        seen: set[str] = set()
        for override in overrides:  # a repeat silently replaced the earlier shape
            if override.name in seen:
                raise fail(f"--input {override.name} given twice; give each input once")
            seen.add(override.name)
        sweep_spec = parse_sweep(sweep) if sweep else None
        return overrides, sweep_spec, dict(parse_tag(t) for t in tags)
    except WorkloadError as exc:
        raise fail(str(exc)) from None


_SCHEMES = ("hf://",)


def _check_source(model: str) -> None:
    """Refuse, before anything is recorded, a model source no loader can read: a folder,
    or a URL of a scheme Ember does not know (echoed as given: ``Path`` turns ``ftp://x``
    into ``ftp:/x``)."""
    if "://" in model and not model.startswith(_SCHEMES):
        raise fail(
            f"{model}: unknown scheme {model.split('://', 1)[0]!r}; give a local .onnx path, "
            "hf://owner/repo[@REVISION]/file.onnx or onnx:light/NAME"
        )
    if Path(model).is_dir():
        raise fail(f"{model}: is a folder; give the .onnx file inside it")


def _calls_progress() -> Progress:
    """The bar of the calls made so far (gone when the run ends)."""
    return Progress(
        TextColumn("[bold]calling[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _print_summary(model: str, trace: Path, defaults: dict[str, Any]) -> None:
    """The run's numbers as a table. They come from the trace, through the run_summary
    view: the same definition as `ember report` and the dashboard."""
    table = Table(title=f"ember run {model}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for name, value in summary_rows(trace_summary(trace)):
        table.add_row(name, value)
    if defaults:
        filled = ", ".join(f"{k}={v}" for k, v in defaults.items())
        table.add_row("defaults", f"{filled} (set with --input)")
    console.print(table)


@app.command()
def run(
    model: str = typer.Argument(
        ...,
        help="A path, hf://owner/repo\\[@REVISION]/file.onnx, or onnx:light/NAME "
        "(e.g. onnx:light/squeezenet).",
    ),
    input: list[str] = typer.Option(
        [], "--input", "-i", help="NAME=SHAPE[:DTYPE], e.g. input_ids=1x17:int64. Repeatable."
    ),
    sweep: str | None = typer.Option(
        None, help="NAME:DIM=v1,v2,... : call once per value of that dimension."
    ),
    calls: int = typer.Option(3, help="Calls per input shape."),
    cache_size: int = typer.Option(8, help="Compiled segments kept per position."),
    cache_dir: Path | None = typer.Option(None, help="Keep compiled programs on disk here."),
    profile: bool = typer.Option(False, help="Also run once node by node for the memory timeline."),
    record_path: Path | None = typer.Option(
        None,
        "--record",
        help="Trace file to write (default: traces/<model>-<time>.jsonl). A run that fails "
        "keeps it when it records the failure (the model failed to load or compile, a call "
        "raised: `ember report` says so) and says where; otherwise (e.g. a bad --input) no "
        "trace is left.",
    ),
    tag: list[str] = typer.Option([], help="key=value tags for the run. Repeatable."),
    sync: bool = typer.Option(
        True,
        "--sync/--no-sync",
        help="Recorded call, segment and break spans end when their results are ready "
        "(default); --no-sync ends them at dispatch (the trace says 'dispatch only').",
    ),
) -> None:
    """Run a model, record a trace, and print calls, compiles, cache, latency and memory."""
    import jax  # noqa: F401  (imported before recording, so the trace names backend and devices)

    from ember.recorder import TraceWriteError, record
    from ember.runtime import EmberRuntimeError
    from ember.runtime.jit.xla_cpu import run_inline
    from ember.runtime.workload import run_workload

    run_inline()  # before the recording starts JAX's backend to name it

    _check_source(model)
    if record_path is not None and record_path.is_file() and record_path.stat().st_size > 0:
        # recording would truncate it (and a failed run would remove it): another run's trace
        raise fail(
            f"--record {record_path}: the file exists (another run's trace?); give a new "
            "path, or remove it first",
            2,
        )
    overrides, sweep_spec, tags = _parse_workload(input, sweep, tag)
    trace = record_path or default_trace_path(model)
    tags.setdefault("model", model)
    progress = _calls_progress()
    try:
        with record(trace, entrypoint=f"ember run {model}", sync=sync, tags=tags), progress:
            task = progress.add_task("calls", total=None)
            summary = run_workload(
                model,
                inputs=overrides,
                sweep=sweep_spec,
                calls=calls,
                cache_size=cache_size,
                cache_dir=cache_dir,
                profile=profile,
                on_call=lambda done, total: progress.update(task, completed=done, total=total),
            )
    except (EmberRuntimeError, FileNotFoundError, ValueError, TraceWriteError) as exc:
        failure = fail(_naming(model, str(exc)))
        _after_failure(trace)
        raise failure from None

    _print_summary(model, trace, summary.defaults)
    # the path on a line of its own, never cut, so it can be copied
    console.print(f"trace: {trace}", soft_wrap=True, highlight=False)
