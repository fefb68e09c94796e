"""The fair claim must not read the done history: its plan is locked in by EXPLAIN."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

from app import Stage
from app.engine import jobs as q
from app.engine.db import connect, create_pool
from app.engine.jobs import NewJob
from app.engine.migrate import migrate
from app.engine.queries import statement
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from bench.explain import explain
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
        INSERT INTO lanes (id, owner_id, priority)
            SELECT gen_random_uuid(), u.id, u.priority
            FROM (SELECT id, (ARRAY[-10, 0, 10])[1 + (row_number() OVER ()) % 3] AS priority FROM users) u,
                 generate_series(1, 4);
    """)
    # a day of finished work, then a backlog: 20 pending jobs per lane
    await pool.execute(f"""
        INSERT INTO jobs (type, lane, status, attempts, locked_at, finished_at, created_at)
        SELECT 't', c.id, 'done', 1, now() - interval '2 hours', now() - interval '1 hour',
               now() - interval '3 hours'
        FROM (SELECT id, row_number() OVER () AS n FROM lanes) c
        JOIN generate_series(1, {DONE_ROWS}) g ON g % 200 = c.n - 1;
        INSERT INTO jobs (type, lane, created_at)
        SELECT 't', c.id, now() - g * interval '1 ms' FROM lanes c, generate_series(1, 20) g;
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
            sql, *args = claim_of_25(run_id)
            raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
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


LANES_WITH_WORK = 5_000
DEFERRED_LANES = 2_000


async def load_lanes(pool):
    """5,000 lanes with two ready jobs each, priorities mixed; ahead of them in the claim
    order, 2,000 lanes of the highest priority whose (older) jobs are all deferred for an hour."""
    await pool.execute(f"""
        SELECT set_config('app.current_actor_kind', 'system', true);
        INSERT INTO users (email)
            SELECT 'lane' || g || '@example.com' FROM generate_series(1, {LANES_WITH_WORK + DEFERRED_LANES}) g;
        INSERT INTO lanes (id, owner_id, priority)
            SELECT gen_random_uuid(), id, CASE WHEN n <= {DEFERRED_LANES} THEN 10 ELSE (ARRAY[-10, 0, 10])[1 + n % 3] END
            FROM (SELECT id, row_number() OVER (ORDER BY email) AS n FROM users) u;
        INSERT INTO jobs (type, lane, created_at, run_after)
            SELECT 't', c.id, now() - interval '1 day' - g * interval '1 ms', now() + interval '1 hour'
            FROM lanes c JOIN users u ON u.id = c.owner_id, generate_series(1, 2) g
            WHERE u.email IN (SELECT 'lane' || g || '@example.com' FROM generate_series(1, {DEFERRED_LANES}) g);
        INSERT INTO jobs (type, lane, created_at)
            SELECT 't', c.id, now() - g * interval '1 ms' FROM lanes c, generate_series(1, 2) g
            WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.lane = c.id);
        ANALYZE;
    """)


def claim_of_25(run_id, done=(), hand_back=(), hand_back_until=()) -> tuple:
    """claim.sql bound as the hot loop binds it: 25 jobs of type t."""
    return statement("claim").bind(type="t", limit=25, run_id=run_id, lease_seconds=900.0, max_attempts=3,
                                   done=list(done), hand_back=list(hand_back),
                                   hand_back_until=list(hand_back_until))


async def explain_claim(pool, run_id, mode: str) -> dict:
    """EXPLAIN ANALYZE of the claim of 25 as a prepared statement under plan_cache_mode
    `mode` (the pool forces the generic plan), rolled back."""
    async with pool.acquire() as conn:
        sql, *args = claim_of_25(run_id)
        raw = await explain(conn, sql, tuple(args), mode=mode, options="ANALYZE, FORMAT JSON")
    return json.loads(raw)[0]["Plan"]


async def test_claim_reads_a_few_lane_rows_however_many_lanes_have_work(pool):
    await load_lanes(pool)
    assert await pool.fetchval("SELECT count(*) FROM job_lanes WHERE pending > 0") == \
        LANES_WITH_WORK + DEFERRED_LANES
    run_id = await f.run(pool)
    for mode in ("force_generic_plan", "force_custom_plan"):
        plan = await explain_claim(pool, run_id, mode)
        nodes = list(walk(plan))
        on = {rel: [n for n in nodes if n.get("Relation Name") == rel] for rel in ("jobs", "job_lanes")}
        assert [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in on] == []
        assert any(n.get("Index Name") == "job_lanes_claim_idx" for n in on["job_lanes"]), mode
        lane_rows = sum(n["Actual Rows"] * n["Actual Loops"] for n in on["job_lanes"])
        # the first 4 x 25 + 32 in the last fold's order, weighed with what claims took since
        assert lane_rows <= 4 * 25 + 32, f"{mode}: the claim read {lane_rows} of {LANES_WITH_WORK:,} lane rows"
        # one probe of jobs per lane taken and one per lane's quota: none for the 2,000
        # lanes ahead whose work is deferred (passed over on the index entry)
        probes = sum(n["Actual Loops"] for n in on["jobs"] if n.get("Index Name") == "jobs_claim_idx")
        assert probes <= 50, f"{mode}: {probes} probes of jobs"
        assert plan["Actual Rows"] == 25


async def test_the_endings_find_the_runs_jobs_by_primary_key_however_many_others_run(pool):
    # statistics taken with nothing running (as after a quiet night), then ten runs at work
    await pool.execute("""
        INSERT INTO jobs (type, created_at) SELECT 't', now() - g * interval '1 ms' FROM generate_series(1, 2000) g;
        ANALYZE jobs;""")
    runs = [await f.run(pool) for _ in range(10)]
    for run_id in runs:
        await pool.execute("""UPDATE jobs SET status = 'running', locked_at = now(), attempts = 1, run_id = $1
            WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id LIMIT 40)""", run_id)
    mine = [r["id"] for r in await pool.fetch("SELECT id FROM jobs WHERE run_id = $1", runs[0])]
    back, until = mine[:5], [datetime.now(timezone.utc)] * 5
    async with pool.acquire() as conn:
        sql, *args = claim_of_25(runs[0], done=mine[5:], hand_back=back, hand_back_until=until)
        raw = await explain(conn, sql, tuple(args), options="ANALYZE, FORMAT JSON")
    plan = json.loads(raw)[0]["Plan"]
    for cte in ("CTE done", "CTE handed_back"):
        [ending] = [n for n in plan["Plans"] if n.get("Subplan Name") == cte]
        on_jobs = [n for n in walk(ending) if n.get("Relation Name") == "jobs" and "Index Name" in n]
        assert [n["Index Name"] for n in on_jobs] == ["jobs_pkey"], (cte, on_jobs)
        # the other runs' 360 running jobs are not read and dropped
        assert sum(n.get("Rows Removed by Filter", 0) for n in on_jobs) == 0, cte
    assert plan["Plans"][0]["Actual Rows"] == 35  # 35 done


async def test_a_run_gathers_the_statistics_a_database_just_loaded_lacks(new_database):
    """A new database's first load, claimed before autovacuum's first ANALYZE: without
    statistics the generic plan probed each lane through jobs_open_dedupe_uq and sorted the
    lane's open jobs (every claim growing with the backlog). The run analyzes jobs first."""
    url = await new_database()
    db = await connect(url)
    try:
        await migrate(db, [])
        await db.execute("ALTER TABLE jobs SET (autovacuum_enabled = off)")  # the run, not autovacuum
        lanes = [uuid.uuid4() for _ in range(100)]
        await q.enqueue_many(db, [NewJob(type="t", lane=lanes[i % 100]) for i in range(20_000)])
    finally:
        await db.close()
    pool = await create_pool(url)
    try:
        assert await pool.fetchval(*statement("jobs_statistics_missing").bind()) is True

        async def untouched(job, ctx):
            raise AssertionError("no job of this type was queued")
        settings = load_settings(database_url="postgresql://unused")
        result = await Pipeline(pool, [Stage(type="other", handler=untouched)], settings).run("manual")
        assert result.stop_reason == "no_work"
        assert await pool.fetchval(*statement("jobs_statistics_missing").bind()) is False
        assert await q.gather_statistics_if_missing(pool) is False  # once, not every run

        plan = await explain_claim(pool, await f.run(pool), "force_generic_plan")
        used = {n.get("Index Name") for n in walk(plan) if n.get("Relation Name") == "jobs"}
        assert "jobs_claim_idx" in used and "jobs_open_dedupe_uq" not in used, used
        assert plan["Actual Rows"] == 25
    finally:
        await pool.close()


