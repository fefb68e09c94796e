"""The plan a statement gets where it runs, for the benchmarks and for the tests that check
an index is used.

The pools run with plan_cache_mode = force_generic_plan (app/engine/db.py): a statement is
planned once, without its parameters' values. EXPLAIN with parameters would show a custom
plan made for those very values instead, so the statement is PREPAREd and EXECUTEd, its
parameters written as literals."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime


def literal(value) -> str:
    """A parameter's value as SQL text for EXECUTE."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, uuid.UUID):
        return f"'{value}'::uuid"
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'::timestamptz"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, list):  # an id array ('{}': the claim's nothing to finish first)
        return "ARRAY[" + ", ".join(literal(v) for v in value) + "]" if value else "'{}'"
    raise TypeError(f"no SQL literal for {value!r}")


async def explain(conn, sql: str, args: tuple, *, mode: str = "force_generic_plan",
                  options: str = "ANALYZE, COSTS OFF") -> str:
    """EXPLAIN (`options`) of `sql` run with `args`, under plan_cache_mode `mode`, rolled
    back (inside a transaction: to a savepoint, the caller's settings kept).

    force_generic_plan is what the pools run with; force_custom_plan is the plan made for
    these very values. A plain EXPLAIN first builds (and keeps) the generic plan, so the
    Planning Time shown is what a call pays on a connection that has run it before."""
    literals = f"({', '.join(literal(a) for a in args)})" if args else ""  # EXECUTE name() is an error
    tr = conn.transaction()
    await tr.start()
    try:
        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
        await conn.execute(f"PREPARE under_explain AS {sql}")
        await conn.fetch(f"EXPLAIN EXECUTE under_explain{literals}")
        rows = await conn.fetch(f"EXPLAIN ({options}) EXECUTE under_explain{literals}")
    finally:
        await tr.rollback()
        await conn.execute("DEALLOCATE under_explain")
    return "\n".join(r[0] for r in rows)


def buffers_read(plan_json: str) -> int:
    """Shared buffers hit or read by the whole statement (its functions' statements
    included), from an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) text."""
    top = json.loads(plan_json)[0]["Plan"]
    return top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)


def rows_filtered_away(plan: str) -> list[int]:
    """Each plan node's rows read and then dropped by a filter, from an EXPLAIN ANALYZE
    text: what an index condition would not have read."""
    return [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]


def buffers_touched(plan: str) -> int:
    """Pages the statement touched (shared hit + read), from an EXPLAIN (ANALYZE, BUFFERS)
    text's top node."""
    top = next(line for line in plan.splitlines() if "Buffers:" in line)
    return sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", top))
