"""The fair claim must not read the done history: its plan is locked in by EXPLAIN."""

from __future__ import annotations

import json

from app.engine.queries import query
from tests import factories as f

DONE_ROWS = 20_000


def walk(node):
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


async def load_history(pool):
    await pool.execute("""
        SELECT set_config('app.current_actor_kind', 'system', true);
        INSERT INTO users (email) SELECT 'u' || g || '@example.com' FROM generate_series(1, 50) g;
        INSERT INTO subscriptions (user_id, plan)
            SELECT id, (ARRAY['free', 'standard', 'pro'])[1 + (row_number() OVER ()) % 3] FROM users;
        INSERT INTO campaigns (user_id) SELECT id FROM users, generate_series(1, 4);
    """)
    # a day of finished work, then a backlog: 20 pending jobs per campaign
    await pool.execute(f"""
        INSERT INTO jobs (type, campaign_id, status, attempts, locked_at, finished_at, created_at)
        SELECT 't', c.id, 'done', 1, now() - interval '2 hours', now() - interval '1 hour',
               now() - interval '3 hours'
        FROM (SELECT id, row_number() OVER () AS n FROM campaigns) c
        JOIN generate_series(1, {DONE_ROWS}) g ON g % 200 = c.n - 1;
        INSERT INTO jobs (type, campaign_id, created_at)
        SELECT 't', c.id, now() - g * interval '1 ms' FROM campaigns c, generate_series(1, 20) g;
        ANALYZE;
    """)


async def test_claim_plan_stays_off_the_done_rows(pool):
    await load_history(pool)
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'done'") == DONE_ROWS
    run_id = await f.run(pool)
    async with pool.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + query("claim"),
                                      "t", 25, run_id, 900.0, 3)
        finally:
            await tr.rollback()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    on_jobs = [n for n in walk(plan) if n.get("Relation Name") == "jobs"]
    assert on_jobs, "the plan must touch jobs"
    assert [n["Node Type"] for n in on_jobs if n["Node Type"] == "Seq Scan"] == []
    assert any(n.get("Index Name") == "jobs_claim_idx" for n in on_jobs)
    rows_read = sum(n["Actual Rows"] * n["Actual Loops"] for n in on_jobs)
    assert rows_read < 500, f"the claim read {rows_read} job rows"
    assert plan["Actual Rows"] == 25
