"""``max_worker_rss``: its byte sizes (bytes, decimal and binary units, refusals),
the setting, and the watch that stops a worker past it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from conveyor.errors import ConfigurationError
from conveyor.settings import load_settings
from conveyor.sizes import format_size, parse_size
from conveyor.worker.memory import MemoryWatch, resident_bytes


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (536870912, 536870912),
        ("1024", 1024),
        ("512MB", 512_000_000),
        ("512 MiB", 512 * 1024**2),
        ("1.5gb", 1_500_000_000),
        ("2GiB", 2 * 1024**3),
        ("10kB", 10_000),
        ("7b", 7),
    ],
)
def test_sizes_parse(text: int | str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MB", "12 parsecs", "-5MB", "0", True, "1M"])
def test_bad_sizes_are_refused(text: object) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)  # type: ignore[arg-type]


def test_format_size() -> None:
    assert format_size(900) == "900B"
    assert format_size(512 * 1024**2) == "512.0MiB"
    assert format_size(3 * 1024**3 // 2) == "1.5GiB"


def test_max_worker_rss_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert load_settings().max_worker_rss is None
    assert load_settings(max_worker_rss="512MiB").max_worker_rss == 512 * 1024**2
    monkeypatch.setenv("CONVEYOR_MAX_WORKER_RSS", "1GB")
    assert load_settings().max_worker_rss == 1_000_000_000
    monkeypatch.setenv("CONVEYOR_MAX_WORKER_RSS", "lots")
    with pytest.raises(ConfigurationError, match=r"CONVEYOR_MAX_WORKER_RSS.*not a size"):
        load_settings()


def test_resident_bytes_reads_this_process() -> None:
    rss = resident_bytes()
    assert rss is not None
    assert 1024**2 < rss < 64 * 1024**3


async def test_memory_watch_stops_the_worker_past_the_limit() -> None:
    stopped: list[bool] = []
    watch = MemoryWatch(1024, lambda: stopped.append(True), interval=0.01)
    await asyncio.wait_for(watch.run(), 5)  # returns once it stopped the worker
    assert stopped == [True]
    assert watch.exceeded is not None
    assert watch.exceeded > 1024


async def test_memory_watch_under_the_limit_keeps_watching() -> None:
    stopped: list[bool] = []
    watch = MemoryWatch(1024**4, lambda: stopped.append(True), interval=0.01)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(watch.run(), 0.2)
    assert stopped == []
    assert watch.exceeded is None
