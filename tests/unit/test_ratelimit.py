"""Rate limit strings: ``"N/period"``."""

from __future__ import annotations

import pytest

from conveyor.ratelimit import RateLimit
from conveyor.task import build_options


@pytest.mark.parametrize(
    ("text", "limit", "period"),
    [
        ("100/s", 100, 1.0),
        ("10/2s", 10, 2.0),
        ("500/m", 500, 60.0),
        ("1000/h", 1000, 3600.0),
        ("7/d", 7, 86400.0),
        ("5/0.5s", 5, 0.5),
        ("3/250ms", 3, 0.25),
        ("20/1.5m", 20, 90.0),
        (" 5 / 2s ", 5, 2.0),
        ("100/S", 100, 1.0),
    ],
)
def test_parse_accepts(text: str, limit: int, period: float) -> None:
    rate = RateLimit.parse(text)
    assert rate.limit == limit
    assert rate.period == pytest.approx(period)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "100",
        "100/",
        "/s",
        "abc",
        "10/x",
        "10/2",
        "-1/s",
        "1.5/s",
        "10/-2s",
        "10 per second",
        "10/s/s",
    ],
)
def test_parse_refuses_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="rate limit"):
        RateLimit.parse(text)


@pytest.mark.parametrize("text", ["0/s", "10/0s", "5/0ms", "0/0s"])
def test_parse_refuses_zero_count_or_period(text: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        RateLimit.parse(text)


def test_str_round_trips() -> None:
    for text in ("100/s", "10/2s", "500/m", "5/0.5s"):
        rate = RateLimit.parse(text)
        assert RateLimit.parse(str(rate)) == rate


def test_task_options_parse_the_rate_limit_and_refuse_a_bad_one() -> None:
    assert build_options(rate_limit="10/2s").rate_limit == RateLimit(10, 2.0)
    assert build_options().rate_limit is None
    with pytest.raises(ValueError, match="rate limit"):
        build_options(rate_limit="lots")
