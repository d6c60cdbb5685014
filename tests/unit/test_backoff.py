"""Backoff policies: the exponential formula, fixed delays, jitter bounds, validation."""

from __future__ import annotations

import random

import pytest

from conveyor import Backoff


@pytest.mark.parametrize(
    ("base", "multiplier", "maximum"),
    [(1.0, 2.0, 3600.0), (0.5, 3.0, 20.0), (2.0, 1.0, 10.0), (0.1, 1.5, 1.0)],
)
def test_exponential_follows_the_formula(base: float, multiplier: float, maximum: float) -> None:
    backoff = Backoff.exponential(base=base, max=maximum, multiplier=multiplier)
    for attempt in range(1, 25):
        expected = min(maximum, base * multiplier ** (attempt - 1))
        assert backoff.delay(attempt) == pytest.approx(expected), attempt


def test_exponential_defaults_match_the_spec() -> None:
    backoff = Backoff.exponential()
    assert [backoff.delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff.delay(13) == 3600.0  # 2**12 = 4096 is capped at one hour


def test_exponential_caps_at_max_and_survives_huge_attempt_numbers() -> None:
    backoff = Backoff.exponential(base=1, max=60, multiplier=2)
    assert backoff.delay(7) == 60.0  # 64 capped
    assert backoff.delay(10**6) == 60.0  # no OverflowError
    assert backoff.delay(1001) == 60.0


def test_attempt_zero_or_negative_is_treated_as_the_first() -> None:
    backoff = Backoff.exponential(base=3, multiplier=2)
    assert backoff.delay(0) == 3.0
    assert backoff.delay(-5) == 3.0


def test_fixed_is_the_same_every_attempt() -> None:
    backoff = Backoff.fixed(2.5)
    assert {backoff.delay(n) for n in range(1, 50)} == {2.5}
    assert backoff.kind == "fixed"


def test_zero_delay_is_allowed() -> None:
    assert Backoff.fixed(0).delay(3) == 0.0
    assert Backoff.exponential(base=0).delay(5) == 0.0


@pytest.mark.parametrize("jitter", [0.1, 0.5, 1.0])
def test_jitter_stays_within_its_bounds(jitter: float) -> None:
    rng = random.Random(1234)
    backoff = Backoff.exponential(base=1, multiplier=2, max=100, jitter=jitter)
    for attempt in (1, 3, 6):
        nominal = min(100.0, 2.0 ** (attempt - 1))
        values = [backoff.delay(attempt, rng) for _ in range(2000)]
        assert min(values) >= nominal * (1 - jitter)
        assert max(values) <= nominal
        # It really spreads: not every value is the nominal one.
        assert max(values) - min(values) > nominal * jitter * 0.5


def test_fixed_with_jitter_stays_within_its_bounds() -> None:
    rng = random.Random(7)
    values = [Backoff.fixed(10, jitter=0.2).delay(1, rng) for _ in range(1000)]
    assert all(8.0 <= v <= 10.0 for v in values)
    assert len(set(values)) > 1


def test_no_jitter_is_deterministic() -> None:
    rng = random.Random(0)
    backoff = Backoff.exponential(base=1, multiplier=3)
    assert [backoff.delay(3, rng) for _ in range(5)] == [9.0] * 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base": -1}, "base and max"),
        ({"max": -0.5}, "base and max"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"jitter": -0.1}, "jitter"),
        ({"jitter": 1.5}, "jitter"),
    ],
)
def test_invalid_parameters_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff.exponential(**kwargs)


def test_fixed_refuses_a_negative_delay_and_bad_jitter() -> None:
    with pytest.raises(ValueError, match="base and max"):
        Backoff.fixed(-1)
    with pytest.raises(ValueError, match="jitter"):
        Backoff.fixed(1, jitter=2)


def test_backoff_is_immutable_and_serialisable() -> None:
    backoff = Backoff.exponential(base=2, max=30, multiplier=3, jitter=0.25)
    assert backoff.to_dict() == {
        "kind": "exponential",
        "base": 2,
        "max": 30,
        "multiplier": 3,
        "jitter": 0.25,
    }
    with pytest.raises(AttributeError):
        backoff.base = 5  # type: ignore[misc]
