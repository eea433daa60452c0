"""A disk-cache miss names the part of the key that changed (issue 27)."""

from __future__ import annotations

import numpy as np
import orjson

from ember import runtime as rt
from ember.recorder import record
from ember.runtime.examples import token_filter_model
from ember.runtime.jit import diskcache


def _segment_compiles(path):
    ends = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return [
        r["attrs"] for r in ends if r["kind"] == "span_end" and r["span_kind"] == "segment_compile"
    ]


def _forget_jax_cache(cache_dir):
    """JAX's own cache keys its entries by the real jaxlib, which a test cannot change:
    remove them, as another jaxlib would miss them, so that only Ember's store is asked."""
    for entry in cache_dir.iterdir():
        if entry.is_file():  # Ember's own folders (ember-programs, ember-jit-keys) stay
            entry.unlink()


def _cold_then_warm(
    tmp_path, monkeypatch, cold: dict[str, str], warm: dict[str, str], xla_flags: str = ""
) -> tuple[list[dict], list[dict]]:
    """The token filter run twice on one cache folder: with the platform's key parts as
    ``cold`` says (trace cold.jsonl), then as ``warm`` says, with ``XLA_FLAGS=xla_flags`` when
    given and JAX's own entries removed (warm.jsonl). Each run's segment compiles."""
    real = diskcache._platform_parts()
    monkeypatch.setattr(diskcache, "_platform_parts", lambda: {**real, **cold})
    first = _run(token_filter_model(), tmp_path / "xla", tmp_path / "cold.jsonl")
    monkeypatch.setattr(diskcache, "_platform_parts", lambda: {**real, **warm})
    if xla_flags:
        monkeypatch.setenv("XLA_FLAGS", xla_flags)
    _forget_jax_cache(tmp_path / "xla")
    return first, _run(token_filter_model(), tmp_path / "xla", tmp_path / "warm.jsonl")


NEW_KEY = "new key: not in this cache (a first run fills it; a new shape or static value)"


def _ingested(folder, traces):
    """A connection to ``folder/ember.duckdb`` with ``traces`` ingested."""
    from ember.analysis import connect, ingest

    db = folder / "ember.duckdb"
    ingest(traces, db)
    return connect(db)


def _misses(con, columns: str, order: str) -> list[tuple]:
    """The rows of ``disk_cache_misses`` (the trace file's name, then ``columns``) in the
    order of the file's name, then ``order``."""
    rows = con.sql(
        f"SELECT r.file, {columns} FROM disk_cache_misses m JOIN runs r USING (run_id) "
        f"ORDER BY r.file, {order}"
    )
    return [(f.rsplit("/", 1)[-1], *rest) for f, *rest in rows.iter_rows()]


def _run(model, cache_dir, trace):
    with record(trace):
        compiled = rt.compile(model, cache_dir=cache_dir)
        compiled(input_ids=np.arange(8, dtype=np.int64)[None, :] % 64)
    return _segment_compiles(trace)


def test_a_cache_filled_by_another_jaxlib_names_that_version_change(tmp_path, monkeypatch):
    # the first run as another jaxlib would have filled the cache
    cold, warm = _cold_then_warm(tmp_path, monkeypatch, {"jaxlib": "0.10.1"}, {"jaxlib": "0.10.2"})
    assert [a["disk_key"]["jaxlib"] for a in cold] == ["0.10.1", "0.10.1"]
    assert all(a["disk_miss"] is None for a in cold)  # an empty cache: nothing changed
    assert [a["disk_cache"] for a in warm] == ["miss", "miss"]
    assert [a["disk_miss"] for a in warm] == ["jaxlib 0.10.1 -> 0.10.2"] * 2
    # the same versions again: loaded, nothing to explain
    again = _run(token_filter_model(), tmp_path / "xla", tmp_path / "again.jsonl")
    assert [(a["disk_cache"], a["disk_miss"]) for a in again] == [("hit", None)] * 2

    # the view says it per run: the cold run's misses are new keys, the warm run's a jaxlib
    con = _ingested(tmp_path, [tmp_path / n for n in ("cold.jsonl", "warm.jsonl", "again.jsonl")])
    got = _misses(con, "m.position, m.changed, m.reason, m.jaxlib", "m.position")
    assert got == [
        ("cold.jsonl", 0, False, NEW_KEY, "0.10.1"),
        ("cold.jsonl", 27, False, NEW_KEY, "0.10.1"),
        ("warm.jsonl", 0, True, "jaxlib 0.10.1 -> 0.10.2", "0.10.2"),
        ("warm.jsonl", 27, True, "jaxlib 0.10.1 -> 0.10.2", "0.10.2"),
    ]


