"""``-- name: x`` blocks of a ``.sql`` file shipped in the package: name -> SQL.

The SQL backends keep their statements in named blocks (one file each), parsed
once at import; a typo in a name fails loudly there, not at the first call.
"""

from __future__ import annotations

import re
from typing import Any, LiteralString, cast

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def trusted_sql(text: str) -> LiteralString:
    """Mark SQL read from a file shipped inside this package (never from input)
    as a literal. The one place where file text becomes ``LiteralString``."""
    literal: LiteralString = cast(Any, text)
    return literal


def _is_filler(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("--")


def parse_named_blocks(text: str) -> dict[str, str]:
    """Each block's SQL without the comments and blank lines around it (comments
    inside a statement stay) and without a final ``;``."""
    blocks: dict[str, str] = {}
    matches = list(_NAME.finditer(text))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(text)
        lines = text[match.end() : end].strip().splitlines()
        while lines and _is_filler(lines[0]):
            lines.pop(0)
        while lines and _is_filler(lines[-1]):  # section rulers between blocks
            lines.pop()
        name = match.group(1)
        if name in blocks:
            raise RuntimeError(f"queries.sql: query {name!r} is defined twice")
        sql = "\n".join(lines).strip().rstrip(";").rstrip()
        if not sql:
            raise RuntimeError(f"queries.sql: query {name!r} is empty")
        blocks[name] = sql
    return blocks
