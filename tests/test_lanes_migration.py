"""A database made before lanes moves forward with its data: every lane ranked from its
campaign and owner's plan, the counters told where each queue starts, the claim in order."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.migrate import migrate
from app.engine.queries import migrations, query
from app.outreach.plans import DEFAULT_PLAN, OWNERLESS_PLAN, PLANS
from tests import factories as f

BEFORE_LANES = "0009"  # migrations below this version made the database


@pytest.fixture
async def old_db(pg_server):
    """A database at migration 0008, without the lanes."""
    admin = await asyncpg.connect(pg_server)
    name = f"skiplock_lanes_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    conn = await connect(f"{pg_server.rpartition('/')[0]}/{name}")
    try:
        async with conn.transaction():
            await conn.execute(query("migrations_prepare"))
            for version, sql in migrations():
                if version < BEFORE_LANES:
                    await conn.execute(sql)
                    await conn.execute(query("migrations_record"), version)
        yield conn
    finally:
        await conn.close()
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def test_an_old_database_moves_to_lanes_with_its_data(old_db):
    db = old_db
    assert await db.fetchval("SELECT to_regclass('lanes')") is None
    await db.execute("SELECT set_config('app.current_actor_kind', 'system', false)")
    users = {plan: await db.fetchval("INSERT INTO users (email) VALUES ($1) RETURNING id", f"{plan}@example.com")
             for plan in (*PLANS, "none")}
    for plan in PLANS:
        await db.execute("INSERT INTO subscriptions (user_id, plan) VALUES ($1, $2)", users[plan], plan)
    lanes = {key: await db.fetchval("INSERT INTO campaigns (user_id) VALUES ($1) RETURNING id", owner)
             for key, owner in users.items()}
    lanes["paused"] = await db.fetchval(
        "INSERT INTO campaigns (user_id, status) VALUES ($1, 'paused') RETURNING id", users["pro"])
    lanes["nobody's"] = await db.fetchval("INSERT INTO campaigns (user_id) VALUES (NULL) RETURNING id")
    lanes["ownerless"] = None
    # a backlog from the old engine: two jobs a lane, the free lane's the oldest; the
    # standard lane's first job is deferred for an hour
    for n, (key, campaign) in enumerate(lanes.items()):
        await db.execute(
            "INSERT INTO jobs (type, campaign_id, created_at, run_after) "
            "SELECT 't', $1, now() - make_interval(mins => 100 - $2) + g * interval '1 ms', "
            "       CASE WHEN $3 AND g = 1 THEN now() + interval '1 hour' ELSE now() END "
            "FROM generate_series(1, 2) g", campaign, n, key == "standard")

    assert await migrate(db) != []

    ranks = {r["id"]: (r["priority"], r["paused"]) for r in await db.fetch(
        "SELECT l.id, j.priority, j.paused FROM lanes l JOIN job_lanes j ON j.lane = l.id")}
    zero = uuid.UUID(int=0)
    assert ranks == {
        lanes["free"]: (PLANS["free"].priority, False),
        lanes["standard"]: (PLANS["standard"].priority, False),
        lanes["pro"]: (PLANS["pro"].priority, False),
        lanes["none"]: (PLANS[DEFAULT_PLAN].priority, False),
        lanes["paused"]: (PLANS["pro"].priority, True),
        lanes["nobody's"]: (PLANS[OWNERLESS_PLAN].priority, False),
        zero: (PLANS[OWNERLESS_PLAN].priority, False),
    }
    heads = await db.fetch(
        "SELECT l.lane, l.head_at = min(j.created_at) AS head_ok, l.ready_at = min(j.run_after) AS ready_ok "
        "FROM job_lanes l JOIN jobs j ON j.lane = l.lane AND j.type = l.type AND j.status = 'pending' "
        "GROUP BY l.lane, l.head_at, l.ready_at")
    assert len(heads) == 7 and all(r["head_ok"] and r["ready_ok"] for r in heads)

    run_id = await f.run(db)
    order = [j.campaign_id for _ in range(10) for j in await q.claim(db, f.lease(), run_id, 1)]
    # pro, then the standard-priority lanes (standard's one ready job, then nobody's
    # campaign's and the ownerless lane's, oldest first), then the free ones; the paused
    # lane waits
    assert order[:2] == [lanes["pro"]] * 2
    assert order[2:7] == [lanes["standard"], lanes["nobody's"], None, lanes["nobody's"], None]
    assert order[7:] == [lanes["free"], lanes["none"], lanes["free"]]
