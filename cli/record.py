"""``ember record -- python train.py ARGS``: record an unmodified Python/JAX program.

The command runs ``python -m ember.record`` (``ember_root/record.py``, where the recording
is) in a child process with the interpreter Ember is installed in, passes SIGTERM on to it,
and exits with its status.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

import typer

from ember import autorecord
from ember.record import TRACE_ENV
from ember.recorder.job import JOB_ENV

from .app import app, console, err_console, fail

# python's own options that take a value (``-X dev``, ``-W error``)
_PYTHON_VALUE_OPTIONS = {"-X", "-W"}


def child_command(
    command: list[str],
    out: Path,
    phase: str,
    tags: list[str],
    steps: list[str] | None = None,
    *,
    no_steps: bool = False,
    sync_steps: bool = False,
) -> list[str]:
    """``python [its options] -m ember.record --out OUT ... PROGRAM ARGS`` for ``command``
    (``python train.py ARGS``, ``python -m module ARGS`` or ``python -c CODE ARGS``)."""
    if not command or not re.fullmatch(r"python[0-9.]*", Path(command[0]).name):
        shown = command[0] if command else "nothing"
        raise ValueError(
            f"ember record runs a Python program: `ember record -- python train.py ARGS` "
            f"(got {shown!r})"
        )
    own: list[str] = []
    i = 1
    while i < len(command) and command[i].startswith("-") and command[i] not in ("-m", "-c"):
        takes_value = command[i] in _PYTHON_VALUE_OPTIONS
        own += command[i : i + 1 + takes_value]
        i += 1 + takes_value
    if i >= len(command):
        raise ValueError("ember record: no script, -m MODULE or -c CODE after `python`")
    options = ["--out", str(out), "--phase", phase]
    for tag in tags:
        options += ["--tag", tag]
    for step in steps or []:
        options += ["--step", step]
    options += ["--no-steps"] * no_steps + ["--sync-steps"] * sync_steps
    return [sys.executable, *own, "-m", "ember.record", *options, *command[i:]]


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def record(
    ctx: typer.Context,
    out: Path | None = typer.Option(
        None, "--out", help=f"Folder of the traces (default ${TRACE_ENV}, else ./traces)."
    ),
    phase: str = typer.Option("train", "--phase", help="train or infer (the run's phase)."),
    tag: list[str] = typer.Option([], "--tag", help="NAME=VALUE tags of the run (repeat)."),
    step: list[str] = typer.Option(
        [],
        "--step",
        help="LABEL=FUNCTION: record the jitted FUNCTION's top-level calls as steps named "
        "LABEL (train=train_step; repeat). Other jitted functions' steps keep their name.",
    ),
    no_steps: bool = typer.Option(
        False, "--no-steps", help="No automatic steps (top-level jitted calls)."
    ),
    job: str | None = typer.Option(
        None,
        "--job",
        help="NAME of the job this process is a rank of (default: the launcher's id: Slurm, "
        "torchrun, or the jax.distributed coordinator). Sets $EMBER_JOB.",
    ),
    sync_steps: bool = typer.Option(
        False,
        "--sync-steps",
        help="A step ends when its outputs are ready (serialises dispatch), not at dispatch.",
    ),
    install_hook: bool = typer.Option(
        False,
        "--install-hook",
        help=f"Install a .pth hook in this environment: every Python process started with "
        f"{TRACE_ENV}=DIR that imports JAX records itself into DIR (children too).",
    ),
    uninstall_hook: bool = typer.Option(
        False, "--uninstall-hook", help="Remove the .pth hook --install-hook wrote."
    ),
) -> None:
    """Record an unmodified program: `ember record -- python train.py ARGS`.

    Every JAX compile, retrace reason, persistent-cache hit/miss, primitive run outside jit
    and memory reading goes to one trace per process under --out (named after the program,
    its start, host, pid and a random part: never another process's file). Each top-level
    call of a jitted or pmapped function is a step named after the function.
    """
    if install_hook or uninstall_hook:
        raise typer.Exit(_hook(install_hook))
    # absolute: a child that changes its working folder still records into this one
    folder = Path(os.path.abspath(out or os.environ.get(TRACE_ENV) or "traces"))
    if phase not in ("train", "infer"):
        raise fail(f"--phase must be 'train' or 'infer', got {phase!r}")
    try:
        cmd = child_command(
            list(ctx.args), folder, phase, tag, step, no_steps=no_steps, sync_steps=sync_steps
        )
    except ValueError as e:
        raise fail(str(e), code=2) from None
    env = {**os.environ, TRACE_ENV: str(folder)}
    if job is not None:
        if not job.strip():
            raise fail("--job takes a non-empty NAME", code=2)
        env[JOB_ENV] = job
    raise typer.Exit(_run_child(cmd, env))


def _hook(install: bool) -> int:
    try:
        path = autorecord.install_hook() if install else autorecord.uninstall_hook()
    except OSError as e:
        raise fail(f"cannot write {autorecord.hook_path()}: {e.strerror}") from None
    if install:
        console.print(f"installed {path}: run with {TRACE_ENV}=DIR to record", highlight=False)
    elif path is None:
        console.print(f"no hook at {autorecord.hook_path()}", highlight=False)
    else:
        console.print(f"removed {path}", highlight=False)
    return 0


def _run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run the child to its end; SIGTERM is passed on, Ctrl-C reaches it by the terminal."""
    child = subprocess.Popen(cmd, env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    old = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                continue  # the child got the same SIGINT: wait for it to close its trace
    finally:
        signal.signal(signal.SIGTERM, old)
    if code < 0:
        err_console.print(f"the program was killed by signal {-code}", highlight=False)
        return 128 - code
    return code
