"""The dashboard's reads that grew with the jobs table (issue 41): /stats's queue card counts
ready and waiting jobs up to a cap, one probe finds the oldest due job, and the error search
walks only jobs with an error (migration 0052). The card's figures equal counting the jobs,
for an admin and for a tenant (its own lanes only); what a call reads stays flat as jobs end
by the ten thousand without an error, and as a backlog grows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from unittest.mock import patch

from app.engine import accounts, job_admin, queue_stats
from app.engine.jobs import DEFAULT_LANE
from app.engine.queries import statement
from app.engine.queue_stats import OPEN_COUNT_CAP
from app.engine.tenancy import tenant_transaction
from bench.explain import buffers_touched, explain
from tests import factories as f
from tests.api.test_trends_api import _ended

# The queue card counted from the jobs (row-level security keeps a tenant's), ready and
# waiting up to $1.
QUEUE_COUNTED = """
SELECT type,
       least(count(*) FILTER (WHERE status = 'pending' AND run_after <= now()), $1)::int AS ready,
       count(*) FILTER (WHERE status = 'pending' AND run_after <= now()) > $1 AS ready_more,
       least(count(*) FILTER (WHERE status = 'pending' AND run_after > now()), $1)::int AS waiting,
       count(*) FILTER (WHERE status = 'pending' AND run_after > now()) > $1 AS waiting_more,
       count(*) FILTER (WHERE status = 'running')::int AS running,
       count(*) FILTER (WHERE status = 'done' AND recent)::int AS done,
       count(*) FILTER (WHERE status = 'failed' AND recent)::int AS failed,
       count(*) FILTER (WHERE status = 'cancelled' AND recent)::int AS cancelled,
       extract(epoch FROM now() - min(run_after) FILTER (WHERE status = 'pending' AND run_after <= now()))::float8
           AS oldest_ready_seconds
FROM (SELECT *, finished_at > now() - interval '1 day' AS recent FROM jobs) j
WHERE status IN ('pending', 'running') OR recent AND status IN ('done', 'failed', 'cancelled')
GROUP BY type
ORDER BY type"""

async def _history(pool, lanes) -> None:
    """Jobs in every state the card shows, moved the ways jobs move: claimed, ended (in a
    batch), failed and retried, cancelled, ended long ago, reopened, ended again."""
    for i, lane in enumerate(lanes):
        await f.jobs(pool, "record", 6 + i, lane=lane)
        await f.jobs(pool, "export", 4, lane=lane)
        await _ended(pool, lane, "record", "done", 20 + i, 0.5, n=5)
        await _ended(pool, lane, "export", "failed", 40, 3.0, n=2)
        await _ended(pool, lane, "record", "done", 25 * 60, 1.0, n=3)  # a day and an hour ago: not counted
        await _ended(pool, lane, "record", "cancelled", 90, 0.0)
    await pool.execute("UPDATE jobs SET run_after = now() + interval '1 hour' "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND type = 'export' LIMIT 3)")
    await pool.execute("UPDATE jobs SET status = 'running', locked_at = now(), attempts = 1 "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND type = 'record' ORDER BY id LIMIT 9)")
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'running' ORDER BY id LIMIT 5)")
    await pool.execute("UPDATE jobs SET status = 'failed', finished_at = now(), last_error = 'boom' "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'running' ORDER BY id LIMIT 2)")
    # a retry reopens a failed job: it leaves the half hour it had failed in
    await pool.execute("UPDATE jobs SET status = 'pending', attempts = 0, finished_at = NULL, run_after = now() "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'failed' ORDER BY id LIMIT 3)")
    await pool.execute("UPDATE jobs SET status = 'cancelled', finished_at = now() "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id DESC LIMIT 4)")
    # an ended job changed again, ending in another half hour and wait class
    await pool.execute("UPDATE jobs SET finished_at = now() - interval '3 hours', locked_at = now() - interval '4 hours' "
                       "WHERE id IN (SELECT id FROM jobs WHERE status = 'done' ORDER BY id LIMIT 2)")


async def test_the_queue_card_equals_the_jobs_counted(pool):
    alice = await f.tenant(pool, "alice@a.example")
    alice_second = await f.lane(pool, alice.user_id)
    bob = await f.tenant(pool, "bob@b.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    await _history(pool, [alice.lane, alice_second, bob.lane, await f.lane(pool, None), DEFAULT_LANE])
    for key, own_lanes in ((admin.key, False), (alice.key, True)):
        actor = await accounts.authenticate(pool, key)
        async with tenant_transaction(pool, actor) as conn:
            for cap in (3, OPEN_COUNT_CAP):
                card = [dict(r) for r in await conn.fetch(*statement("dashboard_queue").bind(own_lanes=own_lanes,
                                                                                             cap=cap))]
                counted = [dict(r) for r in await conn.fetch(QUEUE_COUNTED, cap)]
                assert card == counted and card, (own_lanes, cap)
                assert any(r["ready_more"] for r in card) == (cap == 3), card
            # the card as /stats shows it: an admin's ready exact (the lane counters), capped or not
            exact = await conn.fetch(QUEUE_COUNTED, 10**9)
            shown = await queue_stats.jobs_by_type(conn, own_lanes)
            assert [(r["type"], r["ready"], r["ready_more"]) for r in shown] == [
                (r["type"], r["ready"], False) for r in exact], shown
        if not own_lanes:
            with patch.object(queue_stats, "OPEN_COUNT_CAP", 3):  # past the cap, still exact
                async with tenant_transaction(pool, actor) as conn:
                    shown = await queue_stats.jobs_by_type(conn, own_lanes)
                    assert any(r["ready"] > 3 and not r["ready_more"] for r in shown), shown
        assert any(r["done"] and r["failed"] and r["cancelled"] and r["oldest_ready_seconds"] for r in card), card
    alice_card = {r["type"]: r for r in card}
    assert alice_card["record"]["done"] < 20  # bob's and the operator's endings are not alice's


async def _reads(pool, key, since) -> dict[str, str]:
    """The plan of each bounded read, for the actor of `key`: the pool's generic plans, the
    list's planned for its values (as list_jobs runs it)."""
    actor = await accounts.authenticate(pool, key)
    own_lanes = not actor.is_admin
    reads = {"dashboard_queue": statement("dashboard_queue").bind(own_lanes=own_lanes, cap=OPEN_COUNT_CAP),
             "trends_jobs": statement("trends_jobs").bind(since=since, bucket_seconds=1800, own_lanes=own_lanes)}
    page = dict(status=None, type=None, lane=None, batch_id=None, since=None, until=None, error="rare",
                after=None, limit=50)
    out = {}
    async with tenant_transaction(pool, actor) as conn:
        # as list_jobs reads it: an admin's few matches by id (migration 0066)
        reads["jobs_list error"] = (statement("jobs_list_by_lanes").bind(**page, lanes=None) if own_lanes
                                    else statement("jobs_list").bind(**page, ids=await job_admin._few_error_matches(conn, "rare")))
        for name, (sql, *args) in reads.items():
            mode = "force_custom_plan" if name.startswith("jobs_list") else "force_generic_plan"
            out[name] = await explain(conn, sql, tuple(args), mode=mode, options="ANALYZE, BUFFERS, COSTS OFF")
        rows = await job_admin.list_jobs(conn, job_admin.JobFilter(error="RARE"), None, 50, own_lanes=own_lanes)
        assert [r["last_error"] for r in rows] == ["a rare error"], rows
    return out


