"""Import torch.compile's structured logs (``TORCH_TRACE=DIR``) as Ember traces.

One log is one process (rank). Its format (``torch/_logging/_internal.py``): each entry is
one line, a glog prefix (``V1202 01:18:58.386000 384 torch/_dynamo/utils.py:2350]``,
``[rank0]:`` before it in a distributed job) then a JSON envelope; an envelope with
``has_payload`` (the md5 of the payload) is followed by the payload, one ``\\t``-indented
line per payload line. A line that is neither, an envelope that is not JSON, or a payload
whose md5 differs is *rejected* (``file:line: reason``) and the rest is kept.

The mapping (no record kind is added; the fields added to v3 are optional):

===========================  ===============================================================
torch.compile                Ember
===========================  ===============================================================
a frame compile              a ``jit`` span: ``fun_name`` = ``co_name``, ``defined_at`` =
(``compilation_metrics``,    ``co_filename:co_firstlineno``, ``compile_id`` = ``0/1``
``compile_id`` F/C, attempt) (``0/1_2`` for attempt 2); phases: ``tracing_ns`` = Dynamo
                             (the whole compile less the backend), ``lowering_ns`` =
                             AOTAutograd (backend less Inductor), ``backend_compile_ns`` =
                             Inductor; ``guard_count``, ``cache_size``; a failed compile
                             ends with status error (``fail_type``: ``fail_reason``)
recompile_reason             ``retrace_reason`` (``x dim 0: 8 -> 16``) and typed
                             ``changes`` (shape); not a shape: the guard kept whole
recompile limit              the compile that failed on it: ``recompile_limit`` (the limit)
                             and ``recompile_limit_hit``: the frame runs eagerly from then
bwd_compilation_metrics      a second ``jit`` span, ``fun_name`` + `` (backward)``
fx_graph_cache_hit/miss/     the compile's ``torch_caches``: one lookup each (cache, hit |
bypass, aotautograd_cache_*  miss | bypass, torch's key, time saved); a lookup the metrics
(and the metrics' counts)    count whose artifact the log lacks has no key. Not ``cache``
                             events: those are Ember's segment cache (a miss there is a
                             compile). The FX cache's is also ``persistent_cache`` (hit:
                             all hit)
dynamo_graph_break_reason    a ``break`` span (duration 0): ``position`` = frame id,
                             ``source`` = the function, ``node`` = the user's file:line,
                             ``op_type`` = torch's short reason, ``reason`` = its
                             explanation line, ``user_stack`` = the user code traceback
                             (``file:line in fun``, outermost first)
a log / a TORCH_TRACE dir    a run (meta): ``pid`` and ``versions.torch`` from the log,
                             ``backend: torch.compile``, tags ``rank`` and ``job`` (the
                             folder's name; a log with a rank also has them as
                             ``job_id``/``rank``); ``phase: train`` when a backward compiled
===========================  ===============================================================
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    with_config,
)
from typing_extensions import TypedDict

from ember.analysis.imported import Imported, span_end_record, span_start_record
from ember.analysis.ingest.plan import expand_paths
from ember.schemas import RECORD, SCHEMA_ID, explain
from ember.schemas.records import INT64_MAX, MAX_RUN_NS, MAX_WALL_TIME_NS

__all__ = [
    "Conversion",
    "Entry",
    "TorchImportError",
    "TorchImportResult",
    "import_torch_trace",
    "parse_recompile_reason",
    "read_entries",
    "work_trace",
]

IMPORTED_FROM = "torch_trace"

_PREFIX = re.compile(
    r"^(?:\[rank(?P<rank>\d+)\]:)?(?P<level>[A-Z])(?P<md>\d{4}) "
    r"(?P<time>\d\d:\d\d:\d\d\.\d+) +(?P<pid>\d+) (?P<where>[^\]]+)\][^{]*(?P<json>\{.*)$"
)
_SIZE_MISMATCH = re.compile(
    r"^(?:\d+/\d+: )?tensor '(?P<arg>[^']+)' size mismatch at index (?P<dim>\d+)\. "
    r"expected (?P<old>\d+), actual (?P<new>\d+)$"
)
_DTYPE_MISMATCH = re.compile(
    r"^(?:\d+/\d+: )?tensor '(?P<arg>[^']+)' dtype mismatch\. "
    r"expected (?P<old>\S+), actual (?P<new>\S+)$"
)
_LIMIT = re.compile(r"recompile_limit cache size limit \(currently set to (\d+)\)")
_BREAK_AT = re.compile(r"Graph break in user code at (?P<at>\S+)")
_BREAK_WHY = re.compile(r"Graph Break Reason: (?P<why>.+)")
_BREAK_EXPLAINED = re.compile(r"^\s*Explanation: (?P<text>.+)$", re.M)
_USER_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fun>.+)$')
_CACHE_ARTIFACT = re.compile(r"^(?P<cache>fx_graph|aotautograd)_cache_(?P<action>hit|miss|bypass)$")
# each cache's counts in compilation_metrics (their prefixes)
_CACHES = {
    "fx_graph": ("inductor_fx_local_cache", "inductor_fx_remote_cache"),
    "aotautograd": ("aotautograd_local_cache", "aotautograd_remote_cache"),
}


class TorchImportError(ValueError):
    """A TORCH_TRACE log that cannot be imported at all (no entry, unreadable)."""


@dataclass
class Entry:
    """One log entry: its envelope, its checked payload (or None) and where it starts."""

    line: int
    ts_ns: int
    pid: int
    rank: int | None
    envelope: dict[str, Any]
    payload: str | None


@dataclass
class TorchImportResult(Imported):
    rejected: list[str] = field(default_factory=list)
    compiles: int = 0


# ---------------------------------------------------------------- what an entry may hold
#
# The envelope fields the mapping reads, typed (pydantic): an entry whose field has another
# type, a number out of range (2**70, Infinity, NaN) or text that is not UTF-8 (a lone
# surrogate) is rejected with the field named; the fields it does not read are not checked.


def _utf8(text: str) -> str:
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("unicode_escape").decode()
        raise ValueError(f"not UTF-8 text (a lone surrogate {bad})") from None
    return text


_Count = Annotated[int, Strict(), Field(ge=0, le=INT64_MAX)]
_Text = Annotated[str, Strict(), AfterValidator(_utf8)]
# compile times: seconds (or microseconds) from 0 to the longest run a trace holds
_Seconds = Annotated[float, Strict(), Field(ge=0, le=MAX_RUN_NS / 1e9, allow_inf_nan=False)]
_Micros = Annotated[float, Strict(), Field(ge=0, le=MAX_RUN_NS / 1e3, allow_inf_nan=False)]
_EpochSeconds = Annotated[
    float, Strict(), Field(ge=0, le=MAX_WALL_TIME_NS / 1e9, allow_inf_nan=False)
]
# one compile's cache lookups the metrics count (a handful in a real log): each becomes an
# element of the compile's ``torch_caches``
_Lookups = Annotated[int, Strict(), Field(ge=0, le=1000)]

_OPEN = ConfigDict(extra="allow")


@with_config(_OPEN)
class _FrameFields(TypedDict, total=False):
    line: _Count | None
    name: _Text | None
    filename: _Count | None


@with_config(_OPEN)
class _DynamoStartFields(TypedDict, total=False):
    stack: list[_FrameFields] | None


@with_config(_OPEN)
class _ArtifactFields(TypedDict, total=False):
    name: _Text | None


@with_config(_OPEN)
class _MetricsFields(TypedDict, total=False):
    co_name: _Text | None
    co_filename: _Text | None
    co_firstlineno: _Count | None
    start_time: _EpochSeconds | None
    entire_frame_compile_time_s: _Seconds | None
    backend_compile_time_s: _Seconds | None
    inductor_compile_time_s: _Seconds | None
    backward_cumulative_compile_time_us: _Micros | None
    guard_count: _Count | None
    cache_size: _Count | None
    recompile_reason: _Text | None
    fail_type: _Text | None
    fail_reason: _Text | None
    inductor_fx_local_cache_hit_count: _Lookups | None
    inductor_fx_local_cache_miss_count: _Lookups | None
    inductor_fx_remote_cache_hit_count: _Lookups | None
    inductor_fx_remote_cache_miss_count: _Lookups | None
    aotautograd_local_cache_hit_count: _Lookups | None
    aotautograd_local_cache_miss_count: _Lookups | None
    aotautograd_remote_cache_hit_count: _Lookups | None
    aotautograd_remote_cache_miss_count: _Lookups | None


@with_config(_OPEN)
class _EnvelopeFields(TypedDict, total=False):
    frame_id: _Count | None
    frame_compile_id: _Count | None
    attempt: _Count | None
    compiled_autograd_id: _Count | None
    rank: _Count | None
    has_payload: _Text | None
    str: tuple[_Text, _Count]
    dynamo_start: _DynamoStartFields
    artifact: _ArtifactFields
    compilation_metrics: _MetricsFields
    bwd_compilation_metrics: _MetricsFields


_ENVELOPE = TypeAdapter(_EnvelopeFields).validator  # the validator itself: once an entry


class _BadJSON(ValueError):
    """Text that is not JSON Ember reads; the message says what is wrong."""


def _loads(text: str) -> Any:
    """JSON as Python's ``json`` writes it (torch's logger): orjson, or where it refuses
    (``NaN``/``Infinity``, an integer past 64 bits, a lone surrogate, deeper than 1024)
    Python's ``json``, whose ``NaN`` is a float the typed fields then refuse."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except RecursionError:
        raise _BadJSON("it is nested too deep to read") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of over 4300 digits
        raise _BadJSON(str(exc)) from None


