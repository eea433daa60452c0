"""The trace lines of spans sent after they ended (``bus.emit_span``, to ``bus.attach_spans``).

A recorded whole-graph call is four lines: its call span's start, its segment's start and
end, then its end. Built as record dicts and encoded by orjson one by one they cost more
than the tiny call itself (~7.6 us a call on the Intel host, 2026-12-02). Here each line of
a call or segment span comes from a template of its span kind, with the numbers put in and
the attributes encoded once per metadata object: the runtime makes a call's and a
segment's metadata once per input shapes and never changes it after sending it (the
recorder's ``DEFERRED`` kinds), so its encoded attributes are kept by the object's
identity (with a reference to the object, so the identity is not reused). Every other span
kind is encoded by the recorder's record builders, as its events would be. The lines are
the builders' lines, key for key (``tests/recorder/test_span_lines.py`` compares them).

A drain writes up to ``DRAIN_AT`` sent spans at once (``SpanLines.many``). A call with one
segment, whose four lines come from templates, has one *pair* template: its four templates
joined, filled by one ``%`` of its twelve or so ints. One ``bytes %`` costs more to start
than to fill (on the Intel host, 2026-12-03: 1.9 us for one pair, 0.7 us a pair when 64 are
filled at once), so consecutive calls of the same pair template are filled together, by
one ``%`` of the template repeated. A drain whose calls all have one pair template (the
usual drain: one model called in a loop) takes their values column by column (``zip`` and
``map``, no Python frame per call): 1.0 us a call where ``_pair`` for each costs 1.7 (Intel
host, 2026-12-03).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, repeat
from operator import itemgetter, sub
from typing import Any

import orjson

from ember.recorder import bus

from .writer import ENCODE_OPTIONS, encode_default

__all__ = ["SpanLines", "encode_built"]

Sent = tuple["bus.CompletedSpan", tuple["bus.CompletedSpan", ...]]
"""A span sent after it ended and its children, as a span handler gets them."""

log = logging.getLogger("ember.recorder")

Build = Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]]
"""A record builder: ``build(measurements, metadata) -> record`` (``Recorder._span_builder``)."""

_START = (
    b'{"kind":"span_start","ts_ns":%d,"span_id":%d,"parent_id":PARENT,"name":NAME,'
    b'"span_kind":KIND,"attrs":ATTRS}\n'
)
_END = (
    b'{"kind":"span_end","ts_ns":%d,"span_id":%d,"duration_ns":%d,"status":"ok",'
    b'"span_kind":KIND,"attrs":ATTRS}\n'
)
_KEPT = 256  # metadata objects whose lines are kept; all dropped when full
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # the ints orjson encodes


def _ints(values: Iterable[Any]) -> bool:
    """Whether ``%d`` writes ``values`` as orjson does: ints it encodes (``%d`` would write
    a float or a bool as an int, and an int past 64 bits that orjson refuses)."""
    for v in values:  # noqa: SIM110 (all() of a generator costs more than these checks)
        if type(v) is not int or not _INT_MIN <= v <= _INT_MAX:
            return False
    return True


_ATTRS_OPTIONS = ENCODE_OPTIONS & ~orjson.OPT_APPEND_NEWLINE  # numpy arrays as lists, too


_Record = tuple[Build, dict[str, Any], Mapping[str, Any]]
"""A record to build: ``(build, measurements, metadata)``."""


def encode_built(build: Build, measurements: dict[str, Any], md: Mapping[str, Any]) -> bytes:
    """A record's line, built by ``build`` and encoded as the recorder writes every line."""
    return orjson.dumps(build(measurements, md), default=encode_default, option=ENCODE_OPTIONS)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=encode_default, option=_ATTRS_OPTIONS)


def _escaped(attrs: dict[str, Any]) -> bytes:
    """``attrs`` encoded for a template (a ``%`` in them is no placeholder)."""
    return _dumps(attrs).replace(b"%", b"%%")


class _Lines:
    """The line templates of one metadata object of a span kind, its attributes encoded in
    them: ``root % (ts, span_id)``, ``child % (ts, span_id, parent_id)``, ``end % (ts,
    span_id, duration)``; ``stops``: the end's template by the stop's keys, for stops of
    int values (``% (ts, span_id, duration, *values)``; b"": none fits that stop)."""

    __slots__ = ("child", "end", "end_attrs", "end_json", "md", "root", "stops")

    def __init__(
        self, md: Mapping[str, Any], kind: _Templated, start: dict[str, Any], end: dict[str, Any]
    ) -> None:
        self.md = md  # held: its id is not reused while these lines are kept
        start_json = _escaped(start)
        self.root = kind.root.replace(b"ATTRS", start_json)
        self.child = kind.child.replace(b"ATTRS", start_json)
        self.end_json = _escaped(end)
        self.end = kind.end.replace(b"ATTRS", self.end_json)
        self.end_attrs = end
        self.stops: dict[tuple[str, ...], bytes] = {}


