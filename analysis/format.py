"""Numbers for people: durations, bytes, percentages and counts, written one way everywhere.

The report, ``ember run`` and the dashboard all format through this module, so a
compile that takes ``1077527500`` ns reads "1.1 s" in each of them, and a peak of
``6308352`` bytes reads "6.0 MiB". The rule for durations and sizes: pick the unit that
puts the value in [1, 1000) (seconds, then minutes and hours for long runs; B, KiB,
MiB, GiB, TiB), then show it with 2-3 significant digits: no decimals from 10 up
("412 ms", "615 MiB"), one decimal below ("4.5 ms", "3.0 GiB").
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MISSING",
    "breakdown",
    "count",
    "duration",
    "duration_ms",
    "latency",
    "number",
    "percent",
    "plural",
    "sequence",
    "short_path",
    "size",
    "size_unit",
    "times",
    "wrap",
]

MISSING = "–"
"""What a missing number (``None``, NaN) reads as, unless the caller says otherwise."""

_TIME_UNITS = (("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9))
_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _present(value: float | None) -> float | None:
    """``value``, or None when it is missing: None or a float NaN."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _digits(v: float, unit: str) -> str:
    """``v`` (already in ``unit``, 0 <= v < 1000) with 2-3 significant digits."""
    text = f"{v:.0f}" if v >= 9.95 else f"{v:.1f}"
    if text.endswith(".0") and unit in ("B", "ns"):
        text = text[:-2]  # whole units: "64 B", not "64.0 B"
    return f"{text} {unit}"


def duration(ns: float | None, missing: str = MISSING) -> str:
    """A duration given in nanoseconds: '3.9 s', '412 ms', '4.5 ms', '420 µs', '2.5 min'."""
    if (ns := _present(ns)) is None:
        return missing
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    s = ns / 1e9
    if s >= 3600 * 0.995:
        return f"{sign}{_digits(s / 3600, 'h')}"
    if s >= 100:
        return f"{sign}{_digits(s / 60, 'min')}" if s >= 600 else f"{sign}{s:.0f} s"
    for unit, scale in reversed(_TIME_UNITS):
        if ns >= scale * 0.9995 or unit == "ns":
            v = ns / scale
            if v >= 999.5 and unit != "s":  # rounds up into the next unit
                continue
            return f"{sign}{_digits(v, unit)}"
    raise AssertionError("unreachable")


def duration_ms(ms: float | None, missing: str = MISSING) -> str:
    """A duration given in milliseconds (as the dashboard's frames carry them)."""
    return missing if (ms := _present(ms)) is None else duration(ms * 1e6)


def size(n: float | None, missing: str = MISSING) -> str:
    """Bytes in binary units: '64 B', '6.8 KiB', '9.5 MiB', '615 MiB', '3.0 GiB'."""
    if (n := _present(n)) is None:
        return missing
    sign, v = ("-", -float(n)) if n < 0 else ("", float(n))
    for unit in _SIZE_UNITS:
        if v < 999.5 or unit == _SIZE_UNITS[-1]:
            if unit == "B":
                return f"{sign}{v:.0f} B"
            return f"{sign}{_digits(v, unit)}"
        v /= 1024
    raise AssertionError("unreachable")


def size_unit(n: float | None) -> tuple[str, int]:
    """The unit ``size(n)`` writes ``n`` in and its bytes: ``(\"MiB\", 1048576)`` for 6.0 MiB
    (a chart of bytes scales its axis by the unit of its largest value)."""
    v, factor = abs(float(n or 0)), 1
    for unit in _SIZE_UNITS:
        if v < 999.5 or unit == _SIZE_UNITS[-1]:
            return unit, factor
        v /= 1024
        factor *= 1024
    raise AssertionError("unreachable")


def percent(fraction: float | None, missing: str = MISSING) -> str:
    """A fraction (0.873) as a rounded percentage ('87%'); '<1%' and '>99%' near the ends,
    so a little is never shown as none and almost all never as all."""
    if (fraction := _present(fraction)) is None:
        return missing
    p = fraction * 100
    if 0 < p < 0.5:
        return "<1%"
    if 99.5 <= p < 100:
        return ">99%"
    return f"{p:.0f}%"


def count(n: int | float | None, missing: str = MISSING) -> str:
    """A count with thousands separators: '1,234'."""
    if (n := _present(n)) is None:
        return missing
    return f"{n:,.0f}"


