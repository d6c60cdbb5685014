"""conveyor.testing's assertions on enqueued jobs, on a real memory and SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.job import JobState
from conveyor.testing import assert_enqueued, enqueued_jobs, refute_enqueued
from conveyor.testing.assertions import is_subset


@pytest.fixture(params=["memory", "sqlite"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Conveyor]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'c.db'}"
    app = Conveyor(url)

    @app.task("send")
    async def send(ctx: object, to: str = "", **rest: object) -> str:
        return to

    @app.task("report", queue="slow")
    async def report(ctx: object, **rest: object) -> None:
        return None

    try:
        yield app
    finally:
        await app.close()


async def test_payload_is_a_subset_match(app: Conveyor) -> None:
    job = await app.enqueue("send", {"to": "a@x", "options": {"html": True, "lang": "fr"}})
    found = await assert_enqueued(app, "send", payload={"to": "a@x"})
    assert found.id == job.id
    assert (await assert_enqueued(app, "send", payload={"options": {"lang": "fr"}})).id == job.id
    await refute_enqueued(app, "send", payload={"to": "b@x"})
    await refute_enqueued(app, "send", payload={"options": {"lang": "de"}})
    await refute_enqueued(app, "send", payload={"to": "a@x", "cc": "c@x"})


def test_subset_rules() -> None:
    assert is_subset({}, {"a": 1})
    assert is_subset({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3})
    assert not is_subset({"a": [1]}, {"a": [1, 2]})  # lists are compared whole
    assert not is_subset({"a": 1}, [1])
    assert is_subset([1, 2], [1, 2])
    assert not is_subset(1, 2)


async def test_expected_payload_goes_through_json(app: Conveyor) -> None:
    await app.enqueue("send", {"to": "a@x", "ids": (1, 2)})
    await assert_enqueued(app, "send", payload={"ids": (1, 2)})


async def test_failure_lists_what_is_enqueued(app: Conveyor) -> None:
    await app.enqueue("send", {"to": "a@x"})
    await app.enqueue("report", {"day": 3}, tenant="acme")
    with pytest.raises(AssertionError) as raised:
        await assert_enqueued(app, "send", payload={"to": "z@x"})
    message = str(raised.value)
    assert message.startswith("no delayed/waiting job matches task='send', payload={'to': 'z@x'}")
    assert "delayed/waiting jobs (2):" in message
    assert "send queue=default state=waiting payload={'to': 'a@x'}" in message
    assert "report queue=slow state=waiting tenant='acme' payload={'day': 3}" in message


async def test_failure_on_an_empty_store_says_so(app: Conveyor) -> None:
    with pytest.raises(AssertionError, match=r"(?s)no delayed/waiting job .*jobs: none"):
        await assert_enqueued(app, "send")


async def test_refute_lists_the_matches(app: Conveyor) -> None:
    await refute_enqueued(app, "send")
    job = await app.enqueue("send", {"to": "a@x"})
    with pytest.raises(AssertionError) as raised:
        await refute_enqueued(app, "send")
    assert "expected no job to match task='send'" in str(raised.value)
    assert job.id in str(raised.value)


async def test_filters(app: Conveyor) -> None:
    plain = await app.enqueue("send", {"to": "a@x"})
    special = await app.enqueue(
        "send",
        {"to": "a@x"},
        queue="mail",
        tenant="acme",
        priority=10,
        metadata={"trace": "t1", "source": "api"},
    )
    assert [j.id for j in await enqueued_jobs(app, "send")] == [plain.id, special.id]
    assert (await assert_enqueued(app, "send", queue="mail")).id == special.id
    assert (await assert_enqueued(app, "send", tenant="acme")).id == special.id
    assert (await assert_enqueued(app, "send", priority=10)).id == special.id
    assert (await assert_enqueued(app, metadata={"source": "api"})).id == special.id
    await refute_enqueued(app, "send", queue="mail", priority=0)
    await refute_enqueued(app, metadata={"source": "cli"})
    with pytest.raises(TypeError, match="no Job field named colour"):
        await enqueued_jobs(app, colour="red")


async def test_state_defaults_to_not_yet_run(app: Conveyor) -> None:
    delayed = await app.enqueue("send", {"to": "later"}, delay=3600)
    done = await app.enqueue("send", {"to": "now"})
    assert await app.drain() == 1
    assert (await assert_enqueued(app, "send")).id == delayed.id
    await refute_enqueued(app, "send", payload={"to": "now"})
    found = await assert_enqueued(app, "send", payload={"to": "now"}, state="completed")
    assert found.id == done.id
    assert found.state is JobState.COMPLETED
    both = await enqueued_jobs(app, state=[JobState.COMPLETED, JobState.DELAYED])
    assert {j.id for j in both} == {delayed.id, done.id}


async def test_every_page_is_read(app: Conveyor) -> None:
    await app.enqueue_many([("report", {"n": n}) for n in range(1100)])
    assert len(await enqueued_jobs(app, "report")) == 1100
    assert (await assert_enqueued(app, "report", payload={"n": 1099})).payload == {"n": 1099}
