"""GET /jobs with `until` and `since` (migration 0055): the page walks the key between the
ids they bound, and reads the jobs whose created_at lies a minute or more from their id's
time (set by hand, a long transaction, a random id) off jobs_created_apart_idx. Every job that
matches is listed, in order, for an admin and a tenant; what a page reads stays flat as
newer jobs come by the ten thousand."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from app.engine import accounts, job_admin
from app.engine.queries import statement
from app.engine.tenancy import tenant_transaction
from bench.explain import buffers_touched, explain
from tests import factories as f

# n jobs of `lane` created over the span [$3, $3 + $4 seconds), each with a time-ordered id
# of its own created_at (the layout time_ordered_uuid writes), as if made then.
MADE_THEN = """
INSERT INTO jobs (id, type, lane, status, created_at, finished_at)
SELECT encode(substring(int8send(floor(extract(epoch FROM t) * 1000)::bigint) FROM 3) || '\\x7abc'::bytea
              || substring(uuid_send(gen_random_uuid()) FROM 9), 'hex')::uuid,
       'record', $1, CASE WHEN g % 3 = 0 THEN 'done' ELSE 'pending' END, t, CASE WHEN g % 3 = 0 THEN t END
FROM generate_series(1, $2) g, LATERAL (SELECT $3::timestamptz + make_interval(secs => $4::float8 * g / $2)) s(t)"""


async def _history(pool, lanes) -> None:
    now = datetime.now(timezone.utc)
    for lane in lanes:
        await pool.execute(MADE_THEN, lane, 300, now - timedelta(days=3), 3 * 86400.0)
        # ids made now, created_at days back (an import, the tests' factories): far apart
        await pool.execute("INSERT INTO jobs (type, lane, created_at) "
                           "SELECT 'export', $1, now() - make_interval(hours => 30 + g) FROM generate_series(1, 5) g", lane)
        # random ids (jobs from before time-ordered ids), old and new
        await pool.execute("INSERT INTO jobs (id, type, lane, created_at) "
                           "SELECT gen_random_uuid(), 'legacy', $1, now() - make_interval(hours => g * 20) "
                           "FROM generate_series(0, 4) g", lane)
        # a transaction that ran long: its job's id a few minutes after its created_at
        await pool.execute("INSERT INTO jobs (type, lane, created_at) VALUES ('slow', $1, now() - interval '5 minutes')",
                           lane)
        # created_at set later than the id's time
        await pool.execute("INSERT INTO jobs (id, type, lane, created_at) "
                           "SELECT encode(substring(int8send(floor(extract(epoch FROM now() - interval '3 days') * 1000)::bigint) "
                           "FROM 3) || substring(uuid_send(gen_random_uuid()) FROM 7), 'hex')::uuid, 'later', $1, "
                           "now() - interval '1 day'", lane)


async def _all_pages(conn, where: job_admin.JobFilter, own_lanes: bool, limit: int) -> list:
    listed, after = [], None
    while True:
        rows = await job_admin.list_jobs(conn, where, after, limit, own_lanes=own_lanes)
        listed += [r["id"] for r in rows]
        if len(rows) < limit:
            return listed
        after = rows[-1]["id"]


async def test_until_lists_every_job_created_before_it(pool):
    alice = await f.tenant(pool, "alice@a.example")
    bob = await f.tenant(pool, "bob@b.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    await _history(pool, [alice.lane, await f.lane(pool, alice.user_id), bob.lane, await f.lane(pool, None)])
    now = datetime.now(timezone.utc)
    apart = await pool.fetchval("SELECT count(*) FROM jobs WHERE (to_timestamp(('x' || left(encode(uuid_send(id), "
                                "'hex'), 12))::bit(48)::bigint / 1000.0) - created_at "
                                "BETWEEN interval '-1 minute' AND interval '1 minute') IS NOT TRUE")
    assert apart == 4 * 12, apart  # set by hand, random ids, a long transaction: nothing else
    for who in (admin, alice):
        actor = await accounts.authenticate(pool, who.key)
        async with tenant_transaction(pool, actor) as conn:
            for until, since, status in ((now - timedelta(days=1), None, None), (now - timedelta(minutes=2), None, None),
                                         (now - timedelta(hours=50), now - timedelta(hours=70), None),
                                         (now - timedelta(days=1), None, "pending"), (now + timedelta(hours=1), None, None),
                                         (None, now - timedelta(hours=30), None), (None, now - timedelta(minutes=3), None)):
                where = job_admin.JobFilter(until=until, since=since, status=status)
                want = [r["id"] for r in await conn.fetch(
                    "SELECT id FROM jobs WHERE ($1::timestamptz IS NULL OR created_at < $1) AND ($2::timestamptz IS NULL OR created_at >= $2) "
                    "AND ($3::text IS NULL OR status = $3) ORDER BY id DESC", until, since, status)]
                got = await _all_pages(conn, where, not actor.is_admin, 7)
                assert got == want and want, (who.key, until, since, status, len(got), len(want))
                types = set(await conn.fetch("SELECT DISTINCT type FROM jobs WHERE id = ANY($1)", got))
                assert len(types) > 1
        if not actor.is_admin:
            assert not set(got) & set(await pool.fetch("SELECT id FROM jobs WHERE lane = $1", bob.lane))


async def _until_page(pool, key, until, since=None) -> int:
    """Buffers of the first page in [since, until), planned for its values as list_jobs runs it."""
    actor = await accounts.authenticate(pool, key)
    own_lanes = not actor.is_admin
    page = dict(status=None, type=None, lane=None, batch_id=None, since=since, until=until, error=None,
                after=None, limit=50)
    sql, *args = (statement("jobs_list_by_lanes").bind(**page, lanes=None) if own_lanes
                  else statement("jobs_list").bind(**page, ids=None))
    async with tenant_transaction(pool, actor) as conn:
        plan = await explain(conn, sql, tuple(args), mode="force_custom_plan", options="ANALYZE, BUFFERS, COSTS OFF")
        rows = await job_admin.list_jobs(conn, job_admin.JobFilter(until=until, since=since), None, 50,
                                         own_lanes=own_lanes)
    assert rows and all((since is None or r["created_at"] >= since) and r["created_at"] < until for r in rows)
    return buffers_touched(plan)


async def test_a_page_before_until_reads_as_much_however_many_jobs_came_after(pool):
    """A page before `until` (and an hour's window) two days back reads as much with 60,000
    jobs of the last 40 hours as with 600 (every one of them, before migration 0055), for
    an admin and a tenant."""
    alice = await f.tenant(pool, "alice@a.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    other = await f.lane(pool, None)
    now = datetime.now(timezone.utc)
    await _history(pool, [alice.lane, other])
    for lane in (alice.lane, other):
        await pool.execute(MADE_THEN, lane, 300, now - timedelta(hours=40), 40 * 3600.0)
    await pool.execute("VACUUM ANALYZE jobs")
    until, since = now - timedelta(hours=50), now - timedelta(hours=51)
    before = {(k, s): await _until_page(pool, k, until, s) for k in (admin.key, alice.key) for s in (None, since)}
    for lane in (alice.lane, other):
        await pool.execute(MADE_THEN, lane, 30_000, now - timedelta(hours=40), 40 * 3600.0)
    await pool.execute("VACUUM ANALYZE jobs")
    for (key, s), was in before.items():
        after = await _until_page(pool, key, until, s)
        assert after < was + 20, (key, s, was, after)


async def test_a_tenants_hour_reads_as_much_however_many_jobs_came_before_it(pool):
    """A tenant's hour two days back, with fewer jobs in it than a page holds, reads as much
    with 60,000 older jobs in its lanes as with 600: each lane's walk stops at the id
    `since` bounds (it went on to the lane's first job before)."""
    alice = await f.tenant(pool, "alice@a.example")
    second = await f.lane(pool, alice.user_id)
    now = datetime.now(timezone.utc)
    await _history(pool, [alice.lane, second])
    await pool.execute("VACUUM ANALYZE jobs")
    until, since = now - timedelta(hours=50), now - timedelta(hours=51)
    was = await _until_page(pool, alice.key, until, since)
    for lane in (alice.lane, second):
        await pool.execute(MADE_THEN, lane, 30_000, now - timedelta(days=30), 26 * 86400.0)
    await pool.execute("VACUUM ANALYZE jobs")
    after = await _until_page(pool, alice.key, until, since)
    assert after < was + 20, (was, after)
