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
from collections.abc import Iterator
from typing import Any

import duckdb
import typer
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from typer.core import TyperGroup

from ember.analysis.db import DatabasePathError
from ember.analysis.escape import terminal_text
from ember.analysis.lake import LakeError


class _Commands(TyperGroup):
    """Every command runs through ``invoke``: the one place where what goes wrong with a
    path or the machine (a folder given for a file, /proc, a database DuckDB cannot open,
    an input too big for memory) becomes an ``error:`` line and exit 2, not a traceback;
    a lake that cannot be used as given (``LakeError``: its message says what to do, as a
    command's own ``fail`` does) exit 1. Commands raise ``fail(...)`` themselves for what
    they can say better."""

    def invoke(self, ctx: Any) -> Any:  # typer.core.Context (typer vendors click)
        try:
            return super().invoke(ctx)
        except LakeError as exc:
            raise fail(str(exc)) from None
        except (OSError, duckdb.Error, DatabasePathError, MemoryError) as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            raise fail(explain(exc), 2) from None


def explain(exc: BaseException) -> str:
    """A line for a person about ``exc``: the path and what is wrong with it."""
    if isinstance(exc, MemoryError):
        return (
            f"out of memory ({exc or 'MemoryError'}): the command needed more memory than "
            "this machine gave it; make the input smaller"
        )
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else "a file"
        text = f"{where}: {exc.strerror.lower()}"
        if isinstance(exc, IsADirectoryError):
            text += "; give a file path, not a folder"
        elif isinstance(exc, FileExistsError):
            text += " (a file, where a folder was to be made); give another path"
        return text
    if isinstance(exc, duckdb.Error):
        return str(exc).removeprefix("IO Error: ")
    return str(exc)


app = typer.Typer(
    cls=_Commands,
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


class _SizedConsole(Console):
    """rich's Console for user text: markup off unless asked for, control characters shown
    as escapes, sized at each print from the terminal and ``COLUMNS``/``LINES``.

    What Ember prints is mostly text a trace, a model or a path controls (run ids, tags,
    file and node names). With rich's default (markup on), a run id of ``[/i]x`` made
    ``ember compare`` crash with a MarkupError (exit 1, the code of a broken rule), and
    ``[link=URL]`` made a link; so a print that styles its own words passes
    ``markup=True`` and escapes what it puts among them. And whatever is printed, an ESC
    or BEL in it (a terminal's colours, cursor moves, hyperlinks) or a bidirectional
    override (which reverses the rest of the line as shown) comes out as its escape
    (``\\x1b``, ``\\u202e``): ``render`` rewrites the text of every content segment, so
    tables, ``Text`` and plain strings alike, while rich's own styles and cursor controls
    are not text and pass.

    rich reads ``COLUMNS`` and ``LINES`` once, when a console is made, and keeps them for
    good. The consoles below are made when this module is imported, so the width of whatever
    environment imported it first (a test runner's worker, a parent process) stuck to every
    later command in the process, whatever ``COLUMNS`` said then. A width or height given
    to the constructor is kept."""

    def __init__(self, *, width: int | None = None, height: int | None = None, **kwargs: Any):
        kwargs.setdefault("markup", False)
        super().__init__(width=width, height=height, **kwargs)
        # None: rich's `size` asks the terminal and the environment at each print
        self._width, self._height = width, height

    def render(self, renderable: Any, options: Any = None) -> Iterator[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None:
                text = terminal_text(segment.text)
                if text != segment.text:
                    segment = Segment(text, segment.style)
            yield segment


class _PipeConsole(_SizedConsole):
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
err_console = _SizedConsole(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error for a person (what went wrong, what to do) and return the exit."""
    # soft_wrap: the terminal wraps the line, rich does not cut it (a path stays whole to copy)
    err_console.print(
        f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True, markup=True
    )
    return typer.Exit(code)


def parse_tags(pairs: list[str], option: str = "--tag") -> dict[str, str]:
    """``["branch=main"]`` -> ``{"branch": "main"}``; a pair without ``=`` is an error that
    names ``option``."""
    tags = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise fail(f"{option} {pair!r}: expected KEY=VALUE, e.g. branch=main", 2)
        tags[key] = value
    return tags


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
