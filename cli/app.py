"""The ``ember`` Typer application; command modules register on it.

Output into a pipe whose reader stops early (``ember query ... | head``, ``ember compare
... | head``) ends quietly, like other Unix tools: the rest of the output is dropped and
the command exits with the code it would have given anyway (``ember compare``: its
verdict). Python reports a closed pipe as ``BrokenPipeError``, which rich and click turn
into exit 1, the code ``ember compare`` gives for a broken rule; so every command writes
to stdout through ``console`` or ``write_out``, which send the rest of the output to
``os.devnull`` instead.
"""

from __future__ import annotations

import atexit
import os
import sys

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="ember",
    help="See why models recompile, what compile caches evict, and where memory goes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _drop_stdout() -> None:
    """Send whatever is still written to stdout to os.devnull (its reader has gone)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _PipeConsole(Console):
    """rich's Console, but a reader that stops reading ends the output, not the command
    (rich's own ``on_broken_pipe`` exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _drop_stdout()


def write_out(text: str) -> None:
    """``text`` to stdout, unless its reader has stopped reading (then nothing more is)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()


@atexit.register
def _flush_stdout() -> None:
    # what is still buffered when the command ends, flushed before Python's own flush at
    # exit (which would print "Exception ignored ... BrokenPipeError" and exit 120)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
    except (OSError, ValueError):
        pass  # stdout closed or replaced (tests): nothing to flush


console = _PipeConsole()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error for a person (what went wrong, what to do) and return the exit."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _print_version(asked: bool) -> None:
    if asked:
        from ember import __version__

        console.print(f"ember {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """See why models recompile, what compile caches evict, and where memory goes."""