class _Templated:
    """The line templates and attribute fields of one span kind (one span prefix), and the
    lines of the metadata objects it met (by identity)."""

    __slots__ = ("by_md", "child", "end", "end_fields", "root", "start_fields", "t0")

    def __init__(
        self, prefix: str, kind: str, fields: tuple[frozenset[str], frozenset[str]], t0: int
    ) -> None:
        name, span_kind = _dumps(prefix).replace(b"%", b"%%"), _dumps(kind).replace(b"%", b"%%")
        start = _START.replace(b"NAME", name).replace(b"KIND", span_kind)
        self.root = start.replace(b"PARENT", b"null")  # a span without a parent
        self.child = start.replace(b"PARENT", b"%d")
        self.end = _END.replace(b"KIND", span_kind)
        self.start_fields, self.end_fields = fields
        self.t0 = t0
        self.by_md: dict[int, _Lines] = {}

    def lines(self, span: bus.CompletedSpan) -> tuple[bytes, bytes]:
        """The span's start and end lines."""
        _, span_id, parent, md, start, end, stop_md = span
        one = self.lines_of(md)
        t0 = self.t0
        ts = start - t0 if start > t0 else 0
        first = one.root % (ts, span_id) if parent is None else one.child % (ts, span_id, parent)
        ts = end - t0 if end > t0 else 0
        if not stop_md:
            return first, one.end % (ts, span_id, end - start)
        template = self.stop_template(one, tuple(stop_md)) if _ints(stop_md.values()) else b""
        if not template:  # the end's attributes merged as the builder merges them
            merged = {**one.end_attrs, **stop_md}
            attrs = {k: v for k, v in merged.items() if k in self.end_fields}
            return first, self.end.replace(b"ATTRS", _escaped(attrs)) % (ts, span_id, end - start)
        return first, template % (ts, span_id, end - start, *stop_md.values())

    def lines_of(self, md: Mapping[str, Any]) -> _Lines:
        """The templates of the metadata object ``md``, kept by its identity."""
        one = self.by_md.get(id(md))
        return one if one is not None else self._lines_of(md)

    def stop_template(self, one: _Lines, keys: tuple[str, ...]) -> bytes:
        """The end's template for a stop of these keys, of int values (``% (ts, span_id,
        duration, *values)``); b"" where a key is not an end attribute or is one of the
        start's."""
        template = one.stops.get(keys)
        if template is None:
            template = one.stops[keys] = self._stop_template(one, keys)
        return template

    def _lines_of(self, md: Mapping[str, Any]) -> _Lines:
        start = {k: v for k, v in md.items() if k in self.start_fields}
        end = {k: v for k, v in md.items() if k in self.end_fields}
        if len(self.by_md) >= _KEPT:
            self.by_md.clear()
        one = self.by_md[id(md)] = _Lines(md, self, start, end)
        return one

    def _stop_template(self, one: _Lines, keys: tuple[str, ...]) -> bytes:
        """The end's template for a stop of these keys (int values, after the start's
        fields, as the builder's merged dict has them); b"" where a key is not an end
        attribute or is one of the start's."""
        if not self.end_fields.issuperset(keys) or not one.end_attrs.keys().isdisjoint(keys):
            return b""
        more = b",".join(_dumps(k).replace(b"%", b"%%") + b":%d" for k in keys)
        attrs = one.end_json[:-1] + (b"," if one.end_attrs else b"") + more + b"}"
        return self.end.replace(b"ATTRS", attrs)


