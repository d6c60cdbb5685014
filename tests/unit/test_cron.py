"""Fire-time math: cron in named zones across DST, intervals, start/end/limit,
fire-time keys, and declaration errors (``InvalidSchedule``)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from conveyor import Conveyor
from conveyor.backends.base import MisfirePolicy
from conveyor.errors import ConfigurationError, InvalidSchedule
from conveyor.scheduler.cron import Cron, Interval, InvalidTiming, fire_time_text, normalize_cron
from conveyor.scheduler.spec import build_spec
from conveyor.scheduler.timetable import timetable

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def fires(expr: str, zone: ZoneInfo, start: datetime, count: int) -> list[datetime]:
    cron = Cron.parse(expr, str(zone))
    t = start.timestamp()
    out = []
    for _ in range(count):
        t = cron.next_after(t)
        out.append(datetime.fromtimestamp(t, zone))
    return out


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold)  # type: ignore[misc]


def offsets(times: list[datetime]) -> list[tuple[str, float]]:
    """Each fire as local wall time and UTC offset in hours."""
    return [
        (t.strftime("%m-%d %H:%M:%S"), (t.utcoffset() or timedelta()).total_seconds() / 3600)
        for t in times
    ]


# -- parsing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "normalized"),
    [
        ("*/5 * * * *", "*/5 * * * *"),
        ("  0   9 * * MON-FRI ", "0 9 * * MON-FRI"),
        ("*/10 * * * * *", "*/10 * * * * *"),
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
    ],
)
def test_valid_expressions_are_normalized(expr: str, normalized: str) -> None:
    assert normalize_cron(expr) == normalized


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("* * * *", "has 4 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("", "has 0 fields"),
        ("61 * * * *", "invalid cron expression"),
        ("* 25 * * *", "invalid cron expression"),
        ("0 0 30 2 *", "invalid cron expression"),
        ("*/0 * * * *", "invalid cron expression"),
        ("bogus * * * *", "invalid cron expression"),
    ],
)
def test_invalid_expressions_name_the_problem(expr: str, problem: str) -> None:
    with pytest.raises(InvalidTiming, match=problem):
        normalize_cron(expr)


def test_six_fields_put_seconds_first() -> None:
    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    times = fires("15,45 * * * * *", ZoneInfo("UTC"), start, 3)
    assert [t.strftime("%H:%M:%S") for t in times] == ["12:00:15", "12:00:45", "12:01:15"]


def test_next_is_strictly_after_and_whole_seconds() -> None:
    cron = Cron.parse("* * * * * *")
    assert cron.next_after(100.0) == 101.0
    assert cron.next_after(100.5) == 101.0


def test_cron_in_a_zone_fires_at_local_time() -> None:
    start = datetime(2026, 6, 1, tzinfo=UTC)
    (first,) = fires("0 9 * * *", BERLIN, start, 1)
    assert first == local(BERLIN, 2026, 6, 1, 9)
    assert first.astimezone(UTC).hour == 7  # CEST is UTC+2


# -- DST: fixed-time (wall-clock) schedules ---------------------------------------------


def test_spring_forward_fires_a_missing_time_once_at_the_end_of_the_gap() -> None:
    # New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
    times = fires("30 2 * * *", NEW_YORK, local(NEW_YORK, 2026, 3, 7, 12), 3)
    assert offsets(times) == [
        ("03-08 03:00:00", -4.0),  # the first instant after the gap
        ("03-09 02:30:00", -4.0),
        ("03-10 02:30:00", -4.0),
    ]
    # Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; several slots in the gap
    # still fire once, and 03:00 itself is not fired a second time.
    times = fires("0,20,40 2,3 * * *", BERLIN, local(BERLIN, 2026, 3, 29, 0), 5)
    assert offsets(times) == [
        ("03-29 03:00:00", 2.0),
        ("03-29 03:20:00", 2.0),
        ("03-29 03:40:00", 2.0),
        ("03-30 02:00:00", 2.0),
        ("03-30 02:20:00", 2.0),
    ]


def test_fall_back_fires_a_repeated_time_once_at_its_first_occurrence() -> None:
    # New York, 2026-11-01: 01:00-02:00 happens twice (EDT, then EST).
    times = fires("30 1 * * *", NEW_YORK, local(NEW_YORK, 2026, 10, 31, 12), 3)
    assert offsets(times) == [
        ("11-01 01:30:00", -4.0),
        ("11-02 01:30:00", -5.0),
        ("11-03 01:30:00", -5.0),
    ]
    # Berlin, 2026-10-25 (6 fields): 02:30 CEST fires, 02:30 CET does not.
    times = fires("0 30 2 * * *", BERLIN, local(BERLIN, 2026, 10, 24, 12), 2)
    assert offsets(times) == [("10-25 02:30:00", 2.0), ("10-26 02:30:00", 1.0)]


def test_fall_back_from_inside_the_second_pass_does_not_fire_again() -> None:
    cron = Cron.parse("45 1 * * *", "America/New_York")
    second_pass = local(NEW_YORK, 2026, 11, 1, 1, 40, fold=1).timestamp()
    following = datetime.fromtimestamp(cron.next_after(second_pass), NEW_YORK)
    assert offsets([following]) == [("11-02 01:45:00", -5.0)]


# -- DST: wildcard (real-time) schedules -----------------------------------------------


def test_wildcard_schedules_follow_real_time_through_fall_back() -> None:
    times = fires("*/30 * * * *", NEW_YORK, local(NEW_YORK, 2026, 11, 1, 0, 50), 6)
    assert offsets(times) == [
        ("11-01 01:00:00", -4.0),
        ("11-01 01:30:00", -4.0),
        ("11-01 01:00:00", -5.0),  # the repeated hour is a real hour: it fires
        ("11-01 01:30:00", -5.0),
        ("11-01 02:00:00", -5.0),
        ("11-01 02:30:00", -5.0),
    ]
    gaps = {b.timestamp() - a.timestamp() for a, b in itertools.pairwise(times)}
    assert gaps == {1800.0}


def test_hourly_keeps_a_real_hour_through_spring_forward() -> None:
    times = fires("0 * * * *", BERLIN, local(BERLIN, 2026, 3, 29, 0, 30), 3)
    assert offsets(times) == [
        ("03-29 01:00:00", 1.0),
        ("03-29 03:00:00", 2.0),
        ("03-29 04:00:00", 2.0),
    ]
    assert times[1].timestamp() - times[0].timestamp() == 3600


# -- intervals and the timetable ----------------------------------------------------------


def test_intervals_are_aligned_to_the_epoch_or_to_start() -> None:
    assert Interval(30.0).next_after(1_000_000_005.0) == 1_000_000_020.0
    assert Interval(30.0).next_after(1_000_000_020.0) == 1_000_000_050.0
    assert Interval(30.0, anchor=7.0).next_after(8.0) == 37.0
    base = 1_763_814_600.0
    for tenth in range(10):
        after = base + tenth / 10
        slot = Interval(0.2).next_after(after)
        assert after < slot <= after + 0.2 + 1e-6
        steps = (slot - base) / 0.2
        assert abs(steps - round(steps)) < 1e-4  # on the grid, to float precision


def test_fire_time_keys_carry_milliseconds_only_when_the_interval_has_them() -> None:
    moment = datetime(2026, 11, 22, 12, 30, tzinfo=UTC).timestamp()
    assert fire_time_text(moment, False) == "2026-11-22T12:30:00Z"
    assert fire_time_text(moment + 0.2, True) == "2026-11-22T12:30:00.200Z"
    whole = build_spec("s", task="t", every="30s")
    split = build_spec("s", task="t", every="0.25s")
    assert timetable(whole, None, 30.0).fire_key("s", moment) == "schedule:s:2026-11-22T12:30:00Z"
    assert (
        timetable(split, None, 0.25).fire_key("s", moment + 0.25)
        == "schedule:s:2026-11-22T12:30:00.250Z"
    )


def test_start_end_and_limit_bound_the_slots() -> None:
    start = datetime(2026, 1, 1, 10, 0, tzinfo=UTC).timestamp()
    spec = build_spec("s", task="t", every=60, start=start, end=start + 150, limit=None)
    table = timetable(spec, spec.cron, spec.every)
    assert table.first(start - 3600) == start  # start itself is a slot
    assert table.first(start) == start + 60
    assert table.after_fire(start + 60, 2) == start + 120
    assert table.after_fire(start + 120, 3) is None  # past end
    limited = build_spec("l", task="t", cron="* * * * *", limit=2)
    table = timetable(limited, limited.cron, limited.every)
    assert table.first(0.0, fires=0) == 60.0
    assert table.after_fire(60.0, 1) == 120.0
    assert table.after_fire(120.0, 2) is None  # limit reached
    assert table.first(500.0, fires=2) is None


def test_naive_start_is_read_in_the_schedules_zone() -> None:
    spec = build_spec(
        "s", task="t", cron="0 * * * *", timezone="Europe/Berlin", start=datetime(2026, 7, 1, 9, 0)
    )
    assert spec.start == datetime(2026, 7, 1, 7, 0, tzinfo=UTC).timestamp()


# -- declaration ----------------------------------------------------------------------


def test_app_schedule_returns_the_spec_with_a_stable_fingerprint() -> None:
    app = Conveyor("memory://")
    spec = app.schedule(
        "cleanup",
        cron="0 */15 * * * *",
        task="session.cleanup",
        payload={"max_age": 86400},
        queue="maintenance",
        timeout="5m",
    )
    assert spec.cron == "0 */15 * * * *"
    assert spec.options == b'{"queue":"maintenance","timeout":300.0}'
    assert spec.misfire is MisfirePolicy.SKIP
    again = build_spec(
        "cleanup",
        cron="0 */15 * * * *",
        task="session.cleanup",
        payload={"max_age": 86400},
        options={"queue": "maintenance", "timeout": 300},
    )
    assert again.fingerprint == spec.fingerprint
    other = build_spec(
        "cleanup",
        cron="0 */15 * * * *",
        task="session.cleanup",
        payload={"max_age": 3600},
        options={"queue": "maintenance", "timeout": 300},
    )
    assert other.fingerprint != spec.fingerprint
    assert app.schedule_specs["cleanup"] is spec


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"cron": "* * *"}, "has 3 fields"),
        ({"cron": "0 0 31 2 *"}, "invalid cron expression"),
        ({"cron": "* * * * *", "every": 5}, "exactly one of"),
        ({}, "exactly one of"),
        ({"every": "soon"}, "not a duration"),
        ({"every": 0.01}, "at least 0.1s"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "* * * * *", "limit": 0}, "limit must be"),
        ({"cron": "* * * * *", "misfire": "later"}, "misfire must be one of"),
        ({"cron": "* * * * *", "start": 10.0, "end": 5.0}, "end must be after start"),
        ({"cron": "* * * * *", "start": "tomorrow"}, "start must be a datetime"),
        ({"cron": "* * * * *", "delay": 5}, "unknown option"),
        ({"cron": "* * * * *", "payload": {1, 2}}, "not JSON-serialisable"),
        ({"cron": "* * * * *", "priority": "high"}, "priority must be a whole number"),
    ],
)
def test_invalid_declarations_raise_invalid_schedule(
    arguments: dict[str, object], problem: str
) -> None:
    app = Conveyor("memory://")
    task = arguments.pop("task", "t")
    with pytest.raises(InvalidSchedule, match=problem) as caught:
        app.schedule("nightly", task=task, **arguments)  # type: ignore[arg-type]
    assert "'nightly'" in str(caught.value)
    assert isinstance(caught.value, ConfigurationError)
    assert app.schedule_specs == {}  # nothing half-declared


def test_a_name_is_declared_once() -> None:
    app = Conveyor("memory://")
    app.schedule("a", every="1m", task="t")
    with pytest.raises(InvalidSchedule, match="already declared"):
        app.schedule("a", every="2m", task="t")
    assert app.schedule_specs["a"].every == 60.0


def test_a_task_object_names_its_task() -> None:
    app = Conveyor("memory://")

    @app.task("emails.digest")
    def digest(ctx: object) -> None: ...

    assert app.schedule("d", cron="@daily", task=digest).task == "emails.digest"
