"""The batch decoder of claimed Redis rows (layouts planned once, shared values
read once) gives the same jobs as decoding each row on its own; a claim's lease
groups give each job its group's lease over what its row holds."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from conveyor.backends.redis.decode import (
    claim_result,
    job_from_hash,
    jobs_from_hashes,
    leased_result,
)
from conveyor.job import DependencyPolicy, JobState

CLAIMED = [
    b"t", b"send", b"q", b"mail", b"s", b"active", b"ra", b"1763856000.25",
    b"ca", b"1763856000.25", b"a", b"1", b"ma", b"3",
    b"lu", b"1763856060.5", b"lt", b"tok.1", b"w", b"w1", b"sa", b"1763856000.5",
]  # fmt: skip


def _row(job_id: str, payload: bytes = b'{"n": 1}', *extra: bytes) -> list[bytes]:
    return [*CLAIMED, *extra, b"id", job_id.encode(), b"p", payload]


def _same(raws: list[list[bytes]]) -> None:
    batch = jobs_from_hashes(raws)
    one_by_one = [job_from_hash(raw) for raw in raws]
    assert [dataclasses.asdict(job) for job in batch] == [
        dataclasses.asdict(job) for job in one_by_one
    ]


def test_rows_of_one_layout_decode_as_one_by_one() -> None:
    raws = [_row(f"j{i}", b'{"n": %d}' % i) for i in range(5)]
    _same(raws)
    jobs = jobs_from_hashes(raws)
    assert [job.id for job in jobs] == [f"j{i}" for i in range(5)]
    assert [job.payload for job in jobs] == [{"n": i} for i in range(5)]
    assert jobs[0].state is JobState.ACTIVE
    assert jobs[0].lease_until == 1763856060.5
    assert jobs[0].metadata is not jobs[1].metadata  # each job its own mutable fields


def test_rows_of_one_layout_with_different_values_keep_their_own() -> None:
    rows = [_row(f"j{i}", b"{}", b"ik", b"k%d" % i) for i in range(3)]
    rows[1][rows[1].index(b"a") + 1] = b"2"  # same layout, another attempt count
    rows[2][rows[2].index(b"ra") + 1] = b"1763856009.5"
    _same(rows)
    jobs = jobs_from_hashes(rows)
    assert [(j.attempts, j.run_at, j.idempotency_key) for j in jobs] == [
        (1, 1763856000.25, "k0"),
        (2, 1763856000.25, "k1"),
        (1, 1763856009.5, "k2"),
    ]
    assert jobs[0].errors is not jobs[1].errors


def test_mixed_layouts_optional_fields_and_a_field_given_twice() -> None:
    retried = [*CLAIMED[:-8], b"lu", b"1.0", *CLAIMED[-8:], b"id", b"r1", b"p", b"null"]
    _same(
        [
            _row("a"),
            _row("b", b"{}", b"pr", b"7", b"to", b"2.5", b"ik", b"key-b", b"tn", b"acme"),
            retried,  # an earlier claim's lease_until, then this claim's: the last wins
            _row("c"),
        ]
    )
    assert jobs_from_hashes([retried])[0].lease_until == 1763856060.5


def test_rows_with_json_fields_and_bad_payloads() -> None:
    _same(
        [
            _row("m", b"{}", b"m", b'{"who": "me"}', b"r", b"42"),
            _row("bad", b"{not json"),
            _row("e", b"{}", b"e", b'[{"type": "E", "message": "x"}]'),
        ]
    )
    assert jobs_from_hashes([_row("bad", b"{not json")])[0].decode_error is not None


def test_a_row_whose_payload_key_is_gone() -> None:
    gone = [*CLAIMED, b"id", b"g", b"p", None]  # what MGET returns for a missing key
    _same([_row("a"), gone])  # type: ignore[list-item]
    job = jobs_from_hashes([gone])[0]  # type: ignore[list-item]
    assert job.payload is None
    assert job.decode_error is None


def test_a_row_of_odd_length_is_refused_as_one_by_one() -> None:
    with pytest.raises(ValueError, match="zip"):  # job_from_hash's strict pairing
        jobs_from_hashes([[*_row("a"), b"t"]])


def _unleased(job_id: str, *extra: bytes) -> list[bytes]:
    """A claimed row as the claim script sends it: the lease fields are in its group."""
    return [*CLAIMED[:-8], *extra, b"id", job_id.encode(), b"p", b"{}"]


def test_each_job_takes_its_lease_group_over_its_row() -> None:
    stale = _unleased("old", b"sa", b"1.5", b"w", b"gone")  # an earlier attempt's
    with_errors = _unleased("err", b"e", b'[{"type": "E", "message": "x"}]')  # general path
    groups = [
        [b"1763856100.5", b"tok.1", b"w1", b"1763856040.5", [_unleased("a"), stale]],
        [b"1763856200.5", b"tok.2", b"w1", b"1763856140.5", [with_errors]],
    ]
    expired = [[*CLAIMED[:-8], b"id", b"x", b"p", b"{}"]]
    result = leased_result(groups, expired)
    leases = [(j.id, j.lease_until, j.lease_token, j.worker_id, j.started_at) for j in result.jobs]
    assert leases == [
        ("a", 1763856100.5, "tok.1", "w1", 1763856040.5),
        ("old", 1763856100.5, "tok.1", "w1", 1763856040.5),
        ("err", 1763856200.5, "tok.2", "w1", 1763856140.5),
    ]
    assert result.jobs[2].errors[0].type == "E"
    assert [j.id for j in result.expired] == ["x"]
    assert result.expired[0].lease_token is None


def test_a_packed_claim_decodes_like_its_groups() -> None:
    groups = [[b"1763856100.5", b"tok.1", b"w1", b"1763856040.5", [_unleased("a")]]]
    packed = msgpack.packb([groups, []])
    assert [dataclasses.asdict(j) for j in claim_result(packed).jobs] == [
        dataclasses.asdict(j) for j in leased_result(groups, []).jobs
    ]


def test_dependency_fields_decode_on_both_paths() -> None:
    dependent = _row(
        "d", b"{}", b"dp", b'["a", "b"]', b"of", b"run", b"wf", b"wf-1", b"pd", b"2", b"dn", b"1"
    )
    plain = _row("p", b"{}", b"wf", b"wf-1", b"dn", b"1")  # a dependency: flag only
    other = _row(
        "o", b"{}", b"dp", b'["x"]', b"of", b"run", b"wf", b"wf-1", b"pd", b"2", b"dn", b"1"
    )
    _same([dependent, plain, other])
    for decode in (jobs_from_hashes, lambda raws: [job_from_hash(r) for r in raws]):
        first, second, third = decode([dependent, plain, other])
        assert first.depends_on == ("a", "b")
        assert first.on_dependency_failure is DependencyPolicy.RUN
        assert first.workflow_id == "wf-1"
        assert first.decode_error is None
        assert second.depends_on == ()
        assert second.on_dependency_failure is DependencyPolicy.CANCEL  # absent: cancel
        assert third.depends_on == ("x",)  # one layout, each row its own ids
        assert first.depends_on is not third.depends_on


def test_a_bad_dependency_list_is_a_decode_error_not_an_exception() -> None:
    rows = [
        _row("j", b"{}", b"dp", b"[not json"),
        _row("k", b"{}", b"dp", b'{"a": 1}'),
        _row("both", b"{bad", b"dp", b"[1]"),  # the payload's problem is the one reported
        _row("e", b"{}", b"e", b'[{"type": "E", "message": "x"}]', b"dp", b"[oops"),
    ]
    _same(rows)
    bad_json, not_ids, both, general = jobs_from_hashes(rows)
    assert "depends_on is not valid JSON" in str(bad_json.decode_error)
    assert not_ids.decode_error == "stored depends_on is not a list of ids"
    assert "payload is not valid JSON" in str(both.decode_error)
    assert "depends_on is not valid JSON" in str(general.decode_error)
    assert [j.depends_on for j in (bad_json, not_ids, both, general)] == [(), (), (), ()]
