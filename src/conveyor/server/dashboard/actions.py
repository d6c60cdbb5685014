"""The POST actions (``admin`` scope and a CSRF token, checked by ``guard``).
Each answers with a redirect back and a message saying what happened
(post/redirect/get), or a confirmation page before a destructive change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from conveyor.app import Conveyor
from conveyor.errors import InvalidStateError, JobNotFound
from conveyor.job import JobState
from conveyor.server.dashboard import views
from conveyor.server.dashboard.forms import Form, local_path
from conveyor.server.dashboard.pages import job_query
from conveyor.server.dashboard.render import redirect, render, seconds
from conveyor.server.dashboard.session import Session
from conveyor.server.routing import app_of

#: Most jobs one bulk action takes (a page is 50).
MAX_BULK = 500
_PURGE_FILTERS = ("queue", "task", "tenant", "reason", "age")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _required(form: Form, name: str) -> str:
    value = form.get(name)
    if value is None:
        raise ValueError(f"the form has no {name!r}")
    return value


async def job_action(request: Request, session: Session, form: Form) -> Response:
    """Retry (failed jobs), cancel (waiting, delayed, active) or delete (not
    running) the selected jobs; each job that can't is named in the message."""
    app = app_of(request)
    back = local_path(form.get("next"), "/jobs")
    verb = form.get("action")
    ids = form.getlist("id")
    if not ids:
        return redirect(request, back, "Select at least one job first.", error=True)
    if len(ids) > MAX_BULK:
        return redirect(request, back, f"At most {MAX_BULK} jobs at once.", error=True)
    if verb == "delete" and form.get("confirm") != "yes":
        context = {
            "title": f"Delete {_plural(len(ids), 'job')}?",
            "message": "Deleted jobs are gone for good: their payload, result and errors too. "
            "Running jobs are skipped (cancel them first).",
            "action_path": "/jobs/actions",
            "fields": [("action", "delete"), *(("id", i) for i in ids)],
            "next": back,
            "cancel_to": local_path(form.get("back"), back),
            "button": f"Delete {_plural(len(ids), 'job')}",
        }
        return render(request, "confirm.html", context, session=session)
    run = _BULK.get(verb or "")
    if run is None:
        raise ValueError(f"unknown action {verb!r}: use retry, cancel or delete")
    done, skipped, message = await run(app, ids)
    if skipped:
        shown = "; ".join(skipped[:5]) + ("; …" if len(skipped) > 5 else "")
        message += f" Skipped {len(skipped)}: {shown}."
    return redirect(request, back, message, error=not done)


Outcome = tuple[int, list[str], str]
"""How many jobs changed, why each other one was skipped, and the message."""


async def _retry(app: Conveyor, ids: list[str]) -> Outcome:
    done, skipped = 0, []
    for job_id in ids:
        try:
            job = await app.dlq.retry(job_id)
        except (InvalidStateError, JobNotFound) as exc:
            skipped.append(str(exc))
            continue
        if job.duplicate:
            skipped.append(f"job {job_id} was already retried as {job.id}")
        else:
            done += 1
    return done, skipped, f"Retried {_plural(done, 'job')}."


async def _cancel(app: Conveyor, ids: list[str]) -> Outcome:
    done, skipped = 0, []
    for job_id in ids:
        try:
            job = await app.cancel(job_id)
        except JobNotFound as exc:
            skipped.append(str(exc))
            continue
        if job.state is JobState.CANCELLED or job.cancel_requested:
            done += 1
        else:
            skipped.append(f"job {job_id} is {job.state.value}")
    return done, skipped, f"Cancelled {_plural(done, 'job')} (running ones are signalled)."


async def _delete(app: Conveyor, ids: list[str]) -> Outcome:
    backend = await app.connect()
    found = await backend.get_jobs(ids)
    skipped = [
        f"job {job.id} is running: cancel it first" for job in found if job.state is JobState.ACTIVE
    ]
    deletable = [job.id for job in found if job.state is not JobState.ACTIVE]
    done = await backend.delete_jobs(deletable) if deletable else 0
    if len(ids) > len(found):
        skipped.append(f"{_plural(len(ids) - len(found), 'job')} not found")
    return done, skipped, f"Deleted {_plural(done, 'job')}."


