"""The Lua scripts: loaded from ``scripts/*.lua`` once, run by SHA.

Each file holds one command and names its key count (``claim-4.lua``: 4 KEYS);
``lib.lua`` is prepended to each. Values only ever travel in KEYS/ARGV, never in
script text. A server that forgot the scripts (restart, SCRIPT FLUSH, a failover)
answers NOSCRIPT; the script is loaded again and the call repeated once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from redis.exceptions import NoScriptError

_SCRIPTS_DIR = "scripts"
_LIBRARY = "lib.lua"


class ScriptClient(Protocol):
    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any: ...

    async def script_load(self, script: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    numkeys: int
    source: str
    sha: str


def _load_all() -> dict[str, Script]:
    folder = resources.files(__package__).joinpath(_SCRIPTS_DIR)
    library = folder.joinpath(_LIBRARY).read_text(encoding="utf-8")
    out: dict[str, Script] = {}
    for entry in folder.iterdir():
        filename = entry.name
        if not filename.endswith(".lua") or filename == _LIBRARY:
            continue
        stem = filename[: -len(".lua")]
        name, _, count = stem.rpartition("-")
        source = library + "\n" + entry.read_text(encoding="utf-8")
        sha = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()
        out[name] = Script(name, int(count), source, sha)
    return out


SCRIPTS: dict[str, Script] = _load_all()


class ScriptRunner:
    """Runs the named scripts on one client, loading them when the server lacks them."""

    def __init__(self, client: ScriptClient, base: str) -> None:
        self.client = client
        self.base = base

    async def load_all(self) -> None:
        for script in SCRIPTS.values():
            await self.client.script_load(script.source)

    def args(self, name: str, keys: list[str], argv: list[Any]) -> tuple[str, list[Any]]:
        """``(sha, [numkeys, *keys, base, *argv])`` for pipelines."""
        script = SCRIPTS[name]
        if len(keys) != script.numkeys:
            raise ValueError(f"{name}: {len(keys)} keys given, the script takes {script.numkeys}")
        return script.sha, [script.numkeys, *keys, self.base, *argv]

    async def run_pair(
        self, first: tuple[str, list[str], list[Any]], second: tuple[str, list[str], list[Any]]
    ) -> list[Any]:
        """Two scripts in one round trip, one after the other, on a standalone
        server's own connections; a reply is the script's answer or its error
        (``NoScriptError`` when the server lacks it), never raised."""
        calls = [self.args(*first), self.args(*second)]
        # Our own connections (direct.py): a cluster client refuses scripts in
        # its pipelines, so its callers make two calls instead.
        replies = self.client.replies  # type: ignore[attr-defined]
        return list(await replies([("EVALSHA", sha, *rest) for sha, rest in calls]))

    async def run(self, name: str, keys: list[str], argv: list[Any]) -> Any:
        sha, rest = self.args(name, keys, argv)
        try:
            return await self.client.evalsha(sha, *rest)
        except NoScriptError:
            await self.client.script_load(SCRIPTS[name].source)
            return await self.client.evalsha(sha, *rest)
