"""Helpers shared by the browser test and benchmarks/bench_dashboard.py: start
``ember dashboard`` on a free port and drive Debian's Chromium through Playwright.

Playwright's own browser download is never used: ``tests/dashboard/install_browser.sh``
installs ``/usr/bin/chromium`` from the distribution.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dashboard_server(db: Path, *, startup_timeout: float = 60.0) -> Iterator[str]:
    """Run ``ember dashboard --db DB`` on a free port; yields its base URL."""
    port = free_port()
    ember = Path(sys.executable).with_name("ember")
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [str(ember), "dashboard", "--db", str(db), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"ember dashboard exited with {proc.returncode}:\n{log.read()}")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ember dashboard did not answer on {base} in time")
            time.sleep(0.2)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        os.unlink(log.name)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian Chromium with a fresh profile; yields a Playwright ``BrowserContext``."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="ember-chromium-")
    try:
        with sync_playwright() as pw:
            # A persistent context is how Playwright takes a user-data-dir: a fresh one here.
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1400, "height": 1000},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
