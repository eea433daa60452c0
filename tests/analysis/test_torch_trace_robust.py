"""The torch importer on logs that are not what torch writes: each malformed entry is a
``file:line`` rejection saying what is wrong, never a traceback, and every other entry is
kept; the year of glog's year-less dates; the property test (any bytes in)."""

from __future__ import annotations

import calendar
import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.analysis.torch_trace import TorchImportError, import_torch_trace, read_entries

DATA = Path(__file__).parents[1] / "data" / "torch"
PREFIX = "V1202 01:18:58.386000 384 torch/_dynamo/utils.py:2350] "


def _entry_starts(lines: list[str]) -> list[int]:
    """The indexes of the lines that start an entry (not a payload line)."""
    return [i for i, line in enumerate(lines) if line and not line.startswith("\t")]


def _body(path: Path) -> list[bytes]:
    """The converted trace's records after its meta (the meta's run id is the log's hash)."""
    lines = path.read_bytes().splitlines()
    assert json.loads(lines[0])["kind"] == "meta"
    return lines[1:]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[bytes]]:
    """recompile.log's lines and its converted records (the reference)."""
    tmp = tmp_path_factory.mktemp("clean")
    lines = (DATA / "recompile.log").read_text(encoding="utf-8").split("\n")
    log = tmp / "recompile.log"
    log.write_text("\n".join(lines), encoding="utf-8")
    result = import_torch_trace(log, tmp / "clean.jsonl")
    assert result.rejected == []
    return lines, _body(tmp / "clean.jsonl")