def _payload_error(envelope: dict[str, Any], payload: str | None) -> str | None:
    want = envelope.get("has_payload")
    if want is None:
        return "payload lines after an entry without has_payload" if payload is not None else None
    got = hashlib.md5((payload or "").encode(), usedforsecurity=False).hexdigest()
    if got != want:
        return f"payload md5 {got} differs from has_payload {want} (a cut or edited payload)"
    return None


# ---------------------------------------------------------------- glog's clock and the year
#
# glog writes ``MMDD HH:MM:SS.us`` of the local clock, with no year. The year of each line:
# the one that puts it nearest the line before (a log spans New Year: 1231 then 0101 is the
# next year; a line a thread wrote a moment late, 1231 after 0101, the year before), and for
# the whole log the latest such that its last moment is not after the file's mtime (a day
# later at most: the mtime is UTC, the clock local; today where the mtime is before 2001, as
# a build tool resets it), and a 29 February in a leap year (the nearest not after that).

_YEAR = 372  # a year's positions: month * 31 + day (+ the day's fraction), with room
_MONTH = 31
_MTIME_SLACK = timedelta(days=1)  # time zones: glog's clock is local, the mtime UTC


def _glog_date(md: str, clock: str) -> tuple[int, int, int] | str:
    """(month, day, seconds of the day) of a line's prefix, or what is wrong with it."""
    month, day = int(md[:2]), int(md[2:])
    h, m, s = (int(x) for x in clock[:8].split(":"))
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(2000, month)[1]:
        return f"the date {md} (MMDD) is no day of the year"
    if h > 23 or m > 59 or s > 59:
        return f"the time {clock[:8]} is no time of day"
    return month, day, h * 3600 + m * 60 + s


