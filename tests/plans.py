"""The plan a statement gets on the pool's connections, for tests that check an index is used."""

from __future__ import annotations

import uuid
from datetime import datetime


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, datetime):
        value = value.isoformat()
    if isinstance(value, (str, uuid.UUID)):
        return "'" + str(value).replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {value!r}")


async def generic_plan(conn, sql: str, *args) -> str:
    """EXPLAIN ANALYZE of `sql` run with `args` as the pool runs it: a generic plan, made
    without the parameters' values (PREPARE, then EXECUTE; EXPLAIN with parameters would
    show a custom plan instead)."""
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute("PREPARE under_test AS " + sql)
    try:
        rows = await conn.fetch("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE under_test("
                                + ", ".join(_literal(a) for a in args) + ")")
    finally:
        await conn.execute("DEALLOCATE under_test")
        await conn.execute("RESET plan_cache_mode")
    return "\n".join(r[0] for r in rows)
