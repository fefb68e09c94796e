"""What a tenant reads comes from its own lanes, not the whole table: GET /jobs (the same
rows and pages as the admin's list narrowed to those lanes) and the dashboard's queue,
busiest lanes and jobs in trouble (the same answers as row-level security filtering every
job), at a cost that does not grow with another tenant's jobs."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from serving_kit import Recorder

from app.engine import accounts, job_admin
from app.engine.jobs import DEFAULT_LANE
from app.engine.ended_minutes import roll_up_endings
from app.engine.queries import statement
from app.engine.tenancy import tenant_transaction
from bench.explain import explain, rows_filtered_away
from tests import factories as f
from tests.api.test_dashboard_bounded_reads import QUEUE_COUNTED
from tests.api.test_pagination import page_through


async def _tenant(pool, email: str, lanes: int):
    """Its API key and `lanes` lanes of its own."""
    t = await f.tenant(pool, email)
    return t.key, [t.lane] + [await f.lane(pool, t.user_id) for _ in range(lanes - 1)]


async def test_a_tenant_pages_exactly_its_own_jobs_newest_first(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage, Recorder("export").stage], api_key=False)
    alice, alice_lanes = await _tenant(pool, "alice@a.example", 3)
    bob, bob_lanes = await _tenant(pool, "bob@b.example", 1)
    # interleaved in time, so alice's lanes alternate in the list and bob's jobs sit between
    for i in range(30):
        await f.jobs(pool, "record" if i % 3 else "export", 1, lane=alice_lanes[i % 3])
        await f.jobs(pool, "record", 2, lane=bob_lanes[0])
    await f.jobs(pool, "record", 5, lane=DEFAULT_LANE)
    await pool.execute("UPDATE jobs SET status = 'failed' WHERE lane = $1 AND type = 'export'", alice_lanes[0])
    # running jobs are listed apart (the lane index leaves them out): some of each tenant's
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now(), attempts = 1 "
                       "WHERE id IN (SELECT id FROM jobs WHERE lane = ANY ($1::uuid[]) AND status = 'pending' "
                       "ORDER BY id LIMIT 7)", [alice_lanes[2], bob_lanes[0]])
    mine = {"Authorization": f"Bearer {alice}"}

    async def expected(query_string: str, lanes) -> list[str]:
        """The reference: the table itself, narrowed to alice's lanes and the filter."""
        status = query_string.removeprefix("status=") if query_string.startswith("status=") else None
        type_ = query_string.removeprefix("type=") if query_string.startswith("type=") else None
        rows = await pool.fetch("SELECT id FROM jobs WHERE lane = ANY ($1::uuid[]) AND ($2::text IS NULL OR "
                                "status = $2) AND ($3::text IS NULL OR type = $3) ORDER BY id DESC",
                                lanes, status, type_)
        return [str(r["id"]) for r in rows]

    for query_string, lanes in (("", alice_lanes), ("status=failed", alice_lanes), ("type=export", alice_lanes),
                                ("status=running", alice_lanes), (f"lane={alice_lanes[1]}", [alice_lanes[1]]),
                                (f"lane={alice_lanes[2]}", [alice_lanes[2]])):
        want = await expected("" if query_string.startswith("lane=") else query_string, lanes)
        client.headers.update(mine)
        got = [r["id"] for r in await page_through(client, f"/jobs?limit=4&{query_string}".rstrip("&"))]
        client.headers.pop("Authorization")
        assert got == want and got, query_string
    # another tenant's lane, asked for by name, is just empty
    client.headers.update(mine)
    assert await page_through(client, f"/jobs?lane={bob_lanes[0]}") == []


async def test_a_page_reads_the_callers_lanes_not_other_tenants_jobs(pool):
    alice, alice_lanes = await _tenant(pool, "alice@a.example", 2)
    _, bob_lanes = await _tenant(pool, "bob@b.example", 1)
    for lane in alice_lanes:
        await f.jobs(pool, "record", 60, lane=lane)
    await pool.execute("""INSERT INTO jobs (type, lane, status, finished_at)
        SELECT 'record', $1, 'done', now() FROM generate_series(1, 5000) g""", bob_lanes[0])
    await pool.execute("ANALYZE jobs")
    actor = await accounts.authenticate(pool, alice)
    async with tenant_transaction(pool, actor) as conn:
        sql, *args = statement("jobs_list_by_lanes").bind(status=None, type=None, lane=None, batch_id=None,
                                                          since=None, until=None, error=None, after=None, limit=51, lanes=None)
        plan = await explain(conn, sql, tuple(args), mode="force_custom_plan")  # as list_jobs plans it
    assert "jobs_lane_list_idx" in plan, plan
    assert "jobs_pkey" not in plan and "Seq Scan on jobs" not in plan, plan
    # none of bob's 5,000 was read and dropped: no scan of jobs filters any row away
    lines = plan.splitlines()
    for i, line in enumerate(lines):
        if " on jobs " in line:
            details = [x for x in lines[i + 1:] if "->" not in x][:6]
            assert not any("Rows Removed by Filter" in x for x in details), plan


