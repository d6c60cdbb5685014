"""SQLite database files (and their -wal and -shm files) are created readable
by their owner only, unless ``sqlite_file_mode`` or the URL's ``file_mode`` says
otherwise; an existing file keeps its mode."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conveyor.app import Conveyor
from conveyor.errors import ConfigurationError


def modes(path: Path) -> dict[str, int]:
    found = {}
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            found[suffix or "db"] = stat.S_IMODE(file.stat().st_mode)
    return found


async def write_a_job(url: str, **settings: object) -> None:
    async with Conveyor(url, **settings) as app:
        await app.enqueue("anything")


async def test_new_files_are_private_by_default(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "jobs.db"
        async with Conveyor(f"sqlite:///{path}") as app:
            await app.enqueue("anything")
            found = modes(path)
    finally:
        os.umask(old)
    assert found == {"db": 0o600, "-wal": 0o600, "-shm": 0o600}


async def test_the_mode_is_configurable(tmp_path: Path) -> None:
    by_setting = tmp_path / "a.db"
    async with Conveyor(f"sqlite:///{by_setting}", sqlite_file_mode="0640") as app:
        await app.enqueue("anything")
        assert set(modes(by_setting).values()) == {0o640}
    by_url = tmp_path / "b.db"
    async with Conveyor(f"sqlite:///{by_url}?file_mode=0660") as app:
        await app.enqueue("anything")
        assert set(modes(by_url).values()) == {0o660}


async def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    await write_a_job(f"sqlite:///{path}")
    path.chmod(0o644)
    await write_a_job(f"sqlite:///{path}")
    assert modes(path)["db"] == 0o644


def test_a_bad_mode_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="file_mode"):
        Conveyor(f"sqlite:///{tmp_path / 'x.db'}?file_mode=rw").backend  # noqa: B018
