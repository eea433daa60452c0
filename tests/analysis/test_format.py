"""The one formatting module: durations, bytes, percentages and counts as people read them."""

from __future__ import annotations

import math

import pytest

from ember.analysis import format as fmt


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (1077.5275e6, "1.1 s"),  # the compile that read "compile_ms 1077.5275"
        (3.94e9, "3.9 s"),
        (12.4e9, "12 s"),
        (412e6, "412 ms"),
        (41.2e6, "41 ms"),
        (4.5e6, "4.5 ms"),
        (0.42e6, "420 µs"),
        (7461, "7.5 µs"),
        (999.7e3, "1.0 ms"),  # rounds up into the next unit, never "1000 µs"
        (999.6, "1.0 µs"),
        (12, "12 ns"),
        (0, "0 ns"),
        (150e9, "150 s"),
        (750e9, "12 min"),
        (5400e9, "1.5 h"),
        (-4.5e6, "-4.5 ms"),
    ],
)
def test_durations_have_a_unit_and_two_or_three_significant_digits(ns: float, text: str) -> None:
    assert fmt.duration(ns) == text


def test_durations_in_milliseconds_and_missing_ones() -> None:
    assert fmt.duration_ms(1077.5275) == "1.1 s"
    assert fmt.duration_ms(0.25) == "250 µs"
    assert fmt.duration(None) == fmt.duration_ms(None) == fmt.MISSING == "–"
    assert fmt.duration(math.nan) == "–"
    assert fmt.duration(None, "?") == "?"


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (64, "64 B"),
        (999, "999 B"),
        (1023, "1.0 KiB"),
        (7000, "6.8 KiB"),
        (6308352, "6.0 MiB"),  # the memory caption's activation=6308352
        (9.5 * 2**20, "9.5 MiB"),
        (615 * 2**20, "615 MiB"),
        (3 * 2**30, "3.0 GiB"),
        (2 * 2**40, "2.0 TiB"),
        (-2048, "-2.0 KiB"),
    ],
)
def test_sizes_are_binary_units(n: float, text: str) -> None:
    assert fmt.size(n) == text


def test_a_size_unit_is_the_one_size_writes():
    assert fmt.size_unit(1_572_864) == ("MiB", 2**20)
    assert fmt.size_unit(999) == ("B", 1)
    assert fmt.size_unit(1023) == ("KiB", 1024)  # size writes 1.0 KiB
    assert fmt.size_unit(3 * 2**30) == ("GiB", 2**30)
    assert fmt.size_unit(None) == ("B", 1)


def test_percentages_are_rounded_and_never_hide_a_little_or_round_up_to_all() -> None:
    assert [fmt.percent(x) for x in (0.25, 0.873, 0.0, 1.0, 0.001, 0.999)] == [
        "25%",
        "87%",
        "0%",
        "100%",
        "<1%",
        ">99%",
    ]
    assert fmt.percent(None) == "–"


def test_counts_numbers_and_breakdowns() -> None:
    assert fmt.count(1234567) == "1,234,567"
    assert [fmt.number(x) for x in (12345, 3.0, 3.2154, 0.04213, 12345.6)] == [
        "12,345",
        "3",
        "3.215",
        "0.04213",
        "12,346",
    ]
    parts = {"input": 0, "weight": 1.2 * 2**20, "activation": 6308352}
    assert fmt.breakdown(parts) == "activation 6.0 MiB, weight 1.2 MiB"
    assert fmt.breakdown(parts, keep_zero=True).endswith(", input 0 B")
    assert fmt.breakdown([]) == ""


def test_report_run_and_dashboard_share_the_module() -> None:
    """No surface keeps a formatter of its own (the old ``analysis.report.mib``)."""
    from ember.analysis import report
    from ember.analysis.report import builders
    from ember.dashboard import ui

    assert not hasattr(report, "mib")
    assert not hasattr(report, "seconds")
    assert builders.fmt is fmt
    assert ui.fmt is fmt
    assert ui.fmt_bytes(6308352) == fmt.size(6308352)
    assert ui.fmt_ms(1077.5275) == "1.1 s"
