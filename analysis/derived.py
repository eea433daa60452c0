"""The one definition of the columns computed from a run's rows in order: the cache order
columns and the memory running sums.

Three places compute them and all three read the definitions here: ingest into a DuckDB
file (``ingest.database``: incrementally, a continued file numbering on from the rows of
its run already stored), the upgrade of a database made before the columns existed
(``db``: over the whole table, ordered by ``rowid``) and a lake when it is read
(``lake.read``: over the whole table, ordered by ``line``; also what the Spark tables are
translated from). The order of a run's rows is ``ts_ns``, then file order.
"""

from __future__ import annotations

CACHE_ORDER_COLUMNS: dict[str, str] = {
    # computed with windows over a run's cache events (ts_ns, then file order):
    "ord": "BIGINT",  # 1, 2, 3... events at (run, source, position)
    "seq": "BIGINT",  # 1, 2, 3... lookups (hit, miss) at (run, source, position); else NULL
    "prev_seq": "BIGINT",  # seq of the previous lookup of lookup_key here; NULL: the first
    "life": "BIGINT",  # misses of lookup_key here up to and including this event
    "hits_so_far": "BIGINT",  # hits of lookup_key here up to and including this event
    "evictions": "BIGINT",  # evicts of lookup_key here up to and including this event
}

MEMORY_RUNNING_COLUMNS: dict[str, str] = {
    # computed like CACHE_ORDER_COLUMNS (order: ts_ns, then file order)
    "category_live_bytes": "BIGINT",  # live bytes of (run, device, category) after this row
    "device_live_bytes": "BIGINT",  # live bytes of (run, device) after this row
}

CACHE_POSITION = ("run_id", "source", "position")
"""What ``ord`` and ``seq`` number events within."""
CACHE_KEY = (*CACHE_POSITION, "lookup_key")
"""What the running counts (``CACHE_KEY_COUNTS``) and ``prev_seq`` are per."""
CACHE_LOOKUP = "action IN ('hit', 'miss')"
"""An event that ``seq`` numbers (a lookup)."""
CACHE_KEY_COUNTS: dict[str, str] = {
    # column -> the events of the key it counts, up to and including this one
    "life": "action = 'miss'",
    "hits_so_far": "action = 'hit'",
    "evictions": "action = 'evict'",
}

MEMORY_DELTA = "CASE WHEN action = 'alloc' THEN bytes ELSE -bytes END"
"""What a memory row adds to the live bytes."""
MEMORY_SUMS: dict[str, tuple[str, ...]] = {
    # column -> what the running sum of MEMORY_DELTA is per
    "category_live_bytes": ("run_id", "device", "category"),
    "device_live_bytes": ("run_id", "device"),
}

RUNNING = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"


def counted(condition: str) -> str:
    """1 for a row that meets ``condition``, else 0 (a summand of a running count)."""
    return f"CAST({condition} AS BIGINT)"


def cache_order_sql(src: str, order: str) -> str:
    """``src`` with the cache order columns, over all of its rows (``order``: the file
    order of a row within its run; ``src`` has ``lookup_key``)."""
    position = ", ".join(CACHE_POSITION)
    key = ", ".join(CACHE_KEY)
    counts = ",\n        ".join(
        f"sum({counted(cond)}) OVER k AS {c}" for c, cond in CACHE_KEY_COUNTS.items()
    )
    return f"""
SELECT *,
    CASE WHEN seq IS NOT NULL THEN lag(seq) OVER (
        PARTITION BY {key}, seq IS NULL ORDER BY seq
    ) END AS prev_seq
FROM (
    SELECT *,
        row_number() OVER (PARTITION BY {position} ORDER BY ts_ns, {order}) AS ord,
        CASE WHEN {CACHE_LOOKUP} THEN sum({counted(CACHE_LOOKUP)})
            OVER (PARTITION BY {position} ORDER BY ts_ns, {order}
                {RUNNING}) END AS seq,
        {counts}
    FROM {src}
    WINDOW k AS (PARTITION BY {key} ORDER BY ts_ns, {order}
        {RUNNING})
) AS c
"""


def memory_sums_sql(src: str, order: str) -> str:
    """``src`` with the memory running sums, over all of its rows (``order`` as for
    ``cache_order_sql``). A sum past 64 bits is NULL, as ingest stores it (a run with one
    must not stop the others)."""
    sums = ",\n    ".join(
        f"TRY_CAST(sum({MEMORY_DELTA}) OVER (PARTITION BY {', '.join(per)} ORDER BY ts_ns, {order}"
        f"\n        {RUNNING}) AS BIGINT) AS {c}"
        for c, per in MEMORY_SUMS.items()
    )
    return f"SELECT *,\n    {sums}\nFROM {src}\n"
