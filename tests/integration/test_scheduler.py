"""The scheduler loop in-process on a real SQLite file: fast intervals and
6-field crons, two schedulers racing, misfire policies, limit, and the
``app.schedules`` admin API while a scheduler runs."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.errors import InvalidSchedule, ScheduleNotFound
from conveyor.job import Job
from conveyor.scheduler import Scheduler

Declare = Callable[[Conveyor], None]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sched.db'}"


@pytest.fixture
async def apps(url: str) -> AsyncIterator[Callable[[Declare], Conveyor]]:
    made: list[Conveyor] = []

    def make(declare: Declare) -> Conveyor:
        app = Conveyor(url)
        declare(app)
        made.append(app)
        return app

    yield make
    for app in made:
        await app.close()


async def run_for(seconds: float, *schedulers: Scheduler) -> None:
    tasks = [asyncio.create_task(s.run()) for s in schedulers]
    await asyncio.sleep(seconds)
    for s in schedulers:
        s.stop()
    await asyncio.gather(*tasks)


async def fired(app: Conveyor, schedule: str) -> list[Job]:
    jobs = await app.list_jobs(limit=10_000)
    return sorted(
        (j for j in jobs if j.metadata and j.metadata.get("schedule") == schedule),
        key=lambda j: j.created_at,
    )


def slot_times(jobs: list[Job]) -> list[float]:
    def parse(key: str) -> float:
        text = key.split(":", 2)[2]
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    return sorted(parse(j.idempotency_key or "") for j in jobs)


def assert_gap_free(slots: list[float], step: float) -> None:
    assert slots, "nothing fired"
    assert len(set(slots)) == len(slots), f"duplicate slots: {Counter(slots).most_common(3)}"
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(slots)]
    assert set(gaps) <= {round(step, 3)}, f"missed slots: gaps {gaps}"


async def test_an_interval_fires_every_slot_once(apps: Any) -> None:
    app = apps(lambda a: a.schedule("fast", every="0.2s", task="tick", payload={"n": 1}))
    await run_for(1.6, app.scheduler())
    jobs = await fired(app, "fast")
    assert 3 <= len(jobs) <= 9  # 8 slots in 1.6 s, less the scheduler's start
    assert_gap_free(slot_times(jobs), 0.2)
    first = jobs[0]
    assert first.task == "tick"
    assert first.payload == {"n": 1}
    assert first.idempotency_key is not None
    assert first.idempotency_key.startswith("schedule:fast:")
    assert first.idempotency_key.endswith("0Z")  # milliseconds for a 0.2 s interval
    record = await app.schedules.get("fast")
    assert record.fires == len(jobs)
    assert record.last_fire_at is not None
    assert record.next_fire_at is not None
    assert record.next_fire_at > record.last_fire_at


async def test_two_schedulers_on_one_file_fire_each_second_once(apps: Any) -> None:
    def declare(a: Conveyor) -> None:
        a.schedule("sec", cron="* * * * * *", task="tick", queue="cron", priority=5)

    first, second = apps(declare), apps(declare)
    await run_for(4.3, first.scheduler(), second.scheduler())
    jobs = await fired(first, "sec")
    assert 2 <= len(jobs) <= 5
    assert_gap_free(slot_times(jobs), 1.0)
    whole_seconds = re.compile(r"^schedule:sec:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    assert all(whole_seconds.match(j.idempotency_key or "") for j in jobs)
    assert {(j.queue, j.priority) for j in jobs} == {("cron", 5)}
    assert (await first.schedules.get("sec")).fires == len(jobs)


async def test_limit_and_end_finish_a_schedule(apps: Any) -> None:
    def declare(a: Conveyor) -> None:
        a.schedule("three", every="0.2s", task="t", limit=3)

    app = apps(declare)
    await run_for(2.0, app.scheduler())
    assert len(await fired(app, "three")) == 3
    record = await app.schedules.get("three")
    assert (record.fires, record.next_fire_at) == (3, None)
    assert await app.schedules.next_fires("three") == []


async def test_misfire_skip_forgets_missed_slots(apps: Any) -> None:
    app = apps(lambda a: a.schedule("late", cron="* * * * * *", task="t", misfire="skip"))
    scheduler = app.scheduler(misfire_grace=5.0)
    await scheduler.sync()
    backend = await app.connect()
    now = await backend.now()
    await backend.update_schedule("late", next_fire_at=float(int(now) - 600), reschedule=True)
    seen: list[dict[str, Any]] = []
    app.on("schedule_missed", lambda event, **data: seen.append(data))
    await scheduler.tick()
    record = await app.schedules.get("late")
    assert record.next_fire_at is not None
    assert record.next_fire_at > now
    assert record.fires == 0
    assert [d["missed_from"] for d in seen] == [float(int(now) - 600)]
    assert await fired(app, "late") == []

    # Slots late by less than the grace are late, not missed: each one fires.
    now = await backend.now()
    late = float(int(now) - 3)
    await backend.update_schedule("late", next_fire_at=late, reschedule=True)
    await scheduler.tick()
    jobs = await fired(app, "late")
    assert slot_times(jobs)[:4] == [late, late + 1, late + 2, late + 3]
    assert all(j.metadata is not None and "catch_up" not in j.metadata for j in jobs)


async def test_misfire_run_once_fires_one_catch_up(apps: Any) -> None:
    app = apps(lambda a: a.schedule("late", cron="0 * * * * *", task="t", misfire="run_once"))
    scheduler = app.scheduler(misfire_grace=5.0)
    await scheduler.sync()
    backend = await app.connect()
    now = await backend.now()
    missed = float(int(now // 60) * 60 - 3600)  # an hour of minutely slots missed
    await backend.update_schedule("late", next_fire_at=missed, reschedule=True)
    await scheduler.tick()
    (job,) = await fired(app, "late")
    assert job.metadata is not None
    assert job.metadata["catch_up"] is True
    assert job.idempotency_key == "schedule:late:" + datetime.fromtimestamp(missed, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    record = await app.schedules.get("late")
    assert record.fires == 1
    assert record.next_fire_at is not None
    assert now < record.next_fire_at <= now + 60


async def test_admin_pause_resume_trigger_and_set_cron(apps: Any) -> None:
    app = apps(lambda a: a.schedule("ops", every="0.2s", task="t", payload={"x": 1}))
    scheduler = app.scheduler()
    runner = asyncio.create_task(scheduler.run())
    try:
        await asyncio.sleep(0.7)
        paused = await app.schedules.pause("ops")
        assert paused.paused
        await asyncio.sleep(0.5)  # a look in flight may still finish its fire
        count = len(await fired(app, "ops"))
        await asyncio.sleep(0.8)
        assert len(await fired(app, "ops")) == count  # nothing while paused

        job = await app.schedules.trigger("ops")
        assert job.payload == {"x": 1}
        assert job.idempotency_key is None
        assert job.metadata == {"schedule": "ops", "trigger": True}
        assert (await app.schedules.get("ops")).fires == count  # not counted

        resumed = await app.schedules.resume("ops")
        assert not resumed.paused
        now = await (await app.connect()).now()
        assert resumed.next_fire_at is not None
        assert resumed.next_fire_at > now - 0.01  # skip: on from now, no backlog

        changed = await app.schedules.set_cron("ops", cron="0 0 1 1 *")
        assert (changed.cron, changed.every) == ("0 0 1 1 *", None)
        (upcoming,) = await app.schedules.next_fires("ops", count=1)
        assert (upcoming.month, upcoming.day, upcoming.hour, upcoming.minute) == (1, 1, 0, 0)
        await asyncio.sleep(0.6)  # a look in flight may still finish its fire
        settled = len(await fired(app, "ops"))
        await asyncio.sleep(0.6)
        assert len(await fired(app, "ops")) == settled  # the yearly cron is in force
    finally:
        scheduler.stop()
        await runner


async def test_overrides_survive_a_restart_and_a_code_change_drops_them(
    apps: Any, url: str
) -> None:
    app = apps(lambda a: a.schedule("s", cron="*/5 * * * *", task="t"))
    await app.scheduler().sync()
    await app.schedules.set_cron("s", every="90s")
    await app.schedules.pause("s")

    same_code = apps(lambda a: a.schedule("s", cron="*/5 * * * *", task="t"))
    (kept,) = await same_code.scheduler().sync()
    assert (kept.cron, kept.every, kept.paused) == (None, 90.0, True)

    new_code = apps(lambda a: a.schedule("s", cron="0 * * * *", task="t"))
    (replaced,) = await new_code.scheduler().sync()
    assert (replaced.cron, replaced.every, replaced.paused) == ("0 * * * *", None, True)


async def test_sync_removes_schedules_the_code_no_longer_declares(apps: Any) -> None:
    def both(a: Conveyor) -> None:
        a.schedule("keep", cron="@daily", task="t")
        a.schedule("drop", cron="@hourly", task="t")

    await apps(both).scheduler().sync()
    later = apps(lambda a: a.schedule("keep", cron="@daily", task="t"))
    await later.scheduler().sync()
    assert [r.name for r in await later.schedules.list()] == ["keep"]


async def test_admin_errors_are_typed(apps: Any) -> None:
    app = apps(lambda a: a.schedule("s", cron="@daily", task="t"))
    await app.scheduler().sync()
    for call in (
        app.schedules.get("nope"),
        app.schedules.pause("nope"),
        app.schedules.trigger("nope"),
        app.schedules.next_fires("nope"),
    ):
        with pytest.raises(ScheduleNotFound, match="'nope'"):
            await call
    with pytest.raises(InvalidSchedule, match="invalid cron expression"):
        await app.schedules.set_cron("s", cron="99 * * * *")
    with pytest.raises(InvalidSchedule, match="exactly one"):
        await app.schedules.set_cron("s")
    record = await app.schedules.get("s")
    assert (record.cron, record.every) == ("0 0 * * *", None)  # nothing changed


async def test_next_fires_are_in_the_schedules_zone(apps: Any) -> None:
    app = apps(lambda a: a.schedule("b", cron="30 2 * * *", task="t", timezone="Europe/Berlin"))
    await app.scheduler().sync()
    upcoming = await app.schedules.next_fires("b", count=3)
    assert len(upcoming) == 3
    assert {str(t.tzinfo) for t in upcoming} == {"Europe/Berlin"}
    assert {(t.hour, t.minute) for t in upcoming} == {(2, 30)}
    assert [(b - a).days for a, b in itertools.pairwise(upcoming)] in ([1, 1], [0, 1], [1, 0])
    await app.schedules.pause("b")
    assert await app.schedules.next_fires("b", count=3) == upcoming  # what resume would give
