"""Schedules: sync by fingerprint, list, operator updates, compare-and-set
advance (G6 across backend instances), delete. Only the contract is used."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from conveyor.backends.base import Backend, MisfirePolicy, ScheduleRecord, ScheduleSpec

from .helpers import CLOCK_SLACK


def spec(name: str = "s", **fields: object) -> ScheduleSpec:
    values: dict[str, object] = {
        "name": name,
        "task": "report",
        "payload": b'{"k":1}',
        "cron": "*/5 * * * *",
        "timezone": "Europe/Berlin",
        "start": 1000.0,
        "end": 9_000_000_000.0,
        "limit": 7,
        "misfire": MisfirePolicy.RUN_ONCE,
        "options": b'{"queue":"reports","priority":3}',
        "fingerprint": "fp-1",
    }
    values.update(fields)
    return ScheduleSpec(**values)  # type: ignore[arg-type]


def only(records: list[ScheduleRecord], name: str) -> ScheduleRecord:
    (record,) = [r for r in records if r.name == name]
    return record


async def test_sync_inserts_new_schedules_with_their_first_fire(backend: Backend) -> None:
    before = await backend.now()
    records = await backend.sync_schedules(
        [spec("a"), spec("b", cron=None, every=2.5)], {"a": 1200.0, "b": 1300.5}
    )
    after = await backend.now()
    assert [r.name for r in records] == ["a", "b"]
    a, b = records
    assert a.spec == spec("a")
    assert (a.cron, a.every) == ("*/5 * * * *", None)
    assert (b.cron, b.every) == (None, 2.5)
    assert (a.next_fire_at, b.next_fire_at) == (1200.0, 1300.5)
    assert (a.paused, a.fires, a.last_fire_at) == (False, 0, None)
    assert before - CLOCK_SLACK <= a.updated_at <= after + CLOCK_SLACK
    assert await backend.list_schedules() == records


async def test_sync_keeps_state_when_the_fingerprint_is_unchanged(backend: Backend) -> None:
    await backend.sync_schedules([spec()], {"s": 1200.0})
    assert await backend.advance_schedule("s", 1200.0, 1500.0)
    await backend.update_schedule("s", paused=True, cron="0 * * * *")
    # The same code again (another scheduler, a restart): nothing moves,
    # whatever first fire this caller computed.
    (record,) = await backend.sync_schedules([spec()], {"s": 99_999.0})
    assert record.paused is True
    assert (record.cron, record.every) == ("0 * * * *", None)
    assert (record.next_fire_at, record.fires, record.last_fire_at) == (1500.0, 1, 1200.0)


async def test_a_changed_fingerprint_replaces_the_definition(backend: Backend) -> None:
    await backend.sync_schedules([spec()], {"s": 1200.0})
    assert await backend.advance_schedule("s", 1200.0, 1500.0)
    await backend.update_schedule("s", paused=True, every=30.0)
    changed = spec(cron="0 0 * * *", payload=b'{"k":2}', limit=None, fingerprint="fp-2")
    (record,) = await backend.sync_schedules([changed], {"s": 86_400.0})
    assert record.spec == changed
    # The override is dropped, the next fire is the new one; pause and count stay.
    assert (record.cron, record.every) == ("0 0 * * *", None)
    assert record.next_fire_at == 86_400.0
    assert (record.paused, record.fires) == (True, 1)


async def test_sync_stores_none_as_finished_and_leaves_others_alone(backend: Backend) -> None:
    await backend.sync_schedules([spec("keep")], {"keep": 1200.0})
    (done,) = await backend.sync_schedules([spec("done")], {"done": None})
    assert done.next_fire_at is None
    assert [r.name for r in await backend.list_schedules()] == ["done", "keep"]


async def test_list_is_by_name_and_round_trips_every_field(backend: Backend) -> None:
    names = ["m", "a", "z", "b-2", "b-10"]
    await backend.sync_schedules(
        [spec(n, start=None, end=None, limit=None, misfire=MisfirePolicy.SKIP) for n in names],
        dict.fromkeys(names, 5.0),
    )
    records = await backend.list_schedules()
    assert [r.name for r in records] == sorted(names)
    first = records[0].spec
    assert (first.start, first.end, first.limit, first.misfire) == (
        None,
        None,
        None,
        MisfirePolicy.SKIP,
    )
    assert first.payload == b'{"k":1}'
    assert first.options == b'{"queue":"reports","priority":3}'
    assert await backend.list_schedules() == records  # a read changes nothing


async def test_update_pause_resume_override_and_reschedule(backend: Backend) -> None:
    await backend.sync_schedules([spec()], {"s": 1200.0})
    paused = await backend.update_schedule("s", paused=True)
    assert paused is not None
    assert paused.paused
    assert paused.next_fire_at == 1200.0
    resumed = await backend.update_schedule("s", paused=False, next_fire_at=1800.0, reschedule=True)
    assert resumed is not None
    assert not resumed.paused
    assert resumed.next_fire_at == 1800.0
    interval = await backend.update_schedule("s", every=45.0)
    assert interval is not None
    assert (interval.cron, interval.every, interval.next_fire_at) == (None, 45.0, 1800.0)
    back = await backend.update_schedule("s", cron="1 2 * * *")
    assert back is not None
    assert (back.cron, back.every) == ("1 2 * * *", None)
    assert back.spec == spec()  # an override never touches the definition
    finished = await backend.update_schedule("s", next_fire_at=None, reschedule=True)
    assert finished is not None
    assert finished.next_fire_at is None
    assert only(await backend.list_schedules(), "s") == finished


async def test_update_of_an_unknown_schedule_returns_none(backend: Backend) -> None:
    assert await backend.update_schedule("nope", paused=True) is None
    assert await backend.list_schedules() == []


async def test_advance_is_a_compare_and_set(backend: Backend) -> None:
    await backend.sync_schedules([spec()], {"s": 1200.0})
    assert await backend.advance_schedule("s", 1200.0, 1500.0) is True
    assert await backend.advance_schedule("s", 1200.0, 1800.0) is False  # already moved
    assert await backend.advance_schedule("s", 1500.25, 1800.0) is False  # exact match only
    assert await backend.advance_schedule("nope", 1200.0, 1500.0) is False
    record = only(await backend.list_schedules(), "s")
    assert (record.next_fire_at, record.fires, record.last_fire_at) == (1500.0, 1, 1200.0)
    # The last fire may finish the schedule.
    assert await backend.advance_schedule("s", 1500.0, None) is True
    record = only(await backend.list_schedules(), "s")
    assert (record.next_fire_at, record.fires, record.last_fire_at) == (None, 2, 1500.0)


async def test_a_skip_moves_the_slot_without_counting_a_fire(backend: Backend) -> None:
    await backend.sync_schedules([spec()], {"s": 1200.0})
    assert await backend.advance_schedule("s", 1200.0, 1500.0)
    assert await backend.advance_schedule("s", 1500.0, 9000.0, fired=False) is True
    assert await backend.advance_schedule("s", 1500.0, 9300.0, fired=False) is False
    record = only(await backend.list_schedules(), "s")
    assert (record.next_fire_at, record.fires, record.last_fire_at) == (9000.0, 1, 1200.0)


async def test_advance_keeps_fractional_slots_exact(backend: Backend) -> None:
    slot = 1_763_814_600.2000000477  # an interval slot of 0.2 s
    await backend.sync_schedules([spec(cron=None, every=0.2)], {"s": slot})
    assert only(await backend.list_schedules(), "s").next_fire_at == slot
    assert await backend.advance_schedule("s", slot, slot + 0.2)
    assert only(await backend.list_schedules(), "s").next_fire_at == slot + 0.2


async def test_racing_advances_from_two_instances_move_each_slot_once(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    await first.sync_schedules([spec()], {"s": 0.0})
    wins = 0
    for slot in range(25):
        results = await asyncio.gather(
            *(b.advance_schedule("s", float(slot), float(slot + 1)) for b in (first, second))
        )
        assert sorted(results) == [False, True], f"slot {slot}: {results}"
        wins += 1
    for instance in (first, second):
        record = only(await instance.list_schedules(), "s")
        assert (record.next_fire_at, record.fires, record.last_fire_at) == (25.0, wins, 24.0)


async def test_concurrent_syncs_from_two_instances_store_one_schedule(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    one, two = await asyncio.gather(
        first.sync_schedules([spec()], {"s": 1200.0}),
        second.sync_schedules([spec()], {"s": 1260.0}),
    )
    stored = await second.list_schedules()
    assert len(stored) == 1
    # Whichever came first inserted it; the other found it unchanged.
    assert stored[0].next_fire_at in (1200.0, 1260.0)
    assert one[0].spec == two[0].spec == stored[0].spec


async def test_changes_are_seen_by_another_instance(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    await first.sync_schedules([spec()], {"s": 1200.0})
    await first.update_schedule("s", paused=True, cron="0 9 * * 1")
    record = only(await second.list_schedules(), "s")
    assert record.paused
    assert record.cron == "0 9 * * 1"


async def test_delete_forgets_and_counts(backend: Backend) -> None:
    await backend.sync_schedules([spec("a"), spec("b"), spec("c")], {"a": 1.0, "b": 2.0, "c": 3.0})
    assert await backend.delete_schedules(["a", "c", "missing"]) == 2
    assert [r.name for r in await backend.list_schedules()] == ["b"]
    assert await backend.delete_schedules([]) == 0
    assert await backend.delete_schedules(["a"]) == 0
    # A deleted name comes back as new: fresh state, the caller's first fire.
    (again,) = await backend.sync_schedules([replace(spec("a"))], {"a": 50.0})
    assert (again.next_fire_at, again.fires, again.paused) == (50.0, 0, False)
