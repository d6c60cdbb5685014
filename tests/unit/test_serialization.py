"""JSON only: non-JSON values are refused, big payloads too, and nothing is stored."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from conveyor import PayloadTooLarge, SerializationError
from conveyor.app import Conveyor
from conveyor.errors import EnqueueError
from conveyor.serialization import dumps, dumps_str, encode_payload, loads


@pytest.mark.parametrize(
    "value",
    [
        {"to": "a@b.c", "n": 1, "ok": True, "x": None, "f": 1.5, "list": [1, "2", [3]]},
        [],
        "text",
        42,
        {"nested": {"deep": {"deeper": ["é", "漢字"]}}},
    ],
)
def test_json_values_round_trip(value: object) -> None:
    assert loads(dumps(value)) == value
    assert loads(dumps_str(value)) == value


@pytest.mark.parametrize(
    "value",
    [object(), {1, 2}, {"x": object()}, [b"bytes"], {"d": decimal.Decimal("1.5")}, lambda: 1],
)
def test_non_json_value_raises_serialization_error(value: object) -> None:
    with pytest.raises(SerializationError, match="JSON"):
        dumps(value)


def test_serialization_error_is_a_type_error_and_an_enqueue_error() -> None:
    with pytest.raises(TypeError):
        dumps(object())
    with pytest.raises(EnqueueError):
        dumps(object())


def test_non_string_keys_become_strings() -> None:
    assert loads(dumps({1: "a"})) == {"1": "a"}


def test_datetimes_are_encoded_as_iso_strings() -> None:
    moment = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert loads(dumps({"at": moment})) == {"at": "2024-01-02T03:04:05+00:00"}


def test_bad_json_raises_value_error() -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # orjson's JSONDecodeError: the documented contract
        loads(b"{not json")


def test_encode_payload_enforces_the_limit() -> None:
    data = encode_payload({"s": "x" * 10}, limit=1000)
    assert loads(data) == {"s": "x" * 10}
    exactly = len(dumps({"s": "x" * 10}))
    assert encode_payload({"s": "x" * 10}, limit=exactly) == data
    with pytest.raises(PayloadTooLarge) as info:
        encode_payload({"s": "x" * 10}, limit=exactly - 1)
    assert info.value.size == exactly
    assert info.value.limit == exactly - 1
    assert str(exactly) in str(info.value)


async def test_enqueue_refuses_non_json_payload_and_stores_nothing() -> None:
    async with Conveyor("memory://") as app:
        with pytest.raises(SerializationError):
            await app.enqueue("t", {"when": object()})
        with pytest.raises(SerializationError):
            await app.enqueue("t", {"x": 1}, metadata={"bad": {1, 2}})
        assert await app.count_jobs() == 0


async def test_enqueue_refuses_an_oversized_payload_and_stores_nothing() -> None:
    async with Conveyor("memory://", max_payload_bytes=100) as app:
        await app.enqueue("t", {"s": "x" * 50})
        with pytest.raises(PayloadTooLarge):
            await app.enqueue("t", {"s": "x" * 200})
        with pytest.raises(PayloadTooLarge):
            await app.enqueue_many([("t", {"s": "ok"}), ("t", {"s": "x" * 200})])
        assert await app.count_jobs() == 1


async def test_default_payload_limit_is_one_mebibyte() -> None:
    async with Conveyor("memory://") as app:
        await app.enqueue("t", {"s": "x" * (1024 * 1024 - 100)})
        with pytest.raises(PayloadTooLarge):
            await app.enqueue("t", {"s": "x" * (1024 * 1024)})
        assert await app.count_jobs() == 1
