"""Django tasks of the test project: each exercises one part of the Tasks API."""

from __future__ import annotations

from typing import Any

from conveyor.contrib.django.compat import FRAMEWORK

if FRAMEWORK == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task


class OutOfStock(Exception):
    """A task's own exception: its class path must come back in the result's errors."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def send_receipt(order: dict[str, Any]) -> dict[str, Any]:
    return {"sent_to": order["email"], "total": order["total"]}


@task(takes_context=True)
def whoami(context: Any, tag: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag}


@task
async def double(x: int) -> int:
    return x * 2


@task
def reserve(sku: str) -> None:
    raise OutOfStock(f"no {sku} left")