BIG = 2**70
MALFORMED = {
    "Infinity": (PREFIX + '{"frame_id": Infinity}', "frame_id: Input should be a valid integer"),
    "NaN compile time": (
        PREFIX + '{"frame_id": 0, "compilation_metrics": {"entire_frame_compile_time_s": NaN}}',
        "compilation_metrics.entire_frame_compile_time_s: Input should be a finite number",
    ),
    "Infinity start time": (
        PREFIX + '{"frame_id": 0, "compilation_metrics": {"start_time": Infinity}}',
        "compilation_metrics.start_time: Input should be a finite number",
    ),
    "month 13": ("V1302 01:18:58.386000 384 x.py:1] {}", "the date 1302 (MMDD) is no day"),
    "day 32": ("V1232 01:18:58.386000 384 x.py:1] {}", "the date 1232 (MMDD) is no day"),
    "hour 99": ("V1202 99:18:58.386000 384 x.py:1] {}", "the time 99:18:58 is no time of day"),
    "a lone surrogate": (
        PREFIX + '{"str": ["\\ud800", 7]}',
        "str.0: Value error, not UTF-8 text (a lone surrogate \\ud800)",
    ),
    "a lone surrogate in a name": (
        PREFIX + '{"frame_id": 0, "compilation_metrics": {"co_name": "\\udc00"}}',
        "compilation_metrics.co_name: Value error, not UTF-8 text",
    ),
    "600-deep nesting in a field": (
        PREFIX + '{"frame_id": ' + "[" * 600 + "]" * 600 + "}",
        "frame_id: Input should be a valid integer",
    ),
    "nesting deeper than JSON readers go": (
        PREFIX + '{"a": ' + "[" * 5000 + "]" * 5000 + "}",
        "the entry is not JSON: it is nested too deep to read",
    ),
    "2**70": (PREFIX + f'{{"frame_id": {BIG}}}', "frame_id: Input should be a valid integer"),
    "2**70 string index": (PREFIX + f'{{"str": ["f.py", {BIG}]}}', "str.1: Input should be"),
    "an integer of 5000 digits": (
        PREFIX + '{"frame_id": ' + "9" * 5000 + "}",
        "the entry is not JSON: Exceeds the limit (4300 digits)",
    ),
    "2**70 pid": (
        f"V1202 01:18:58.386000 {BIG} x.py:1] {{}}",
        f"the glog prefix is wrong: its pid {BIG} is past 64 bits",
    ),
    "a list for dynamo_start": (
        PREFIX + '{"frame_id": 0, "dynamo_start": []}',
        "dynamo_start: Input should be a valid dictionary",
    ),
    "a number for a stack frame": (
        PREFIX + '{"frame_id": 0, "dynamo_start": {"stack": [5]}}',
        "dynamo_start.stack.0: Input should be a valid dictionary",
    ),
    "a text for the artifact": (
        PREFIX + '{"artifact": "x"}',
        "artifact: Input should be a valid dictionary",
    ),
    "a list for the metrics": (
        PREFIX + '{"frame_id": 0, "compilation_metrics": []}',
        "compilation_metrics: Input should be a valid dictionary",
    ),
    "a number for the recompile reason": (
        PREFIX + '{"frame_id": 0, "compilation_metrics": {"recompile_reason": 5}}',
        "compilation_metrics.recompile_reason: Input should be a valid string",
    ),
    "a text for the guard count": (
        PREFIX + '{"frame_id": 0, "compilation_metrics": {"guard_count": "x"}}',
        "compilation_metrics.guard_count: Input should be a valid integer",
    ),
    "a billion cache lookups": (
        PREFIX + '{"frame_id": 9, "compilation_metrics": '
        '{"inductor_fx_local_cache_hit_count": 1000000000}}',
        "compilation_metrics.inductor_fx_local_cache_hit_count: Input should be less than",
    ),
    "a string table entry without its index": (
        PREFIX + '{"str": ["x"]}',
        "str.1: missing required field",
    ),
    "a JSON list": (PREFIX + "[1, 2]", "not a TORCH_TRACE entry (a glog prefix, then JSON)"),
    "binary junk": ("\x00\x01\xff\xfe garbage \x7f", "not a TORCH_TRACE entry"),
    "binary junk in the JSON": (PREFIX + "{\x00\x9c}", "the entry is not JSON"),
    "a truncated entry": (
        PREFIX + '{"frame_id": 0, "compilation_metrics": {"co_n',
        "the entry is not JSON: Unterminated string",
    ),
    "a torch_version payload that is not JSON": (
        PREFIX + '{"artifact": {"name": "torch_version"}, "has_payload": '
        '"7215ee9c7d9dc229d2921a40e899ec5f"}\n\t ',  # the md5 of " "
        "the torch_version payload is not JSON",
    ),
    "a cache key with a lone surrogate": (
        PREFIX + '{"frame_id": 0, "artifact": {"name": "fx_graph_cache_hit"}, "has_payload": '
        '"e69b7f72c8b13ffc2611402a8f3fd31c"}\n\t{"key": "\\udcff"}',
        "the cache key is not UTF-8 text",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_entry_is_a_file_line_rejection_and_every_other_entry_is_kept(
    tmp_path, clean, name
):
    lines, reference = clean
    bad, why = MALFORMED[name]
    if "has_payload" in bad:  # the md5 in the case is that of its payload: check it
        import hashlib

        head, payload = bad.split("\n\t", 1)
        want = re.search(r'"has_payload": "([0-9a-f]+)"', head)[1]  # type: ignore[index]
        assert hashlib.md5(payload.encode("utf-8", "surrogatepass")).hexdigest() == want
    at = _entry_starts(lines)[5]  # between two entries, with entries after it
    log = tmp_path / "x.log"
    text = "\n".join([*lines[:at], bad, *lines[at:]])
    log.write_bytes(text.encode("utf-8", "surrogatepass"))
    result = import_torch_trace(log, tmp_path / "out.jsonl")
    assert len(result.rejected) == 1, result.rejected
    assert result.rejected[0].startswith(f"{log}:{at + 1}: ")
    assert why in result.rejected[0]
    assert _body(tmp_path / "out.jsonl") == reference  # nothing else changed


def test_a_log_with_no_entry_left_is_refused_with_its_first_rejected_line(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(PREFIX + '{"frame_id": Infinity}\n')
    with pytest.raises(TorchImportError, match=r"no TORCH_TRACE entry could be read.*x\.log:1"):
        import_torch_trace(log, tmp_path / "out.jsonl")


# ---------------------------------------------------------------- the year


def _log_at(tmp_path: Path, dates: list[str], mtime: datetime) -> Path:
    """A log of one entry a date (``MMDD HH:MM:SS``), its mtime set."""
    log = tmp_path / "y.log"
    log.write_text(
        "".join(f'V{d}.000000 384 x.py:1] {{"frame_id": {i}}}\n' for i, d in enumerate(dates))
    )
    os.utime(log, (mtime.timestamp(), mtime.timestamp()))
    return log


def _years(log: Path) -> list[datetime]:
    rejected: list[str] = []
    moments = [datetime.fromtimestamp(e.ts_ns / 1e9, tz=UTC) for e in read_entries(log, rejected)]
    assert rejected == []
    return moments


def test_a_log_that_spans_new_year_starts_in_the_year_before_its_mtime(tmp_path):
    # before: the year of the mtime for every line (December 2027, a year ahead)
    log = _log_at(
        tmp_path,
        ["1231 23:59:58", "1231 23:59:59", "0101 00:00:01", "0101 00:05:00"],
        datetime(2027, 1, 1, 0, 10, tzinfo=UTC),
    )
    assert [(m.year, m.month, m.day) for m in _years(log)] == [
        (2026, 12, 31),
        (2026, 12, 31),
        (2027, 1, 1),
        (2027, 1, 1),
    ]


def test_a_line_written_a_moment_late_across_new_year_stays_in_its_year(tmp_path):
    log = _log_at(
        tmp_path,
        ["1231 23:59:59", "0101 00:00:01", "1231 23:59:59", "0101 00:00:02"],
        datetime(2027, 1, 2, tzinfo=UTC),
    )
    assert [m.year for m in _years(log)] == [2026, 2027, 2026, 2027]


def test_the_last_line_is_not_after_the_mtime(tmp_path):
    # a December log copied in January (the copy's mtime): still last December's
    log = _log_at(tmp_path, ["1202 01:18:58", "1202 01:19:00"], datetime(2027, 1, 20, tzinfo=UTC))
    assert {m.year for m in _years(log)} == {2026}
    # and a day's slack for glog's local clock against the UTC mtime
    log = _log_at(tmp_path, ["0101 09:00:00"], datetime(2026, 12, 31, 23, 0, tzinfo=UTC))
    assert [m.year for m in _years(log)] == [2027]


def test_29_february_is_in_the_nearest_leap_year_not_after_the_mtime(tmp_path):
    # before: ValueError (day is out of range for month) for a 2027 mtime
    log = _log_at(tmp_path, ["0229 10:00:00", "0301 09:00:00"], datetime(2027, 3, 2, tzinfo=UTC))
    moments = _years(log)
    assert [(m.year, m.month, m.day) for m in moments] == [(2024, 2, 29), (2024, 3, 1)]
    assert calendar.isleap(moments[0].year)
    log = _log_at(tmp_path, ["0229 10:00:00"], datetime(2028, 3, 1, tzinfo=UTC))
    assert [m.year for m in _years(log)] == [2028]


def test_one_corrupt_date_does_not_move_the_rest_of_the_log_into_another_year(tmp_path):
    log = _log_at(
        tmp_path,
        ["1202 01:00:00", "0601 01:00:00", "1202 01:00:01", "1202 01:00:02"],
        datetime(2026, 12, 3, tzinfo=UTC),
    )
    years = [m.year for m in _years(log)]
    assert years[0] == years[2] == years[3] == 2026


def test_an_mtime_a_build_tool_reset_reads_as_today(tmp_path):
    log = _log_at(tmp_path, ["0101 00:00:00"], datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC))
    (moment,) = _years(log)
    assert moment.year == datetime.now(UTC).year


# ---------------------------------------------------------------- any bytes in (hypothesis)
#
# Like the JSONL fuzz (tests/analysis/test_fuzz.py): lines of junk put between the entries of
# a real log, the log cut at any byte, or any bytes at all; the import never raises but
# TorchImportError (no entry left), each rejection names a line that was put in or cut, and
# every entry of the log is kept. Few examples: a few seconds in `make test`.

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
TORCH_KEYS = [
    "frame_id",
    "frame_compile_id",
    "attempt",
    "compiled_autograd_id",
    "rank",
    "str",
    "dynamo_start",
    "artifact",
    "compilation_metrics",
    "bwd_compilation_metrics",
    "has_payload",
    "stack",
    "name",
    "co_name",
    "start_time",
    "entire_frame_compile_time_s",
    "guard_count",
    "recompile_reason",
    "fail_type",
    "inductor_fx_local_cache_hit_count",
]
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and Infinity too: json.dumps writes them
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(TORCH_KEYS) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
_JUNK = st.one_of(
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"").lstrip(b"\t")),
    st.text(max_size=60).map(lambda t: (PREFIX + t).replace("\n", "").encode("utf-8", "replace")),
    st.text(alphabet='{}[]":,0123456789.eE-+ INaf', max_size=40).map(
        lambda t: (PREFIX + "{" + t).encode()
    ),
)


