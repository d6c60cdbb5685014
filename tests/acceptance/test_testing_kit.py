"""conveyor.testing as a user and a backend author meet it: pytest run in a
subprocess on a project in tmp_path, outside this repository and its conftests,
in pytest-asyncio's strict mode with warnings as errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import conveyor

SRC = Path(conveyor.__file__).resolve().parents[1]
REPO = SRC.parent
INI = """\
[pytest]
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


def pytest_in(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``project``, with this checkout's conveyor importable."""
    extra = (env or {}).get("PYTHONPATH", "")
    paths = [str(SRC), str(project), extra, os.environ.get("PYTHONPATH", "")]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--strict-markers", *args],
        cwd=project,
        env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(filter(None, paths))},
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in {"pytest.ini": INI, **files}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def collected(run: subprocess.CompletedProcess[str]) -> int:
    found = re.search(r"(\d+) tests? collected", run.stdout)
    assert found, run.stdout + run.stderr
    return int(found[1])


USER_TESTS = """\
import pytest

from conveyor.testing import assert_enqueued, perform_job, refute_enqueued

pytestmark = pytest.mark.asyncio  # strict mode: async tests say so


def register(app):
    @app.task("welcome")
    async def welcome(ctx, email):
        return email


async def test_a_memory_app(conveyor_app):
    assert conveyor_app.url == "memory://"
    register(conveyor_app)
    await conveyor_app.enqueue("welcome", {"email": "a@example.com"})
    await assert_enqueued(conveyor_app, "welcome", payload={"email": "a@example.com"})
    assert await perform_job(conveyor_app, "welcome", {"email": "b@x"}) == "b@x"
    assert await conveyor_app.drain() == 1
    await refute_enqueued(conveyor_app, "welcome")


async def test_each_test_gets_a_fresh_app(conveyor_app):
    register(conveyor_app)
    await refute_enqueued(conveyor_app)
    await conveyor_app.enqueue("welcome", {"email": "c@example.com"})


@pytest.mark.conveyor_app(backend="sqlite", lease="5s")
async def test_a_sqlite_file_with_settings(conveyor_app, tmp_path):
    assert conveyor_app.url == f"sqlite:///{tmp_path / 'conveyor.db'}"
    assert conveyor_app.settings.lease == 5
    register(conveyor_app)
    job = await conveyor_app.enqueue("welcome", {"email": "d@example.com"})
    assert (await assert_enqueued(conveyor_app, "welcome")).id == job.id
    assert (tmp_path / "conveyor.db").exists()
"""


def entry_points_of_pyproject(folder: Path) -> Path:
    """A dist-info in ``folder`` that declares pyproject.toml's entry points, as an
    installed conveyor does; pytest finds plugins there when it is on the path."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    info = folder / "conveyor_entry_points-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: conveyor-entry-points\nVersion: 0\n"
    )
    groups = project["project"]["entry-points"]
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items())
            for group, eps in groups.items()
        )
    )
    return folder


def test_the_pytest_plugin_in_a_user_project(tmp_path: Path) -> None:
    installed = str(entry_points_of_pyproject(tmp_path / "site"))
    project = write(tmp_path / "app", {"tests/test_signup.py": USER_TESTS})
    # Only the entry point: pytest loads the plugin by itself.
    run = pytest_in(project, "-q", "tests", env={"PYTHONPATH": installed})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout

    # Named three ways at once (entry point, pytest_plugins, -p): one plugin.
    (project / "conftest.py").write_text('pytest_plugins = ["conveyor.testing.pytest_plugin"]\n')
    run = pytest_in(
        project,
        "-q",
        "-p",
        "conveyor.testing.pytest_plugin",
        "tests",
        env={"PYTHONPATH": installed},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout


def test_without_the_plugin_there_is_no_fixture(tmp_path: Path) -> None:
    """The runs above pass because of the plugin: blocked, its marker is unknown."""
    project = write(tmp_path, {"tests/test_signup.py": USER_TESTS})
    run = pytest_in(project, "-q", "-p", "no:conveyor.testing.pytest_plugin", "tests")
    assert run.returncode == 2  # a collection error
    assert "'conveyor_app' not found in `markers`" in run.stdout, run.stdout


TOY_BACKEND = """\
'''A backend from outside conveyor, for the test: the memory store, renamed.'''
import uuid

from conveyor.backends.memory import MemoryBackend, drop_memory_store
from conveyor.testing.conformance import BackendKit


class ToyBackend(MemoryBackend):
    pass


class ToyKit(BackendKit):
    name = "toy"

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.store = f"toy-{uuid.uuid4().hex}"

    def backend(self):
        return ToyBackend("memory://", None)

    def shared_backend(self):
        return ToyBackend(f"memory://{self.store}", None)

    async def corrupt_payload(self, backend, job_id):
        backend._store.jobs[job_id].payload = b"{not json"

    async def cleanup(self):
        drop_memory_store(self.store)
"""

TOY_SUITE = """\
import pytest

from conveyor.testing.conformance import *  # noqa: F403
from toy_backend import ToyKit


@pytest.fixture
def backend_kit_factory():
    return ToyKit
"""


def test_an_outside_backend_runs_the_conformance_suite(tmp_path: Path) -> None:
    project = write(
        tmp_path / "toy",
        {"toy_backend.py": TOY_BACKEND, "tests/test_conformance.py": TOY_SUITE},
    )
    # The whole suite: as many tests as this repository runs per backend.
    whole = pytest_in(project, "--collect-only", "-q", "tests")
    ours = pytest_in(
        REPO,
        "--collect-only",
        "-q",
        "tests/conformance/test_conformance.py",
        env={"CONVEYOR_TEST_BACKENDS": "memory"},
    )
    assert collected(whole) == collected(ours) > 200

    # A handful, run: one test per fixture the kit feeds (backend, backend_pair,
    # kit.shared_backend, kit.corrupt_payload, fresh_backend for the reruns).
    chosen = (
        "test_enqueue_stores_every_field",
        "test_two_instances_share_the_keys",
        "test_a_cancelled_claim_leaves_no_job_claimed_by_nobody",
        "test_corrupt_payload_yields_decode_error",
        "test_delayed_job_is_not_claimed_until_due",
    )
    run = pytest_in(project, "-v", "-k", " or ".join(chosen), "tests")
    assert run.returncode == 0, run.stdout + run.stderr
    for name in chosen:
        assert f"tests/test_conformance.py::{name} PASSED" in run.stdout, run.stdout
    assert f"{len(chosen)} passed" in run.stdout
