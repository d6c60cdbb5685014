"""The dispatch message's body: a batch of [id, stamp] pairs for one queue,
the earlier one-job form still read, anything else refused."""

from __future__ import annotations

import orjson
import pytest

from conveyor.backends.dispatchstore import Dispatchable
from conveyor.dispatch.messages import Envelope, decode, encode
from conveyor.dispatch.relay import batches


def test_a_batch_message_names_its_jobs_and_reads_back() -> None:
    items = [Dispatchable(f"j{i}", "emails", None, 100.0 + i) for i in range(3)]
    message = encode("emails", items, now=50.0)
    assert message.expiration is None
    assert decode(message.body) == Envelope("emails", (("j0", 100.0), ("j1", 101.0), ("j2", 102.0)))


def test_a_message_carries_its_jobs_expiry() -> None:
    items = [Dispatchable("a", "q", 60.0, 1.0), Dispatchable("b", "q", 60.0, 1.0)]
    assert encode("q", items, now=58.5).expiration == pytest.approx(1.5)


def test_the_one_job_form_is_still_read() -> None:
    body = orjson.dumps({"id": "j1", "queue": "default", "stamp": 12.5})
    assert decode(body) == Envelope("default", (("j1", 12.5),))


@pytest.mark.parametrize(
    "body",
    [
        b"not json {",
        b"[]",
        b'{"id": 5}',
        b'{"queue": "q", "jobs": []}',
        b'{"queue": "q", "jobs": [["j1"]]}',
        b'{"queue": "q", "jobs": [["", 1.0]]}',
        b'{"queue": "q", "jobs": [["j1", true]]}',
        b'{"queue": "q", "jobs": "j1"}',
        b'{"jobs": [["j1", 1.0]]}',
    ],
)
def test_anything_else_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"JSON|queue|job|stamp"):
        decode(body)


def test_a_batch_splits_by_queue_and_expiry_in_take_order() -> None:
    items = [
        Dispatchable("a", "q1", None, 1.0),
        Dispatchable("b", "q2", None, 1.0),
        Dispatchable("c", "q1", 9.0, 1.0),
        Dispatchable("d", "q1", None, 1.0),
    ]
    groups = batches(items)
    assert {k: [i.id for i in v] for k, v in groups.items()} == {
        ("q1", None): ["a", "d"],
        ("q2", None): ["b"],
        ("q1", 9.0): ["c"],
    }
