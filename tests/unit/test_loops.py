"""--loop: which event loop a worker runs on."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import loops
from conveyor.errors import ConfigurationError


async def running_loop() -> str:
    return loops.loop_name()


def test_auto_takes_uvloop_when_installed() -> None:
    assert loops.resolve_loop("auto") == "uvloop"
    assert loops.run(running_loop(), "auto") == "uvloop"


def test_asyncio_is_the_standard_loop() -> None:
    assert loops.resolve_loop("asyncio") == "asyncio"
    assert loops.run(running_loop(), "asyncio") == "asyncio"


def test_an_unknown_loop_is_a_configuration_error() -> None:
    coro = running_loop()
    with pytest.raises(ConfigurationError, match="not one of auto, asyncio, uvloop"):
        loops.run(coro, "trio")
    assert coro.cr_frame is None  # closed, not left un-awaited


def test_uvloop_asked_for_but_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loops.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigurationError, match="uvloop is not installed"):
        loops.resolve_loop("uvloop")
    assert loops.resolve_loop("auto") == "asyncio"


def test_run_returns_the_result_and_closes_the_loop() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> int:
        seen.append(asyncio.get_running_loop())
        return 7

    assert loops.run(main(), "asyncio") == 7
    assert seen[0].is_closed()