async def test_the_bounded_reads_stay_flat_as_jobs_end_by_the_ten_thousand(pool):
    """A few hundred endings today, then 100,000 more last week and 10,000 today, none with
    an error: the error search reads as much as before (every job it passed, before
    migration 0052), and an admin's queue card and day of trends read the day's endings
    off jobs_finished_idx, never the history before the day."""
    alice = await f.tenant(pool, "alice@a.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    other = await f.lane(pool, None)
    for lane in (alice.lane, other):
        await _ended(pool, lane, "record", "done", 30, 1.0, n=200)
        await _ended(pool, lane, "record", "failed", 50, 2.0, n=20)
    await pool.execute("UPDATE jobs SET last_error = 'a rare error' "
                       "WHERE id = (SELECT id FROM jobs WHERE lane = $1 AND status = 'failed' ORDER BY id LIMIT 1)",
                       alice.lane)
    await pool.execute("VACUUM ANALYZE jobs")
    since = datetime.now(timezone.utc) - timedelta(hours=24)
    before = {k: await _reads(pool, k, since) for k in (admin.key, alice.key)}
    for lane in (alice.lane, other):
        await pool.execute(
            "INSERT INTO jobs (type, lane, status, attempts, finished_at, locked_at, run_after) "
            "SELECT 'record', $1, 'done', 1, now() - interval '5 days' - make_interval(secs => g), "
            "now() - interval '6 days', now() - interval '6 days' FROM generate_series(1, 50000) g", lane)
    await pool.execute("VACUUM ANALYZE jobs")
    history = await _reads(pool, admin.key, since)
    for name in ("dashboard_queue", "trends_jobs"):
        assert buffers_touched(history[name]) < buffers_touched(before[admin.key][name]) + 20, history[name]
    for lane in (alice.lane, other):
        for minutes in range(10, 1400, 141):  # in batches, as runs end them
            await _ended(pool, lane, "record", "done", minutes, 1.0, n=500)
    await pool.execute("VACUUM ANALYZE jobs")
    for key in (admin.key, alice.key):
        after = await _reads(pool, key, since)
        listing = buffers_touched(after["jobs_list error"])
        assert listing < buffers_touched(before[key]["jobs_list error"]) + 20, after["jobs_list error"]


async def test_the_queue_card_reads_at_most_its_cap_of_a_backlog(pool):
    """Ready and waiting jobs are counted up to the cap: a backlog of 40,000 reads about as
    much as one of 400 (every open job, before), for an admin and a tenant."""
    alice = await f.tenant(pool, "alice@a.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    other = await f.lane(pool, None)

    async def backlog(n: int) -> None:
        for lane in (alice.lane, other):
            await pool.execute("INSERT INTO jobs (type, lane, run_after) "
                               "SELECT 'record', $1, now() + make_interval(secs => (g % 2) * 3600 - 60) "
                               "FROM generate_series(1, $2) g", lane, n)
        await pool.execute("VACUUM ANALYZE jobs")

    async def card(key) -> tuple[list[dict], int]:
        actor = await accounts.authenticate(pool, key)
        async with tenant_transaction(pool, actor) as conn:
            sql, *args = statement("dashboard_queue").bind(own_lanes=not actor.is_admin, cap=100)
            plan = await explain(conn, sql, tuple(args), options="ANALYZE, BUFFERS, COSTS OFF")
            return [dict(r) for r in await conn.fetch(sql, *args)], buffers_touched(plan)

    await backlog(200)
    small = {key: await card(key) for key in (admin.key, alice.key)}
    await backlog(20_000)
    for key, want in ((admin.key, 20_200), (alice.key, 10_100)):
        rows, buffers = await card(key)
        assert [(r["ready"], r["ready_more"], r["waiting"], r["waiting_more"]) for r in rows] == [(100, True, 100, True)]
        assert rows[0]["oldest_ready_seconds"] >= 59
        assert buffers < small[key][1] + 60, (small[key][1], buffers, want)


async def test_a_rare_error_text_is_found_off_the_trigram_index_however_many_errors_are_newer(pool):
    """An admin's search for a text one old job's error holds reads about as much with 20,000
    newer failed jobs as with 200 (migration 0066). Walking the errors newest first, as
    before, it read every one of them."""
    assert await pool.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname = 'jobs_error_text_idx'") == 1
    admin = await f.tenant(pool, "root@a.example", admin=True)
    actor = await accounts.authenticate(pool, admin.key)
    [rare] = await f.jobs(pool, "record", 1)
    await pool.execute("UPDATE jobs SET status = 'failed', last_error = 'ValueError: quota of tenant 7f3a gone' "
                       "WHERE id = $1", rare)

    async def failed_jobs(n: int) -> None:
        """n failed jobs among 5n that ended well, as a queue's failures come"""
        await pool.execute("INSERT INTO jobs (type, status, attempts, finished_at, last_error) "
                           "SELECT 'record', CASE WHEN g % 6 = 0 THEN 'failed' ELSE 'done' END, 1, now(), "
                           "       CASE WHEN g % 6 = 0 THEN 'TimeoutError: upstream took ' || g || ' s' END "
                           "FROM generate_series(1, 6 * $1) g", n)
        await pool.execute("VACUUM ANALYZE jobs")

    async def search(text: str) -> tuple[list, int]:
        """What list_jobs reads for an admin: the matches if few, then the page."""
        page = dict(status=None, type=None, lane=None, batch_id=None, since=None, until=None, error=text,
                    after=None, limit=50)
        async with tenant_transaction(pool, actor) as conn:
            sql, *args = statement("jobs_error_matches").bind(error=text, cap=job_admin.ERROR_MATCHES_BY_ID)
            read = buffers_touched(await explain(conn, sql, tuple(args), options="ANALYZE, BUFFERS, COSTS OFF"))
            ids = await job_admin._few_error_matches(conn, text)
            sql, *args = statement("jobs_list").bind(**page, ids=ids)
            plan = await explain(conn, sql, tuple(args), mode="force_custom_plan", options="ANALYZE, BUFFERS, COSTS OFF")
            rows = await job_admin.list_jobs(conn, job_admin.JobFilter(error=text), None, 50, own_lanes=False)
        return [r["id"] for r in rows], read + buffers_touched(plan)

    await failed_jobs(200)
    found, few = await search("TENANT 7F3A")
    assert found == [rare]
    await failed_jobs(20_000)
    found, many = await search("TENANT 7F3A")
    assert found == [rare] and many < few + 30, (few, many)
    # a common text still walks the errors newest first: a page of 50 off the newest
    common, read = await search("upstream took")
    assert len(common) == 50 and read < 200, read