class _Years:
    """Each line's year offset from the log's first (0, or 1 after a New Year).

    A line's year is the one nearest the latest line (``at``); a line more than a month
    after it moves ``at`` only when the next line is near it too, so that one odd line
    (a corrupt date) does not move the rest of the log into another year.
    """

    def __init__(self) -> None:
        self.offset = 0
        self.latest: tuple[int, int, int] | None = None  # the latest (month, day, seconds)
        self.at = 0.0  # its position: offset * _YEAR + month * 31 + day + fraction
        self.far: float | None = None  # the position of a line far after ``at``
        self.key = ""  # the last line's MMDD HH:MM:SS, and its answer (a second's lines
        self.answer: tuple[tuple[int, int, int] | str, int] = ("", 0)  # are many)

    def line(self, md: str, clock: str) -> tuple[tuple[int, int, int] | str, int]:
        """A line's (month, day, seconds) or what is wrong with its date, and its offset."""
        key = md + clock[:8]
        if key != self.key:
            date = _glog_date(md, clock)
            self.key, self.answer = key, (date, self.of(*date) if isinstance(date, tuple) else 0)
        return self.answer

    def of(self, month: int, day: int, seconds: int) -> int:
        here = month * 31 + day + seconds / 86400
        if self.latest is None:
            self.latest, self.at = (month, day, seconds), here
            return 0
        offset = self.nearest(here, self.at)
        position = offset * _YEAR + here
        moves = 0 < position - self.at < _MONTH
        if self.far is not None:  # a line far after ``at`` came before: is this one near it?
            beside = self.nearest(here, self.far)
            if abs(beside * _YEAR + here - self.far) < _MONTH and beside * _YEAR + here > self.at:
                offset, position, moves = beside, beside * _YEAR + here, True
        if moves:
            self.offset, self.latest, self.at = offset, (month, day, seconds), position
        self.far = position if not moves and position - self.at >= _MONTH else None
        return offset

    def nearest(self, here: float, to: float) -> int:
        """The year offset that puts ``here`` nearest the position ``to``."""
        k = round((to - here) / _YEAR)
        return min((k, k + 1, k - 1), key=lambda j: abs(j * _YEAR + here - to))


_HEAD_DATE = re.compile(
    rb"\n(?:\[rank\d+\]:)?[A-Z](\d{4}) (\d\d:\d\d:\d\d)\.\d+ +\d+ [^\]\n]+\][^{\n]*\{"
)


def _start_year(path: Path) -> int:
    """The year of the log's first line, from its dates and its mtime (see above)."""
    mtime = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    if mtime.year < 2001:  # reset by a build or copy tool (0 in a Nix store): no clue
        mtime = datetime.now(UTC)
    mtime += _MTIME_SLACK
    years, leap_days = _Years(), set()
    rest = b"\n"
    with path.open("rb") as f:
        while block := f.read(_PIECE_BYTES):
            data = rest + block
            cut = data.rfind(b"\n")
            rest = data[cut:]
            for m in _HEAD_DATE.finditer(data, 0, cut + 1):
                date, offset = years.line(m[1].decode(), m[2].decode())
                if date[:2] == (2, 29):
                    leap_days.add(offset)
        for m in _HEAD_DATE.finditer(rest + b"\n"):
            date, offset = years.line(m[1].decode(), m[2].decode())
            if date[:2] == (2, 29):
                leap_days.add(offset)
    if years.latest is None:
        return mtime.year
    limit = (mtime.month, mtime.day, mtime.hour * 3600 + mtime.minute * 60 + mtime.second)
    last_year = mtime.year if years.latest <= limit else mtime.year - 1
    start = last_year - years.offset
    for _ in range(8):  # a 29 February: the nearest leap year before (2100 is none)
        if all(calendar.isleap(start + k) for k in leap_days):
            break
        start -= 1
    return start


# ---------------------------------------------------------------- reading


_PIECE_BYTES = 8 << 20
_HEAD_START = re.compile(r"\n(?!\t)")  # the end of a line before one that is not a payload


def _pieces(path: Path) -> Iterator[str]:
    """The log's text in pieces of about 8 MiB, each cut just before an entry's line."""
    rest = b""
    with path.open("rb") as f:
        while block := f.read(_PIECE_BYTES):
            data = rest + block
            cut = data.rfind(b"\n")
            while cut >= 0 and data[cut + 1 : cut + 2] in (b"\t", b""):
                cut = data.rfind(b"\n", 0, cut)
            if cut < 0:  # one entry's payload is bigger than the piece: read on
                rest = data
                continue
            rest = data[cut + 1 :]
            yield data[: cut + 1].decode("utf-8", errors="replace")
    if rest:
        yield rest.decode("utf-8", errors="replace")