@pytest.fixture(scope="module")
def rank_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[bytes]]:
    """rank_0.log's bytes and its converted records (the reference)."""
    tmp = tmp_path_factory.mktemp("rank")
    log = tmp / "rank_0.log"
    log.write_bytes((DATA / "rank_0.log").read_bytes())
    assert import_torch_trace(log, tmp / "ref.jsonl").rejected == []
    return log.read_bytes(), _body(tmp / "ref.jsonl")


def _convert(data: bytes, folder: Path, name: str) -> tuple[list[str], list[bytes]] | None:
    """The rejections and the records of a log of these bytes; None when no entry is left."""
    log = folder / f"{name}.log"
    log.write_bytes(data)
    try:
        result = import_torch_trace(log, folder / f"{name}.jsonl")
    except TorchImportError:
        return None
    return [r.removeprefix(f"{log}:") for r in result.rejected], _body(folder / f"{name}.jsonl")


@FUZZ
@given(data=st.data())
def test_junk_lines_between_entries_are_rejected_and_every_entry_kept(rank_log, data):
    log, reference = rank_log
    lines = log.split(b"\n")
    starts = [i for i, line in enumerate(lines) if line and not line.startswith(b"\t")]
    junk = data.draw(st.lists(st.tuples(st.sampled_from(starts), _JUNK), min_size=1, max_size=4))
    put: list[bytes] = []
    for i, line in enumerate(lines):
        put += [j for at, j in junk if at == i]
        put.append(line)
    junk_numbers = {n + 1 for n, line in enumerate(put) if line in {j for _, j in junk}}
    with tempfile.TemporaryDirectory() as tmp:
        got = _convert(b"\n".join(put), Path(tmp), "junk")
    assert got is not None
    rejected, body = got
    assert {int(r.split(":", 1)[0]) for r in rejected} <= junk_numbers
    assert all(r.split(": ", 1)[1] for r in rejected)  # each says what is wrong
    if len(rejected) == len(junk) or all(not j.strip() for _, j in junk):
        assert body == reference
    else:  # a line of junk that is an entry (`{}`): the log's compiles are all there still
        assert _compile_ids(reference) <= _compile_ids(body)


