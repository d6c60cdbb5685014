"""The dashboard in a real browser: headless Chromium (Debian's, by path)
driven by Playwright, against a real ``conveyor serve`` process on a SQLite file
filled by a real worker. Screenshots of every page go to
``test-artifacts/screenshots/`` (and to ``docs/images/`` with
``CONVEYOR_DOCS_SCREENSHOTS=1``)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright

from conveyor import chain, group
from conveyor.app import Conveyor
from support.services import missing_service

from .apps.shop import XSS, XSS_TASK
from .conftest import ADMIN, ENQUEUE, READ
from .seed import Seeded, seed
from .site import Site, with_app

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
DOCS_IMAGES = ROOT / "docs" / "images"
WIDE = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> str:
    path = os.environ.get("CONVEYOR_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        missing_service(  # under CI a missing browser fails, never skips
            f"no Chromium at {path}: the dashboard browser tests need one "
            "(apt-get install -y chromium, or export CONVEYOR_CHROMIUM=/path/to/chromium); "
            "scripts/test.sh installs it when it can"
        )
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = chromium_path()
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, Seeded]]:
    site = Site(tmp_path_factory.mktemp("dashboard"))
    seeded = with_app(site.url, seed)
    site.start()
    try:
        yield site, seeded
    finally:
        site.stop()


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    target = SHOTS / f"dashboard-{name}.png"
    page.screenshot(path=str(target), full_page=True)
    if os.environ.get("CONVEYOR_DOCS_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, DOCS_IMAGES / target.name)


class Tab:
    """A fresh browser context (its own cookies) with one page; records dialogs."""

    def __init__(self, browser: Browser, base: str, **options: Any) -> None:
        self.context = browser.new_context(base_url=base, viewport=WIDE, **options)
        self.page = self.context.new_page()
        self.dialogs: list[str] = []

        def record(dialog: Dialog) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        self.page.on("dialog", record)

    def sign_in(self, token: str) -> Page:
        page = self.page
        page.goto("/")
        expect(page).to_have_url(re.compile(r"/sign-in\?next=%2F$"))
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        return page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tabs(browser: Browser, site: tuple[Site, Seeded]) -> Iterator[Any]:
    opened: list[Tab] = []

    def open_tab(**options: Any) -> Tab:
        tab = Tab(browser, site[0].base, **options)
        opened.append(tab)
        return tab

    yield open_tab
    for tab in opened:
        assert tab.dialogs == [], f"a dialog fired: {tab.dialogs}"
        tab.close()


def nav(page: Page, section: str) -> None:
    page.get_by_role("navigation", name="Sections").get_by_role("link", name=section).click()


def total(page: Page, key: str) -> str:
    return page.locator(f'[data-total="{key}"]').inner_text()


def test_sign_in_and_the_overview_counts_equal_the_api(
    tabs: Any, site: tuple[Site, Seeded]
) -> None:
    server, _ = site
    tab = tabs()
    page = tab.page
    page.goto("/sign-in")
    shot(page, "sign-in")
    page.get_by_label("API token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Unknown token.")
    page = tab.sign_in(ADMIN)
    cookie = next(c for c in tab.context.cookies() if c["name"] == "conveyor_session")
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"

    queues = server.api(ADMIN, "GET", "/api/v1/queues").json()["queues"]
    for queue in queues:
        row = page.locator(f'tr[data-queue="{queue["name"]}"]')
        for state in ("waiting", "delayed", "active", "completed", "failed", "cancelled"):
            shown = row.locator(f'td[data-state="{state}"]').inner_text()
            assert int(shown) == queue["counts"][state], (queue["name"], state)
    waiting = sum(q["counts"]["waiting"] for q in queues)
    assert int(total(page, "waiting")) == waiting
    dead = server.api(ADMIN, "GET", "/api/v1/dlq", params={"limit": 1}).json()["total"]
    assert int(total(page, "dead_letters")) == dead > 0
    workers = server.api(ADMIN, "GET", "/api/v1/workers").json()["workers"]
    assert int(total(page, "workers_alive")) == sum(w["alive"] for w in workers) == 1
    circuits = server.api(ADMIN, "GET", "/api/v1/circuits").json()["circuits"]
    assert int(total(page, "circuits_open")) == sum(c["state"] == "open" for c in circuits) == 1
    shot(page, "overview")

    page.set_viewport_size(PHONE)
    shot(page, "overview-phone")
    page.set_viewport_size(WIDE)
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/sign-in$"))
    page.goto("/queues")
    expect(page).to_have_url(re.compile(r"/sign-in\?next=%2Fqueues$"))


def test_jobs_list_filters_and_job_detail(tabs: Any, site: tuple[Site, Seeded]) -> None:
    page = tabs().sign_in(ADMIN)
    nav(page, "Jobs")
    shot(page, "jobs")
    page.get_by_label("State").select_option("completed")
    page.get_by_label("Task").fill("mail.send")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(6)
    for task in rows.locator("td.task").all_inner_texts():
        assert task == "mail.send"
    page.get_by_label("Select every job on this page").check()
    expect(page.locator('input[name="id"]:checked')).to_have_count(6)
    page.get_by_label("Search").fill("pay-1")  # an idempotency key
    page.get_by_label("State").select_option("")
    page.get_by_label("Task").fill("")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    rows.first.get_by_role("link").click()
    expect(page.get_by_role("heading", name="Attempts")).to_be_visible()
    expect(page.locator(".timeline li")).to_have_count(2)  # two attempts, two errors
    expect(page.locator("[data-error-message]").first).to_contain_text("card declined: order 1")
    page.locator("details summary").first.click()
    expect(page.locator("pre.trace").first).to_contain_text("RuntimeError")
    shot(page, "job")


def test_retry_a_dead_letter_and_watch_it_leave_the_list(
    tabs: Any, site: tuple[Site, Seeded]
) -> None:
    server, _ = site
    page = tabs().sign_in(ADMIN)
    nav(page, "Dead letters")
    page.get_by_label("Task").fill("pay.charge")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(3)
    shot(page, "dead-letters")
    first_id = rows.first.locator("td.mono a").inner_text()
    page.get_by_label(f"Select job {first_id}").check()
    page.get_by_role("button", name="Retry selected").click()
    expect(page.get_by_role("status")).to_have_text("Retried 1 job.")
    expect(rows).to_have_count(2)
    expect(page.get_by_text(first_id)).to_have_count(0)
    original = server.api(ADMIN, "GET", f"/api/v1/jobs/{first_id}").json()
    assert original["retried_as"]

    # Purge by filter: the confirmation says how many before anything goes.
    page.goto("/dead-letters?task=flaky.api")
    expect(rows).to_have_count(2)
    page.get_by_role("button", name="Purge matching…").click()
    expect(page.get_by_role("heading", name="Purge 2 dead letters?")).to_be_visible()
    shot(page, "purge-confirm")
    page.get_by_role("button", name="Purge 2 dead letters").click()
    expect(page.get_by_role("status")).to_have_text("Purged 2 dead letters.")
    expect(page.locator("table.jobs td.empty")).to_have_text("Nothing matches.")


def test_pause_and_resume_a_queue(tabs: Any, site: tuple[Site, Seeded]) -> None:
    server, _ = site
    page = tabs().sign_in(ADMIN)
    nav(page, "Queues")
    row = page.locator('tr[data-queue="emails"]')
    expect(row.locator(".badge")).to_have_text("running")
    row.get_by_role("button", name="Pause queue emails").click()
    expect(page.get_by_role("status")).to_have_text("Paused queue emails.")
    expect(row.locator("[data-paused]")).to_have_text("paused")
    paused = {
        q["name"]: q["paused"] for q in server.api(READ, "GET", "/api/v1/queues").json()["queues"]
    }
    assert paused["emails"] is True
    shot(page, "queues")
    row.get_by_role("button", name="Resume queue emails").focus()
    page.keyboard.press("Enter")  # keyboard works as well as the mouse
    expect(page.get_by_role("status")).to_have_text("Resumed queue emails.")
    expect(row.locator(".badge")).to_have_text("running")
    paused = {
        q["name"]: q["paused"] for q in server.api(READ, "GET", "/api/v1/queues").json()["queues"]
    }
    assert paused["emails"] is False


def test_read_only_sees_no_actions_and_forged_posts_are_refused(
    tabs: Any, site: tuple[Site, Seeded]
) -> None:
    server, seeded = site
    tab = tabs()
    page = tab.sign_in(READ)
    expect(page.locator(".who .badge")).to_have_text("read only")
    for path in ["/", "/jobs", f"/jobs/{seeded.failed_ids[1]}", "/dead-letters", "/queues",
                 "/schedules", "/workers", "/circuits"]:  # fmt: skip
        page.goto(path)
        # The only forms that post are sign-out; every other button is a GET filter.
        posting = page.locator('form[method="post"]:not([action$="/sign-out"])')
        expect(posting).to_have_count(0)
        for name in ("Retry", "Cancel", "Delete", "Pause", "Resume", "Reset", "Purge", "Trigger"):
            expect(page.get_by_role("button", name=re.compile(name))).to_have_count(0)
    page.goto("/queues")
    shot(page, "queues-read-only")

    # Forged posts, from the read-only session's own page (its cookie goes along).
    csrf = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    assert csrf
    for form in ({"name": "emails"}, {"name": "emails", "csrf_token": csrf}):
        refused = page.request.post(f"{server.base}/queues/pause", form=form)
        assert refused.status == 403, form
    queues = server.api(ADMIN, "GET", "/api/v1/queues").json()["queues"]
    assert not next(q for q in queues if q["name"] == "emails")["paused"]

    # An admin session without the CSRF token is refused too.
    admin = tabs().sign_in(ADMIN)
    refused = admin.request.post(f"{server.base}/queues/pause", form={"name": "emails"})
    assert refused.status == 403
    assert "security token" in refused.text()
    queues = server.api(ADMIN, "GET", "/api/v1/queues").json()["queues"]
    assert not next(q for q in queues if q["name"] == "emails")["paused"]


def test_an_xss_payload_stays_inert(tabs: Any, site: tuple[Site, Seeded]) -> None:
    _, seeded = site
    tab = tabs()
    page = tab.sign_in(ADMIN)
    evil_id = seeded.failed_ids[-1]
    for path in [
        "/jobs?" + urlencode({"task": XSS_TASK}),
        "/dead-letters?" + urlencode({"task": XSS_TASK}),
        f"/jobs/{evil_id}",
    ]:
        page.goto(path)
        page.wait_for_load_state("load")
        # Our own script is the only one; no injected image exists.
        assert page.locator("script").count() == 1
        assert page.locator('img[src="x"]').count() == 0
        expect(page.locator(".task").first).to_contain_text(XSS_TASK)
    expect(page.locator("[data-payload]")).to_contain_text(XSS.replace('"', '\\"'))
    expect(page.locator("[data-error-message]").first).to_have_text(XSS)
    expect(page.locator("dd").filter(has_text="org-<b>2</b>")).to_have_count(1)
    page.wait_for_timeout(300)  # any alert() would have fired by now
    assert tab.dialogs == []
    shot(page, "job-xss")


def test_schedules_workers_and_circuits(tabs: Any, site: tuple[Site, Seeded]) -> None:
    server, _ = site
    page = tabs().sign_in(ADMIN)
    nav(page, "Schedules")
    card = page.locator('[data-schedule="nightly-report"]')
    fires = card.locator(".fires time")
    expect(fires).to_have_count(3)
    for text in fires.all_inner_texts():  # 02:30 in Paris, shown in Paris time
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 02:30:00 CES?T", text), text
    shot(page, "schedules")
    card.get_by_label("Cron").fill("not a cron")
    card.get_by_role("button", name="Save the timing").click()
    expect(page.get_by_role("alert")).to_contain_text("cron expression 'not a cron' has 3 fields")
    expect(card.locator(".mono").first).to_have_text("cron 0 30 2 * * *")
    card.get_by_label("Cron").fill("0 0 4 * * *")
    card.get_by_role("button", name="Save the timing").click()
    expect(page.get_by_role("status")).to_have_text(
        "Schedule nightly-report now runs on cron 0 0 4 * * *."
    )
    expect(fires.first).to_contain_text("04:00:00")
    card.get_by_role("button", name="Trigger schedule nightly-report now").click()
    expect(page.get_by_role("status")).to_contain_text("Triggered schedule nightly-report")

    nav(page, "Workers")
    expect(page.locator('tr[data-worker="web-1.4242"] .badge')).to_have_text("alive")
    shot(page, "workers")

    nav(page, "Circuits")
    row = page.locator('tr[data-circuit="flaky.api"]')
    expect(row.locator(".badge")).to_have_text("open")
    shot(page, "circuits")
    row.get_by_role("button", name="Reset the circuit of flaky.api").click()
    expect(page.get_by_role("status")).to_have_text("Reset the circuit of flaky.api.")
    circuits = server.api(READ, "GET", "/api/v1/circuits").json()["circuits"]
    assert all(c["state"] == "closed" for c in circuits if c["task"] == "flaky.api")


def test_charts_show_data_after_a_restart_and_update_live(
    tabs: Any, site: tuple[Site, Seeded], browser: Browser
) -> None:
    server, _ = site
    server.restart()
    tab = tabs(color_scheme="dark")
    page = tab.sign_in(ADMIN)
    hour = page.locator('[data-chart="hour"]')
    completed = int(hour.get_attribute("data-total-completed") or 0)
    assert completed >= 9  # 6 mails + 3 reports, recorded by the worker before the restart
    assert int(hour.get_attribute("data-total-failed") or 0) >= 1
    points = hour.locator("polyline.line-completed").get_attribute("points") or ""
    heights = {float(p.split(",")[1]) for p in points.split()}
    assert len(heights) > 1, "the completed line is flat: no point was drawn"
    shot(page, "overview-dark")

    before = int(total(page, "waiting"))

    async def add_work(app: Conveyor) -> None:
        await app.enqueue_many([("report.build", {"pages": 1}, {"queue": "reports"})] * 3)

    with_app(server.url, add_work)
    # No reload: the live region refreshes itself.
    expect(page.locator('[data-total="waiting"]')).to_have_text(str(before + 3), timeout=10_000)
    # The Live button stops the refresh (for reading a busy page) and restarts it.
    toggle = page.get_by_role("button", name="Live")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    with_app(server.url, add_work)
    page.wait_for_timeout(3500)  # longer than one refresh interval
    expect(page.locator('[data-total="waiting"]')).to_have_text(str(before + 3))
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "false")
    expect(page.locator('[data-total="waiting"]')).to_have_text(str(before + 6), timeout=10_000)


def test_a_job_enqueued_through_the_api_is_pushed_to_the_open_jobs_page(
    tabs: Any, site: tuple[Site, Seeded]
) -> None:
    server, _ = site
    tab = tabs()
    page = tab.sign_in(ADMIN)
    polls: list[str] = []
    page.on(
        "request",
        lambda request: (
            polls.append(request.url) if request.headers.get("x-conveyor-live") else None
        ),
    )
    with page.expect_request(re.compile(r"/live\?page=")):
        page.goto("/jobs?" + urlencode({"queue": "live-push"}))
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_text(["Nothing matches."])

    def enqueue(note: str) -> str:
        body = {"task": "mail.send", "payload": {"to": note}, "queue": "live-push"}
        created = server.api(ENQUEUE, "POST", "/api/v1/jobs", json=body)
        assert created.status_code == 201, created.text
        job_id: str = created.json()["id"]
        return job_id

    first = enqueue("pushed@example.com")
    expect(page.locator(f'a[href$="/jobs/{first}"]')).to_be_visible(timeout=5_000)
    assert polls == [], "the page polled while its stream was open"

    # A page whose stream is refused polls instead, and retries the stream.
    live = re.compile(r"/live\?page=")
    page.route(live, lambda route: route.abort())
    page.reload()
    second = enqueue("polled@example.com")
    expect(page.locator(f'a[href$="/jobs/{second}"]')).to_be_visible(timeout=10_000)
    assert polls, "the page did not fall back to polling"
    page.unroute(live)
    with page.expect_request(live, timeout=15_000):  # the retry, after its backoff
        pass
    expect(rows).to_have_count(2)


def test_wrong_sign_ins_are_throttled_and_sign_out_revokes_the_cookie(
    browser: Browser, tmp_path: Path
) -> None:
    own = Site(tmp_path, env={"CONVEYOR_AUTH_FREE_FAILURES": "2", "CONVEYOR_AUTH_LOCKOUT": "1"})
    own.start()
    try:
        tab = Tab(browser, own.base)
        page = tab.page
        page.goto("/sign-in")
        for expected in ("Unknown token.", "Unknown token.", "Too many wrong tokens"):
            page.get_by_label("API token").fill("not-a-token")
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("alert")).to_contain_text(expected)
        page.get_by_label("API token").fill(ADMIN)
        page.get_by_role("button", name="Sign in").click()  # locked out: even the right one
        expect(page.get_by_role("alert")).to_contain_text("Too many wrong tokens")
        page.wait_for_timeout(1200)
        page = tab.sign_in(ADMIN)
        cookie = next(c for c in tab.context.cookies() if c["name"] == "conveyor_session")
        assert ADMIN not in cookie["value"]
        assert own.api(cookie["value"], "GET", "/api/v1/queues").status_code == 401
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/sign-in$"))

        thief = Tab(browser, own.base)  # replays the cookie copied before sign-out
        thief.context.add_cookies([cookie])  # type: ignore[list-item]
        thief.page.goto("/queues")
        expect(thief.page).to_have_url(re.compile(r"/sign-in\?next=%2Fqueues$"))
        thief.close()
        tab.close()
    finally:
        own.stop()


def test_a_workflow_page_draws_its_graph_and_links_its_jobs(
    tabs: Any, site: tuple[Site, Seeded]
) -> None:
    server, _ = site

    async def start(app: Conveyor) -> tuple[str, list[str]]:
        build = app.tasks["report.build"]
        steps = chain(build.step(pages=1), group(build.step(pages=2), build.step(pages=3)))
        workflow = await app.start(steps)
        return workflow.id, [job.id for job in workflow.jobs]

    workflow_id, job_ids = with_app(server.url, start)
    page = tabs().sign_in(READ)
    page.goto(f"/jobs/{job_ids[-1]}")
    page.get_by_role("link", name=workflow_id).click()
    expect(page.get_by_role("heading", name=re.compile("^Workflow"))).to_be_visible()
    graph = page.get_by_role("img", name=re.compile("layers by dependency depth"))
    expect(graph).to_be_visible()
    expect(page.locator("svg a[data-node]")).to_have_count(3)
    expect(page.locator("svg path.wf-edge")).to_have_count(2)
    expect(page.locator("[data-progress]")).to_contain_text("/3")
    box = page.locator("svg rect.wf-node").first.bounding_box()
    assert box is not None
    assert box["width"] > 100  # the stylesheet and the SVG geometry apply
    shot(page, "workflow")
    page.locator('svg a[data-node="1"]').click()
    expect(page).to_have_url(re.compile(f"/jobs/{job_ids[0]}$"))
    page.goto("/jobs")
    expect(page.get_by_label("State").locator("option", has_text="blocked")).to_have_count(1)


def test_cancel_a_running_workflow_from_its_page(tabs: Any, site: tuple[Site, Seeded]) -> None:
    server, _ = site

    async def start(app: Conveyor) -> str:
        build = app.tasks["report.build"]
        workflow = await app.start(chain(build.step(pages=1), build.step(pages=2)))
        return workflow.id

    workflow_id = with_app(server.url, start)
    reader = tabs().sign_in(READ)
    reader.goto(f"/workflows/{workflow_id}")
    expect(reader.locator("[data-workflow-state]")).to_have_text("running")
    expect(reader.get_by_role("button", name="Cancel workflow")).to_have_count(0)

    page = tabs().sign_in(ADMIN)
    page.goto(f"/workflows/{workflow_id}")
    page.get_by_role("button", name="Cancel workflow").click()
    expect(page.get_by_role("status")).to_have_text(
        "Cancelled 2 steps of the workflow (running ones are signalled)."
    )
    expect(page).to_have_url(re.compile(f"/workflows/{workflow_id}$"))
    expect(page.locator("[data-workflow-state]")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel workflow")).to_have_count(0)
    shown = server.api(READ, "GET", f"/api/v1/workflows/{workflow_id}").json()
    assert shown["state"] == "cancelled"
