"""The test-only fault hook is free when off; the loop watchdog warns on a blocked loop."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest

from conveyor.worker import faults
from conveyor.worker.looplag import LoopWatchdog


class FakeExecutor:
    async def execute(self, run: Any) -> None:
        return None


def test_fault_hook_leaves_the_worker_untouched_when_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(faults.KILL_AFTER_EFFECT, raising=False)
    executor = FakeExecutor()
    faults.install(SimpleNamespace(executor=executor))  # type: ignore[arg-type]
    assert "execute" not in vars(executor), "the hook wrapped execute though no fault was asked"


def test_fault_hook_wraps_execute_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.KILL_AFTER_EFFECT, "some.task")
    executor = FakeExecutor()
    faults.install(SimpleNamespace(executor=executor))  # type: ignore[arg-type]
    assert "execute" in vars(executor)


async def test_loop_watchdog_warns_about_a_blocked_loop(caplog: pytest.LogCaptureFixture) -> None:
    watchdog = LoopWatchdog(lease=0.6, running=lambda: ["job-1"])
    task = asyncio.create_task(watchdog.run())
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        await asyncio.sleep(0.1)
        assert "event loop blocked" not in caplog.text, "warned with nothing blocking"
        time.sleep(0.5)  # noqa: ASYNC251  # block the loop: what the watchdog must notice
        await asyncio.sleep(0.2)
    task.cancel()
    assert "event loop blocked" in caplog.text
    assert "job-1" in caplog.text
    assert watchdog.worst >= 0.4