class SpanLines:
    """``lines(span, children) -> bytes``: the lines of a span sent after it ended and of
    its children (``bus.SpanHandler``'s arguments), in the order of their events.

    ``kinds``: span prefix -> span kind (``SPANS``); ``templated``: the span kinds encoded
    from templates (their metadata is never changed after it is sent), with ``fields``:
    span kind -> (start attribute fields, end attribute fields); ``builder(prefix, phase)``
    the record builder of the others; ``t0``: the run's start (``time.monotonic_ns()``).
    """

    def __init__(
        self,
        t0: int,
        kinds: Mapping[str, str],
        templated: frozenset[str],
        fields: Mapping[str, tuple[frozenset[str], frozenset[str]]],
        builder: Callable[[str, str], Build],
    ) -> None:
        self._kinds = kinds
        self._builder = builder
        self._templates = {
            prefix: _Templated(prefix, kind, fields[kind], t0)
            for prefix, kind in kinds.items()
            if kind in templated
        }
        self._built_by: dict[tuple[str, str], Build] = {}
        self._t0 = t0
        # the pair templates (``_pair``): (span prefix, child prefix, id of the span's
        # metadata, id of the child's, whether the span has no parent, the stop's keys)
        # -> (both metadata objects, held, and the template; b"": none)
        self._pairs: dict[tuple[Any, ...], tuple[Any, Any, bytes]] = {}

    def __call__(self, span: bus.CompletedSpan, kids: tuple[bus.CompletedSpan, ...]) -> bytes:
        try:
            return self._lines(span, kids)
        except Exception:  # something orjson cannot encode: lose only the records holding it
            return self._record_by_record(span, kids)

    def many(self, sent: Sequence[Sent]) -> bytes:
        """The lines of spans sent one after another (a drain's), in their order: each
        one's ``self(span, kids)``, joined. Calls in a row of one pair template (a call and
        its one segment) are filled by one ``%``."""
        if len(sent) > 1:
            try:
                whole = self._one_template(sent)
            except Exception:  # something a template cannot take: call by call below
                whole = None
            if whole is not None:
                return whole
        out: list[bytes] = []
        run: list[Sent] = []  # the open run: calls of the pair template ``template``
        template, values = b"", list[Any]()  # the run's template and its values, in order
        for one in sent:
            try:
                pair = self._pair(*one)
            except Exception:  # something orjson cannot encode: self() writes the rest
                pair = None
            if run and (pair is None or pair[0] is not template):
                out.append(self._fill(template, run, values))
                run, values = [], []
            if pair is None:
                out.append(self(*one))
                continue
            template = pair[0]
            run.append(one)
            values += pair[1]
        if run:
            out.append(self._fill(template, run, values))
        return b"".join(out)

    def _fill(self, template: bytes, run: list[Sent], values: list[Any]) -> bytes:
        try:
            return (template * len(run)) % tuple(values)
        except Exception:  # not expected (the values are ints): each call on its own
            return b"".join(self(*one) for one in run)

    def _pair(
        self, span: bus.CompletedSpan, kids: tuple[bus.CompletedSpan, ...]
    ) -> tuple[bytes, tuple[Any, ...]] | None:
        """A span with one child, both of template kinds and the child without stop
        metadata: its pair template (its start, the child's start and end, its end: the
        templates ``lines`` uses, joined) and the values that fill it. None for any other."""
        if len(kids) != 1:
            return None
        prefix, span_id, parent, md, start, end, stop_md = span
        kid_prefix, kid_id, kid_parent, kid_md, kid_start, kid_end, kid_stop = kids[0]
        if kid_stop or kid_parent is None:
            return None
        root = parent is None
        keys = tuple(stop_md) if stop_md else ()
        # by the metadata objects' identity: the entry holds both, so neither id is reused
        key = (prefix, kid_prefix, id(md), id(kid_md), root, keys)
        pair = self._pairs.get(key)
        if pair is None:
            pair = self._new_pair(key, span, kids[0])
        template = pair[2]
        if not template or (stop_md and not _ints(stop_md.values())):
            return None
        t0 = self._t0
        # the builders' ts_ns: since the run's start, never below 0
        ts, ends = (start - t0 if start > t0 else 0), (end - t0 if end > t0 else 0)
        kid_ts, kid_ends = (
            (kid_start - t0 if kid_start > t0 else 0),
            (kid_end - t0 if kid_end > t0 else 0),
        )
        kid = (kid_ts, kid_id, kid_parent, kid_ends, kid_id, kid_end - kid_start, ends, span_id)
        if stop_md:
            if root:
                return template, (ts, span_id, *kid, end - start, *stop_md.values())
            return template, (ts, span_id, parent, *kid, end - start, *stop_md.values())
        if root:
            return template, (ts, span_id, *kid, end - start)
        return template, (ts, span_id, parent, *kid, end - start)

    def _one_template(self, sent: Sequence[Sent]) -> bytes | None:
        """The lines of calls that all have the first one's pair template (``_pair``), filled
        from their values taken column by column; None where one differs in any way the
        template depends on, or starts before the run (its ``ts_ns`` would be clamped)."""
        spans, kids = zip(*sent, strict=True)
        if spans[0][3] is not spans[-1][3]:  # two shapes at least: not worth the columns
            return None
        if set(map(len, kids)) != {1}:
            return None
        prefixes, ids, parents, mds, starts, ends, stops = zip(*spans, strict=True)
        kid_prefixes, kid_ids, kid_parents, kid_mds, kid_starts, kid_ends, kid_stops = zip(
            *map(itemgetter(0), kids), strict=True
        )
        n = len(sent)
        if (
            len(set(map(id, mds))) != 1  # by identity, as the template is kept
            or len(set(map(id, kid_mds))) != 1
            or prefixes.count(prefixes[0]) != n
            or kid_prefixes.count(kid_prefixes[0]) != n
            or kid_stops.count(None) != n
            or kid_parents.count(None)
        ):
            return None
        root = parents[0] is None
        if parents.count(None) != (n if root else 0):
            return None
        t0 = self._t0
        if min(min(starts), min(ends), min(kid_starts), min(kid_ends)) <= t0:
            return None
        first = self._pair(*sent[0])
        if first is None:
            return None
        stop = stops[0]
        keys = tuple(stop) if stop else ()
        stop_values: list[list[Any]] = []
        if keys:
            if len(set(map(tuple, stops))) != 1:  # (a None among them: TypeError)
                return None
            for key in keys:
                column = list(map(itemgetter(key), stops))
                if set(map(type, column)) != {int} or not (
                    min(column) >= _INT_MIN and max(column) <= _INT_MAX
                ):
                    return None
                stop_values.append(column)
        elif stops.count(None) + stops.count({}) != n:
            return None
        since = repeat(t0)
        columns = [
            map(sub, starts, since),
            ids,
            *([] if root else [parents]),
            map(sub, kid_starts, since),
            kid_ids,
            kid_parents,
            map(sub, kid_ends, since),
            kid_ids,
            map(sub, kid_ends, kid_starts),
            map(sub, ends, since),
            ids,
            map(sub, ends, starts),
            *stop_values,
        ]
        return (first[0] * n) % tuple(chain.from_iterable(zip(*columns, strict=True)))

    def _new_pair(
        self, key: tuple[Any, ...], span: bus.CompletedSpan, kid: bus.CompletedSpan
    ) -> tuple[Any, Any, bytes]:
        """The pair template of ``key`` (``_pair``'s), kept with both metadata objects; b""
        where the span or its child has no template, or no end template takes the stop."""
        prefix, _, parent, md, _, _, stop_md = span
        t, k = self._templates.get(prefix), self._templates.get(kid[0])
        template = b""
        if t is not None and k is not None:
            one, child = t.lines_of(md), k.lines_of(kid[3])
            last = t.stop_template(one, tuple(stop_md)) if stop_md else one.end
            if last:
                template = (one.root if parent is None else one.child) + child.child
                template += child.end + last
        if len(self._pairs) >= _KEPT:
            self._pairs.clear()
        pair = self._pairs[key] = (md, kid[3], template)
        return pair

    def _lines(self, span: bus.CompletedSpan, kids: tuple[bus.CompletedSpan, ...]) -> bytes:
        templates = self._templates
        t = templates.get(span[0])
        first, last = t.lines(span) if t is not None else self._built(span)
        if not kids:
            return first + last
        lines = [first]
        for kid in kids:
            t = templates.get(kid[0])
            lines += t.lines(kid) if t is not None else self._built(kid)
        lines.append(last)
        return b"".join(lines)

    def _built(self, span: bus.CompletedSpan) -> tuple[bytes, bytes]:
        """The lines of a span kind without a template, from the recorder's record builder."""
        records = self._records(span)
        if not records:  # a span the recorder does not record
            return b"", b""
        return encode_built(*records[0]), encode_built(*records[1])

    def _records(self, span: bus.CompletedSpan) -> list[_Record]:
        """The span's start and end records, unencoded, as its events would be built (none
        for a span the recorder does not record)."""
        prefix, span_id, parent, md, start, end, stop_md = span
        if prefix not in self._kinds:
            return []
        meta = {**md, "span_id": span_id, "parent_id": parent}
        stop_meta = {**meta, **stop_md} if stop_md else meta
        return [
            (self._build(prefix, "start"), {"monotonic_time": start}, meta),
            (
                self._build(prefix, "stop"),
                {"duration": end - start, "monotonic_time": end},
                stop_meta,
            ),
        ]

    def _record_by_record(
        self, span: bus.CompletedSpan, kids: tuple[bus.CompletedSpan, ...]
    ) -> bytes:
        """The lines from the record builders, each encoded alone: one that cannot be is
        logged and left out, as the event path does, and the others are written."""
        outer = self._records(span)
        records = outer[:1] + [r for kid in kids for r in self._records(kid)] + outer[1:]
        lines = []
        for build, measurements, md in records:
            try:
                lines.append(encode_built(build, measurements, md))
            except Exception as exc:
                log.error("ember: a record could not be written (%r): %s", md, exc)
        return b"".join(lines)

    def _build(self, prefix: str, phase: str) -> Build:
        build = self._built_by.get((prefix, phase))
        if build is None:
            build = self._built_by[prefix, phase] = self._builder(prefix, phase)
        return build
