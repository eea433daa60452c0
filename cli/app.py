"""The ``ember`` Typer application; command modules register on it."""

from __future__ import annotations

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
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error for a person (what went wrong, what to do) and return the exit."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


@app.callback()
def _root() -> None:
    """See why models recompile, what compile caches evict, and where memory goes."""
