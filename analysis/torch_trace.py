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

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from ember.analysis.imported import Imported, span_end_record, span_start_record
from ember.schemas import RECORD, SCHEMA_ID, explain

__all__ = [
    "Entry",
    "TorchImportError",
    "TorchImportResult",
    "import_torch_trace",
    "parse_recompile_reason",
    "read_entries",
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


def _epoch_ns(month_day: str, clock: str, year: int, seconds: dict[str, int]) -> int:
    # glog's local clock, read as UTC; ``seconds`` keeps each second's epoch (thousands of
    # entries share one)
    hms, _, frac = clock.partition(".")
    whole = seconds.get(month_day + hms)
    if whole is None:
        h, m, s = (int(x) for x in hms.split(":"))
        moment = datetime(year, int(month_day[:2]), int(month_day[2:]), h, m, s, tzinfo=UTC)
        whole = seconds[month_day + hms] = int(moment.timestamp())
    return whole * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


def _payload_error(envelope: dict[str, Any], payload: str | None) -> str | None:
    want = envelope.get("has_payload")
    if want is None:
        return "payload lines after an entry without has_payload" if payload is not None else None
    got = hashlib.md5((payload or "").encode(), usedforsecurity=False).hexdigest()
    if got != want:
        return f"payload md5 {got} differs from has_payload {want} (a cut or edited payload)"
    return None


def _loads(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN and Infinity, which Python's json writes
        return json.loads(text)


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


@dataclass
class _Reader:
    """Reads one log's pieces into checked entries; what fails goes to ``rejected``."""

    path: Path
    rejected: list[str]
    year: int
    seconds: dict[str, int] = field(default_factory=dict)

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
                    self.rejected.append(
                        f"{self.path}:{number}: not a TORCH_TRACE entry (a glog prefix, then JSON)"
                    )
                if payload:
                    self.orphans(payload, number + 1)
                continue
            if payload:
                payload = payload[1:].replace("\n\t", "\n")
            entry = self.entry(number, head, payload or None)
            if entry is not None:
                yield entry

    def orphans(self, payload: str, number: int) -> None:
        for i in range(payload.count("\n") + 1):
            self.rejected.append(f"{self.path}:{number + i}: a payload line before any entry")

    def entry(self, number: int, m: re.Match[str], payload: str | None) -> Entry | None:
        try:
            envelope = _loads(m["json"])
        except json.JSONDecodeError as exc:
            self.rejected.append(f"{self.path}:{number}: the entry is not JSON: {exc}")
            return None
        if not isinstance(envelope, dict):
            self.rejected.append(f"{self.path}:{number}: the entry is not a JSON object")
            return None
        error = _payload_error(envelope, payload)
        if error is not None:
            self.rejected.append(f"{self.path}:{number}: {error}")
            return None
        return Entry(
            number,
            _epoch_ns(m["md"], m["time"], self.year, self.seconds),
            int(m["pid"]),
            int(m["rank"]) if m["rank"] is not None else None,
            envelope,
            payload if envelope.get("has_payload") is not None else None,
        )


def read_entries(path: Path, rejected: list[str], year: int) -> Iterator[Entry]:
    """The entries of one log, each checked; what fails goes to ``rejected``."""
    reader = _Reader(path, rejected, year)
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
        if "frame_id" not in env:
            return None
        cid = _compile_id(env)
        if cid not in self.compiles:
            self.compiles[cid] = _Compile(cid, int(env["frame_id"]), ts_ns)
        return self.compiles[cid]

    def add(self, entry: Entry) -> None:
        env = entry.envelope
        if self.t0 is None:
            self.t0, self.pid, self.rank = entry.ts_ns, entry.pid, entry.rank
        if isinstance(env.get("rank"), int):  # torch.distributed puts it in each entry
            self.rank = env["rank"]
        if "str" in env:
            text, index = env["str"]
            self.strings[int(index)] = str(text)
            return
        comp = self.compile_for(env, entry.ts_ns)
        if "dynamo_start" in env and comp is not None:
            comp.start_ns = entry.ts_ns
            frame = (env["dynamo_start"].get("stack") or [{}])[-1]
            comp.fun_name = frame.get("name")
            file = self.strings.get(frame.get("filename"), "?")
            comp.defined_at = f"{file}:{frame.get('line')}"
        elif "artifact" in env:
            self.artifact(entry, env["artifact"].get("name", ""), comp)
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
            version = json.loads(entry.payload)
            if isinstance(version, dict):
                version = version.get("pytorch_version")
            self.torch_version = str(version)
        elif (m := _CACHE_ARTIFACT.match(name)) is not None and comp is not None:
            self.cache_artifact(entry, comp, m["cache"], m["action"])
        elif name == "dynamo_graph_break_reason" and comp is not None:
            self.graph_break(entry, comp)

    def cache_artifact(self, entry: Entry, comp: _Compile, cache: str, action: str) -> None:
        payload = json.loads(entry.payload) if entry.payload else {}
        if not isinstance(payload, dict):
            payload = {}
        lookup: dict[str, Any] = {"cache": cache, "action": action}
        if isinstance(payload.get("key"), str):
            lookup["key"] = payload["key"]
        saved = payload.get("time_saved_ms")
        if action == "hit" and isinstance(saved, (int, float)) and saved >= 0:
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
    """Convert one TORCH_TRACE log into an Ember trace (``<name>.ember.jsonl`` beside it)."""
    src = Path(path)
    dst = Path(out) if out is not None else src.with_name(src.name + ".ember.jsonl")
    run_id = _run_id(src)
    result = TorchImportResult(str(dst), run_id)
    run = _Run(src)
    year = datetime.fromtimestamp(src.stat().st_mtime, tz=UTC).year
    for entry in read_entries(src, result.rejected, year):
        try:
            run.add(entry)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            result.rejected.append(f"{src}:{entry.line}: cannot read this entry: {exc!r}")
    if run.t0 is None:
        raise TorchImportError(f"{src}: no TORCH_TRACE entry in it; is this a torch log?")
    records = [_meta(run, src, run_id), *sorted(run.records, key=lambda r: r["ts_ns"])]
    lines = []
    for record in records:
        try:
            RECORD.validate_python(record)
        except ValidationError as exc:  # an Ember bug or an odd log: said, not fatal
            result.rejected.append(f"{src}: a converted record is invalid: {explain(exc)}")
            continue
        lines.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        result.counts[record["kind"]] = result.counts.get(record["kind"], 0) + 1
    result.records = len(lines)
    result.compiles = sum(1 for r in records if r.get("span_kind") == "jit") // 2
    dst.write_bytes(b"".join(lines))
    return result


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


def convert_for_ingest(paths: list[str]) -> tuple[list[str], list[TorchImportResult]]:
    """``ember ingest``'s paths with each TORCH_TRACE log converted first.

    A log (given, or a ``*.log`` in a given folder) becomes ``<log>.ember.jsonl`` beside it,
    unless that is already newer than the log; a log given by name is replaced by its
    trace, a folder stays (ingest finds the traces in it). Returns the paths and what each
    conversion did.
    """
    out, results = [], []
    for raw in paths:
        p = Path(raw)
        logs = [x for x in find_logs(p) if x.suffix == ".log" and is_torch_log(x)]
        if p.is_file() and not logs:
            out.append(raw)
            continue
        for log in logs:
            trace = log.with_name(log.name + ".ember.jsonl")
            if not trace.exists() or trace.stat().st_mtime_ns < log.stat().st_mtime_ns:
                results.append(import_torch_trace(log, trace))
            if p.is_file():
                out.append(str(trace))
        if not p.is_file():
            out.append(raw)
    return out, results
