"""``conveyor queues`` on a fair queue: fairness, weights, jobs per tenant;
and refused queue options as one error line."""

from __future__ import annotations

from .conftest import Cli

FAIR_APP = "apps.fair:app"


def test_queues_show_fairness_and_jobs_per_tenant(cli: Cli) -> None:
    for tenant in ("org-1", "org-1", "org-2"):
        cli.enqueue("mail.send", {"to": "a@b.c"}, "--app", FAIR_APP, "--tenant", tenant)
    cli.enqueue("mail.send", {"to": "a@b.c"}, "--app", FAIR_APP)  # no tenant

    rows = {row["name"]: row for row in cli.json("queues", "--app", FAIR_APP)}
    emails = rows["emails"]
    assert (emails["fairness"], emails["weights"]) == ("tenant", {"org-1": 3.0})
    assert emails["tenants"] == [
        {"tenant": "org-1", "waiting": 2, "active": 0},
        {"tenant": None, "waiting": 1, "active": 0},
        {"tenant": "org-2", "waiting": 1, "active": 0},
    ]

    table = cli.run("queues", "--app", FAIR_APP).stdout
    assert "tenant org-1=3" in table
    assert "fair queue emails: jobs per tenant" in table
    assert "(no tenant)" in table
    org_2 = next(line for line in table.splitlines() if "org-2" in line)
    assert [cell.strip() for cell in org_2.split("│")[1:4]] == ["org-2", "1", "0"]


def test_refused_queue_options_are_one_error_line(cli: Cli) -> None:
    done = cli.run("queues", "--app", "apps.bad_queue:app", ok=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert "queue 'emails': the weight of tenant 'org-1' must be a positive number" in lines[0]
