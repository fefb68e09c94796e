"""GET /trends: per stage, jobs done and failed and their wait from due to claimed, in
buckets over the last hour or day, and runs by stop reason. A tenant sees its own jobs and
no runs; an admin everything. A day over a large table reads a range of an index, never
the whole jobs table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from app.engine import accounts
from app.engine.queries import statement
from app.engine.tenancy import tenant_transaction
from bench.explain import buffers_touched, explain, rows_filtered_away
from tests import factories as f


async def _ended(pool, lane, type_, status, minutes_ago: float, waited_seconds: float, n: int = 1) -> None:
    """n jobs of `lane` that ended `minutes_ago`, claimed `waited_seconds` after they were due."""
    await pool.execute(
        "INSERT INTO jobs (type, lane, status, attempts, finished_at, locked_at, run_after, last_error) "
        "SELECT $1, $2, $3, 1, now() - make_interval(secs => $4), "
        "       now() - make_interval(secs => $4 + 1), now() - make_interval(secs => $4 + 1 + $5), "
        "       CASE WHEN $3 = 'failed' THEN 'boom' END "
        "FROM generate_series(1, $6)", type_, lane, status, minutes_ago * 60, waited_seconds, n)


def _bucket(answer: dict, type_: str, minutes_ago: float) -> dict:
    stage = next(s for s in answer["stages"] if s["type"] == type_)
    at = datetime.now(timezone.utc) - timedelta(minutes=minutes_ago)
    for point in reversed(stage["points"]):
        if datetime.fromisoformat(point["at"]) <= at:
            return point
    raise AssertionError(f"no bucket holds {at}")


async def test_trends_count_per_stage_and_bucket_and_keep_tenants_apart(make_client, pool):
    a = await f.tenant(pool, "a@example.com")
    b = await f.tenant(pool, "b@example.com")
    await _ended(pool, a.lane, "record", "done", 10.5, 2.0, n=3)
    await _ended(pool, a.lane, "record", "done", 10.5, 40.0)
    await _ended(pool, a.lane, "record", "failed", 10.5, 4.0)
    await pool.execute("UPDATE jobs SET status = 'cancelled', locked_at = NULL "
                       "WHERE id = (SELECT id FROM jobs WHERE status = 'done' LIMIT 1)")  # a cancel: not a failure
    await _ended(pool, a.lane, "export", "done", 30.5, 1.0)
    await _ended(pool, a.lane, "record", "done", 61 * 60, 1.0)  # two days ago: outside both windows
    await _ended(pool, b.lane, "record", "done", 10.5, 1.0, n=50)
    await pool.execute("INSERT INTO runs (trigger, started_at, finished_at, stop_reason) VALUES "
                       "('cron', now() - interval '5 minutes', now() - interval '4 minutes', 'no_work'), "
                       "('cron', now() - interval '5 minutes', now() - interval '4 minutes', 'time_budget'), "
                       "('cron', now() - interval '3 hours', now() - interval '3 hours', 'error')")
    client = await make_client()

    admin = (await client.get("/trends")).json()
    assert admin["window"] == "hour" and admin["bucketSeconds"] == 60
    assert {s["type"] for s in admin["stages"]} == {"record", "export"}
    assert all(len(s["points"]) == 60 for s in admin["stages"])
    assert _bucket(admin, "record", 10.5)["done"] == 2 + 1 + 50
    assert len(admin["runs"]) == 60
    assert sum(p["counts"]["no_work"] + p["counts"]["time_budget"] for p in admin["runs"]) == 2

    mine = (await client.get("/trends", headers=a.headers)).json()
    point = _bucket(mine, "record", 10.5)
    assert (point["done"], point["failed"]) == (3, 1)  # b's 50 are not a's; the cancel is not a failure
    # the waits of the four claimed jobs there: 2, 2, 40 and 4 seconds
    assert point["waitP50Seconds"] == pytest.approx(3.0, abs=0.01)
    assert point["waitP95Seconds"] == pytest.approx(40 - 0.15 * 36, abs=0.01)
    assert _bucket(mine, "export", 30.5)["done"] == 1
    record = next(s for s in mine["stages"] if s["type"] == "record")
    assert (record["done"], record["failed"]) == (3, 1)
    assert all(sum(p["counts"].values()) == 0 for p in mine["runs"])  # runs are the operator's

    day = (await client.get("/trends?window=day", headers=a.headers)).json()
    assert day["bucketSeconds"] == 1800 and len(day["stages"][0]["points"]) == 48
    assert {s["type"]: s["done"] for s in day["stages"]} == {"record": 3, "export": 1}
    admin_day = (await client.get("/trends?window=day")).json()
    assert sum(p["counts"]["error"] for p in admin_day["runs"]) == 1

    for query, code in (("?window=week", "invalid_parameter"), ("?window=hour&window=day", "invalid_parameter"),
                        ("?bucket=1", "unknown_parameter")):
        response = await client.get(f"/trends{query}")
        assert response.status_code == 400, query
        assert response.json()["error"]["code"] == code


async def test_a_days_trends_over_200k_jobs_read_an_index_range_not_the_table(pool):
    a = await f.tenant(pool, "a@example.com")
    b = await f.tenant(pool, "b@example.com")
    # 200,000 of b's jobs that ended last week, and a few hundred today, a's and b's
    await pool.execute("INSERT INTO jobs (type, lane, status, attempts, finished_at, locked_at, run_after) "
                       "SELECT 'record', $1, 'done', 1, now() - interval '5 days' - make_interval(secs => g), "
                       "now() - interval '5 days', now() - interval '5 days' FROM generate_series(1, 200000) g",
                       b.lane)
    await _ended(pool, b.lane, "record", "done", 100, 1.0, n=300)
    await _ended(pool, a.lane, "record", "done", 100, 1.0, n=20)
    await pool.execute("ANALYZE jobs")
    since = datetime.now(timezone.utc) - timedelta(days=1)
    table_pages = await pool.fetchval("SELECT relpages FROM pg_class WHERE oid = 'jobs'::regclass")
    async with pool.acquire() as conn:
        sql, *args = statement("trends_jobs").bind(since=since, bucket_seconds=1800, own_lanes=False)
        plan = await explain(conn, sql, tuple(args), options="ANALYZE, BUFFERS, COSTS OFF")
    assert "jobs_finished_idx" in plan and "Seq Scan on jobs" not in plan, plan
    assert buffers_touched(plan) < table_pages / 10, (table_pages, plan)  # the day's 320, not the week's 200,000

    actor = await accounts.authenticate(pool, a.key)
    async with tenant_transaction(pool, actor) as conn:
        sql, *args = statement("trends_jobs").bind(since=since, bucket_seconds=1800, own_lanes=True)
        plan = await explain(conn, sql, tuple(args), options="ANALYZE, BUFFERS, COSTS OFF")
        rows = await conn.fetch(sql, *args)
    assert "jobs_lane_list_idx" in plan and "Seq Scan on jobs" not in plan, plan
    assert all(n < 100 for n in rows_filtered_away(plan)), plan  # none of b's 200,300 read
    assert buffers_touched(plan) < 100, plan
    assert sum(r["done"] for r in rows) == 20
