"""Schedules and job statistics: Python records <-> what the scripts store.

A schedule is a hash: the code's definition as JSON (``spec``), its
fingerprint, the cron/every in force, paused, next fire, fires, last fire and
updated-at (times as exact float text; ``''`` is none). A statistics row is
``"count sum bucket..."`` under the field ``task NUL queue NUL status``.
"""

from __future__ import annotations

from collections.abc import Sequence

from conveyor import serialization
from conveyor.backends import base
from conveyor.backends.base import MisfirePolicy
from conveyor.backends.redis import decode


def spec_json(spec: base.ScheduleSpec) -> bytes:
    return serialization.dumps(
        {
            "name": spec.name,
            "task": spec.task,
            "payload": spec.payload.decode("utf-8"),
            "cron": spec.cron,
            "every": spec.every,
            "timezone": spec.timezone,
            "start": spec.start,
            "end": spec.end,
            "limit": spec.limit,
            "misfire": spec.misfire.value,
            "options": spec.options.decode("utf-8"),
            "fingerprint": spec.fingerprint,
        }
    )


def _optional_float(value: bytes | None) -> float | None:
    return float(value) if value else None


def schedule_from_hash(raw: Sequence[bytes]) -> base.ScheduleRecord:
    f = decode.as_dict(raw)
    data = serialization.loads(f[b"spec"])
    spec = base.ScheduleSpec(
        name=data["name"],
        task=data["task"],
        payload=data["payload"].encode("utf-8"),
        cron=data["cron"],
        every=data["every"],
        timezone=data["timezone"],
        start=data["start"],
        end=data["end"],
        limit=data["limit"],
        misfire=MisfirePolicy(data["misfire"]),
        options=data["options"].encode("utf-8"),
        fingerprint=data["fingerprint"],
    )
    cron = f.get(b"cron") or b""
    return base.ScheduleRecord(
        spec=spec,
        cron=cron.decode() or None,
        every=_optional_float(f.get(b"every")),
        paused=f.get(b"paused") == b"1",
        next_fire_at=_optional_float(f.get(b"next")),
        fires=int(f.get(b"fires") or 0),
        last_fire_at=_optional_float(f.get(b"last")),
        updated_at=float(f.get(b"upd") or 0.0),
    )


def stats_from_hash(flat: Sequence[bytes], minute: float) -> list[base.JobStat]:
    out: list[base.JobStat] = []
    for row, value in decode.as_dict(flat).items():
        task, queue, status = row.decode().split("\0")
        numbers = value.split()
        buckets = base.fit_buckets([int(x) for x in numbers[2:]])
        out.append(
            base.JobStat(
                task=task,
                queue=queue,
                status=status,
                count=int(numbers[0]),
                duration_sum=float(numbers[1]),
                buckets=buckets,
                minute=minute,
            )
        )
    return out


def stat_order(stat: base.JobStat) -> tuple[str, str, str]:
    return (stat.task, stat.queue, stat.status)
