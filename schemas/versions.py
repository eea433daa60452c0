"""Schema versions: reading a file's version, upgrading older records, refusing newer ones.

A migration turns one raw record (a dict, as parsed from JSON) of version ``v`` into
version ``v + 1``; readers chain them up to ``SCHEMA_VERSION``. Migrations work on dicts
rather than models because the models only describe the current version.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .records import SCHEMA_NAME, SCHEMA_VERSION

__all__ = [
    "MIGRATIONS",
    "Migrations",
    "TraceVersionError",
    "check_version",
    "parse_schema_id",
]

RawRecord = dict[str, Any]
Migration = Callable[[RawRecord], RawRecord]


class TraceVersionError(ValueError):
    """A trace whose schema this reader cannot read (newer, or not an Ember trace)."""


def parse_schema_id(schema_id: object) -> int:
    """The version number of ``"ember.trace/N"``; raises TraceVersionError otherwise."""
    if not isinstance(schema_id, str) or "/" not in schema_id:
        raise TraceVersionError(
            f"schema {schema_id!r} is not an Ember schema id; expected '{SCHEMA_NAME}/N'"
        )
    name, _, version = schema_id.rpartition("/")
    if name != SCHEMA_NAME or not version.isdigit():
        raise TraceVersionError(
            f"schema {schema_id!r} is not an Ember trace; expected '{SCHEMA_NAME}/N'"
        )
    return int(version)


def check_version(version: int) -> None:
    """Refuse a file written by a newer Ember, naming both versions."""
    if version > SCHEMA_VERSION:
        raise TraceVersionError(
            f"the trace is {SCHEMA_NAME}/{version} but this Ember reads up to "
            f"{SCHEMA_NAME}/{SCHEMA_VERSION}; upgrade Ember (pip install -U ember) to read it"
        )


class Migrations:
    """A registry of one-step migrations, ``from_version -> fn(record) -> record``."""

    def __init__(self, current: int = SCHEMA_VERSION) -> None:
        self.current = current
        self._steps: dict[int, Migration] = {}
        # versions whose step only added optional fields: their records read as they are
        self._additive: set[int] = set()

    def register(
        self, from_version: int, *, additive: bool = False
    ) -> Callable[[Migration], Migration]:
        """Decorator: ``fn`` upgrades a record of ``from_version`` to ``from_version + 1``.

        ``additive``: the newer version only added optional fields, so every record of
        ``from_version`` other than ``meta`` is valid as it is (readers may skip the step
        for those and take their fast path).
        """

        def add(fn: Migration) -> Migration:
            if from_version in self._steps:
                raise ValueError(f"a migration from version {from_version} is already registered")
            self._steps[from_version] = fn
            if additive:
                self._additive.add(from_version)
            return fn

        return add

    def copy(self) -> Migrations:
        """A registry with the same steps, to extend (e.g. with a made-up older version)."""
        other = Migrations(self.current)
        other._steps = dict(self._steps)
        other._additive = set(self._additive)
        return other

    def reads_as_is(self, version: int) -> bool:
        """Whether records of ``version`` (other than ``meta``) are valid current records:
        the current version, or one whose every later step only added optional fields."""
        return version <= self.current and all(
            v in self._additive for v in range(version, self.current)
        )

    def oldest_readable(self) -> int:
        v = self.current
        while v - 1 in self._steps:
            v -= 1
        return v

    def upgrade(self, record: RawRecord, version: int) -> RawRecord:
        """Upgrade one raw record from ``version`` to the current version."""
        if version > self.current:
            check_version(version)
        if version < self.oldest_readable():
            raise TraceVersionError(
                f"the trace is {SCHEMA_NAME}/{version}, older than any version this Ember "
                f"can upgrade (oldest: {SCHEMA_NAME}/{self.oldest_readable()})"
            )
        for v in range(version, self.current):
            record = self._steps[v](record)
        if record.get("kind") == "meta":
            record["schema"] = f"{SCHEMA_NAME}/{self.current}"
        return record


MIGRATIONS = Migrations()
"""The migrations of the real schema."""


@MIGRATIONS.register(from_version=1)
def _v1_spans_ended_at_dispatch(record: RawRecord) -> RawRecord:
    """1 -> 2: version 1 ended call spans at dispatch, so its meta says ``sync: false``.

    Everything else of version 2 is new and optional (``dispatch_ns``, ``segment`` spans,
    the break's ``host_transfer_ns`` and ``subgraph_ns``): version 1 records are valid as
    they are.
    """
    if record.get("kind") == "meta":
        record = dict(record)
        record["sync"] = False
    return record


@MIGRATIONS.register(from_version=2, additive=True)
def _v2_fields_added(record: RawRecord) -> RawRecord:
    """2 -> 3: only optional fields were added (``disk_key`` and ``disk_miss`` of
    ``segment_compile`` and ``jit`` ends, ``defined_at`` and ``called_at`` of ``jit`` ends):
    records read as they are; ``upgrade`` sets the meta's schema id."""
    return record


@MIGRATIONS.register(from_version=3, additive=True)
def _v3_jobs_added(record: RawRecord) -> RawRecord:
    """3 -> 4: only optional fields and a record kind were added (``meta``'s ``job_id``,
    ``rank``, ``world_size``, ``job_source``; the ``process`` record): version 3 records read
    as they are (a version 3 run belongs to no job)."""
    return record


@MIGRATIONS.register(from_version=4, additive=True)
def _v4_step_functions_added(record: RawRecord) -> RawRecord:
    """4 -> 5: only an optional field was added (a ``step`` span's ``fun_name``): version 4
    records read as they are (their steps name no function, so their jitted calls' hits are
    not counted)."""
    return record
