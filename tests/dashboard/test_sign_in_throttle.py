"""Wrong tokens pasted into the sign-in form lock the address out like wrong
bearer tokens do (one count for both)."""

from __future__ import annotations

import asyncio

from .conftest import ADMIN, Serve, sign_in


async def test_repeated_wrong_sign_ins_are_refused_for_a_while(serve: Serve) -> None:
    # A lockout long enough for a loaded host to make the ten tries inside it.
    _, client = await serve(auth_free_failures=3, auth_lockout=1.5)
    statuses = [(await sign_in(client, f"guess-{i}")).status_code for i in range(10)]
    assert statuses[:3] == [401] * 3
    assert set(statuses[3:]) == {429}
    locked = await sign_in(client, ADMIN)
    assert locked.status_code == 429
    assert "Too many wrong tokens" in locked.text
    assert (await client.get("/")).status_code == 303  # still signed out
    await asyncio.sleep(1.6)
    assert (await sign_in(client, ADMIN)).status_code == 303
    assert (await client.get("/")).status_code == 200


async def test_the_form_and_the_api_share_the_count(serve: Serve) -> None:
    _, client = await serve(auth_free_failures=2, auth_lockout=5)
    for i in range(2):
        assert (await sign_in(client, f"guess-{i}")).status_code == 401
    api = await client.get("/api/v1/queues", headers={"Authorization": f"Bearer {ADMIN}"})
    assert api.status_code == 429
