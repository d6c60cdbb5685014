"""The workflow page: every step with its state, the layered graph, progress,
failures highlighted and escaped; linked from each of its jobs; the jobs list
filters on ``blocked``."""

from __future__ import annotations

import re

from conveyor import JobState, Workflow, WorkflowState, chain, group
from conveyor.app import Conveyor

from .apps.shop import XSS, XSS_TASK
from .conftest import ADMIN, READ, Serve, post_action, signed_in
from .test_pages import flash_after

ESCAPED = "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;"


async def start(app: Conveyor) -> Workflow:
    """mail.send, then report.build beside a step that fails, then report.build."""
    return await app.start(
        chain(
            app.step("mail.send", {"to": "a@b.c"}),
            group(app.step("report.build", {"pages": 2}), app.step(XSS_TASK, {"note": XSS})),
            app.step("report.build", {"pages": 1}),
        )
    )


async def test_a_running_workflow_shows_blocked_steps_in_layers(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    workflow = await start(app)
    page = await client.get(f"/workflows/{workflow.id}")
    assert page.status_code == 200, page.text
    html = page.text
    assert "data-workflow-state>running<" in html
    assert "<span data-progress>0/4</span>" in html
    assert "4 in 3 layers" in html
    assert html.count('class="wf-node wf-blocked"') == 3
    assert html.count('class="wf-node wf-waiting"') == 1
    assert len(re.findall(r'<path class="wf-edge', html)) == 4  # 1->2, 1->3, 2->4, 3->4
    for job in workflow.jobs:
        assert f'href="/jobs/{job.id}"' in html
    layers = re.findall(r'data-step="(\d)">\s*<td>\d</td>\s*<td>(\d)</td>', html)
    assert layers == [("1", "0"), ("2", "1"), ("3", "1"), ("4", "2")]
    assert "Failed steps" not in html

    jobs = (await client.get("/jobs", params={"state": "blocked"})).text
    assert "<option selected>blocked</option>" in jobs
    assert jobs.count('<span class="state state-blocked">blocked</span>') == 3


async def test_a_failed_step_is_highlighted_and_escaped(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    workflow = await start(app)
    await app.drain()
    html = (await client.get(f"/workflows/{workflow.id}")).text
    assert "data-workflow-state>failed<" in html
    assert "<span data-progress>4/4</span>" in html
    assert html.count("data-failed-step") == 1
    assert html.count('class="wf-node wf-failed"') == 1
    assert html.count('class="wf-failed-row"') == 1
    assert html.count('class="wf-node wf-completed"') == 2
    assert "cancelled (dependency_failed)" in html  # the last step
    assert len(re.findall(r'class="wf-edge wf-edge-failed"', html)) == 1
    assert ESCAPED in html
    assert "<script>alert" not in html
    assert XSS_TASK not in html


async def test_each_job_links_its_workflow(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    workflow = await start(app)
    last = workflow.jobs[-1]
    html = (await client.get(f"/jobs/{last.id}")).text
    assert f'<a href="/workflows/{workflow.id}" data-workflow>{workflow.id}</a>' in html
    for dep in last.depends_on:
        assert f'href="/jobs/{dep}"' in html
    plain = await app.enqueue("report.build", {"pages": 1})
    assert "data-workflow" not in (await client.get(f"/jobs/{plain.id}")).text


async def test_unknown_workflow_is_a_404_page_and_live_gets_the_block(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    missing = await client.get("/workflows/nope")
    assert missing.status_code == 404
    assert "No workflow with id &#39;nope&#39;" in missing.text
    workflow = await start(app)
    live = await client.get(f"/workflows/{workflow.id}", headers={"x-conveyor-live": "1"})
    assert live.status_code == 200
    assert "<html" not in live.text
    assert "data-workflow-state" in live.text


async def test_an_admin_cancels_a_running_workflow_from_its_page(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    workflow = await start(app)
    where = f"/workflows/{workflow.id}"
    assert "data-cancel-workflow" in (await client.get(where)).text
    form = {"id": workflow.id, "next": where}
    done = await post_action(client, where, "/workflows/cancel", form)
    assert await flash_after(client, done) == (
        "ok: Cancelled 4 steps of the workflow (running ones are signalled)."
    )
    await workflow.refresh()
    assert workflow.state is WorkflowState.CANCELLED
    assert {job.state for job in workflow.jobs} == {JobState.CANCELLED}
    html = (await client.get(where)).text
    assert "data-workflow-state>cancelled<" in html
    assert "data-cancel-workflow" not in html  # nothing left to cancel

    again = await post_action(client, "/", "/workflows/cancel", form)
    assert await flash_after(client, again) == "error: Nothing to cancel: every step has finished."
    missing = await post_action(client, "/", "/workflows/cancel", {"id": "nope", "next": "/"})
    assert await flash_after(client, missing) == "error: No workflow with id &#39;nope&#39;."


async def test_a_read_only_session_gets_no_cancel_button(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    workflow = await start(app)
    html = (await client.get(f"/workflows/{workflow.id}")).text
    assert "data-cancel-workflow" not in html
    assert "/workflows/cancel" not in html
