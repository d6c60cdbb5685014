"""The dashboard over HTTP (create_app on a real SQLite file, through httpx):
sign-in and sessions, CSRF and scopes on every action, each page and action,
and the numbers against the API. The browser tests cover the same in Chromium."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from conveyor.errors import InvalidStateError
from conveyor.server import create_app

from .apps.shop import XSS, XSS_TASK, build
from .conftest import (
    ADMIN,
    ENQUEUE,
    READ,
    TOKENS,
    Serve,
    csrf_of,
    post_action,
    sign_in,
    signed_in,
)
from .seed import seed

FORM = {"content-type": "application/x-www-form-urlencoded"}
PAGES = ["/", "/jobs", "/dead-letters", "/queues", "/schedules", "/workers", "/circuits"]


def set_cookie(response: httpx.Response, name: str) -> str:
    for header in response.headers.get_list("set-cookie"):
        if header.startswith(f"{name}="):
            return header
    raise AssertionError(f"no {name} cookie set")


async def flash_after(client: httpx.AsyncClient, response: httpx.Response) -> str:
    """Follow a post/redirect/get answer; the message the next page shows."""
    assert response.status_code == 303, response.text
    page = await client.get(response.headers["location"])
    found = re.search(r'<p class="flash (ok|error)" role="\w+">([^<]*)</p>', page.text)
    assert found, "no flash message on the page"
    return f"{found.group(1)}: {found.group(2)}"


# -- sign-in and sessions ------------------------------------------------------


async def test_pages_need_a_session_and_send_to_the_sign_in_form(serve: Serve) -> None:
    _, client = await serve()
    for path in PAGES:
        response = await client.get(path, params={"q": "x"} if path == "/jobs" else None)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/sign-in?next=")
    response = await client.get("/jobs", params={"state": "failed"})
    assert response.headers["location"] == "/sign-in?next=%2Fjobs%3Fstate%3Dfailed"
    live = await client.get("/", headers={"X-Conveyor-Live": "1"})
    assert live.status_code == 401  # the live script reloads into the sign-in form


async def test_sign_in_sets_a_strict_http_only_cookie_and_a_new_session_id(serve: Serve) -> None:
    _, client = await serve()
    form = await client.get("/sign-in")
    before = set_cookie(form, "conveyor_session")
    response = await client.post(
        "/sign-in", data={"token": READ, "csrf_token": csrf_of(form.text), "next": "/queues"}
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/queues"
    cookie = set_cookie(response, "conveyor_session")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    assert READ not in cookie  # encoded, not in the clear
    old_id = SimpleCookie(before)["conveyor_session"].value.split(".")[0]
    new_id = SimpleCookie(cookie)["conveyor_session"].value.split(".")[0]
    assert old_id != new_id
    assert (await client.get("/queues")).status_code == 200


async def test_the_cookie_is_secure_over_https(serve: Serve) -> None:
    _, client = await serve()
    secure = httpx.AsyncClient(transport=client._transport, base_url="https://t")
    async with secure:
        response = await sign_in(secure, ADMIN)
        assert "Secure" in set_cookie(response, "conveyor_session")


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        ("wrong", 401, "Unknown token."),
        ("", 401, "Unknown token."),
        (ENQUEUE, 403, "lacks the &#39;read&#39; scope"),
    ],
)
async def test_sign_in_refuses_unknown_tokens_and_tokens_without_read(
    serve: Serve, token: str, status: int, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, client = await serve()
    response = await sign_in(client, token)
    assert response.status_code == status
    assert message in response.text
    if status == 401:
        assert "dashboard sign-in refused: unknown token" in caplog.text
    if token:
        assert token not in caplog.text  # a refused token is never logged
    assert (await client.get("/")).status_code == 303  # still signed out


async def test_sign_in_without_its_csrf_token_is_refused(serve: Serve) -> None:
    _, client = await serve()
    await client.get("/sign-in")
    response = await client.post("/sign-in", data={"token": ADMIN})
    assert response.status_code == 403
    assert "expired" in response.text
    assert (await client.get("/")).status_code == 303


async def test_sign_in_never_redirects_off_site(serve: Serve) -> None:
    _, client = await serve()
    form = await client.get("/sign-in")
    for target in ["//evil.example/x", "https://evil.example/", "/\\evil.example"]:
        response = await client.post(
            "/sign-in", data={"token": ADMIN, "csrf_token": csrf_of(form.text), "next": target}
        )
        assert response.headers["location"] == "/", target
        client.cookies.clear()
        form = await client.get("/sign-in")


async def test_sign_out_ends_the_session(serve: Serve) -> None:
    _, client = await signed_in(serve, READ)
    response = await post_action(client, "/", "/sign-out", {})
    assert response.status_code == 303
    assert response.headers["location"] == "/sign-in"
    assert (await client.get("/")).status_code == 303


async def test_a_token_removed_from_the_settings_signs_its_sessions_out(serve: Serve) -> None:
    _, client = await signed_in(serve, READ)
    cookie = client.cookies["conveyor_session"]
    _, other = await serve(api_tokens={ADMIN: ["admin"]})  # READ is no longer configured
    other.cookies.set("conveyor_session", cookie)
    response = await other.get("/")
    assert response.status_code == 303
    assert response.headers["location"].startswith("/sign-in")


async def test_without_any_token_the_dashboard_is_open_but_still_needs_csrf(
    serve: Serve,
) -> None:
    app, client = await serve(api_tokens={})
    page = await client.get("/queues")
    assert page.status_code == 200
    assert "open (no token)" in page.text
    assert (await client.get("/sign-in")).status_code == 303
    forged = await client.post("/queues/pause", data={"name": "emails"})
    assert forged.status_code == 403
    paused = await post_action(client, "/queues", "/queues/pause", {"name": "emails"})
    assert await flash_after(client, paused) == "ok: Paused queue emails."
    assert {q.name: q.paused for q in await app.queues()}["emails"] is True


# -- scopes and CSRF on every action --------------------------------------------

ACTIONS: list[tuple[str, dict[str, Any]]] = [
    ("/queues/pause", {"name": "emails"}),
    ("/queues/resume", {"name": "emails"}),
    ("/jobs/actions", {"action": "retry", "id": "x"}),
    ("/jobs/actions", {"action": "delete", "id": "x", "confirm": "yes"}),
    ("/dead-letters/purge", {"confirm": "yes"}),
    ("/schedules/actions", {"action": "trigger", "name": "nightly-report"}),
    ("/circuits/reset", {"task": "flaky.api"}),
    ("/workflows/cancel", {"id": "x"}),
]


async def test_read_only_pages_offer_no_action(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    await seed(app)
    failed = (await app.dlq.list(limit=1))[0]
    for path in [*PAGES, f"/jobs/{failed.id}"]:
        page = await client.get(path)
        assert page.status_code == 200, path
        posting = re.findall(r'<form method="post" action="([^"]+)"', page.text)
        assert posting == ["/sign-out"], (path, posting)
        assert 'name="id"' not in page.text  # no selection boxes


async def test_read_only_posts_are_refused_with_or_without_the_csrf_token(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    await seed(app)
    token = csrf_of((await client.get("/")).text)  # the sign-out form's token
    for path, data in ACTIONS:
        for form in (data, {**data, "csrf_token": token}):
            response = await client.post(path, data=form)
            assert response.status_code == 403, (path, form)
    assert {q.name: q.paused for q in await app.queues()}["emails"] is False
    assert await app.dlq.count() == 6


async def test_admin_posts_without_a_valid_csrf_token_are_refused(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    for path, data in ACTIONS:
        for form in (data, {**data, "csrf_token": "forged"}):
            response = await client.post(path, data=form)
            assert response.status_code == 403, (path, form)
            assert "security token" in response.text
    # A token from another session is no good either.
    _, other = await signed_in(serve, ADMIN)
    foreign = csrf_of((await other.get("/")).text)
    response = await client.post("/queues/pause", data={"name": "emails", "csrf_token": foreign})
    assert response.status_code == 403
    assert {q.name: q.paused for q in await app.queues()}["emails"] is False


async def test_posts_without_a_session_are_refused(serve: Serve) -> None:
    _, client = await serve()
    for path, data in ACTIONS:
        response = await client.post(path, data=data)
        assert response.status_code == 401, path


async def test_a_post_that_is_not_a_form_is_refused(serve: Serve) -> None:
    _, client = await signed_in(serve, ADMIN)
    token = csrf_of((await client.get("/")).text)
    response = await client.post("/queues/pause", json={"name": "emails", "csrf_token": token})
    assert response.status_code == 415


# -- pages ------------------------------------------------------------------------


async def test_every_page_renders_with_the_security_headers(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)
    for path in PAGES:
        page = await client.get(path)
        assert page.status_code == 200, path
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "'unsafe-inline'" not in csp
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["cache-control"] == "no-store"


async def test_overview_counts_equal_the_api(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)
    page = (await client.get("/")).text
    api = await client.get("/api/v1/queues", headers={"Authorization": f"Bearer {READ}"})
    for queue in api.json()["queues"]:
        row = re.search(rf'<tr data-queue="{re.escape(queue["name"])}">(.*?)</tr>', page, re.S)
        assert row, queue["name"]
        for state, n in queue["counts"].items():
            cell = re.search(rf'data-state="{state}">(?:<a [^>]*>)?(\d+)', row.group(1))
            assert cell, (queue["name"], state)
            assert int(cell.group(1)) == n, (queue["name"], state)
    assert re.search(r'data-total="dead_letters">6<', page)
    assert re.search(r'data-total="workers_alive">1<', page)
    assert re.search(r'data-total="circuits_open">1<', page)
    assert re.search(r'data-total="waiting">4<', page)


async def test_the_live_request_gets_only_the_live_block(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)
    for path in PAGES:
        live = await client.get(path, headers={"X-Conveyor-Live": "1"})
        assert live.status_code == 200
        assert "<html" not in live.text
        assert '<nav aria-label="Sections">' not in live.text
    overview = await client.get("/", headers={"X-Conveyor-Live": "1"})
    assert 'data-total="waiting">4<' in overview.text
    await app.enqueue("mail.send", {"to": "new@example.com"})
    overview = await client.get("/", headers={"X-Conveyor-Live": "1"})
    assert 'data-total="waiting">5<' in overview.text


async def test_values_from_jobs_are_escaped(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    seeded = await seed(app)
    escaped = "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;"
    for path in [f"/jobs/{seeded.failed_ids[-1]}", "/jobs?state=failed", "/dead-letters"]:
        page = (await client.get(path)).text
        assert escaped in page, path
        assert "<script>alert" not in page
        assert "<img src=x" not in page
    assert XSS_TASK not in page  # only ever escaped
    assert XSS not in page


async def test_jobs_filters_search_and_paging(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await app.enqueue_many([("mail.send", {"to": f"u{i}@x"}) for i in range(60)])
    keyed = await app.enqueue(
        "report.build", {"pages": 1}, idempotency_key="monthly-7", tenant="org-9"
    )
    first = await client.get("/jobs", params={"queue": "emails"})
    assert first.text.count('name="id" value=') == 50
    assert "1\u201350 of 60" in first.text  # an en dash
    assert "offset=50" in first.text
    second = await client.get("/jobs", params={"queue": "emails", "offset": "50"})
    assert second.text.count('name="id" value=') == 10
    for search in (keyed.id, "monthly-7"):
        found = await client.get("/jobs", params={"q": search})
        assert found.text.count('name="id" value=') == 1
        assert keyed.id in found.text
    by_tenant = await client.get("/jobs", params={"tenant": "org-9"})
    assert by_tenant.text.count('name="id" value=') == 1
    bad = await client.get("/jobs", params={"state": "bogus", "offset": "-1", "reason": "nope"})
    assert bad.status_code == 200
    assert "&#39;bogus&#39; is not a job state, ignored" in bad.text
    assert "is not a page offset" in bad.text
    assert "is not a failure reason" in bad.text


async def test_job_detail_shows_attempts_and_links_the_retry(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    seeded = await seed(app)
    failed_id = seeded.failed_ids[0]
    page = (await client.get(f"/jobs/{failed_id}")).text
    assert page.count("card declined: order 0") >= 2  # two attempts, each with its error
    assert "Traceback (most recent call last)" in page
    assert "org-1" in page
    assert "pay-0" in page
    retried = await post_action(
        client, f"/jobs/{failed_id}", "/jobs/actions", {"action": "retry", "id": failed_id}
    )
    assert await flash_after(client, retried) == "ok: Retried 1 job."
    original = await app.get_job(failed_id)
    assert original is not None
    assert original.retried_as
    twice = await post_action(
        client, f"/jobs/{failed_id}", "/jobs/actions", {"action": "retry", "id": failed_id}
    )
    assert await flash_after(client, twice) == (
        f"error: Retried 0 jobs. Skipped 1: job {failed_id} was already retried as "
        f"{original.retried_as}."
    )
    assert len([j for j in await app.list_jobs() if j.retry_of == failed_id]) == 1
    page = (await client.get(f"/jobs/{failed_id}")).text
    assert f'href="/jobs/{original.retried_as}" data-retried-as' in page
    copy = (await client.get(f"/jobs/{original.retried_as}")).text
    assert f'href="/jobs/{failed_id}"' in copy
    missing = await client.get("/jobs/no-such-job")
    assert missing.status_code == 404
    assert "No job with id" in missing.text


async def test_bulk_retry_cancel_and_delete_say_what_they_did(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    seeded = await seed(app)
    waiting = [job.id for job in await app.list_jobs("waiting")]
    ids = seeded.failed_ids[:2]
    retried = await post_action(
        client, "/dead-letters", "/jobs/actions", {"action": "retry", "id": [*ids, waiting[0]]}
    )
    message = await flash_after(client, retried)
    assert message.startswith("ok: Retried 2 jobs. Skipped 1: ")
    assert f"job {waiting[0]} is waiting" in message
    cancelled = await post_action(
        client, "/jobs", "/jobs/actions", {"action": "cancel", "id": waiting[:2]}
    )
    assert (
        await flash_after(client, cancelled) == "ok: Cancelled 2 jobs (running ones are signalled)."
    )
    for job_id in waiting[:2]:
        job = await app.get_job(job_id)
        assert job is not None
        assert job.state.value == "cancelled"

    ask = await post_action(
        client, "/jobs", "/jobs/actions", {"action": "delete", "id": waiting[:2], "next": "/jobs"}
    )
    assert ask.status_code == 200
    assert "Delete 2 jobs?" in ask.text
    assert [await app.get_job(i) is not None for i in waiting[:2]] == [True, True]  # not yet
    confirm = await client.post(
        "/jobs/actions",
        data={
            "action": "delete",
            "id": waiting[:2],
            "confirm": "yes",
            "next": "/jobs",
            "csrf_token": csrf_of(ask.text),
        },
    )
    assert await flash_after(client, confirm) == "ok: Deleted 2 jobs."
    assert [await app.get_job(i) for i in waiting[:2]] == [None, None]

    nothing = await post_action(client, "/jobs", "/jobs/actions", {"action": "retry"})
    assert await flash_after(client, nothing) == "error: Select at least one job first."
    unknown = await post_action(client, "/jobs", "/jobs/actions", {"action": "explode", "id": "x"})
    assert "unknown action" in await flash_after(client, unknown)


async def test_dead_letters_hide_retried_ones_unless_asked(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    seeded = await seed(app)
    await app.dlq.retry(seeded.failed_ids[0])
    shown = (await client.get("/dead-letters")).text
    assert shown.count('name="id" value=') == 5
    assert seeded.failed_ids[0] not in shown
    assert "1 dead letter on this page already retried" in shown
    everything = (await client.get("/dead-letters", params={"retried": "show"})).text
    assert everything.count('name="id" value=') == 6
    by_reason = (
        await client.get("/dead-letters", params={"task": "flaky.api", "reason": "error"})
    ).text
    assert by_reason.count('name="id" value=') == 2
    none_old = (await client.get("/dead-letters", params={"age": "1h"})).text
    assert none_old.count('name="id" value=') == 0
    bad_age = (await client.get("/dead-letters", params={"age": "soon"})).text
    assert "&#39;soon&#39; is not a duration" in bad_age


async def test_purge_confirms_how_many_then_purges_only_the_matching(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)
    ask = await post_action(
        client,
        "/dead-letters",
        "/dead-letters/purge",
        {"task": "pay.charge", "next": "/dead-letters?task=pay.charge"},
    )
    assert ask.status_code == 200
    assert "Purge 3 dead letters?" in ask.text
    assert "task = pay.charge" in ask.text
    assert await app.dlq.count() == 6  # asked, not done
    done = await client.post(
        "/dead-letters/purge",
        data={
            "task": "pay.charge",
            "confirm": "yes",
            "next": "/dead-letters",
            "csrf_token": csrf_of(ask.text),
        },
    )
    assert await flash_after(client, done) == "ok: Purged 3 dead letters."
    assert await app.dlq.count() == 3
    assert await app.dlq.count(task="pay.charge") == 0
    none = await post_action(client, "/dead-letters", "/dead-letters/purge", {"task": "pay.charge"})
    assert await flash_after(client, none) == "error: No dead letter matches these filters."
    bad = await post_action(client, "/dead-letters", "/dead-letters/purge", {"age": "later"})
    assert "is not a duration" in await flash_after(client, bad)
    assert await app.dlq.count() == 3


async def test_queue_pause_and_resume(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)
    paused = await post_action(
        client, "/queues", "/queues/pause", {"name": "emails", "next": "/queues"}
    )
    assert await flash_after(client, paused) == "ok: Paused queue emails."
    page = (await client.get("/queues")).text
    assert re.search(r'data-queue="emails">.*?data-paused>paused<', page, re.S)
    assert "10000" in page  # max_size and TTL of the declared queue
    assert '<td class="num">1h</td>' in page
    resumed = await post_action(client, "/queues", "/queues/resume", {"name": "emails"})
    assert await flash_after(client, resumed) == "ok: Resumed queue emails."
    assert {q.name: q.paused for q in await app.queues()}["emails"] is False
    missing = await post_action(client, "/queues", "/queues/pause", {})
    assert "has no &#39;name&#39;" in await flash_after(client, missing)


async def test_schedules_show_zoned_fires_and_change_with_validation(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)
    page = (await client.get("/schedules")).text
    assert page.count("02:30:00 CE") == 3  # Europe/Paris, CET or CEST
    assert "Europe/Paris" in page
    bad = await post_action(
        client,
        "/schedules",
        "/schedules/actions",
        {"name": "nightly-report", "action": "cron", "cron": "61 * * * *"},
    )
    assert (await flash_after(client, bad)).startswith("error: schedule &#39;nightly-report&#39;")
    assert (await app.schedules.get("nightly-report")).cron == "0 30 2 * * *"
    good = await post_action(
        client,
        "/schedules",
        "/schedules/actions",
        {"name": "nightly-report", "action": "cron", "cron": "0 15 * * *"},
    )
    assert "now runs on cron" in await flash_after(client, good)
    assert "overridden" in (await client.get("/schedules")).text
    pause = await post_action(
        client, "/schedules", "/schedules/actions", {"name": "nightly-report", "action": "pause"}
    )
    assert await flash_after(client, pause) == "ok: Paused schedule nightly-report."
    assert (await app.schedules.get("nightly-report")).paused
    trigger = await post_action(
        client, "/schedules", "/schedules/actions", {"name": "nightly-report", "action": "trigger"}
    )
    assert "job " in await flash_after(client, trigger)
    assert await app.count_jobs(task="report.build", queue="default", state="waiting") == 1
    interval = await post_action(
        client,
        "/schedules",
        "/schedules/actions",
        {"name": "mail-digest", "action": "cron", "every": "0s"},
    )
    assert (await flash_after(client, interval)).startswith("error: schedule &#39;mail-digest&#39;")
    assert (await app.schedules.get("mail-digest")).every == 300
    assert 'name="every" value="5m"' in (await client.get("/schedules")).text
    interval = await post_action(
        client,
        "/schedules",
        "/schedules/actions",
        {"name": "mail-digest", "action": "cron", "every": "10m"},
    )
    assert await flash_after(client, interval) == "ok: Schedule mail-digest now runs on every 10m."
    assert (await app.schedules.get("mail-digest")).every == 600
    unknown = await post_action(
        client, "/schedules", "/schedules/actions", {"name": "nope", "action": "pause"}
    )
    assert (await flash_after(client, unknown)).startswith("error:")


async def test_circuit_reset(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)
    assert "open" in (await client.get("/circuits")).text
    reset = await post_action(client, "/circuits", "/circuits/reset", {"task": "flaky.api"})
    assert await flash_after(client, reset) == "ok: Reset the circuit of flaky.api."
    assert all(c.state.value == "closed" for c in await app.circuits())


async def test_workers_page_lists_heartbeats(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    await seed(app)
    page = (await client.get("/workers")).text
    assert 'data-worker="web-1.4242"' in page
    assert "default, emails" in page
    assert "alive" in page


async def test_static_assets_come_from_the_package(serve: Serve) -> None:
    _, client = await serve()
    page = (await client.get("/sign-in")).text
    for name in ("dashboard.css", "dashboard.js", "favicon.svg"):
        url = re.search(rf'"(/static/dashboard/{re.escape(name)}\?v=[0-9a-f]+)"', page)
        assert url, name
        asset = await client.get(url.group(1))
        assert asset.status_code == 200
        assert "immutable" in asset.headers["cache-control"]
    css = await client.get("/static/dashboard/dashboard.css")
    assert "prefers-color-scheme: dark" in css.text
    assert (await client.get("/static/dashboard/nope.js")).status_code == 404
    assert (await client.get("/static/dashboard/..%2Fsession.py")).status_code == 404


async def test_a_backend_error_in_an_action_becomes_a_message(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    with pytest.raises(InvalidStateError):
        await app.dlq.retry((await app.enqueue("mail.send", {"to": "a"})).id)
    job = (await app.list_jobs("waiting"))[0]
    retry = await post_action(client, "/jobs", "/jobs/actions", {"action": "retry", "id": job.id})
    message = await flash_after(client, retry)
    assert message.startswith("error: Retried 0 jobs. Skipped 1:")


async def test_mounted_under_a_prefix_links_forms_and_cookie_follow_it(tmp_path: Path) -> None:
    app = build(f"sqlite:///{tmp_path / 'jobs.db'}", api_tokens=TOKENS)
    inner = create_app(app)
    outer = Starlette(routes=[Mount("/ops", app=inner)])
    async with inner.router.lifespan_context(inner):
        transport = httpx.ASGITransport(app=outer)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            first = await client.get("/ops/queues")
            assert first.headers["location"] == "/ops/sign-in?next=%2Fqueues"
            form = await client.get("/ops/sign-in")
            assert 'action="/ops/sign-in"' in form.text
            assert "/ops/static/dashboard/dashboard.css?v=" in form.text
            signed = await client.post(
                "/ops/sign-in",
                data={"token": ADMIN, "csrf_token": csrf_of(form.text), "next": "/queues"},
            )
            assert signed.headers["location"] == "/ops/queues"
            assert "Path=/ops/" in set_cookie(signed, "conveyor_session")
            page = await client.get("/ops/queues")
            assert 'href="/ops/jobs"' in page.text
            paused = await client.post(
                "/ops/queues/pause",
                data={"name": "emails", "csrf_token": csrf_of(page.text), "next": "/queues"},
            )
            assert paused.headers["location"] == "/ops/queues"
            assert {q.name: q.paused for q in await app.queues()}["emails"] is True


async def test_charts_count_new_runs_at_once(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    await seed(app)

    async def totals() -> list[tuple[str, int, int]]:
        page = (await client.get("/", headers={"X-Conveyor-Live": "1"})).text
        found = re.findall(
            r'data-chart="(\w+)" data-total-completed="(\d+)" data-total-failed="(\d+)"', page
        )
        return [(key, int(done), int(failed)) for key, done, failed in found]

    assert await totals() == [("hour", 9, 6), ("day", 9, 6)]
    await app.enqueue_many([("mail.send", {"to": "late@example.com"})] * 2)
    await app.drain()
    # The day's older minutes are read once a minute; the last hour every time.
    assert await totals() == [("hour", 11, 6), ("day", 11, 6)]


async def test_empty_cells_all_show_one_em_dash(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    seeded = await seed(app)
    bare = re.compile(r"<(td|dd)\b[^>]*>\s*(-|\u2013|&ndash;)?\s*</(td|dd)>")
    for path in [*PAGES, f"/jobs/{seeded.failed_ids[0]}", "/dead-letters?retried=show"]:
        page = (await client.get(path)).text
        found = [m.group(0) for m in bare.finditer(page)]
        assert not found, (path, found)


async def test_a_retry_of_a_purged_job_shows_it_gone_without_a_link(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    seeded = await seed(app)
    failed_id = seeded.failed_ids[0]
    copy = await app.dlq.retry(failed_id)
    await app.dlq.delete(failed_id)
    page = (await client.get(f"/jobs/{copy.id}")).text
    assert f'href="/jobs/{failed_id}"' not in page
    assert failed_id in page
    assert "gone" in page


async def test_the_pager_counts_the_rows_shown_when_retried_ones_are_hidden(serve: Serve) -> None:
    app, client = await signed_in(serve, ADMIN)
    seeded = await seed(app)
    await app.dlq.retry(seeded.failed_ids[0])
    page = (await client.get("/dead-letters")).text
    assert page.count('name="id" value=') == 5
    pager = re.search(r'<nav class="pager"[^>]*>\s*<span>([^<]*)</span>', page)
    assert pager is not None
    assert "5 shown" in pager.group(1), pager.group(1)
    assert "1 retried hidden" in pager.group(1), pager.group(1)


async def test_task_names_never_break_mid_word(serve: Serve) -> None:
    _, client = await signed_in(serve, ADMIN)
    css = (await client.get("/static/dashboard/dashboard.css")).text
    rule = re.search(r"\n\.task \{([^}]*)\}", css)
    assert rule is not None
    assert "anywhere" not in rule.group(1)
    assert "nowrap" in rule.group(1)