async def test_the_dashboards_due_index_cannot_serve_the_claims_probes(pool):
    """jobs_due_idx (type, run_after) holds every pending job of a type; a head probe walking
    it filters the whole backlog by lane. Under statistics taken before the table filled the
    planner chose it (0.3 s a claim in the horizon soak). Here the probes' own indexes are
    dropped (in a transaction, rolled back) and scans priced out: the due index must still
    not be a way in, whatever the statistics say."""
    await load_history(pool)
    run_id = await f.run(pool)
    async with pool.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            await conn.execute("DROP INDEX jobs_claim_idx; DROP INDEX jobs_wake_idx;"
                               "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
            sql, *args = claim_of_25(run_id)
            raw = await explain(conn, sql, tuple(args), mode="force_generic_plan", options="FORMAT JSON")
        finally:
            await tr.rollback()
    used = {n.get("Index Name") for n in walk(json.loads(raw)[0]["Plan"]) if n.get("Relation Name") == "jobs"}
    assert "jobs_due_idx" not in used, used


async def test_the_claim_is_prepared_once_per_connection_and_kept(pool):
    """asyncpg keeps a prepared statement only up to a size; the claim's text is larger than
    its default, and a claim not kept was parsed and planned on every call (half the drain's
    speed). Three claims on one connection: one prepared statement holds the claim."""
    await f.jobs(pool, "t", 3)
    run_id = await f.run(pool)
    sql, *_ = claim_of_25(run_id)
    assert len(sql.encode()) > 15 * 1024  # over asyncpg's default: the setting is needed
    async with pool.acquire() as conn:
        for _ in range(3):
            await q.claim(conn, f.lease(), run_id, 1)
        # the claim's own text: the pool's connection may have prepared the keyed claim too
        kept = await conn.fetchval("SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", sql)
    assert kept == 1