async def test_an_admins_list_of_one_lane_reads_that_lane_not_the_table(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    lane, other = uuid.uuid4(), uuid.uuid4()
    await f.jobs(pool, "record", 40, lane=lane)
    await f.jobs(pool, "record", 12, lane=DEFAULT_LANE)
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now(), attempts = 1 "
                       "WHERE id IN (SELECT id FROM jobs WHERE lane = $1 ORDER BY id LIMIT 5)", lane)
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() "
                       "WHERE id IN (SELECT id FROM jobs WHERE lane = $1 ORDER BY id DESC LIMIT 9)", lane)
    # another lane's 5,000 jobs, all newer: a walk of the whole table meets them first
    await pool.execute("""INSERT INTO jobs (type, lane, status, finished_at)
        SELECT 'record', $1, 'done', now() FROM generate_series(1, 5000) g""", other)
    await pool.execute("ANALYZE jobs")
    for filters, lane_, status in (("", lane, None), ("&status=running", lane, "running"),
                                   ("&status=done", lane, "done"), ("", DEFAULT_LANE, None)):
        want = [str(r["id"]) for r in await pool.fetch(
            "SELECT id FROM jobs WHERE lane = $1 AND ($2::text IS NULL OR status = $2) ORDER BY id DESC",
            lane_, status)]
        got = [r["id"] for r in await page_through(client, f"/jobs?limit=7&lane={lane_}{filters}")]
        assert got == want and got, (lane_, filters)
    async with pool.acquire() as conn:
        sql, *args = statement("jobs_list_by_lanes").bind(status=None, type=None, lane=lane, batch_id=None,
                                                          since=None, until=None, error=None, after=None, limit=51, lanes=[lane])
        plan = await explain(conn, sql, tuple(args), mode="force_custom_plan")  # as list_jobs plans it
        # and what the API and the CLI call reads that lane's index entries, no more (the
        # counts are this backend's own, pending in the transaction)
        read = "SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index WHERE indrelid = 'jobs'::regclass"
        async with conn.transaction():
            before = await conn.fetchval(read)
            await job_admin.list_jobs(conn, job_admin.JobFilter(lane=lane), None, 7)
            entries = await conn.fetchval(read) - before
    assert "jobs_lane_list_idx" in plan and "jobs_pkey" not in plan, plan
    assert all(n < 100 for n in rows_filtered_away(plan)), plan  # not the other lane's 5,000
    assert entries < 100, entries


DASHBOARD = [("dashboard_queue", {"own_lanes": True, "cap": 10}), ("dashboard_lanes", {"limit": 10}),
             ("dashboard_trouble", {"limit": 10, "own_lanes": True})]
# The busiest lanes counted from every open job, row-level security dropping the others':
# the reference for a tenant's dashboard_lanes and an admin's dashboard_lanes_all.
BUSIEST_COUNTED = """
SELECT j.lane, j.pending, j.running, l.priority, coalesce(l.paused, false) AS paused, l.owner_id
FROM (SELECT * FROM (SELECT lane, count(*) FILTER (WHERE status = 'pending')::int AS pending,
                             count(*) FILTER (WHERE status = 'running')::int AS running
                      FROM jobs WHERE status IN ('pending', 'running') GROUP BY lane) c
      ORDER BY pending + running DESC, lane LIMIT $1) j
LEFT JOIN lanes l ON l.id = j.lane
ORDER BY j.pending + j.running DESC, j.lane"""


