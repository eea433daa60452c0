"""``ember dashboard``: start the Streamlit app on one Ember database."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.markup import escape

from .app import app, console, fail


def _app_script() -> Path:
    # The editable install maps ember.dashboard to dashboard/; ask the package in case
    # the layout differs (an installed wheel).
    import ember.dashboard

    return Path(ember.dashboard.__file__).resolve().parent / "pages" / "app.py"


def streamlit_command(host: str, port: int) -> list[str]:
    """The command line that serves the dashboard (run with ``EMBER_DASHBOARD_DB=db``)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(_app_script()),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--server.runOnSave",
        "false",
        "--browser.gatherUsageStats",
        "false",
        "--global.developmentMode",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


@app.command()
def dashboard(
    db: Path = typer.Option(
        Path("ember.duckdb"),
        "--db",
        help="Database written by `ember ingest`, a lake (`ember ingest --lake`), or a folder "
        "written by `ember export --parquet`.",
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind; 0.0.0.0 opens it to the network."
    ),
    port: int = typer.Option(8501, "--port", min=1, max=65535, help="TCP port to serve on."),
) -> None:
    """Serve the web dashboard (runs, recompiles, cache, memory, Hub, calls, SQL) on a database."""
    db = db.expanduser().resolve()
    from ember.dashboard.db import DB_ENV, DatabaseError, db_version, open_readonly

    try:
        with open_readonly(db_version(db), wait_s=2.0) as con:
            names = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    except DatabaseError as e:
        raise fail(str(e)) from None
    if "runs" not in names:
        raise fail(
            f"{db}: not an Ember database (it has no `runs` table); create one with "
            f"`ember ingest TRACES --db {db}`"
        )

    cmd = streamlit_command(host, port)
    env = {**os.environ, DB_ENV: str(db)}
    where = f"http://{'localhost' if host in ('127.0.0.1', 'localhost') else host}:{port}"
    console.print(f"Ember dashboard on {db} at {where}  (Ctrl-C stops it)", highlight=False)
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"[yellow]warning:[/] bound to {escape(host)}: anyone who reaches this port can "
            "read the database; turn on login (see the dashboard README)",
            highlight=False,
            markup=True,
        )
    sys.stdout.flush()
    # Replace this process with Streamlit: Ctrl-C and kill reach the server directly.
    os.execve(cmd[0], cmd, env)
