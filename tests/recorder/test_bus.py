"""The event bus: attach/detach/emit/span, failing handlers, threads."""

from __future__ import annotations

import logging
import threading

import pytest

from ember.recorder import bus

# the events of a call and of a segment; the order they come in when the segment ran
# inside the call
CALL_AND_SEGMENT = [
    f"ember.{span}.{at}" for span in ("call", "segment") for at in ("start", "stop")
]
SEGMENT_INSIDE_CALL = [
    "ember.call.start",
    "ember.segment.start",
    "ember.segment.stop",
    "ember.call.stop",
]


@pytest.fixture
def seen():
    events = []
    ids = []

    def listen(handler_id, names):
        bus.attach(handler_id, names, lambda n, m, md: events.append((n, m, md)))
        ids.append(handler_id)

    yield events, listen
    for handler_id in ids:
        bus.detach(handler_id)


def test_emit_reaches_only_attached_events(seen):
    events, listen = seen
    listen("t", ["ember.cache.hit"])
    bus.emit("ember.cache.hit", {"count": 1}, {"position": 3})
    bus.emit("ember.cache.miss", {"count": 1}, {"position": 4})
    assert len(events) == 1
    name, measurements, metadata = events[0]
    assert name == "ember.cache.hit"
    assert measurements["count"] == 1
    assert measurements["monotonic_time"] > 0
    assert metadata == {"position": 3}


def test_detach(seen):
    events, listen = seen
    listen("t", ["e.x"])
    assert bus.detach("t") is True
    assert bus.detach("t") is False
    bus.emit("e.x")
    assert events == []


def test_attach_twice_is_an_error(seen):
    _, listen = seen
    listen("dup", ["e.x"])
    with pytest.raises(ValueError, match="already attached"):
        bus.attach("dup", ["e.y"], print)


def test_span_stop_carries_start_and_stop_metadata(seen):
    events, listen = seen
    listen("t", ["ember.load.start", "ember.load.stop", "ember.load.exception"])
    with bus.span("ember.load", {"source": "m.onnx"}) as handle:
        handle.set(node_count=5, opset=21)
        handle.measure(bytes=10)
    (n1, m1, md1), (n2, m2, md2) = events
    assert (n1, n2) == ("ember.load.start", "ember.load.stop")
    assert set(m1) == {"system_time", "monotonic_time"}
    assert m2["duration"] == m2["monotonic_time"] - m1["monotonic_time"] >= 0
    assert m2["bytes"] == 10
    assert md1 == {"source": "m.onnx", "span_id": md1["span_id"], "parent_id": None}
    assert md2 == {**md1, "node_count": 5, "opset": 21}


def test_span_exception_event_and_reraise(seen):
    events, listen = seen
    listen("t", ["ember.call.start", "ember.call.stop", "ember.call.exception"])
    with pytest.raises(KeyError), bus.span("ember.call", {"source": None}):
        raise KeyError("x")
    assert [e[0] for e in events] == ["ember.call.start", "ember.call.exception"]
    md = events[1][2]
    assert md["kind"] == "throw"
    assert md["reason"] == "KeyError: 'x'"
    assert "raise KeyError" in md["stacktrace"]


def test_a_span_ended_by_a_base_exception_is_an_exit_and_restores_the_current_span(seen):
    events, listen = seen
    listen("t", ["ember.call.start", "ember.call.stop", "ember.call.exception"])
    with bus.span("ember.call") as outer:
        with pytest.raises(KeyboardInterrupt), bus.span("ember.call"):
            raise KeyboardInterrupt
        assert bus.current_span_id() == outer.span_id
    assert bus.current_span_id() is None
    assert [e[0] for e in events] == [
        "ember.call.start",
        "ember.call.start",
        "ember.call.exception",
        "ember.call.stop",
    ]
    assert events[2][2]["kind"] == "exit"
    assert events[2][2]["parent_id"] == outer.span_id


def test_nested_spans_know_their_parent(seen):
    events, listen = seen
    listen("t", ["ember.call.start", "ember.segment.compile.start"])
    with bus.span("ember.call") as outer, bus.span("ember.segment.compile", {"position": 0}):
        pass
    assert events[1][2]["parent_id"] == outer.span_id != 0