def _number(digits: str | None) -> int | str | None:
    """A prefix's pid or rank, or what is wrong with it."""
    if digits is None:
        return None
    if len(digits) < 19:  # most
        return int(digits)
    if len(digits) > 19 or int(digits) > INT64_MAX:
        return f"{digits[:24]}{'...' if len(digits) > 24 else ''} is past 64 bits"
    return int(digits)


@dataclass
class _Reader:
    """Reads one log's pieces into checked entries; what fails goes to ``rejected``."""

    path: Path
    rejected: list[str]
    start_year: int
    years: _Years = field(default_factory=_Years)
    second: tuple[int, tuple[int, int, int]] | None = None
    whole: int = 0

    def entries(self, text: str, first_line: int) -> Iterator[Entry]:
        # each line that is not a payload line, and the payload lines (``\t``) after it,
        # whole: a regex finds where each such line starts (a newline not followed by a
        # tab: a fast search for the newline), no Python loop over payload lines
        starts = [m.end() for m in _HEAD_START.finditer(text)]
        if not text.startswith("\t"):
            starts.insert(0, 0)
        elif text:  # payload lines before any entry
            self.orphans(text[: starts[0] - 1] if starts else text, first_line)
        number, counted = first_line, 0
        for i, start in enumerate(starts):
            number += text.count("\n", counted, start)
            counted = start
            end = starts[i + 1] - 1 if i + 1 < len(starts) else len(text)
            eol = text.find("\n", start, end)
            line = text[start:end] if eol < 0 else text[start:eol]
            payload = text[eol + 1 : end] if eol >= 0 else None
            head = _PREFIX.match(line) if line.strip() else None
            if head is None:
                if line.strip():
                    self.reject(number, "not a TORCH_TRACE entry (a glog prefix, then JSON)")
                if payload:
                    self.orphans(payload, number + 1)
                continue
            if payload:
                payload = payload[1:].replace("\n\t", "\n")
            entry = self.entry(number, head, payload or None)
            if entry is not None:
                yield entry

    def reject(self, number: int, why: str) -> None:
        self.rejected.append(f"{self.path}:{number}: {why}")

    def orphans(self, payload: str, number: int) -> None:
        for i in range(payload.count("\n") + 1):
            self.reject(number + i, "a payload line before any entry")

    def entry(self, number: int, m: re.Match[str], payload: str | None) -> Entry | None:
        date, offset = self.years.line(m["md"], m["time"])  # before the JSON: as _start_year
        if isinstance(date, str):
            self.reject(number, f"the glog prefix is wrong: {date}")
            return None
        year = self.start_year + offset
        pid, rank = _number(m["pid"]), _number(m["rank"])
        if isinstance(pid, str) or isinstance(rank, str):
            what, value = ("pid", pid) if isinstance(pid, str) else ("rank", rank)
            self.reject(number, f"the glog prefix is wrong: its {what} {value}")
            return None
        if date[:2] == (2, 29) and not calendar.isleap(year):
            self.reject(number, f"29 February in {year}, not a leap year (the year is a guess)")
            return None
        try:
            envelope = _ENVELOPE.validate_python(_loads(m["json"]))
        except _BadJSON as exc:
            self.reject(number, f"the entry is not JSON: {exc}")
            return None
        except ValidationError as exc:
            first = exc.errors()[0]
            if first["type"] == "dict_type" and not first["loc"]:
                self.reject(number, "the entry is not a JSON object")
            else:
                self.reject(number, f"a field holds what torch does not write: {explain(exc)}")
            return None
        error = _payload_error(envelope, payload)
        if error is not None:
            self.reject(number, error)
            return None
        assert pid is not None
        return Entry(
            number,
            self.epoch_ns(year, date, m["time"]),
            pid,
            rank,
            envelope,
            payload if envelope.get("has_payload") is not None else None,
        )

    def epoch_ns(self, year: int, date: tuple[int, int, int], clock: str) -> int:
        # glog's local clock, read as UTC; the last second's epoch is kept (thousands of
        # entries share one)
        frac = clock.partition(".")[2]
        if (year, date) != self.second:
            month, day, secs = date
            self.second = (year, date)
            self.whole = calendar.timegm((year, month, day, 0, 0, secs))
        return self.whole * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


def read_entries(path: Path, rejected: list[str], start_year: int | None = None) -> Iterator[Entry]:
    """The entries of one log, each checked; what fails goes to ``rejected``.

    ``start_year`` is the year of the log's first line; by default it is inferred from the
    log's dates and its mtime (glog's prefix has no year): the log's last line is not after
    the mtime (a day's slack: glog's clock is local), a month that goes back (12 to 01) is a
    new year, and a 29 February falls in a leap year.
    """
    reader = _Reader(path, rejected, _start_year(path) if start_year is None else start_year)
    first_line = 1
    for text in _pieces(path):
        yield from reader.entries(text, first_line)
        first_line += text.count("\n")


