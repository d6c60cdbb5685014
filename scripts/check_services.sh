#!/usr/bin/env bash
# Check that CONVEYOR_TEST_POSTGRES_URL and CONVEYOR_TEST_REDIS_URL answer, with the
# same drivers conveyor uses (asyncpg, redis-py) when they are installed, else psql
# and redis-cli. Run it under scripts/services.sh:
#   CONVEYOR_FORCE_OWN_SERVICES=1 scripts/services.sh -- scripts/check_services.sh
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
: "${CONVEYOR_TEST_POSTGRES_URL:?not set}" "${CONVEYOR_TEST_REDIS_URL:?not set}"

python="$PY"
[[ -x "$python" ]] || python=python3
"$python" - <<'PYEOF'
import asyncio, os, sys

pg_url = os.environ["CONVEYOR_TEST_POSTGRES_URL"]
redis_url = os.environ["CONVEYOR_TEST_REDIS_URL"]

async def main() -> None:
    try:
        import asyncpg
    except ImportError:
        asyncpg = None
    if asyncpg is not None:
        conn = await asyncpg.connect(pg_url, timeout=5)
        try:
            version = await conn.fetchval("show server_version")
            db = await conn.fetchval("select current_database()")
        finally:
            await conn.close()
        print(f"postgres ok (asyncpg): {pg_url} -> server {version}, database {db}")
    else:
        import subprocess
        out = subprocess.run(["psql", pg_url, "-XAtc", "show server_version"],
                             check=True, capture_output=True, text=True).stdout.strip()
        print(f"postgres ok (psql): {pg_url} -> server {out}")
    try:
        import redis.asyncio as aioredis
    except ImportError:
        aioredis = None
    if aioredis is not None:
        client = aioredis.from_url(redis_url)
        try:
            assert await client.ping()
            info = await client.info("server")
        finally:
            await client.aclose()
        print(f"redis ok (redis-py): {redis_url} -> server {info['redis_version']}")
    else:
        import subprocess
        out = subprocess.run(["redis-cli", "-u", redis_url, "ping"],
                             check=True, capture_output=True, text=True).stdout.strip()
        assert out == "PONG", out
        print(f"redis ok (redis-cli): {redis_url}")

asyncio.run(main())
PYEOF
