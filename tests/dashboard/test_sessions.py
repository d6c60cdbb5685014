"""The session cookie is a random id, not the API token: it opens no API
endpoint, signing out revokes it (a copy kept by a thief stops working), and it
expires when idle or old."""

from __future__ import annotations

import asyncio
import base64

from .conftest import ADMIN, READ, Serve, post_action, signed_in


async def test_the_cookie_holds_no_token_and_is_no_api_credential(serve: Serve) -> None:
    _, client = await signed_in(serve, ADMIN)
    cookie = client.cookies["conveyor_session"]
    encoded = base64.urlsafe_b64encode(ADMIN.encode()).rstrip(b"=").decode()
    assert ADMIN not in cookie
    assert encoded not in cookie
    for presented in (cookie, *cookie.split(".")):
        api = await client.get("/api/v1/queues", headers={"Authorization": f"Bearer {presented}"})
        assert api.status_code == 401


async def test_sign_out_revokes_a_copied_cookie(serve: Serve) -> None:
    _, client = await signed_in(serve, ADMIN)
    stolen = client.cookies["conveyor_session"]
    assert (await client.get("/queues")).status_code == 200
    signed_out = await post_action(client, "/", "/sign-out", {})
    assert signed_out.status_code == 303
    client.cookies.set("conveyor_session", stolen)  # the thief's copy
    replay = await client.get("/queues")
    assert replay.status_code == 303
    assert replay.headers["location"].startswith("/sign-in")


async def test_a_cookie_of_the_old_token_format_signs_nobody_in(serve: Serve) -> None:
    _, client = await serve()
    encoded = base64.urlsafe_b64encode(ADMIN.encode()).rstrip(b"=").decode()
    client.cookies.set("conveyor_session", f"{'a' * 32}.{encoded}")
    assert (await client.get("/queues")).status_code == 303


async def test_an_idle_session_expires(serve: Serve) -> None:
    _, client = await signed_in(serve, READ, session_idle_timeout=0.3)
    for _ in range(3):  # each request keeps it alive
        await asyncio.sleep(0.15)
        assert (await client.get("/queues")).status_code == 200
    await asyncio.sleep(0.4)
    assert (await client.get("/queues")).status_code == 303


async def test_a_session_expires_at_its_max_age_even_when_used(serve: Serve) -> None:
    _, client = await signed_in(serve, READ, session_max_age=0.5)
    assert (await client.get("/queues")).status_code == 200
    for _ in range(4):
        await asyncio.sleep(0.15)
        await client.get("/queues")
    assert (await client.get("/queues")).status_code == 303
