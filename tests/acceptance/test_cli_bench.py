"""``conveyor bench``: the figures, a namespace of its own that is gone afterwards, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import redis.asyncio as aioredis

from conveyor.backends.redis.keys import Keys
from conveyor.benchmark import masked, with_option

from .conftest import HERE, Cli, clean_env

SMALL = ("--jobs", "300", "--samples", "20")


def bench(cli: Cli, *args: str) -> dict[str, Any]:
    done = cli.run("bench", *SMALL, "--json", *args)
    data: dict[str, Any] = json.loads(done.stdout)  # the whole of stdout is one object
    assert "Traceback" not in done.stderr
    return data


def assert_figures(data: dict[str, Any], backend: str) -> None:
    assert data["backend"] == backend
    assert (data["jobs"], data["samples"], data["concurrency"]) == (300, 20, 50)
    assert data["cores"] >= 1
    assert data["enqueue"]["jobs_per_s"] > 0
    assert data["drain"]["jobs_per_s"] > 0
    pickup = data["pickup_ms"]
    assert 0 < pickup["p50"] <= pickup["p90"] <= pickup["p99"] <= pickup["max"]


def query_option(url: str, key: str) -> str:
    return parse_qs(urlsplit(url).query)[key][0]


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


def test_default_runs_on_a_temporary_sqlite_file_and_removes_it(tmp_path: Path) -> None:
    temp, work = tmp_path / "tmp", tmp_path / "work"
    temp.mkdir()
    work.mkdir()
    env = clean_env("unused")
    del env["CONVEYOR_URL"]  # nothing configured: never ./conveyor.db
    env["TMPDIR"] = str(temp)
    cli = Cli(url="", cwd=work, env=env)

    data = bench(cli)

    assert_figures(data, "sqlite")
    assert data["url"].startswith(f"sqlite:///{temp}/conveyor-bench-")
    assert "temporary" in data["namespace"]
    assert list(temp.iterdir()) == []
    assert list(work.iterdir()) == []


def test_the_table_names_the_backend_and_every_figure(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    cli = Cli(url=url, cwd=HERE, env=clean_env(url))

    out = cli.run("bench", *SMALL).stdout

    for word in ("sqlite", "Python", "cores", "enqueue", "drain", "jobs/s", "pickup p99"):
        assert word in out, out
    assert not (tmp_path / "bench.db").exists()


def test_an_existing_sqlite_database_is_refused_and_left_alone(cli: Cli) -> None:
    job_id = cli.enqueue("add", {"a": 1, "b": 2})

    done = cli.run("bench", *SMALL, ok=False)

    assert done.returncode == 2
    assert "already exists" in one_error_line(done.stderr)
    assert cli.job(job_id)["state"] == "waiting"
    assert len(cli.json("jobs", "list")) == 1


async def test_postgres_runs_in_its_own_schema_and_drops_it(
    tmp_path: Path, postgres_url: str
) -> None:
    configured = with_option(postgres_url, "schema", "users_own")
    cli = Cli(url=configured, cwd=HERE, env=clean_env(configured))  # from CONVEYOR_URL

    data = bench(cli)

    assert_figures(data, "postgresql")
    schema = query_option(data["url"], "schema")
    assert schema.startswith("conveyor_bench_")
    conn = await asyncpg.connect(postgres_url)
    try:
        left = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE nspname IN ($1, 'users_own')", schema
        )
    finally:
        await conn.close()
    assert left == []


async def test_redis_runs_under_its_own_prefix_and_deletes_its_keys(
    cli: Cli, redis_url: str
) -> None:
    data = bench(cli, "--url", redis_url)

    assert_figures(data, "redis")
    prefix = query_option(data["url"], "prefix")
    assert prefix.startswith("bench-")
    client = aioredis.Redis.from_url(redis_url)
    try:
        pattern = Keys.for_prefix(prefix).pattern()
        left = [key async for key in client.scan_iter(match=pattern, count=10_000)]
    finally:
        await client.aclose()
    assert left == []


def test_bad_counts_are_usage_errors(cli: Cli) -> None:
    for args in (["--jobs", "0"], ["--jobs", "-5"], ["--samples", "0"], ["-c", "0"]):
        done = cli.run("bench", *args, ok=False)
        assert done.returncode == 2, args
        assert "Invalid value" in one_error_line(done.stderr)
        assert done.stdout == ""


def test_an_unreachable_backend_is_one_error_line(cli: Cli) -> None:
    done = cli.run("bench", *SMALL, "--url", "redis://127.0.0.1:1/0", ok=False)

    assert done.returncode == 1
    one_error_line(done.stderr)
    assert done.stdout == ""


def test_urls_are_shown_without_their_password() -> None:
    assert masked("postgresql://app:s3cret@db:5432/jobs?schema=x") == (
        "postgresql://app:***@db:5432/jobs?schema=x"
    )
    assert masked("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert with_option("redis://h/0?prefix=app&db=1", "prefix", "b") == "redis://h/0?db=1&prefix=b"
