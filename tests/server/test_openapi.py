"""The OpenAPI document describes exactly the routes the app serves."""

from __future__ import annotations

import httpx
from starlette.routing import Route

from conveyor.app import Conveyor
from conveyor.server.app import all_routes


def served_operations() -> set[tuple[str, str]]:
    found = set()
    for route in all_routes():
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":  # Starlette adds HEAD to every GET
                found.add((method, route.path))
    return found


async def test_document_matches_the_routes(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    _, client = served
    response = await client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"] == "3.1.0"
    documented = {(method.upper(), path) for path, item in doc["paths"].items() for method in item}
    assert documented == served_operations()
    schemas = doc["components"]["schemas"]
    enqueue = schemas["EnqueueBody"]
    assert enqueue["required"] == ["task"]
    assert {"payload", "delay", "priority", "idempotency_key", "tenant"} <= set(
        enqueue["properties"]
    )
    for item in doc["paths"].values():  # every reference resolves
        for op in item.values():
            for response_doc in op["responses"].values():
                for media in response_doc.get("content", {}).values():
                    ref = media["schema"].get("$ref")
                    if ref:
                        assert ref.removeprefix("#/components/schemas/") in schemas, ref