def parse_recompile_reason(text: str) -> tuple[str, list[dict[str, Any]]]:
    """torch's recompile reason as Ember phrases it, and its typed changes.

    ``0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16`` is
    ``x dim 0: 8 -> 16`` (a shape change); a dtype mismatch a dtype change; any other
    guard failure is kept whole (``0/0: k == 0``, its first line) with no typed change.
    Several reasons (one per cached entry it failed) are joined by ``; ``.
    """
    phrases, changes = [], []
    for reason in _reason_lines(text):
        m = _SIZE_MISMATCH.match(reason)
        if m is not None:
            phrases.append(f"{m['arg']} dim {m['dim']}: {m['old']} -> {m['new']}")
            changes.append(
                {
                    "arg": m["arg"],
                    "what": "shape",
                    "old": m["old"],
                    "new": m["new"],
                    "dim": int(m["dim"]),
                }
            )
            continue
        m = _DTYPE_MISMATCH.match(reason)
        if m is not None:
            phrases.append(f"{m['arg']} dtype: {m['old']} -> {m['new']}")
            changes.append({"arg": m["arg"], "what": "dtype", "old": m["old"], "new": m["new"]})
            continue
        phrases.append("guard failed: " + reason)
    return "; ".join(phrases), changes


def _reason_lines(text: str) -> list[str]:
    # compilation_metrics' recompile_reason: one guard failure (the latest cached entry's);
    # its first line is the guard, the rest the user stack. The source comment torch adds
    # after the guard (`# return x * k  # file:53 in g`) is dropped.
    first = text.strip().split("\n", 1)[0]
    return [re.sub(r"\s+#.*$", "", first).strip()] if first else []


# ---------------------------------------------------------------- the mapping


@dataclass
class _Compile:
    compile_id: str
    frame_id: int
    start_ns: int
    fun_name: str | None = None
    defined_at: str | None = None
    cache: str | None = None
    # the cache lookups the artifacts said since this compile's last metrics
    lookups: list[dict[str, Any]] = field(default_factory=list)


