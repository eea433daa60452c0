"""Record an unmodified Python/JAX program: ``python -m ember.record [--out DIR] train.py ARGS``.

The program runs in this process as ``__main__`` (``runpy``, as ``python train.py`` would run
it, ``-m package.module`` too) inside a ``ProfileSession``: every JAX compile with its retrace
reason, persistent-cache hits and misses, primitives compiled outside jit, and device/host
memory readings (``MemorySampler``) go into one trace per process under ``DIR`` (``--out``,
else ``$EMBER_TRACE``, else ``traces``), named
``<program>-<time>-<host>-<pid>-<random>.jsonl`` and created exclusively, so that no two
processes (of one job, or of containers that all run as pid 1) ever share or overwrite a
file. A folder that cannot take the trace is one line on stderr, and the program runs
unrecorded. ``python -c CODE`` is recorded too. ``meta`` carries the command line
(``entrypoint`` and the ``command`` tag) and the git commit of the working directory
(``git_commit`` tag, when it is a git checkout).

The trace stays valid however the program ends: a normal end, ``sys.exit``, an exception
(the traceback is printed as Python would and the exit status is 1), Ctrl-C (SIGINT) or
SIGTERM (turned into ``SystemExit(143)`` so that the recording closes its spans and flushes).
``ember record -- python train.py ARGS`` runs this module in a child process.
"""

from __future__ import annotations

import os
import re
import runpy
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

__all__ = ["Program", "git_commit", "main", "parse_args", "record_program", "trace_path"]

TRACE_ENV = "EMBER_TRACE"
"""The environment variable naming the folder of the traces (``--out`` wins)."""

USAGE = (
    "usage: python -m ember.record [--out DIR] [--phase train|infer] [--tag NAME=VALUE]... "
    "[--step LABEL=FUNCTION]... [--no-steps] [--sync-steps] (SCRIPT | -m MODULE | -c CODE) "
    "[ARGS...]"
)


class UsageError(ValueError):
    """The command line of ``ember.record`` is wrong; the message says how."""


@dataclass
class Program:
    """What to run and where to record it."""

    target: str  # a script's path, a module's name when ``module``, the code when ``code``
    args: list[str] = field(default_factory=list)
    module: bool = False
    out: Path = Path("traces")
    phase: Literal["train", "infer"] = "train"
    tags: dict[str, str] = field(default_factory=dict)
    step_labels: dict[str, str] = field(default_factory=dict)
    """A jitted function's name -> the label of its steps (``--step train=train_step``)."""
    steps: bool = True
    """Top-level jitted calls are ``step`` spans (``--no-steps``: none)."""
    sync_steps: bool = False
    """A step ends when its outputs are ready (``--sync-steps``), else at dispatch."""
    code: bool = False
    """``target`` is the program's text (``python -c CODE``)."""

    @property
    def argv(self) -> list[str]:
        """``sys.argv`` as the program would see it run by ``python``."""
        return ["-c" if self.code else self.target, *self.args]

    @property
    def command(self) -> str:
        how = ["-m"] if self.module else ["-c"] if self.code else []
        return shlex.join(["python", *how, self.target, *self.args])


def _option_value(argv: list[str], i: int, name: str) -> str:
    if i + 1 >= len(argv):
        raise UsageError(f"{name} needs a value\n{USAGE}")
    return argv[i + 1]


def parse_args(argv: Sequence[str], environ: dict[str, str] | None = None) -> Program:
    """Ember's options, then the program: everything from the script (or ``-m MODULE``) on
    belongs to the program, untouched (its own ``--out`` included)."""
    env = os.environ if environ is None else environ
    argv = list(argv)
    out, phase, tags = Path(env.get(TRACE_ENV) or "traces"), "train", {}
    steps: dict[str, Any] = {"step_labels": {}}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--no-steps":
            steps["steps"], i = False, i + 1
        elif arg == "--sync-steps":
            steps["sync_steps"], i = True, i + 1
        elif arg == "--step":
            label, eq, fun = _option_value(argv, i, arg).partition("=")
            if not eq or not label or not fun:
                raise UsageError(f"--step takes LABEL=FUNCTION (train=train_step), got {fun!r}")
            steps["step_labels"][fun], i = label, i + 2
        elif arg == "--out":
            out, i = Path(_option_value(argv, i, arg)), i + 2
        elif arg == "--phase":
            phase, i = _option_value(argv, i, arg), i + 2
            if phase not in ("train", "infer"):
                raise UsageError(f"--phase must be 'train' or 'infer', got {phase!r}")
        elif arg == "--tag":
            name, eq, value = _option_value(argv, i, arg).partition("=")
            if not eq or not name:
                raise UsageError(f"--tag takes NAME=VALUE, got {argv[i + 1]!r}")
            tags[name], i = value, i + 2
        elif arg == "-m":
            module = _option_value(argv, i, "-m")
            return Program(module, argv[i + 2 :], True, out, phase, tags, **steps)  # type: ignore[arg-type]
        elif arg == "-c":
            code = _option_value(argv, i, "-c")
            return Program(code, argv[i + 2 :], False, out, phase, tags, code=True, **steps)  # type: ignore[arg-type]
        elif arg == "--":
            i += 1
        elif arg.startswith("-"):
            raise UsageError(f"unknown option {arg!r}\n{USAGE}")
        else:
            return Program(arg, argv[i + 1 :], False, out, phase, tags, **steps)  # type: ignore[arg-type]
    raise UsageError(f"no program to run\n{USAGE}")


