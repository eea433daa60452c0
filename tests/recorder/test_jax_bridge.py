"""The JAX bridge: jit spans with retrace reasons, step spans, gradient records."""

from __future__ import annotations

import json
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ember.recorder import bus, record
from ember.recorder.jax import (
    CompileWatcher,
    ProfileSession,
    gradient_records,
    parse_explanation,
    watch_compiles,
)
from ember.recorder.jax_explain import UNKNOWN_REASON
from ember.schemas import validate_file
from tests import recordings


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _jit_spans(records, fun_name=None):
    """span_end attrs of the jit spans (optionally of one function), in file order."""
    return [
        r
        for r in records
        if r["kind"] == "span_end"
        and r["span_kind"] == "jit"
        and (fun_name is None or r["attrs"]["fun_name"] == fun_name)
    ]


def test_importing_the_recorder_does_not_import_jax(tmp_path):
    out = recordings.run("no_jax_until_asked", str(tmp_path / "t.jsonl"), check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ---------------------------------------------------------------- a tiny MLP, trained


def _init(key):
    k1, k2 = jax.random.split(key)
    return {
        "l1": {"w": jax.random.normal(k1, (4, 8)) * 0.5, "b": jnp.full((8,), 0.1, jnp.float32)},
        "l2": {"w": jax.random.normal(k2, (8, 1)) * 0.5, "b": jnp.zeros((1,))},
    }


def _loss(p, x, y):
    h = jnp.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
    return jnp.mean((h @ p["l2"]["w"] + p["l2"]["b"] - y) ** 2)


def _numpy_grads(p, x, y):
    """Backpropagation by hand in float64: the reference for the recorded norms."""
    w1, b1 = (np.asarray(p["l1"][k], np.float64) for k in ("w", "b"))
    w2, b2 = (np.asarray(p["l2"][k], np.float64) for k in ("w", "b"))
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    h = np.tanh(x @ w1 + b1)
    d_out = 2.0 * (h @ w2 + b2 - y) / y.size
    d_pre = (d_out @ w2.T) * (1.0 - h**2)
    return {
        "l1/w": x.T @ d_pre,
        "l1/b": d_pre.sum(0),
        "l2/w": h.T @ d_out,
        "l2/b": d_out.sum(0),
    }


def _train(path, batches):
    opt = optax.sgd(0.1)

    @jax.jit
    def grad_step(params, x, y):
        return jax.value_and_grad(_loss)(params, x, y)

    @jax.jit
    def apply_updates(params, opt_state, grads):
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    rng = np.random.default_rng(0)
    expected = []
    with ProfileSession(path, phase="train", model="mlp") as session:
        params = _init(jax.random.PRNGKey(0))
        opt_state = opt.init(params)
        for i, n in enumerate(batches):
            x = jnp.asarray(rng.normal(size=(n, 4)), jnp.float32)
            y = jnp.asarray(rng.normal(size=(n, 1)), jnp.float32)
            expected.append(_numpy_grads(jax.device_get(params), x, y))
            with session.step("forward", i):
                _, grads = grad_step(params, x, y)
            session.record_gradients(i, grads)
            with session.step("optimizer", i):
                params, opt_state = apply_updates(params, opt_state, grads)
    return expected


@pytest.fixture(scope="module")
def mlp_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "train.jsonl"
    expected = _train(path, [32, 32, 16, 16])
    return path, _read(path), expected


def test_mlp_trace_validates_and_is_a_train_run(mlp_trace):
    path, records, _ = mlp_trace
    report = validate_file(path)
    assert report.ok, report.errors[:3]
    assert records[0]["kind"] == "meta"
    assert records[0]["phase"] == "train"
    assert records[0]["tags"] == {"model": "mlp"}


def test_each_jitted_function_compiles_once_per_batch_size(mlp_trace):
    _, records, _ = mlp_trace
    grad_step = _jit_spans(records, "grad_step")
    apply_updates = _jit_spans(records, "apply_updates")
    assert len(grad_step) == 2  # batch 32, then 16
    assert len(apply_updates) == 1  # its arguments do not depend on the batch
    for span in grad_step + apply_updates:
        a = span["attrs"]
        assert a["tracing_ns"] > 0
        assert a["lowering_ns"] > 0
        assert a["backend_compile_ns"] > 0
        assert span["duration_ns"] >= a["backend_compile_ns"]
        assert a["persistent_cache"] is None  # no cache directory configured


def test_the_one_recompile_says_which_argument_and_dim_changed(mlp_trace):
    _, records, _ = mlp_trace
    first, second = _jit_spans(records, "grad_step")
    assert first["attrs"]["retrace_reason"] is None
    assert first["attrs"]["changes"] == []
    assert second["attrs"]["retrace_reason"] == "x dim 0: 32 -> 16; y dim 0: 32 -> 16"
    assert second["attrs"]["changes"] == [
        # one dimension changed: named, as torch names it, with its sizes
        {"arg": "x", "what": "shape", "old": "32", "new": "16", "dim": 0},
        {"arg": "y", "what": "shape", "old": "32", "new": "16", "dim": 0},
    ]
    # the one retrace of a jitted function; primitives run outside jit say so instead
    retraced = [s for s in _jit_spans(records) if s["attrs"]["retrace_reason"]]
    assert [s for s in retraced if not s["attrs"]["outside_jit"]] == [second]
    assert all(
        s["attrs"]["retrace_reason"].startswith(f"primitive outside jit {s['attrs']['fun_name']}:")
        for s in retraced
        if s["attrs"]["outside_jit"]
    )


def test_jit_spans_nest_in_the_step_that_compiled_them(mlp_trace):
    _, records, _ = mlp_trace
    starts = {r["span_id"]: r for r in records if r["kind"] == "span_start"}
    forward = {
        r["attrs"]["index"]: r["span_id"]
        for r in starts.values()
        if r["span_kind"] == "step" and r["attrs"]["step"] == "forward"
    }
    first, second = (s["span_id"] for s in _jit_spans(records, "grad_step"))
    assert starts[first]["parent_id"] == forward[0]
    assert starts[second]["parent_id"] == forward[2]
    # the span covers tracing too: it starts before the backend compile's duration
    end = {r["span_id"]: r for r in _jit_spans(records)}
    assert starts[first]["ts_ns"] + end[first]["duration_ns"] == end[first]["ts_ns"]


def test_step_spans_in_train_phase(mlp_trace):
    _, records, _ = mlp_trace
    steps = [
        (r["attrs"]["step"], r["attrs"]["index"])
        for r in records
        if r["kind"] == "span_start" and r["span_kind"] == "step"
    ]
    assert steps == [(s, i) for i in range(4) for s in ("forward", "optimizer")]
    ends = [r for r in records if r["kind"] == "span_end" and r["span_kind"] == "step"]
    assert len(ends) == 8
    assert all(r["status"] == "ok" for r in ends)


def test_gradient_records_match_numpy_backprop(mlp_trace):
    _, records, expected = mlp_trace
    grads = [r for r in records if r["kind"] == "gradient"]
    assert len(grads) == 4 * 4
    for step, reference in enumerate(expected):
        got = {r["key"]: r for r in grads if r["step"] == step}
        assert set(got) == set(reference)
        for key, g in reference.items():
            assert got[key]["root"] == "params"
            assert got[key]["state"] == "present"
            np.testing.assert_allclose(got[key]["norm"], np.linalg.norm(g), rtol=1e-4)
    assert len({r["event_id"] for r in grads}) == len(grads)


# ---------------------------------------------------------------- gradient states


def test_gradient_states():
    recs = gradient_records(
        {
            "zero": jnp.zeros((3,)),
            "nan": jnp.array([1.0, jnp.nan]),
            "inf": np.array([np.inf]),
            "none": None,
            "layers": [jnp.array([3.0, 4.0])],
        }
    )
    assert recs == [
        {"key": "inf", "state": "non_finite", "norm": None},
        {"key": "layers/0", "state": "present", "norm": 5.0},
        {"key": "nan", "state": "non_finite", "norm": None},
        {"key": "none", "state": "missing", "norm": None},
        {"key": "zero", "state": "zero", "norm": 0.0},
    ]


def test_recorded_gradient_states_validate(tmp_path):
    path = tmp_path / "g.jsonl"
    with ProfileSession(path, phase="train") as session:
        session.record_gradients(7, {"w": jnp.zeros(2), "b": None, "c": jnp.array([np.nan])})
    recs = [r for r in _read(path) if r["kind"] == "gradient"]
    assert [(r["key"], r["state"], r["step"]) for r in recs] == [
        ("b", "missing", 7),
        ("c", "non_finite", 7),
        ("w", "zero", 7),
    ]
    assert validate_file(path).ok


# ---------------------------------------------------------------- other retrace reasons


def _watch(fn, *calls):
    """Call ``fn`` on each argument tuple while watching; the jit stop metadata of ``fn``."""
    seen = []

    def on_stop(name, measurements, md):
        if md["fun_name"] == fn.__name__:
            seen.append(md)

    bus.attach("test.jit", ["ember.jit.stop"], on_stop)
    try:
        with watch_compiles():
            jitted = jax.jit(fn)
            for args in calls:
                jax.block_until_ready(jitted(*args))
    finally:
        bus.detach("test.jit")
    return seen


def test_dtype_change_is_typed():
    def dtype_fn(x):
        return x * 2

    first, second = _watch(dtype_fn, (jnp.ones(3, jnp.float32),), (jnp.ones(3, jnp.int32),))
    assert first["retrace_reason"] is None
    assert second["retrace_reason"] == "x dtype: float32 -> int32"
    assert second["changes"] == [{"arg": "x", "what": "dtype", "old": "f32[3]", "new": "i32[3]"}]


def test_rank_change_is_one_phrase():
    def rank_fn(x):
        return x + 1

    _, second = _watch(rank_fn, (jnp.ones((2, 3)),), (jnp.ones((6,)),))
    assert second["retrace_reason"] == "x shape: f32[2,3] -> f32[6]"
    assert second["changes"][0]["what"] == "shape"


def test_pytree_structure_change_is_typed():
    def tree_fn(d):
        return sum(d.values())

    _, second = _watch(tree_fn, ({"a": jnp.ones(2)},), ({"a": jnp.ones(2), "b": jnp.ones(2)},))
    assert [c["what"] for c in second["changes"]] == ["structure"]
    assert "structure" in second["retrace_reason"]


def test_weak_type_change_is_typed():
    def weak_fn(x):
        return x * 3

    _, second = _watch(weak_fn, (1.0,), (jnp.float32(1.0),))
    assert second["changes"] == [
        {
            "arg": "x",
            "what": "weak_type",
            "old": "f32[]{weak_type=True}",
            "new": "f32[]{weak_type=False}",
        }
    ]
    assert second["retrace_reason"] == "x weak_type: True -> False"


def test_parse_explanation_of_other_messages():
    assert parse_explanation("Finished tracing + transforming f in 0.1 sec") is None
    exp = parse_explanation(
        "TRACING CACHE MISS at t.py:3 (f):\n  never seen function:\n    f id=140 defined at t.py:1"
    )
    assert (exp.fun_name, exp.first, exp.reason, exp.changes) == ("f", True, None, [])
    exp = parse_explanation(
        "TRACING CACHE MISS at t.py:3 (f):\n  for f defined at t.py:1\n"
        "  all previously seen cache keys differ. For the closest previous key:\n"
        "  Tracing context doesn't match, e.g. due to config or context manager.\n"
        "  * jax_enable_x64 differs: now True and before False"
    )
    assert exp.reason == "jax_enable_x64: False -> True"
    assert exp.changes == [
        {"arg": "context:jax_enable_x64", "what": "other", "old": "False", "new": "True"}
    ]
    exp = parse_explanation(
        "TRACING CACHE MISS at t.py:3 (f):\n  for f defined at t.py:1\n"
        "  all previously seen cache keys differ. For the closest previous key:\n"
        "  Debug info doesn't match."
    )
    assert (exp.reason, exp.changes) == ("Debug info doesn't match.", [])


# ---------------------------------------------------------------- config and logging


def test_explain_option_is_restored_and_its_logs_stay_quiet(caplog):
    assert jax.config.jax_explain_cache_misses is False

    def quiet_fn(x):
        return x - 1

    with caplog.at_level(logging.WARNING):
        _watch(quiet_fn, (jnp.ones(2),), (jnp.ones(3),))
    assert jax.config.jax_explain_cache_misses is False
    assert not [r for r in caplog.records if "TRACING CACHE MISS" in r.getMessage()]


def test_explanations_still_reach_a_program_that_asked_for_them(caplog):
    def loud_fn(x):
        return x - 2

    jax.config.update("jax_explain_cache_misses", True)
    try:
        with caplog.at_level(logging.WARNING):
            _, second = _watch(loud_fn, (jnp.ones(2),), (jnp.ones(3),))
        assert jax.config.jax_explain_cache_misses is True
    finally:
        jax.config.update("jax_explain_cache_misses", False)
    assert second["retrace_reason"] == "x dim 0: 2 -> 3"
    assert [r for r in caplog.records if "TRACING CACHE MISS" in r.getMessage()]


def test_watcher_errors_and_stop_twice():
    watcher = CompileWatcher().start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            watcher.start()
    finally:
        watcher.stop()
    watcher.stop()
    assert jax.config.jax_explain_cache_misses is False


def test_profile_session_rejects_bad_phase_and_step(tmp_path):
    with pytest.raises(ValueError, match="phase must be 'train' or 'infer'"):
        ProfileSession(tmp_path / "x.jsonl", phase="training")
    with ProfileSession(tmp_path / "y.jsonl", phase="infer") as session:
        with pytest.raises(ValueError, match="step must be a non-empty label"):
            session.step("")
        with pytest.raises(ValueError, match="got 3"):
            session.step(3)  # type: ignore[arg-type]
    assert _read(tmp_path / "y.jsonl")[0]["phase"] == "infer"


def test_watch_compiles_inside_a_plain_recording(tmp_path):
    path = tmp_path / "plain.jsonl"

    def plain_fn(x):
        return x @ x.T

    with record(path), watch_compiles() as watcher:
        jax.block_until_ready(jax.jit(plain_fn)(jnp.ones((3, 2))))
    spans = _jit_spans(_read(path), "plain_fn")
    assert len(spans) == 1
    assert watcher.compiles >= 1
    assert validate_file(path).ok


def test_persistent_cache_miss_then_hit(tmp_path):
    # A fresh process: JAX decides once per process whether the disk cache is used.
    out = recordings.run(
        "persistent_cache", str(tmp_path / "cache"), str(tmp_path / "c.jsonl"), check=False
    )
    assert out.returncode == 0, out.stderr
    path = tmp_path / "c.jsonl"
    spans = _jit_spans(_read(path), "cached_fn")
    assert [s["attrs"]["persistent_cache"] for s in spans] == ["miss", "hit"]
    assert validate_file(path).ok


def test_overlapping_watchers_record_each_compile_once_and_restore_the_option(tmp_path):
    path = tmp_path / "overlap.jsonl"

    def overlap_fn(x):
        return x * x

    two, five = jnp.ones(2), jnp.ones(5)  # made before watching: no eager compiles inside
    with record(path):
        outer = CompileWatcher(explain=False).start()
        inner = CompileWatcher().start()
        assert jax.config.jax_explain_cache_misses is True
        f = jax.jit(overlap_fn)
        jax.block_until_ready(f(two))
        outer.stop()  # stopped first, out of order: explanations stay on for `inner`
        assert jax.config.jax_explain_cache_misses is True
        jax.block_until_ready(f(five))
        inner.stop()
    assert jax.config.jax_explain_cache_misses is False
    spans = _jit_spans(_read(path), "overlap_fn")
    assert [s["attrs"]["retrace_reason"] for s in spans] == [None, "x dim 0: 2 -> 5"]
    assert (outer.compiles, inner.compiles) == (1, 2)


def test_a_failure_in_the_bridge_never_fails_the_compile(monkeypatch, caplog):
    from ember.recorder import jax_compiles as bridge

    def broken(*args, **kwargs):
        raise RuntimeError("bridge bug")

    monkeypatch.setattr(bridge._BRIDGE, "compiled", broken)

    def survives_fn(x):
        return x + 41

    with caplog.at_level(logging.ERROR, logger="ember.recorder"), watch_compiles():
        assert float(jax.jit(survives_fn)(jnp.float32(1))) == 42.0
    assert any("could not record a JAX compile event" in r.getMessage() for r in caplog.records)


def test_a_synced_step_ends_when_its_results_are_ready(tmp_path):
    x = jnp.ones((1200, 1200), jnp.float32)
    chain = jax.jit(lambda a: ((a @ a) @ a) @ a)  # ~10 GFLOP: ~0.1 s or more on the CPU
    chain(x).block_until_ready()  # compiled before the session
    path = tmp_path / "steps.jsonl"
    with ProfileSession(path, phase="infer") as session:
        with session.step("forward", 0) as step:
            y = chain(x)
            step.wait_for(y)
            first_id = step.span_id
        assert y.is_ready()  # the step ended at its result, not at its dispatch
        with session.step("forward", 1):  # nothing named: every live array is waited for
            z = chain(x)
        assert z.is_ready()
        with session.step("forward", 2, sync=False):
            w = chain(x)
    w.block_until_ready()
    records = _read(path)
    assert validate_file(path).ok
    assert records[0]["sync"] is True
    ends = [r for r in records if r["kind"] == "span_end" and r["span_kind"] == "step"]
    assert [r["attrs"]["index"] for r in ends] == [0, 1, 2]
    assert ends[0]["span_id"] == first_id
    for r in ends[:2]:
        assert 0 < r["attrs"]["dispatch_ns"] < r["duration_ns"]
    assert "dispatch_ns" not in ends[2]["attrs"]


def test_a_session_without_sync_says_dispatch_only(tmp_path):
    path = tmp_path / "nosync.jsonl"
    with ProfileSession(path, phase="infer", sync=False) as session, session.step("forward", 0):
        jnp.ones(3) + 1
    records = _read(path)
    assert records[0]["sync"] is False
    (end,) = [r for r in records if r["kind"] == "span_end" and r["span_kind"] == "step"]
    assert "dispatch_ns" not in end["attrs"]
    assert not bus.syncing()


def test_primitives_outside_jit_are_flagged_and_say_what_changed(tmp_path):
    path = tmp_path / "prims.jsonl"
    with record(path), watch_compiles():
        jnp.full((13, 17), 7.0)
        jnp.full((19, 17), 7.0)  # the same primitive for another shape: compiled again
        jax.jit(lambda x: x + 1)(np.zeros(2, np.int32))
    assert validate_file(path).ok
    spans = _jit_spans(_read(path))
    bcast = [s["attrs"] for s in spans if s["attrs"]["fun_name"] == "broadcast_in_dim"]
    assert len(bcast) >= 2
    assert all(a["outside_jit"] for a in bcast)
    # the first compile that the bridge saw is not a retrace; the one after it is, and why
    assert bcast[-1]["retrace_reason"] == (
        "primitive outside jit broadcast_in_dim: shape: (13, 17) -> (19, 17)"
    )
    assert bcast[-1]["changes"] == [
        {"arg": "shape", "what": "static", "old": "(13, 17)", "new": "(19, 17)"}
    ]
    (lam,) = [s["attrs"] for s in spans if s["attrs"]["fun_name"] == "<lambda>"]
    assert lam["outside_jit"] is False


def test_a_retrace_jax_explains_in_words_ember_cannot_type_keeps_jax_text(tmp_path):
    from ember.recorder.jax_compiles import _BRIDGE

    text = (
        "TRACING CACHE MISS at /app/train.py:3 (step) because:\n"
        "  for step defined at /app/train.py:1\n"
        "For the closest previous key:\n"
        "  explanation unavailable! please open an issue at https://github.com/jax-ml/jax"
    )
    path = tmp_path / "words.jsonl"
    with record(path), watch_compiles():
        now = time.time()
        _BRIDGE.on_explanation(text)
        _BRIDGE.compiled("step", now, now + 0.001)
    (span,) = _jit_spans(_read(path), "step")
    attrs = span["attrs"]
    assert attrs["changes"] == []
    assert attrs["outside_jit"] is False
    assert attrs["jax_explanation"] == text.rsplit(" https://", 1)[0]
    assert attrs["retrace_reason"] == "explanation unavailable! please open an issue at"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_session_on_a_full_disk_keeps_the_blocks_error_and_fails_at_close():
    from ember.recorder import TraceWriteError, TraceWriteWarning

    # the warnings come from the block and from the session closing: both are under test
    with pytest.warns(TraceWriteWarning) as caught:  # noqa: PT031
        with pytest.raises(KeyError, match="from the block"):
            with ProfileSession("/dev/full"):
                raise KeyError("from the block")
    assert [str(w.message)[:35] for w in caught] == [
        "ember: writing the trace /dev/full ",
        "the trace /dev/full is incomplete: ",
    ]
    session = ProfileSession("/dev/full")
    with pytest.warns(TraceWriteWarning, match="writing the trace /dev/full failed"):
        with pytest.raises(TraceWriteError, match="the trace /dev/full is incomplete: 1 record"):
            session.close()


def test_a_persistent_cache_miss_names_the_jax_version_that_changed(tmp_path, monkeypatch):
    """JAX's own persistent cache: the bridge keeps the key parts it can name per function
    (in <cache dir>/ember-jit-keys) and a miss after a version change names it (issue 27)."""
    import jax.numpy as jnp

    from ember.recorder import bus
    from ember.recorder import jax_compiles as jc

    ends = []
    bus.attach("test.persistent", ["ember.jit.stop"], lambda n, m, md: ends.append(dict(md)))
    real = jc._platform_parts()
    folder = tmp_path / "jax-cache"

    def compile_once(jaxlib: str) -> dict:
        monkeypatch.setattr(jc, "_platform_parts", lambda: {**real, "jaxlib": jaxlib})
        for entry in folder.glob("*") if folder.exists() else []:
            if entry.is_file():  # JAX's entries: another jaxlib would miss them
                entry.unlink()
        jax.clear_caches()
        with watch_compiles():
            jax.jit(lambda x: x * 3 + 1)(jnp.arange(5.0)).block_until_ready()
        (end,) = [e for e in ends if e["fun_name"] == "<lambda>"]
        ends.clear()
        return end

    from ember.runtime.jit.diskcache import disk_cache

    try:
        with disk_cache(folder):
            first = compile_once("0.10.1")
        with disk_cache(folder):
            second = compile_once("0.10.2")
    finally:
        bus.detach("test.persistent")
    assert first["persistent_cache"] == "miss"
    assert first["disk_key"]["jaxlib"] == "0.10.1"
    assert first["disk_miss"] is None  # nothing stored before
    assert second["persistent_cache"] == "miss"
    assert second["disk_miss"] == "jaxlib 0.10.1 -> 0.10.2"


def test_explanations_say_where_the_call_and_the_function_are_and_static_values():
    first = parse_explanation(
        "TRACING CACHE MISS at /w/t.py:10:4 (test_it):\n  never seen function:\n"
        "    f id=140636875916448 defined at /w/t.py:7"
    )
    assert (first.first, first.called_at, first.defined_at) == (
        True,
        "/w/t.py:10:4 (test_it)",
        "/w/t.py:7",
    )
    static = parse_explanation(
        "TRACING CACHE MISS at /w/t.py:12:27 (<module>) costing 1.2 ms because:\n"
        "  for scale defined at /w/t.py:7\n"
        "  all previously seen cache keys differ. For the closest previous key:\n"
        "  different input pytree:\n"
        "  * at input path [0][1], now <class 'jax._src.tree_util.Static'> with pytree "
        "metadata Static(val=3) and before <class 'jax._src.tree_util.Static'> with pytree "
        "metadata Static(val=2), so the pytree node metadata does not match"
    )
    assert static.called_at == "/w/t.py:12:27 (<module>)"
    assert static.defined_at == "/w/t.py:7"
    assert static.reason == "static arg 1: 2 -> 3"
    assert static.changes == [{"arg": "arg 1", "what": "static", "old": "2", "new": "3"}]


def test_a_compile_with_nothing_changed_names_no_cause_it_has_no_evidence_for(tmp_path):
    """The same primitive compiled again for the same types (here after jax.clear_caches):
    nothing recorded differs, so the reason says it is unknown and what would reveal it,
    not a guess such as 'caches were cleared'."""
    path = tmp_path / "same.jsonl"
    with record(path), watch_compiles():
        jnp.full((11, 3), 2.0)
        jax.clear_caches()
        jnp.full((11, 3), 2.0)
    spans = _jit_spans(_read(path))
    bcast = [s["attrs"] for s in spans if s["attrs"]["fun_name"] == "broadcast_in_dim"]
    assert len(bcast) >= 2
    reason = bcast[-1]["retrace_reason"]
    assert reason == f"primitive outside jit broadcast_in_dim: {UNKNOWN_REASON}"
    assert "JAX_EXPLAIN_CACHE_MISSES=1" in reason
    assert "cleared" not in reason
    assert bcast[-1]["changes"] == []