@FUZZ
@given(data=st.data())
def test_a_torch_like_entry_with_any_values_keeps_every_entry(rank_log, data):
    log, reference = rank_log
    lines = log.split(b"\n")
    starts = [i for i, line in enumerate(lines) if line and not line.startswith(b"\t")]
    at = data.draw(st.sampled_from(starts))
    value = data.draw(st.dictionaries(st.sampled_from(TORCH_KEYS), _JSON, max_size=4))
    entry = (PREFIX + json.dumps(value)).encode()
    with tempfile.TemporaryDirectory() as tmp:
        got = _convert(b"\n".join([*lines[:at], entry, *lines[at:]]), Path(tmp), "entry")
    assert got is not None
    rejected, body = got
    assert all(r.startswith(f"{at + 1}: ") for r in rejected)
    if rejected:  # refused: nothing else changed
        assert body == reference
    else:  # taken: the log's compiles are all there still
        assert _compile_ids(reference) <= _compile_ids(body)


def _compile_ids(body: list[bytes]) -> set[str]:
    return {json.loads(r)["attrs"].get("compile_id") for r in body} - {None}


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len((DATA / "rank_0.log").read_bytes())))
def test_a_log_cut_at_any_byte_keeps_every_entry_before_the_cut(rank_log, cut):
    log, _ = rank_log
    head = log[:cut]
    start = max(head.rfind(b"\n" + c) for c in (b"V", b"I", b"W", b"E")) + 1  # the cut entry
    end = log.find(b"\n", cut)
    while end >= 0 and log[end + 1 : end + 2] == b"\t":
        end = log.find(b"\n", end + 1)
    with tempfile.TemporaryDirectory() as tmp:
        got = _convert(head, Path(tmp), "cut")
        before = _convert(log[:start], Path(tmp), "before")
        whole = _convert(log[: end + 1] if end >= 0 else log, Path(tmp), "whole")
    if got is None:  # the cut is in the first entry
        assert before is None
        return
    rejected, body = got
    line = head.count(b"\n", 0, start) + 1
    assert all(r.startswith(f"{line}: ") for r in rejected)
    assert body in ([] if before is None else before[1], None if whole is None else whole[1])


@FUZZ
@given(blob=st.binary(max_size=400))
def test_any_bytes_are_a_log_or_a_clear_refusal(tmp_path, blob):
    log = tmp_path / "any.log"
    log.write_bytes(blob)
    refused = None
    try:
        result = import_torch_trace(log, tmp_path / "any.jsonl")
    except TorchImportError as exc:
        refused = str(exc)
    if refused is not None:
        assert refused.startswith(f"{log}: no TORCH_TRACE entry")
    else:
        assert all(re.match(rf"{re.escape(str(log))}:\d+: \S", r) for r in result.rejected)