def number(x: float | None, missing: str = MISSING) -> str:
    """A plain number without unit: integers with thousands separators ('12,345'), other
    values with 4 significant digits ('3.215', '0.0421'), large ones rounded ('12,346')."""
    if (x := _present(x)) is None:
        return missing
    if float(x).is_integer() or abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def breakdown(
    parts: Mapping[str, float | None] | Iterable[tuple[str, float | None]],
    *,
    keep_zero: bool = False,
) -> str:
    """Bytes per part, largest first: 'activation 6.0 MiB, weight 1.2 MiB' (zeros left
    out unless ``keep_zero``); '' when there is nothing to show."""
    items = parts.items() if isinstance(parts, Mapping) else parts
    shown = [(k, v or 0) for k, v in items if keep_zero or v]
    shown.sort(key=lambda kv: -kv[1])
    return ", ".join(f"{k} {size(v)}" for k, v in shown)


def short_path(text: str | None, width: int = 40) -> str:
    """``text`` cut from the left to ``width`` characters (``…/light_squeezenet.onnx``)."""
    if text is None:
        return ""
    if len(text) <= width:
        return text
    tail = text[-(width - 1) :]
    cut = tail.find("/")
    if 0 <= cut < len(tail) - 1:
        tail = tail[cut:]
    return "…" + tail


def plural(n: int, what: str) -> str:
    """'1 compile', '3 compiles'."""
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def latency(
    what: str,
    samples: int,
    p50_ns: float | None,
    p99_ns: float | None,
    compiling: int = 0,
    warm_p50_ns: float | None = None,
    warm_p99_ns: float | None = None,
    warm: int = 0,
    loaded: int = 0,
) -> str:
    """'p50 12 ms, p99 13 ms': a run's latency, from its steady state when some of its
    ``samples`` calls (or steps) compiled: a median over compiling and warm calls alike
    (two of four calls compiling for 1.8 s made "p50 916 ms" of a 12 ms model) is neither.
    ``warm``: the calls that neither compiled nor failed, whose percentiles ``warm_*`` are.
    ``loaded``: the calls that loaded their programs from a disk cache (compiled nothing,
    but were not warm either).
    """
    overall = f"p50 {duration(p50_ns)}, p99 {duration(p99_ns)}"
    if not compiling and not loaded:
        return overall
    # "3 compiled, 9 loaded from the disk cache": what the calls that were not warm did
    did = [
        f"{n} {verb}"
        for n, verb in ((compiling, "compiled"), (loaded, "loaded from the disk cache"))
        if n
    ]
    if warm_p50_ns is None or not warm:
        others = ", the others failed" if compiling + loaded < samples else ""
        count, verb = did[0].split(" ", 1)
        done = ", ".join([f"{count} of {samples} {verb}", *did[1:]])
        return f"{overall} ({done}{others}: no warm {what}s)"
    count, verb = did[0].split(" ", 1)
    which = ", ".join([f"{count} of which {verb}", *did[1:]])
    return (
        f"p50 {duration(warm_p50_ns)}, p99 {duration(warm_p99_ns)} over the "
        f"{plural(warm, 'warm ' + what)} (all {samples}, {which}: {overall})"
    )


def times(n: int) -> str:
    """'once', 'twice', '3 times'."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def sequence(values: list[Any], keep: int = 6) -> str:
    """'8 -> 9 -> ... -> 19': the values in order, the middle elided when long."""
    text = [str(v) for v in values]
    if len(text) > keep:
        text = [*text[:2], "...", *text[-2:]]
    return " -> ".join(text)


# Wrapping keeps a number with the word it counts or measures ("12.3 MiB", "4 times") and
# a run of changes ("17 -> 23 -> 31") on one line: their spaces become _GLUE (not a space
# to textwrap) while wrapping. A run longer than a line breaks after an arrow instead.
_GLUE = "\x1f"
_NUMBER_WORD = re.compile(r"((?<![\w.])\d[\d.,]*) (?=[^\W\d_])")
_ARROW_RUN = re.compile(r"\S+(?: -> \S+)+")


def wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """``text`` as lines of at most ``width`` characters (``first``/``rest``: the indent of
    the first and of the other lines), never breaking between a number and its unit."""
    room = width - max(len(first), len(rest))

    def glue_run(m: re.Match[str]) -> str:
        run = m.group(0)
        return run.replace(" ", _GLUE) if len(run) <= room else run.replace(" ->", _GLUE + "->")

    glued = _ARROW_RUN.sub(glue_run, _NUMBER_WORD.sub(r"\1" + _GLUE, text))
    lines = textwrap.wrap(
        glued,
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
    )
    return [line.replace(_GLUE, " ") for line in lines]