def test_span_without_handlers_still_runs_the_body():
    ran = []
    with bus.span("ember.nobody.listens", {"a": 1}) as handle:
        handle.set(b=2)
        ran.append(True)
    assert ran == [True]


def test_raising_handler_is_detached_and_logged_once(seen, caplog):
    events, listen = seen
    calls = []

    def broken(name, m, md):
        calls.append(name)
        raise RuntimeError("handler bug")

    bus.attach("broken", ["e.x"], broken)
    listen("good", ["e.x"])
    with caplog.at_level(logging.ERROR, logger="ember.recorder"):
        bus.emit("e.x")  # the caller goes on
        bus.emit("e.x")
    assert calls == ["e.x"]
    assert len(events) == 2  # the other handler still gets every event
    assert "broken" not in bus.list_handlers()
    errors = [r for r in caplog.records if "handler bug" in r.getMessage()]
    assert len(errors) == 1
    assert "detached" in errors[0].getMessage()


def test_concurrent_attach_and_emit():
    counts = []
    lock = threading.Lock()

    def handler(n, m, md):
        with lock:
            counts.append(md["i"])

    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            bus.attach(f"churn-{i}", ["e.other"], handler)
            bus.detach(f"churn-{i}")
            i += 1

    bus.attach("steady", ["e.t"], handler)
    try:
        t = threading.Thread(target=churn)
        t.start()
        workers = [
            threading.Thread(
                target=lambda k=k: [bus.emit("e.t", None, {"i": k}) for _ in range(2000)]
            )
            for k in range(4)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stop.set()
        t.join()
    finally:
        bus.detach("steady")
    assert len(counts) == 8000
    assert sorted(set(counts)) == [0, 1, 2, 3]


def test_listening_and_generation_follow_attach_and_detach():
    before = bus.generation
    assert not bus.listening("test.gen.a", "test.gen.b")
    bus.attach("test-gen", ["test.gen.b"], lambda n, m, md: None)
    try:
        assert bus.listening("test.gen.a", "test.gen.b")
        assert not bus.listening("test.gen.a")
        assert bus.generation == before + 1
    finally:
        bus.detach("test-gen")
    assert not bus.listening("test.gen.b")
    assert bus.generation == before + 2
    assert not bus.detach("test-gen")  # nothing changed: the generation stays
    assert bus.generation == before + 2


def test_a_span_ended_by_its_body_and_a_child_sent_after_it_ran(seen):
    # a whole-graph call: the body says when its results were ready (``end``) and sends its
    # one segment's events once it ran (``emit_span``), a child of the call with its times
    events, listen = seen
    listen("t", CALL_AND_SEGMENT)
    with bus.span("ember.call", {"source": "m"}) as call:
        bus.emit_span("ember.segment", {"position": 0}, call.start + 10, call.start + 30)
        call.end = call.start + 40
    assert [n for n, _, _ in events] == SEGMENT_INSIDE_CALL
    _, (_, seg_m1, seg_md), (_, seg_m2, seg_md2), (_, call_m, _) = events
    assert (
        seg_md
        == seg_md2
        == {"position": 0, "span_id": seg_md["span_id"], "parent_id": call.span_id}
    )
    assert seg_md["span_id"] != call.span_id
    assert seg_m1["monotonic_time"] == call.start + 10
    assert (seg_m2["monotonic_time"], seg_m2["duration"]) == (call.start + 30, 20)
    assert (call_m["monotonic_time"], call_m["duration"]) == (call.start + 40, 40)


def test_emit_span_with_nobody_listening_sends_nothing(seen):
    events, listen = seen
    listen("t", ["ember.call.start"])
    bus.emit_span("ember.segment", {"position": 0}, 1, 2)
    assert events == []


def test_emit_span_sends_its_children_inside_it_and_its_stop_metadata_at_the_stop(seen):
    # a recorded whole-graph call: the call and its segment sent once the call ran, in the
    # order and with the ids ``span`` would give them
    events, listen = seen
    listen("t", CALL_AND_SEGMENT)
    listen("run", ["ember.run.start"])
    with bus.span("ember.run", {}) as outer:
        events.clear()
        bus.emit_span(
            "ember.call",
            {"source": "m"},
            100,
            200,
            stop_metadata={"dispatch_ns": 30},
            children=[("ember.segment", {"position": 0}, 110, 190)],
        )
    assert [n for n, _, _ in events] == SEGMENT_INSIDE_CALL
    (_, m1, call_md), (_, _, seg_md), (_, seg_m, _), (_, m2, stop_md) = events
    assert call_md == {"source": "m", "span_id": call_md["span_id"], "parent_id": outer.span_id}
    assert stop_md == {**call_md, "dispatch_ns": 30}
    assert (seg_md["parent_id"], seg_md["position"]) == (call_md["span_id"], 0)
    assert m1["monotonic_time"] == 100
    assert (m2["monotonic_time"], m2["duration"]) == (200, 100)
    assert (seg_m["monotonic_time"], seg_m["duration"]) == (190, 80)


def test_emit_span_nobody_listens_to_gives_its_children_to_the_current_span(seen):
    events, listen = seen
    listen("t", ["ember.segment.start", "ember.run.start"])
    with bus.span("ember.run", {}) as outer:
        events.clear()
        bus.emit_span("ember.call", {}, 1, 9, children=[("ember.segment", {}, 2, 8)])
    assert [(n, md["parent_id"]) for n, _, md in events] == [("ember.segment.start", outer.span_id)]


def test_emit_span_exception_sends_the_start_and_the_exception_as_span_does(seen):
    events, listen = seen
    listen("t", ["ember.call.start", "ember.call.stop", "ember.call.exception"])
    try:
        raise RuntimeError("the program failed")
    except RuntimeError as exc:
        bus.emit_span_exception("ember.call", {"source": "m"}, 5, exc)
    (start, _, md), (name, m, exc_md) = events
    assert (start, name) == ("ember.call.start", "ember.call.exception")
    assert exc_md["span_id"] == md["span_id"]
    assert exc_md["source"] == "m"
    assert exc_md["kind"] == "throw"
    assert exc_md["reason"] == "RuntimeError: the program failed"
    assert "the program failed" in exc_md["stacktrace"]
    assert m["duration"] == m["monotonic_time"] - 5


@pytest.fixture
def spans_seen():
    got = []
    yield got, lambda span, kids: got.append((span, kids))
    bus.detach("test-spans")


def test_a_span_handler_gets_a_sent_span_and_its_children_in_one_call(seen, spans_seen):
    # a recorded whole-graph call: the span handler gets it whole, in place of the events
    # of the handler it replaces (another handler of other events changes nothing)
    events, listen = seen
    got, on_spans = spans_seen
    listen("mine", CALL_AND_SEGMENT)
    listen("other", ["ember.cache.hit", "ember.run.start"])
    bus.attach_spans("test-spans", on_spans, replacing=["mine"])
    assert bus.list_handlers()["test-spans"] == frozenset([bus.SPANS_SENT])
    with bus.span("ember.run", {}):
        outer = bus.current_span_id()
        call_md, seg_md, stop = {"source": "m"}, {"position": 0}, {"dispatch_ns": 30}
        bus.emit_span(
            "ember.call", call_md, 100, 200, stop_metadata=stop,
            children=[("ember.segment", seg_md, 110, 190)],
        )  # fmt: skip
    ((span, kids),) = got
    call_id = span[1]
    assert span == ("ember.call", call_id, outer, call_md, 100, 200, stop)
    assert span[3] is call_md  # the sender's metadata itself (a recorder keeps it by identity)
    assert kids == (("ember.segment", call_id + 1, call_id, seg_md, 110, 190, None),)
    assert [name for name, _, _ in events] == ["ember.run.start"]  # the live span's, only


def test_a_span_handler_does_not_replace_the_events_of_live_spans(seen, spans_seen):
    events, listen = seen
    got, on_spans = spans_seen
    listen("mine", CALL_AND_SEGMENT)
    bus.attach_spans("test-spans", on_spans, replacing=["mine"])
    with bus.span("ember.call", {"source": "m"}):
        bus.emit_span("ember.segment", {"position": 0}, 1, 2)
    assert [n for n, _, _ in events] == ["ember.call.start", "ember.call.stop"]
    assert [span[0] for span, _ in got] == ["ember.segment"]


def test_a_detached_span_handler_gives_the_events_back(seen, spans_seen):
    events, listen = seen
    got, on_spans = spans_seen
    listen("mine", CALL_AND_SEGMENT)
    bus.attach_spans("test-spans", on_spans, replacing=["mine"])
    with pytest.raises(ValueError, match="already attached"):
        bus.attach_spans("test-spans", on_spans)
    with pytest.raises(ValueError, match="already attached"):
        bus.attach("test-spans", ["e.x"], print)
    assert bus.detach("test-spans") is True
    bus.emit_span("ember.call", {}, 1, 9, children=[("ember.segment", {}, 2, 8)])
    assert got == []
    assert [n for n, _, _ in events] == SEGMENT_INSIDE_CALL


def test_a_span_handler_that_raises_is_detached_and_logged(seen, spans_seen, caplog):
    events, listen = seen
    listen("mine", CALL_AND_SEGMENT)

    def broken(span, kids):
        raise RuntimeError("boom")

    bus.attach_spans("test-spans", broken, replacing=["mine"])
    with caplog.at_level(logging.ERROR, logger="ember.recorder"):
        bus.emit_span("ember.call", {}, 1, 9)  # the caller never sees the error
    assert "test-spans" not in bus.list_handlers()
    assert "boom" in caplog.text
    bus.emit_span("ember.call", {}, 1, 9)  # the replaced handler gets the events again
    assert [n for n, _, _ in events] == ["ember.call.start", "ember.call.stop"]


def test_another_handler_of_a_sent_span_gets_its_events_as_without_a_span_handler(seen, spans_seen):
    # where a handler the span handler does not replace listens to a sent span or to one of
    # its children, every handler gets that span's events, in their order: the span handler
    # does not get it (its lines would be written apart from what the other one emits)
    events, listen = seen
    got, on_spans = spans_seen
    listen("mine", CALL_AND_SEGMENT)
    listen("other", ["ember.segment.stop"])
    bus.attach_spans("test-spans", on_spans, replacing=["mine"])
    bus.emit_span("ember.call", {}, 1, 9, children=[("ember.segment", {}, 2, 8)])
    assert got == []
    names = [n for n, _, _ in events]
    assert names == SEGMENT_INSIDE_CALL[:3] + ["ember.segment.stop", "ember.call.stop"]
    bus.detach("other")  # the span handler's alone again
    bus.emit_span("ember.call", {}, 1, 9, children=[("ember.segment", {}, 2, 8)])
    assert [span[0] for span, _ in got] == ["ember.call"]
    assert len(events) == 5


def test_a_handler_detached_for_raising_gets_no_more_events_of_a_sent_span(seen, spans_seen):
    _, listen = seen
    _, on_spans = spans_seen
    listen("mine", CALL_AND_SEGMENT)
    raised = []

    def broken(name, m, md):
        raised.append(name)
        raise RuntimeError("boom")

    bus.attach("broken", ["ember.call.start", "ember.segment.start"], broken)
    bus.attach_spans("test-spans", on_spans, replacing=["mine"])
    bus.emit_span("ember.call", {}, 1, 9, children=[("ember.segment", {}, 2, 8)])
    assert raised == ["ember.call.start"]  # detached at once, as on the event path
    assert "broken" not in bus.list_handlers()


def test_the_children_of_a_sent_span_nobody_listens_to_are_its_parents(seen, spans_seen):
    _, listen = seen
    got, on_spans = spans_seen
    listen("mine", CALL_AND_SEGMENT)
    bus.attach_spans("test-spans", on_spans, replacing=["mine"])
    with bus.span("ember.run", {}):
        outer = bus.current_span_id()
        bus.emit_span("my.own", {}, 1, 9, children=[("ember.segment", {"position": 0}, 2, 8)])
    ((span, kids),) = got  # the segment alone, a child of the open span
    assert (span[0], span[2], kids) == ("ember.segment", outer, ())