def test_another_ember_version_and_xla_flags_are_named_too(tmp_path, monkeypatch):
    _, warm = _cold_then_warm(
        tmp_path,
        monkeypatch,
        {"ember": "0.0.9"},
        {"ember": "0.1.0"},
        xla_flags="--xla_cpu_enable_fast_math=false",
    )
    assert warm[0]["disk_miss"] == (
        "ember 0.0.9 -> 0.1.0; xla_flags (none) -> --xla_cpu_enable_fast_math=false"
    )


def test_changed_parts_lists_every_part_that_differs_in_key_order():
    before = {"model": "aa", "jax": "0.10.1", "jaxlib": "0.10.1", "device": "cpu"}
    now = {"model": "bb", "jax": "0.10.2", "jaxlib": "0.10.1", "device": "cpu"}
    assert diskcache.changed_parts(before, now) == "model aa -> bb; jax 0.10.1 -> 0.10.2"
    assert diskcache.changed_parts(now, now) is None


def test_the_report_names_the_version_that_emptied_the_cache(tmp_path, monkeypatch):
    from ember.analysis.report import findings

    _cold_then_warm(tmp_path, monkeypatch, {"jax": "0.10.1"}, {"jax": "0.10.2"})
    con = _ingested(tmp_path, [tmp_path / "cold.jsonl", tmp_path / "warm.jsonl"])
    texts = {f.run_id: f.text for f in findings(con, limit=50) if f.kind == "disk_miss"}
    runs = dict(con.sql("SELECT file, run_id FROM runs").iter_rows())
    warm = texts[runs[str(tmp_path / "warm.jsonl")]]
    assert warm.endswith("; the cache held them under another key: jax 0.10.1 -> 0.10.2")
    assert "first run fills the cache" in texts[runs[str(tmp_path / "cold.jsonl")]]


def test_the_view_has_jax_persistent_cache_misses_once_each(tmp_path, monkeypatch):
    """A jitted function that missed JAX's persistent cache after a jaxlib change is a row
    with that reason; the jit compiles inside a segment's compile are not rows of their own."""
    import jax

    from ember.recorder import jax_compiles as jc
    from ember.recorder.jax import watch_compiles

    real = jc._platform_parts()
    folder = tmp_path / "xla"

    def run(name: str, jaxlib: str) -> None:
        monkeypatch.setattr(jc, "_platform_parts", lambda: {**real, "jaxlib": jaxlib})
        if folder.exists():
            _forget_jax_cache(folder)
        jax.clear_caches()
        with record(tmp_path / name), watch_compiles(), diskcache.disk_cache(folder):
            jax.jit(lambda x: x * 5 - 1)(np.arange(4.0)).block_until_ready()
        with record(tmp_path / f"model-{name}"), watch_compiles():
            rt.compile(token_filter_model(), cache_dir=tmp_path / "store")(input_ids=_ids(8))

    run("cold.jsonl", "0.10.1")
    run("warm.jsonl", "0.10.2")
    con = _ingested(tmp_path, sorted(tmp_path.glob("*.jsonl")))
    got = _misses(con, "m.fun_name, m.position, m.changed, m.reason", "m.position NULLS FIRST")
    assert got == [
        ("cold.jsonl", "<lambda>", None, False, NEW_KEY),
        ("model-cold.jsonl", None, 0, False, NEW_KEY),
        ("model-cold.jsonl", None, 27, False, NEW_KEY),
        ("warm.jsonl", "<lambda>", None, True, "jaxlib 0.10.1 -> 0.10.2"),
    ]


def _ids(n):
    return np.arange(n, dtype=np.int64)[None, :] % 64