def _name_part(text: str, default: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._-") or default


def trace_path(out: Path, program: Program, pid: int | None = None) -> Path:
    """``OUT/<program>-<time>-<host>-<pid>-<random>.jsonl``, ``OUT`` made absolute.

    One file per process, never another's: processes in containers, pods or Slurm steps
    that share a folder often have the same pid (1) and start in the same second, so the
    host and 8 random hex digits are in the name too; the time first sorts a folder by
    start. ``create_trace`` creates it, exclusively.
    """
    if program.code:
        stem = "python-c"
    else:
        stem = program.target if program.module else Path(program.target).stem
    stem = _name_part(stem, "program")
    host = _name_part(socket.gethostname(), "host")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    pid = os.getpid() if pid is None else pid
    return Path(os.path.abspath(out)) / f"{stem}-{stamp}-{host}-{pid}-{secrets.token_hex(4)}.jsonl"


def create_trace(out: Path, program: Program) -> Path:
    """A new, empty trace file in ``out`` (the folder made), created exclusively: a name
    that exists (another process's trace) is never reused, truncated or appended to.
    ``OSError`` when the folder cannot be made or written."""
    Path(out).mkdir(parents=True, exist_ok=True)
    while True:
        path = trace_path(out, program)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:  # 32 random bits taken already: draw again
            continue
        return path


def git_commit(cwd: Path | None = None) -> str | None:
    """The commit checked out in ``cwd`` (with ``+dirty`` when files changed), else None."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises ``SystemExit(143)`` in the main thread, so the recording closes (the
    default action would kill the process with the buffered lines unwritten)."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    try:
        old = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        # the program may have put its own handler: only ours is taken back
        if signal.getsignal(signal.SIGTERM) is on_term:
            signal.signal(signal.SIGTERM, old)


def _run(program: Program) -> None:
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    try:
        if program.module:
            sys.argv = program.argv
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
        elif program.code:  # as `python -c` runs it: sys.path[0] is the working folder
            sys.argv = program.argv
            if sys.path:
                sys.path[0] = ""
            exec(compile(program.target, "<string>", "exec"), {"__name__": "__main__"})
        else:
            script = Path(program.target)
            sys.argv = program.argv
            if sys.path:
                sys.path[0] = str(script.resolve().parent)
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0


def record_program(program: Program, path: Path, *, memory_interval_s: float = 0.1) -> None:
    """Run ``program`` in this process, recording it into the trace at ``path``.

    What the program raises (``SystemExit`` included) propagates after the trace is closed.
    """
    from ember import autorecord

    autorecord.claim()  # the EMBER_TRACE hook (if installed) leaves this process to us
    from ember.recorder.jax import ProfileSession
    from ember.recorder.jax_steps import jit_steps
    from ember.runtime.memory import MemorySampler

    path.parent.mkdir(parents=True, exist_ok=True)
    tags = {"command": program.command, **program.tags}
    if (commit := git_commit()) is not None:
        tags.setdefault("git_commit", commit)
    session = ProfileSession(
        path, phase=program.phase, entrypoint=program.command, sync=program.sync_steps, tags=tags
    )
    steps = jit_steps(program.step_labels, sync=program.sync_steps) if program.steps else None
    with _sigterm_as_exit(), session, MemorySampler(memory_interval_s):
        with steps or nullcontext():
            _run(program)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``python -m ember.record`` command; returns the exit status."""
    try:
        program = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        print(f"ember.record: {e}", file=sys.stderr)
        return 2
    if not program.module and not program.code and not Path(program.target).is_file():
        print(
            f"ember.record: {program.target}: no such file (the program to record)", file=sys.stderr
        )
        return 2
    try:
        path = create_trace(program.out, program)
    except OSError as exc:
        # a recorder never stops the program: it runs, unrecorded, and this says why once
        why = exc.strerror or str(exc)
        print(
            f"ember.record: not recording: cannot write a trace in {program.out} ({why}); "
            "the program runs unrecorded (--out DIR names another folder)",
            file=sys.stderr,
        )
        _run(program)
        return 0
    try:
        record_program(program, path)
    finally:
        if path.exists():
            print(f"ember.record: trace {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