_BULK: dict[str, Callable[[Conveyor, list[str]], Awaitable[Outcome]]] = {
    "retry": _retry,
    "cancel": _cancel,
    "delete": _delete,
}


async def purge(request: Request, session: Session, form: Form) -> Response:
    """Purge the dead letters matching the filters: first a confirmation that
    says how many, then the purge (which reports how many it deleted)."""
    app = app_of(request)
    q, problems = job_query(
        {name: form.get(name) or "" for name in _PURGE_FILTERS}, dead_letters=True
    )
    back = local_path(form.get("next"), "/dead-letters")
    if problems:
        return redirect(request, back, "; ".join(problems), error=True)
    filters = {k: v for k, v in q.filters().items() if k != "q"}
    if form.get("confirm") != "yes":
        count = await views.count_matching(app, q, JobState.FAILED.value)
        if count == 0:
            return redirect(request, back, "No dead letter matches these filters.", error=True)
        described = ", ".join(f"{k} = {v}" for k, v in filters.items()) or "no filter: every one"
        context = {
            "title": f"Purge {_plural(count, 'dead letter')}?",
            "message": f"{_plural(count, 'dead letter')} match ({described}), including any "
            "already retried. They will be deleted for good.",
            "action_path": "/dead-letters/purge",
            "fields": list(filters.items()),
            "next": back,
            "cancel_to": back,
            "button": f"Purge {_plural(count, 'dead letter')}",
            "count": count,
        }
        return render(request, "confirm.html", context, session=session)
    deleted = await app.dlq.purge(
        task=q.task, queue=q.queue, tenant=q.tenant, reason=q.reason, older_than=q.age
    )
    return redirect(request, back, f"Purged {_plural(deleted, 'dead letter')}.")


async def cancel_workflow(request: Request, session: Session, form: Form) -> Response:
    """Cancel every unfinished step of a workflow (running ones are signalled)."""
    workflow_id = _required(form, "id")
    back = local_path(form.get("next"), f"/workflows/{workflow_id}")
    workflow = await app_of(request).get_workflow(workflow_id)
    if workflow is None:
        return redirect(request, back, f"No workflow with id {workflow_id!r}.", error=True)
    cancelled = await workflow.cancel()
    if not cancelled:
        return redirect(request, back, "Nothing to cancel: every step has finished.", error=True)
    return redirect(
        request,
        back,
        f"Cancelled {_plural(cancelled, 'step')} of the workflow (running ones are signalled).",
    )


async def pause_queue(request: Request, session: Session, form: Form) -> Response:
    name = _required(form, "name")
    await app_of(request).pause_queue(name)
    return redirect(request, local_path(form.get("next"), "/queues"), f"Paused queue {name}.")


async def resume_queue(request: Request, session: Session, form: Form) -> Response:
    name = _required(form, "name")
    await app_of(request).resume_queue(name)
    return redirect(request, local_path(form.get("next"), "/queues"), f"Resumed queue {name}.")


async def schedule_action(request: Request, session: Session, form: Form) -> Response:
    schedules = app_of(request).schedules
    name = _required(form, "name")
    back = local_path(form.get("next"), "/schedules")
    verb = form.get("action")
    if verb == "pause":
        await schedules.pause(name)
        return redirect(request, back, f"Paused schedule {name}.")
    if verb == "resume":
        await schedules.resume(name)
        return redirect(request, back, f"Resumed schedule {name}.")
    if verb == "trigger":
        job = await schedules.trigger(name)
        return redirect(request, back, f"Triggered schedule {name}: job {job.id} enqueued.")
    if verb == "cron":
        cron, every = form.get("cron"), form.get("every")
        record = await schedules.set_cron(name, cron=cron, every=every)
        timing = f"cron {record.cron}" if record.cron else f"every {seconds(record.every)}"
        return redirect(request, back, f"Schedule {name} now runs on {timing}.")
    raise ValueError(f"unknown action {verb!r}: use pause, resume, trigger or cron")


async def reset_circuit(request: Request, session: Session, form: Form) -> Response:
    task = _required(form, "task")
    await app_of(request).reset_circuit(task)
    return redirect(
        request, local_path(form.get("next"), "/circuits"), f"Reset the circuit of {task}."
    )