async def test_a_tenants_dashboard_reads_its_own_lanes_with_the_same_answers(pool):
    alice, alice_lanes = await _tenant(pool, "alice@a.example", 3)
    _, bob_lanes = await _tenant(pool, "bob@b.example", 1)
    for i, lane in enumerate(alice_lanes):
        await f.jobs(pool, "record", 4 + i, lane=lane)
        await f.jobs(pool, "export", 2, lane=lane)
    a0, a1, a2 = alice_lanes
    # every state the dashboard counts: waiting, running, done today and long ago, failed, retrying
    await pool.execute("UPDATE jobs SET run_after = now() + interval '1 hour' WHERE lane = $1 AND type = 'export'", a0)
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now(), attempts = 1 "
                       "WHERE lane = $1 AND type = 'export'", a1)
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() - make_interval(days => (id < $2)::int * 3) "
                       "WHERE lane = $1 AND type = 'record'", a1, (await f.jobs(pool, "record", 1, lane=a1))[0])
    await pool.execute("UPDATE jobs SET status = 'failed', finished_at = now(), last_error = 'boom', attempts = 3 "
                       "WHERE lane = $1 AND type = 'export'", a2)
    await pool.execute("UPDATE jobs SET last_error = 'try again', attempts = 1, run_after = now() + interval '5 minutes' "
                       "WHERE id IN (SELECT id FROM jobs WHERE lane = $1 AND type = 'record' LIMIT 2)", a2)
    # bob's endings in a closed minute: the card reads it from its rollup (the last few
    # minutes are read live, every tenant's endings of them)
    await pool.execute("""INSERT INTO jobs (type, lane, status, finished_at, last_error)
        SELECT 'record', $1, CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'done' END, now() - interval '10 minutes', 'bob'
        FROM generate_series(1, 3000) g""", bob_lanes[0])
    await pool.execute("INSERT INTO jobs (type, lane) SELECT 'record', $1 FROM generate_series(1, 2000) g", bob_lanes[0])
    await pool.execute("ANALYZE jobs")
    actor = await accounts.authenticate(pool, alice)
    async with tenant_transaction(pool, actor) as conn:
        await roll_up_endings(conn)  # as jobs_by_type does before the card
        for name, own_lanes in DASHBOARD:
            # the reference: every job, row-level security dropping bob's (the admin's branch;
            # the queue card's counters are the operator's: its jobs counted)
            all_lanes = {k: (False if v is True else v) for k, v in own_lanes.items()}
            reference = {"dashboard_lanes": (BUSIEST_COUNTED, 10), "dashboard_queue": (QUEUE_COUNTED, 10)}.get(name)
            everything = [dict(r) for r in (await conn.fetch(*reference) if reference
                                            else await conn.fetch(*statement(name).bind(**all_lanes)))]
            own = [dict(r) for r in await conn.fetch(*statement(name).bind(**own_lanes))]
            assert own == everything and own, name
            sql, *args = statement(name).bind(**own_lanes)
            plan = await explain(conn, sql, tuple(args))
            removed = rows_filtered_away(plan)
            assert all(n < 100 for n in removed), plan  # bob's 5,000 are never read


async def test_an_admins_busiest_lanes_from_the_counters_are_the_jobs_counted(pool):
    """dashboard_lanes_all reads pending jobs from the lane counters: the same figures as a
    count of every open job, the all-zero lane, ownerless lanes and running jobs included,
    through enqueues, claims, endings and retries; a tenant may not call it."""
    alice, alice_lanes = await _tenant(pool, "alice@a.example", 2)
    admin = await f.tenant(pool, "root@a.example", admin=True)
    ownerless = await f.lane(pool, None)
    for i, lane in enumerate([*alice_lanes, ownerless, DEFAULT_LANE]):
        await f.jobs(pool, "record", 3 + 2 * i, lane=lane)
        await f.jobs(pool, "export", 12 - i, lane=lane)
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now(), attempts = 1 "
                       "WHERE id IN (SELECT id FROM jobs WHERE type = 'export' ORDER BY id LIMIT 9)")
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() "
                       "WHERE id IN (SELECT id FROM jobs WHERE type = 'record' ORDER BY id DESC LIMIT 4)")
    await pool.execute("UPDATE jobs SET status = 'pending', last_error = 'again', run_after = now() + interval '1 minute' "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'running' ORDER BY id LIMIT 2)")
    actor = await accounts.authenticate(pool, admin.key)
    async with tenant_transaction(pool, actor) as conn:
        for limit in (2, 10):
            got = [dict(r) for r in await conn.fetch(*statement("dashboard_lanes_all").bind(limit=limit))]
            assert got == [dict(r) for r in await conn.fetch(BUSIEST_COUNTED, limit)] and len(got) == min(limit, 4)
    actor = await accounts.authenticate(pool, alice)
    async with tenant_transaction(pool, actor) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch(*statement("dashboard_lanes_all").bind(limit=10))


async def test_runs_and_the_audit_log_stay_the_operators_and_a_tenant_reads_none_of_them(pool):
    """The policies evaluate app_is_admin() once per statement (migration 0050): an admin
    sees every run and audit row, a tenant none (of its own lanes' either), and the rows a
    tenant's read passes over are dropped on the InitPlan's answer, not a call per row."""
    alice, alice_lanes = await _tenant(pool, "alice@a.example", 1)
    admin = await f.tenant(pool, "root@a.example", admin=True)
    await f.jobs(pool, "record", 2, lane=alice_lanes[0])
    for _ in range(300):
        await f.run(pool)
    runs, audited = await pool.fetchval("SELECT count(*) FROM runs"), await pool.fetchval("SELECT count(*) FROM audit_log")
    assert runs >= 300 and audited > 0
    async with tenant_transaction(pool, await accounts.authenticate(pool, admin.key)) as conn:
        assert await conn.fetchval("SELECT count(*) FROM runs") == runs
        assert await conn.fetchval("SELECT count(*) FROM audit_log") >= audited
    async with tenant_transaction(pool, await accounts.authenticate(pool, alice)) as conn:
        assert await conn.fetchval("SELECT count(*) FROM runs") == 0
        assert await conn.fetchval("SELECT count(*) FROM audit_log") == 0
        for table in ("runs", "audit_log"):
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM {table}"))
            assert "Filter: (InitPlan 1).col1" in plan and plan.count("app_is_admin()") == 1, plan
            assert plan.index("app_is_admin()") > plan.index("InitPlan 1\n"), plan  # in the InitPlan alone