class _Run:
    """Collects one log's entries into Ember records, in time order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.compiles: dict[str, _Compile] = {}
        self.strings: dict[int, str] = {}
        self.names: dict[str, int] = {}
        self.records: list[dict[str, Any]] = []
        self.t0: int | None = None
        self.next_span = 1
        self.torch_version: str | None = None
        self.pid = 0
        self.rank: int | None = None

    def rel(self, epoch_ns: int) -> int:
        assert self.t0 is not None
        return max(0, epoch_ns - self.t0)

    def compile_for(self, env: dict[str, Any], ts_ns: int) -> _Compile | None:
        if env.get("frame_id") is None:
            return None
        cid = _compile_id(env)
        if cid not in self.compiles:
            self.compiles[cid] = _Compile(cid, int(env["frame_id"]), ts_ns)
        return self.compiles[cid]

    def add(self, entry: Entry) -> None:
        env = entry.envelope
        if self.t0 is None:
            self.t0, self.pid, self.rank = entry.ts_ns, entry.pid, entry.rank
        if env.get("rank") is not None:  # torch.distributed puts it in each entry
            self.rank = env["rank"]
        if "str" in env:
            text, index = env["str"]
            self.strings[int(index)] = str(text)
            return
        comp = self.compile_for(env, entry.ts_ns)
        if "dynamo_start" in env and comp is not None:
            comp.start_ns = entry.ts_ns
            frame: dict[str, Any] = (env["dynamo_start"].get("stack") or [{}])[-1]
            comp.fun_name = frame.get("name")
            index = frame.get("filename")  # into the string table (``str`` entries)
            file = self.strings.get(index, "?") if index is not None else "?"
            comp.defined_at = f"{file}:{frame.get('line')}"
        elif "artifact" in env:
            self.artifact(entry, env["artifact"].get("name") or "", comp)
        elif "compilation_metrics" in env and comp is not None:
            self.compile_span(entry, comp, env["compilation_metrics"], backward=False)
        elif "bwd_compilation_metrics" in env and comp is not None:
            self.compile_span(entry, comp, env["bwd_compilation_metrics"], backward=True)

    def unique_name(self, name: str, frame_id: int) -> str:
        # Ember keys a function's compiles by its name; torch by frame (code object). Two
        # frames of one name (the resume functions of both branches after a graph break)
        # are two functions: the second is named `name [frame N]`
        owner = self.names.setdefault(name, frame_id)
        return name if owner == frame_id else f"{name} [frame {frame_id}]"

    def frame_name(self, frame_id: int) -> str:
        # a compile refused before tracing (the recompile limit) names no function: the
        # frame's earlier compiles do
        names = [c.fun_name for c in self.compiles.values() if c.frame_id == frame_id]
        return next((n for n in names if n), "?")

    def artifact(self, entry: Entry, name: str, comp: _Compile | None) -> None:
        if name == "torch_version" and entry.payload:
            version = _payload_json(entry.payload, name)
            if isinstance(version, dict):
                version = version.get("pytorch_version")
            if not isinstance(version, str):
                raise _BadEntry("the torch_version payload names no version (pytorch_version)")
            self.torch_version = _text(version, "the torch_version payload")
        elif (m := _CACHE_ARTIFACT.match(name)) is not None and comp is not None:
            self.cache_artifact(entry, comp, m["cache"], m["action"])
        elif name == "dynamo_graph_break_reason" and comp is not None:
            self.graph_break(entry, comp)

    def cache_artifact(self, entry: Entry, comp: _Compile, cache: str, action: str) -> None:
        payload = _payload_json(entry.payload, f"{cache}_cache_{action}") if entry.payload else {}
        if not isinstance(payload, dict):
            payload = {}
        lookup: dict[str, Any] = {"cache": cache, "action": action}
        if isinstance(payload.get("key"), str):
            lookup["key"] = _text(payload["key"], "the cache key")
        saved = payload.get("time_saved_ms")
        if action == "hit" and isinstance(saved, (int, float)) and 0 <= saved <= MAX_RUN_NS / 1e6:
            lookup["time_saved_ns"] = int(saved * 1e6)
        comp.lookups.append(lookup)

    def counted_lookups(self, comp: _Compile, m: dict[str, Any]) -> list[dict[str, Any]]:
        """The compile's cache lookups: its artifacts', and those the metrics count whose
        artifact the log lacks (a trimmed log, an older torch), without their key."""
        lookups, comp.lookups = comp.lookups, []
        for cache, prefixes in _CACHES.items():
            for action in ("hit", "miss"):
                counted = sum(_count(m, f"{p}_{action}_count") for p in prefixes)
                # a bypass compiles like a miss (torch may count it as one)
                actions = ("miss", "bypass") if action == "miss" else ("hit",)
                seen = sum(1 for x in lookups if x["cache"] == cache and x["action"] in actions)
                lookups += [{"cache": cache, "action": action}] * max(counted - seen, 0)
        fx = [x["action"] for x in lookups if x["cache"] == "fx_graph"]
        if fx:  # the frame's graphs all hit, or the compile missed
            comp.cache = "hit" if all(a == "hit" for a in fx) else "miss"
        return lookups

    def span_id(self) -> int:
        self.next_span += 1
        return self.next_span - 1

    def graph_break(self, entry: Entry, comp: _Compile) -> None:
        text = entry.payload or ""
        at, why = _BREAK_AT.search(text), _BREAK_WHY.search(text)
        attrs = {
            "position": comp.frame_id,
            "node": at["at"] if at else (comp.defined_at or "?"),
            "op_type": why["why"].strip() if why else "graph break",
            "reason": _break_reason(text),
            "source": comp.fun_name,
            "user_stack": _user_stack(text),
        }
        sid, ts = self.span_id(), self.rel(entry.ts_ns)
        self.records.append(_span_start(ts, sid, "torch.graph_break", "break", attrs))
        self.records.append(span_end_record(ts, sid, 0, "break", attrs))

    def compile_span(self, entry: Entry, comp: _Compile, m: dict[str, Any], backward: bool) -> None:
        fun = self.unique_name(
            m.get("co_name") or comp.fun_name or self.frame_name(comp.frame_id), comp.frame_id
        )
        start = _epoch_from_s(m.get("start_time")) or comp.start_ns
        if backward:
            fun, start = (
                f"{fun} (backward)",
                entry.ts_ns - _us(m, "backward_cumulative_compile_time_us"),
            )
        duration = _phase_ns(m, "entire_frame_compile_time_s") or _us(
            m, "backward_cumulative_compile_time_us"
        )
        lookups = self.counted_lookups(comp, m)
        end = _end_attrs(m, comp, fun)
        if lookups:
            end["torch_caches"] = lookups
        status, error = "ok", None
        if m.get("fail_type"):
            status = "error"
            error = {"kind": str(m["fail_type"]), "reason": str(m.get("fail_reason") or "")}
        sid, ts = self.span_id(), self.rel(start)
        start_attrs = {"fun_name": fun}
        self.records.append(_span_start(ts, sid, "torch.compile", "jit", start_attrs))
        record = span_end_record(ts + duration, sid, duration, "jit", {**start_attrs, **end})
        if error is not None:
            record.update(status=status, error=error)
        self.records.append(record)


class _BadEntry(ValueError):
    """An entry the mapping cannot read; the message says why (``file:line`` before it)."""


def _payload_json(payload: str, artifact: str) -> Any:
    try:
        return _loads(payload)
    except _BadJSON as exc:
        raise _BadEntry(f"the {artifact} payload is not JSON: {exc}") from None


def _text(value: str, what: str) -> str:
    try:
        return _utf8(value)
    except ValueError as exc:
        raise _BadEntry(f"{what} is {exc}") from None


def _break_reason(text: str) -> str:
    # torch's explanation line (the whole message, with hints and the user's code, is a
    # screenful); the message's first lines when it has none
    m = _BREAK_EXPLAINED.search(text)
    return m["text"].strip() if m else "\n".join(text.strip().split("\n")[:3])


def _user_stack(text: str) -> list[str] | None:
    # torch's "User code traceback:" section: `File "f.py", line 38, in f` a frame,
    # outermost first, each followed by its source line
    _, found, tail = text.partition("User code traceback:")
    if not found:
        return None
    frames = []
    for line in tail.split("\n"):
        m = _USER_FRAME.match(line)
        if m is not None:
            frames.append(f"{m['file']}:{m['line']} in {m['fun'].strip()}")
    return frames or None


def _count(m: dict[str, Any], key: str) -> int:
    value = m.get(key)
    return value if isinstance(value, int) and value > 0 else 0


def _compile_id(env: dict[str, Any]) -> str:
    cid = f"{env['frame_id']}/{env.get('frame_compile_id', 0)}"
    attempt = env.get("attempt") or 0
    if env.get("compiled_autograd_id") is not None:
        cid = f"!{env['compiled_autograd_id']}/{cid}"
    return f"{cid}_{attempt}" if attempt else cid


def _epoch_from_s(value: Any) -> int | None:
    return int(value * 1e9) if isinstance(value, (int, float)) and value > 0 else None


def _phase_ns(m: dict[str, Any], key: str) -> int:
    value = m.get(key)
    return int(value * 1e9) if isinstance(value, (int, float)) and value >= 0 else 0


def _us(m: dict[str, Any], key: str) -> int:
    value = m.get(key)
    return int(value) * 1000 if isinstance(value, (int, float)) and value >= 0 else 0


def _end_attrs(m: dict[str, Any], comp: _Compile, fun: str) -> dict[str, Any]:
    whole = _phase_ns(m, "entire_frame_compile_time_s")
    backend = _phase_ns(m, "backend_compile_time_s")
    inductor = _phase_ns(m, "inductor_compile_time_s")
    attrs: dict[str, Any] = {
        "compile_id": comp.compile_id,
        "tracing_ns": max(whole - backend, 0) if whole else None,
        "lowering_ns": max(backend - inductor, 0) if backend else None,
        "backend_compile_ns": inductor or None,
        "guard_count": m.get("guard_count"),
        "cache_size": m.get("cache_size"),
        "persistent_cache": comp.cache,
        "defined_at": (
            f"{m['co_filename']}:{m.get('co_firstlineno')}"
            if m.get("co_filename")
            else comp.defined_at
        ),
    }
    if m.get("recompile_reason"):
        attrs["retrace_reason"], attrs["changes"] = parse_recompile_reason(m["recompile_reason"])
    limit = _LIMIT.search(str(m.get("fail_reason") or ""))
    if limit is not None:
        attrs["recompile_limit"] = int(limit.group(1))
        attrs["recompile_limit_hit"] = True
    return {k: v for k, v in attrs.items() if v is not None}


def _span_start(ts: int, sid: int, name: str, kind: str, attrs: dict[str, Any]) -> dict[str, Any]:
    start_attrs = {k: v for k, v in attrs.items() if k in _START_FIELDS[kind]}
    return span_start_record(ts, sid, name, kind, start_attrs)


_START_FIELDS = {
    "jit": {"fun_name"},
    "break": {"position", "node", "op_type", "source", "reason", "user_stack"},
}


# ---------------------------------------------------------------- writing


def _run_id(path: Path) -> str:
    # from the log's content (its first 64 KiB and size), not its path or mtime: the same
    # log copied elsewhere is the same run, and ingest skips it the second time
    with path.open("rb") as f:
        head = f.read(65536)
    digest = hashlib.sha1(head + str(path.stat().st_size).encode()).hexdigest()[:16]
    return f"torch-{digest}"


def _meta(run: _Run, path: Path, run_id: str) -> dict[str, Any]:
    # TORCH_TRACE=DIR is one job: its ranks' logs share the folder, whose name is the job
    tags = {"imported_from": IMPORTED_FROM, "log": path.name, "job": path.parent.name}
    if run.rank is not None:
        tags["rank"] = str(run.rank)
    return {
        "kind": "meta",
        "schema": SCHEMA_ID,
        "run_id": run_id,
        "wall_time_ns": run.t0 or 0,
        "host": "unknown",
        "pid": run.pid,
        "versions": {"torch": run.torch_version} if run.torch_version else {},
        "backend": "torch.compile",
        "entrypoint": None,
        "phase": "train" if any("(backward)" in _fun(r) for r in run.records) else "infer",
        "tags": tags,
        "sync": True,
        # a distributed run's job and rank, in the fields every job view reads (the tags'
        # job is the folder of any log; only a log with a rank is a rank of a job)
        **(
            {"job_id": tags["job"], "rank": run.rank, "job_source": "torch_trace"}
            if run.rank is not None
            else {}
        ),
    }


def _fun(record: dict[str, Any]) -> str:
    return str(record.get("attrs", {}).get("fun_name", ""))


def import_torch_trace(
    path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
) -> TorchImportResult:
    """Convert one TORCH_TRACE log into an Ember trace (``<name>.ember.jsonl`` beside it,
    or ``out``).

    An entry that cannot be read (not JSON, a field of another type, a number out of range,
    a date that is none) is rejected (``result.rejected``: ``file:line: what is wrong``) and
    every other entry kept. Raises ``TorchImportError`` when no entry is left (not a torch
    log), ``OSError`` when the log cannot be read or ``out`` written.
    """
    src = Path(path)
    dst = Path(out) if out is not None else src.with_name(src.name + ".ember.jsonl")
    result = _convert(src, str(dst))
    dst.write_bytes(result.text)
    return result.imported


@dataclass
class _Converted:
    imported: TorchImportResult
    text: bytes


def _convert(src: Path, dst: str) -> _Converted:
    """One log's Ember trace, in memory, and what became of its entries."""
    run_id = _run_id(src)
    result = TorchImportResult(dst, run_id)
    run = _Run(src)
    lines: list[tuple[int, int, bytes]] = []  # (ts_ns, order, line)
    for entry in read_entries(src, result.rejected):
        before = len(run.records)
        why = None
        try:
            run.add(entry)
            added = run.records[before:]
            new = [(r["ts_ns"], len(lines) + i, _checked(r)) for i, r in enumerate(added)]
        except _BadEntry as exc:
            why = str(exc)
        except ValidationError as exc:
            why = f"its Ember record would be invalid: {explain(exc)}"
        except Exception as exc:  # no traceback for a log: said, and the rest kept
            why = f"cannot read this entry (an Ember bug: please report it): {exc!r}"
        if why is not None:
            del run.records[before:]
            result.rejected.append(f"{src}:{entry.line}: {why}")
            continue
        lines += new
    if run.t0 is None:
        raise TorchImportError(
            f"{src}: no TORCH_TRACE entry could be read in it; is this a torch log?"
            + (f" (its first rejected line: {result.rejected[0]})" if result.rejected else "")
        )
    meta = _meta(run, src, run_id)
    try:
        head = _checked(meta)
    except (ValidationError, TypeError) as exc:
        why = explain(exc) if isinstance(exc, ValidationError) else str(exc)
        raise TorchImportError(f"{src}: its run's meta record would be invalid: {why}") from None
    lines.sort()
    result.records = len(lines) + 1
    for record in (meta, *run.records):
        result.counts[record["kind"]] = result.counts.get(record["kind"], 0) + 1
    result.compiles = sum(1 for r in run.records if r.get("span_kind") == "jit") // 2
    return _Converted(result, head + b"".join(line for _, _, line in lines))


