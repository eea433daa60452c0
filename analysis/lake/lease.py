"""Leases: how ``ember lake check --repair`` tells a live ingest from an abandoned one.

An ingest's rows are written before its ``_ingests`` commit (``lake_commit``); until that
commit they are orphans, and repair deletes the orphans of ingests that will never
commit. Whether an ingest is still alive is not something the ingester's clock can say
(a machine hours behind, an ingest longer than any grace): so, before writing a row, an
ingester creates one lease file per ingest in ``_leases/`` of the lake and a daemon
thread touches them every ``LEASE_RENEW_S`` seconds (``os.utime`` without times: the
file system sets the mtime) until the commit is done, when they are removed.

Repair judges a lease's age by the storage's clock only: against the mtime of a file it
has just written in the same folder, never against its own clock. An ingest is abandoned
when its lease is older than the grace; repair removes the lease before the rows, and an
ingester checks that its leases are still there before it commits, so an ingest whose
rows were removed fails (``LakeError``: run it again) instead of marking its files
ingested. Orphans with no lease are of an ingest that ended (its commit lost a race, or
it failed) or of an Ember from before leases; those are judged by their ingest id's start
time, as before.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from ember.analysis.lake.table import LakeError

LEASES = "_leases"
"""The lake's folder of lease files (one per uncommitted ingest, named by its id)."""
LEASE_RENEW_S = 30.0
"""Seconds between an ingester's renewals of its leases (far below any sensible grace)."""


class IngestLease:
    """The leases of one batch's ingests, renewed from a daemon thread while held (a
    context manager: created on enter, removed on exit)."""

    def __init__(self, root: Path, ingests: Iterable[str], renew_s: float = LEASE_RENEW_S):
        self.root = root
        self.dir = root / LEASES
        self.ingests = list(ingests)
        self.renew_s = renew_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="ember-lake-lease", daemon=True)

    def _paths(self) -> list[Path]:
        return [self.dir / i for i in self.ingests]

    def __enter__(self) -> IngestLease:
        self.dir.mkdir(exist_ok=True)
        for p in self._paths():
            p.touch()
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_s):
            for p in self._paths():
                try:
                    os.utime(p)  # the storage's clock; a removed lease stays removed
                except FileNotFoundError:
                    pass

    def verify(self) -> None:
        """Raise ``LakeError`` if a repair removed a lease (and so this ingest's rows)."""
        gone = [p.name for p in self._paths() if not p.exists()]
        if gone:
            raise LakeError(
                f"{self.root}: `ember lake check --repair` judged this ingest abandoned and "
                f"removed the rows it had written ({len(gone)} of its file ingest(s)); "
                "nothing of this batch was committed: run the ingest again"
            )

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        for p in self._paths():
            p.unlink(missing_ok=True)


def lease_ages_s(root: Path, ingests: Iterable[str]) -> dict[str, float | None]:
    """Each ingest's lease age in seconds by the storage's clock (the mtime of a file
    written now in the same folder), or None where it has no lease."""
    folder = root / LEASES
    folder.mkdir(exist_ok=True)
    probe = folder / f".now-{uuid.uuid4().hex}"
    probe.touch()
    try:
        now = probe.stat().st_mtime_ns
    finally:
        probe.unlink(missing_ok=True)
    out: dict[str, float | None] = {}
    for i in ingests:
        if not i.isalnum():  # not an ingest id (a lease file name): no lease
            out[i] = None
            continue
        try:
            out[i] = (now - (folder / i).stat().st_mtime_ns) / 1e9
        except FileNotFoundError:
            out[i] = None
    return out


def remove_leases(root: Path, ingests: Iterable[str]) -> None:
    """Remove leases (before their ingests' rows are deleted: their ingester then fails)."""
    for i in ingests:
        if i.isalnum():
            (root / LEASES / i).unlink(missing_ok=True)
