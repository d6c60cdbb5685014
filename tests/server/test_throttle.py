"""Guessing tokens is slowed down per client address, on the API and the
dashboard's sign-in form alike; tokens too short to resist guessing are refused
when the service binds beyond loopback."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from conveyor.server.auth import token_bits, weak_tokens

from .conftest import ADMIN, Serve, auth


async def test_wrong_bearer_tokens_lock_the_address_out(serve: Serve) -> None:
    _, client = await serve(auth_free_failures=5, auth_lockout=0.3)
    answers = [
        (await client.get("/api/v1/queues", headers=auth(f"guess-{i}"))).status_code
        for i in range(300)
    ]
    assert answers[:5] == [401] * 5
    assert set(answers[5:]) == {429}
    locked = await client.get("/api/v1/queues", headers=auth(ADMIN))
    assert locked.status_code == 429  # a right guess must look like a wrong one
    assert int(locked.headers["retry-after"]) >= 1
    assert locked.json()["error"]["type"] == "too_many_failures"
    await asyncio.sleep(0.4)
    assert (await client.get("/api/v1/queues", headers=auth(ADMIN))).status_code == 200


async def test_the_lockout_doubles_and_spares_other_addresses(serve: Serve) -> None:
    _, client = await serve(auth_free_failures=1, auth_lockout=0.2)
    assert (await client.get("/api/v1/queues", headers=auth("x"))).status_code == 401
    await asyncio.sleep(0.25)
    assert (await client.get("/api/v1/queues", headers=auth("y"))).status_code == 401
    await asyncio.sleep(0.25)  # the second lockout is 0.4 s
    assert (await client.get("/api/v1/queues", headers=auth(ADMIN))).status_code == 429
    transport = httpx.ASGITransport(app=client._transport.app, client=("10.1.2.3", 4000))  # type: ignore[attr-defined]
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as other:
        assert (await other.get("/api/v1/queues", headers=auth(ADMIN))).status_code == 200


async def test_a_missing_header_is_not_a_guess(serve: Serve) -> None:
    _, client = await serve(auth_free_failures=2)
    for _ in range(10):
        assert (await client.get("/api/v1/queues")).status_code == 401
    assert (await client.get("/api/v1/queues", headers=auth(ADMIN))).status_code == 200


@pytest.mark.parametrize(
    ("token", "strong"),
    [
        ("read-token", False),
        ("a" * 64, False),
        ("correct-horse", False),
        ("Zq3_x9Lr0PaV8mW2tYc5bN", True),  # secrets.token_urlsafe(16)
        ("9f86d081884c7d659a2feaa0c55ad015", True),  # 32 hex digits
    ],
)
def test_token_strength(token: str, strong: bool) -> None:
    assert (token_bits(token) >= 128) is strong
    assert weak_tokens({token: ["read", "admin"]}) == ([] if strong else ["read/admin"])