def _checked(record: dict[str, Any]) -> bytes:
    """The record's JSONL line, once the schema takes it."""
    RECORD.validate_python(record)
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def find_logs(path: Path) -> list[Path]:
    """The TORCH_TRACE logs of a path: the file itself, or a folder's ``*.log`` files."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*.log") if p.is_file())
    return [path]


def is_torch_log(path: Path) -> bool:
    """Whether a file starts like a TORCH_TRACE log (a glog prefix, then a JSON object)."""
    try:
        with path.open("rb") as f:
            first = f.readline(65536).decode("utf-8", errors="replace")
    except OSError:
        return False
    return _PREFIX.match(first.rstrip("\n")) is not None


@dataclass
class Conversion:
    """What ``convert_for_ingest`` did: the paths to ingest, each log converted."""

    paths: list[str]  # ``ember ingest``'s paths, a log's Ember trace in place of the log
    results: list[TorchImportResult] = field(default_factory=list)  # the logs converted now
    refused: list[str] = field(default_factory=list)  # ``log: why`` of each log left out


def convert_for_ingest(paths: list[str]) -> Conversion:
    """``ember ingest``'s paths with each TORCH_TRACE log converted first.

    A log (given, or a ``*.log`` in a given folder) is converted into ``work_trace(log)``,
    unless that is already newer than the log; the log's own folder is not written (it may
    be read-only). A trace an older Ember wrote beside the log (``<log>.ember.jsonl``) and
    newer than it is ingested as it is (the database has it from there). A log that cannot
    be converted is in ``refused`` and the others go on. A folder's own traces (``*.jsonl``)
    are ingested too.
    """
    done = Conversion([])
    for raw in paths:
        p = Path(raw)
        logs = [x for x in find_logs(p) if x.suffix == ".log" and is_torch_log(x)]
        if p.is_file() and not logs:
            done.paths.append(raw)
            continue
        beside = {log.with_name(log.name + ".ember.jsonl").resolve(): log for log in logs}
        if not p.is_file():  # the folder's traces, less those of its logs (converted here)
            done.paths += [str(x) for x in expand_paths([p]) if x not in beside]
        for old, log in beside.items():
            try:
                if _fresh(old, log):
                    done.paths.append(str(old))
                    continue
                trace = work_trace(log)
                if not _fresh(trace, log):
                    converted = _convert(log, str(trace))
                    _write_atomically(trace, converted.text)
                    done.results.append(converted.imported)
            except (TorchImportError, OSError) as exc:
                done.refused.append(_why(log, exc))
                continue
            done.paths.append(str(trace))
    return done


def _why(log: Path, exc: Exception) -> str:
    text = str(exc)
    return text if text.startswith(str(log)) else f"{log}: {text}"


def _fresh(trace: Path, log: Path) -> bool:
    """Whether ``trace`` exists and is newer than ``log`` (converted since it changed)."""
    try:
        return trace.stat().st_mtime_ns >= log.stat().st_mtime_ns
    except FileNotFoundError:
        return False


def _write_atomically(path: Path, data: bytes) -> None:
    # another ingester may convert the same log at once: each writes its own file and
    # renames it, so that a reader sees one whole trace
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_bytes(data)
    os.replace(part, path)


def work_trace(log: Path) -> Path:
    """Where the Ember trace of ``log`` goes when it is ingested: a private folder of
    this user's in the temporary folder (``TMPDIR``), one path for each log (from its
    absolute path), so that the same log ingested again is the same trace ("unchanged")
    and the log's own folder is never written (logs on read-only storage).

    Raises ``TorchImportError`` when that folder belongs to another user or others may
    write in it.
    """
    uid = os.getuid() if hasattr(os, "getuid") else None
    root = Path(tempfile.gettempdir()) / f"ember-torch-trace-{uid if uid is not None else 'u'}"
    root.mkdir(mode=0o700, exist_ok=True)
    st = root.lstat()
    if (
        not stat.S_ISDIR(st.st_mode)
        or (uid is not None and st.st_uid != uid)
        or stat.S_IMODE(st.st_mode) & 0o022
    ):
        raise TorchImportError(
            f"{root} is not a private folder of this user (another user's, a link, or "
            "writable by others): remove it, or set TMPDIR to another folder"
        )
    key = hashlib.sha256(str(log.resolve()).encode()).hexdigest()[:16]
    folder = root / key
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / (log.name + ".ember.jsonl")
