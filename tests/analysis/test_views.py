"""The SQL views, on traces the real runtime recorded (a sequence-length sweep)."""

from __future__ import annotations

from conftest import SWEEP

from ember.analysis import VIEW_NAMES
from ember.analysis.db import view_sql


def test_every_view_has_a_header_that_says_what_a_row_is():
    for name in VIEW_NAMES:
        head = view_sql(name).lstrip()
        assert head.startswith(f"-- {name}: one row per"), name


def test_recompiles_name_the_input_dim_and_sizes(con):
    rows = con.sql(
        "SELECT compile_index, change, arg, dim, old_value, new_value, after_eviction, reason "
        "FROM recompiles WHERE run_id = 'sweep' AND position = 0 ORDER BY compile_index"
    ).to_dicts()
    # one compile per call (cache_size 2 < 3 lengths): the first is not a recompile
    assert [r["compile_index"] for r in rows] == [2, 3, 4, 5]
    assert [(r["arg"], r["dim"], r["old_value"], r["new_value"]) for r in rows] == [
        ("input_ids", 1, str(a), str(b)) for a, b in zip(SWEEP, SWEEP[1:], strict=False)
    ]
    assert rows[0]["reason"] == "input_ids dim 1: 17 -> 23"
    assert rows[1]["reason"] == "input_ids dim 1: 23 -> 31"
    assert [r["after_eviction"] for r in rows] == [False, False, True, True]
    assert rows[2]["change"] == "after_eviction"
    assert rows[2]["reason"] == "re-compile after eviction: input_ids dim 1: 31 -> 17"


def test_evictions_and_thrash(con):
    ev = con.sql(
        "SELECT shapes_text, cache_size, hits, recompiled FROM evictions "
        "WHERE run_id = 'sweep' AND position = 0 ORDER BY ts_ns"
    ).to_dicts()
    assert [e["shapes_text"] for e in ev] == [
        "input_ids[1,17]:int64",
        "input_ids[1,23]:int64",
        "input_ids[1,31]:int64",
    ]
    assert all(e["cache_size"] == 2 for e in ev)
    assert [e["recompiled"] for e in ev] == [True, True, False]
    thrash = con.sql(
        "SELECT shapes_text, compiles, wasted_compiles, keys_at_position FROM cache_thrash "
        "WHERE run_id = 'sweep' AND position = 0 ORDER BY shapes_text"
    ).to_dicts()
    assert thrash == [
        {
            "shapes_text": "input_ids[1,17]:int64",
            "compiles": 2,
            "wasted_compiles": 1,
            "keys_at_position": 3,
        },
        {
            "shapes_text": "input_ids[1,23]:int64",
            "compiles": 2,
            "wasted_compiles": 1,
            "keys_at_position": 3,
        },
    ]


def test_cache_what_if_shows_the_size_that_removes_the_recompiles(con):
    rows = con.sql(
        "SELECT cache_size, compiles, recompiles, is_actual, actual_compiles, fixes_thrash "
        "FROM cache_what_if WHERE run_id = 'sweep' AND position = 0 ORDER BY cache_size"
    ).to_dicts()
    assert [(r["cache_size"], r["compiles"]) for r in rows] == [(1, 5), (2, 5), (3, 3)]
    assert [r["is_actual"] for r in rows] == [False, True, False]
    assert rows[1]["actual_compiles"] == 5  # the replay of the real size matches the run
    assert [r["fixes_thrash"] for r in rows] == [False, False, True]
