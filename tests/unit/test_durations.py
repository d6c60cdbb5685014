"""``parse_duration`` and ``format_duration``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conveyor.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (1, 1.0),
        (1.5, 1.5),
        ("1.5", 1.5),
        ("30", 30.0),
        ("250ms", 0.25),
        ("0.5s", 0.5),
        (".5s", 0.5),
        ("2.", 2.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("2w", 2 * 604800.0),
        (" 30s ", 30.0),
        ("30 s", 30.0),
        ("5M", 300.0),
        ("250MS", 0.25),
        (timedelta(minutes=2), 120.0),
        (timedelta(milliseconds=5), 0.005),
    ],
)
def test_accepted_forms(value: float | str | timedelta, seconds: float) -> None:
    result = parse_duration(value)
    assert isinstance(result, float)
    assert result == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "abc",
        "s",
        "ms",
        "-1",
        "-1s",
        "1y",
        "1 2s",
        "1s2",
        "1.2.3s",
        "1e3",
        "5 minutes",
        -1,
        -0.001,
        timedelta(seconds=-1),
        True,
        False,
        None,
        [1],
    ],
)
def test_refused_forms(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)  # type: ignore[arg-type]


def test_the_error_quotes_the_bad_value_and_shows_examples() -> None:
    with pytest.raises(ValueError, match=r"'ten seconds'.*250ms"):
        parse_duration("ten seconds")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0ms"),
        (0.0004, "0ms"),
        (0.85, "850ms"),
        (0.9996, "1000ms"),
        (1, "1.0s"),
        (12.34, "12.3s"),
        (59.9, "59.9s"),
        (60, "1m00s"),
        (245, "4m05s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (7800, "2h10m"),
        (86399, "23h59m"),
        (86400, "1d0h"),
        (273600, "3d4h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["250ms", "30s", "5m", "1h", "1d"])
def test_format_of_a_parsed_round_value_reads_the_same_amount(text: str) -> None:
    formatted = format_duration(parse_duration(text))
    # Not necessarily the same spelling, but the same amount once parsed back.
    simple = {"1d0h": "1d", "1h00m": "1h", "5m00s": "5m", "30.0s": "30s"}.get(formatted, formatted)
    assert parse_duration(simple) == parse_duration(text)
