"""Run ids as people give them: the whole id or a unique start of it (``e57e161d``).

``ember report --run``, ``ember export --run``, the dashboard's ``?run=`` and ``?other=``
links and the Python API all resolve a run the same way: an exact id wins; else the ids
that start with what was given; one is the run, several are listed so a person can say
which, none lists the runs there are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .db import Connection
from .format import short_path

__all__ = ["SHORT_ID", "ambiguous", "matching", "pick_run", "resolve_run", "unknown"]

SHORT_ID = 8
"""How many characters of a run id the report and the dashboard show."""


def matching(wanted: str, ids: Iterable[str]) -> list[str]:
    """``[wanted]`` when it is one of ``ids``, else the ids that start with it, in order."""
    ids = list(ids)
    if wanted in ids:
        return [wanted]
    return [i for i in ids if i.startswith(wanted)]


def _named(run_id: str, name: str | None) -> str:
    return f"{run_id[:SHORT_ID]} ({short_path(name, 30)})" if name else run_id[:SHORT_ID]


def ambiguous(wanted: str, matches: Sequence[tuple[str, str | None]], what: str = "--run") -> str:
    """The message for a start of an id that several runs share, listing them."""
    listed = ", ".join(_named(r, n) for r, n in matches)
    return (
        f"{what} {wanted!r} is ambiguous: it starts {len(matches)} run ids: {listed}; "
        "give more characters of the run id"
    )


def unknown(wanted: str, ids: Sequence[str], what: str = "--run") -> str:
    """The message for a run that is not there, listing some that are."""
    listed = ", ".join(r[:SHORT_ID] for r in ids[:10]) or "none"
    return (
        f"no run {wanted!r} (not a run id, nor the start of one); runs: {listed}"
        ' (all: `ember query "FROM runs"`)'
    )


def pick_run(wanted: str, runs: Sequence[tuple[str, str | None]], what: str = "--run") -> str:
    """The run id that ``wanted`` names among ``runs`` (``(run_id, name)`` pairs, oldest
    first). Raises ``LookupError`` (none) or ``ValueError`` (ambiguous) with a message
    that lists what would work."""
    names = dict(runs)
    found = matching(wanted, names)
    if len(found) == 1:
        return found[0]
    if not found:
        raise LookupError(unknown(wanted, list(names), what))
    raise ValueError(ambiguous(wanted, [(r, names[r]) for r in found], what))


def resolve_run(con: Connection, run: str) -> str:
    """The run id that ``run`` names in the database: the exact id or a unique start of
    one, e.g. ``db.sql("FROM recompiles WHERE run_id = ?", [resolve_run(db, "e57e")])``.

    Raises ``LookupError`` (no such run) or ``ValueError`` (the start is ambiguous),
    each with a message that lists what would work.
    """
    rows = con.sql(
        """
        SELECT run_id, coalesce(json_extract_string(tags, '$.scenario'),
            json_extract_string(tags, '$.model'), entrypoint) AS name
        FROM runs ORDER BY started_at, run_id
        """
    ).rows()
    return pick_run(run, rows)
