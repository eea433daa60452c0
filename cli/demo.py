"""``ember demo``: the tour, offline. Records a few runs, ingests them, prints the report.

Each run shows one thing Ember is for:

1. ``growing-sequence``: a model with a data-dependent graph break (``NonZero``) called
   like a greedy decoder whose prompt grows one token a step, with a cache of 4 segments
   per position: every new length compiles, and once a position is full it evicts.
2. ``disk-cache-cold`` / ``disk-cache-warm``: each length twice with a persistent
   compilation cache, in a fresh process each: the second one loads every segment from disk
   (a load, not a compile), and each length's second call is warm in both.
3. ``light-batch-sweep``: a CNN that the ``onnx`` package ships (squeezenet), called at
   batch sizes 1, 2 and 4, profiled node by node once for the memory timeline.
4. ``jax-training``: a tiny JAX MLP trained for a few steps, its batch size changed once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import typer
from rich.markup import escape

from .app import app, console, fail

GROWING = "input_ids:1=" + ",".join(str(n) for n in range(8, 20))


def _ember(*args: str) -> None:
    """Run ``ember ARGS`` in a fresh process (a cold start, as a new job would have)."""
    cmd = [sys.executable, "-m", "ember.cli.main", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise fail(f"`ember {' '.join(args)}` failed:\n{done.stderr.strip()}")


@app.command()
def demo(
    out: Path = typer.Option(Path("ember-demo"), help="Folder for the traces and the database."),
) -> None:
    """Record the demo runs into ./ember-demo/, ingest them, and print the report."""
    import onnx

    from ember.runtime.examples import token_filter_model, train_tiny_mlp

    traces = out / "traces"
    db = out / "ember.duckdb"
    # A fresh tour each time: old traces and the old database would mix runs.
    shutil.rmtree(traces, ignore_errors=True)
    shutil.rmtree(out / "xla-cache", ignore_errors=True)
    for stale in (db, Path(f"{db}.wal")):
        stale.unlink(missing_ok=True)
    traces.mkdir(parents=True, exist_ok=True)
    model_path = out / "token_filter.onnx"
    onnx.save(token_filter_model(), model_path)

    # a greedy decoder's prompt growing one token a step, 4 segments kept per position
    decode = [str(model_path), "--sweep", GROWING, "--calls", "1", "--cache-size", "4"]
    # each length twice: the second call of a length is warm (in memory) in both runs, and
    # the warm run's first calls load their programs from disk instead of compiling them
    disk = ["--calls", "2", "--cache-size", "4", "--cache-dir", str(out / "xla-cache")]
    disk_decode = [str(model_path), "--sweep", GROWING, *disk]
    squeezenet = ["onnx:light/squeezenet", "--sweep", "data_0:0=1,2,4", "--calls", "3", "--profile"]
    # (what it shows, `ember run` arguments, scenario: the trace's name and tag)
    steps = [
        (
            "a graph break and a prompt that grows one token a step (cache of 4)",
            decode,
            "growing-sequence",
        ),
        ("each length twice with a disk cache, cold", disk_decode, "disk-cache-cold"),
        (
            "the same calls again in a new process: programs come from the disk cache",
            disk_decode,
            "disk-cache-warm",
        ),
        (
            "squeezenet from the onnx package at batch sizes 1, 2, 4, profiled once",
            squeezenet,
            "light-batch-sweep",
        ),
    ]
    for i, (what, args, name) in enumerate(steps, start=1):
        with console.status(f"[{i}/{len(steps) + 1}] {what}"):
            _ember(
                "run", *args, "--tag", f"scenario={name}", "--record", str(traces / f"{name}.jsonl")
            )
        console.print(f"[green]✓[/] [{i}/{len(steps) + 1}] {what}", markup=True)
    with console.status(f"[{len(steps) + 1}/{len(steps) + 1}] a tiny JAX training loop"):
        train_tiny_mlp(traces / "jax-training.jsonl")
    console.print(
        f"[green]✓[/] [{len(steps) + 1}/{len(steps) + 1}] a tiny JAX training loop", markup=True
    )

    from .analysis import Engine, ingest_command, report

    # every option given: a typer command called as a function gets OptionInfo defaults
    ingest_command(
        [str(traces)],
        db=db,
        wait=10.0,
        strict=False,
        lake=None,
        engine=Engine.duckdb,
        master="local[2]",
    )
    report(db=db, run=None, limit=5, since=None)
    shown = escape(str(db))  # a path is text, not markup
    console.print(
        f"\nOpen the dashboard: [bold]ember dashboard --db {shown}[/]  "
        "(or [bold]make dashboard[/])",
        markup=True,
    )
    console.print(
        f'Query the views:   [bold]ember query --db {shown} "select * from recompiles"[/]',
        markup=True,
    )
