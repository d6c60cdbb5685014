"""``conveyor workflows show/cancel`` against a SQLite file, on workflows
started through the Python API."""

from __future__ import annotations

import asyncio

from conveyor import chain, group
from conveyor.app import Conveyor

from .conftest import APP, Cli


def start(url: str, *steps: tuple[str, dict[str, int | str]]) -> str:
    """A chain of the first step, a group of the middle ones and the last; its id."""

    async def go() -> str:
        async with Conveyor(url) as app:
            first, *middle, last = (app.step(task, payload) for task, payload in steps)
            workflow = await app.start(chain(first, group(*middle), last))
            return workflow.id

    return asyncio.run(go())


def test_show_follows_a_workflow_to_the_end(cli: Cli) -> None:
    workflow_id = start(
        cli.url,
        ("add", {"a": 1, "b": 2}),
        ("add", {"a": 2, "b": 2}),
        ("mail.send", {"to": "x@y.z"}),
        ("add", {"a": 0, "b": 0}),
    )
    shown = cli.run("workflows", "show", workflow_id).stdout
    assert f"workflow {workflow_id}: running, 0/4 finished" in shown
    assert shown.count("blocked") == 3
    assert "mail.send" in shown

    running = cli.json("workflows", "show", workflow_id)
    assert running["id"] == workflow_id
    assert running["state"] == "running"
    assert [job["state"] for job in running["jobs"]] == ["waiting", "blocked", "blocked", "blocked"]
    assert running["jobs"][3]["depends_on"] == [running["jobs"][1]["id"], running["jobs"][2]["id"]]

    cli.run("worker", APP, "--burst", "--queues", "default,emails")

    done = cli.json("workflows", "show", workflow_id)
    assert done["state"] == "completed"
    assert [job["result"] for job in done["jobs"]] == [3, 4, "sent to x@y.z", 0]
    assert "completed, 4/4 finished" in cli.run("workflows", "show", workflow_id).stdout


def test_cancel_then_cancel_again_is_an_error(cli: Cli) -> None:
    workflow_id = start(cli.url, ("add", {"a": 1, "b": 2}), ("add", {"a": 1, "b": 1}), ("add", {}))
    cancelled = cli.run("workflows", "cancel", workflow_id)
    assert cancelled.stdout.strip() == f"cancelled 3 job(s) of workflow {workflow_id}"
    assert cli.json("workflows", "show", workflow_id)["state"] == "cancelled"

    again = cli.run("workflows", "cancel", workflow_id, ok=False)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"error: workflow {workflow_id} is already cancelled; nothing to cancel"
    )


def test_an_unknown_id_is_one_line_and_exit_1(cli: Cli) -> None:
    for command in ("show", "cancel"):
        done = cli.run("workflows", command, "nope", ok=False)
        assert done.returncode == 1, done
        assert done.stderr == "error: no workflow with id 'nope'\n"
        assert done.stdout == ""
