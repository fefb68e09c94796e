"""A database made before the split (one chain for the queue and the outreach example, kept
in sql/migrations/legacy/) moves forward with its data: the rest of the legacy chain, then
the bridge, and it is the same schema as a fresh database migrated with the split chains."""

from __future__ import annotations

import difflib
import subprocess
import uuid

from app.devdb import _bin_dir
from app.engine import jobs as q
from app.engine.db import connect
from app.engine.migrate import LEGACY_DIR, SQUASHED, _files, chain, migrate, pending_migrations
from app.engine.queries import statement
from app.outreach.plans import DEFAULT_PLAN, OWNERLESS_PLAN, PLANS
from app.outreach.plugin import PLUGIN
from tests.outreach import factories as f

BEFORE_LANES = "0009"  # the old database was made by the legacy migrations below this one
ZERO = uuid.UUID(int=0)


def schema_of(url: str) -> list[str]:
    """The database's schema as pg_dump writes it (tables, columns, constraints, indexes,
    triggers, functions, views, policies, grants), without comments."""
    out = subprocess.run([str(_bin_dir() / "pg_dump"), "--schema-only", "--no-owner", url],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines()
            if line and not line.startswith("--") and not line.startswith("\\")]


async def seed_old(db) -> dict:
    """Users on each plan, campaigns, a backlog from the old engine (jobs.campaign_id), a
    batch: the legacy schema at BEFORE_LANES."""
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
    # two jobs a lane, the free lane's the oldest; the standard lane's first job is
    # deferred for an hour; and a done job in each
    for n, (key, campaign) in enumerate(lanes.items()):
        await db.execute(
            "INSERT INTO jobs (type, campaign_id, created_at, run_after) "
            "SELECT 't', $1, now() - make_interval(mins => 100 - $2) + g * interval '1 ms', "
            "       CASE WHEN $3 AND g = 1 THEN now() + interval '1 hour' ELSE now() END "
            "FROM generate_series(1, 2) g", campaign, n, key == "standard")
        await db.execute("INSERT INTO jobs (type, campaign_id, status, finished_at) VALUES ('t', $1, 'done', now())",
                         campaign)
    batch = await db.fetchval("INSERT INTO batches (campaign_id) VALUES ($1) RETURNING id", lanes["free"])
    await db.execute("INSERT INTO jobs (type, campaign_id, batch_id) VALUES ('b', $1, $2)", lanes["free"], batch)
    return lanes


async def test_a_database_made_before_the_split_comes_across_with_its_data(new_database):
    old_url, fresh_url = await new_database(), await new_database()
    db = await connect(old_url)
    try:
        async with db.transaction():
            await db.execute(*statement("migrations_prepare").bind())
            for version, sql in _files(LEGACY_DIR):
                if version < BEFORE_LANES:
                    await db.execute(sql)
                    await db.execute(*statement("migrations_record").bind(version=version))
        lanes = await seed_old(db)
        jobs_before = {r["id"]: r["campaign_id"] or ZERO for r in await db.fetch("SELECT id, campaign_id FROM jobs")}

        # the rest of the legacy chain, the bridge (recorded as the squashed files it
        # stands for), then whatever came after the squash
        legacy_rest = [v for v, _ in _files(LEGACY_DIR) if v >= BEFORE_LANES]
        later = [v for v, _ in chain([PLUGIN]) if v not in SQUASHED]
        expected = legacy_rest + list(SQUASHED) + later
        assert await pending_migrations(db, [PLUGIN]) == expected
        assert await migrate(db, [PLUGIN]) == expected
        assert await migrate(db, [PLUGIN]) == []

        fresh = await connect(fresh_url)
        try:
            assert await migrate(fresh, [PLUGIN]) == [v for v, _ in chain([PLUGIN])]
        finally:
            await fresh.close()
        # pg_trgm (migration 0066) is made where the queue was when 0066 ran: public, for a
        # queue that moved into its schema afterwards; an extension is not moved with it
        old_schema = [line.replace("pg_trgm WITH SCHEMA public", "pg_trgm WITH SCHEMA skiplock")
                      .replace("public.gin_trgm_ops", "skiplock.gin_trgm_ops") for line in schema_of(old_url)]
        new_schema = schema_of(fresh_url)
        assert old_schema == new_schema, "\n".join(difflib.unified_diff(
            old_schema, new_schema, "legacy + bridge", "fresh", lineterm="", n=1))

        # every job kept its lane; the counters match a recount
        assert {r["id"]: r["lane"] for r in await db.fetch("SELECT id, lane FROM jobs")} == jobs_before
        assert await db.fetchval("SELECT lane FROM batches") == lanes["free"]
        counted = await db.fetch(
            "SELECT l.type, l.lane, l.pending, count(j.id) AS n, l.head_at = min(j.created_at) AS head_ok, "
            "       l.ready_at = min(j.run_after) AS ready_ok "
            "FROM job_lanes l LEFT JOIN jobs j ON j.lane = l.lane AND j.type = l.type AND j.status = 'pending' "
            "GROUP BY l.type, l.lane, l.epoch")
        assert len(counted) == 8 and all(r["pending"] == r["n"] and r["head_ok"] and r["ready_ok"]
                                         for r in counted)
        # every lane ranked from its campaign and its owner's plan
        ranks = {r["id"]: (r["priority"], r["paused"]) for r in await db.fetch(
            "SELECT l.id, j.priority, j.paused FROM lanes l JOIN job_lanes j ON j.lane = l.id AND j.type = 't'")}
        assert ranks == {
            lanes["free"]: (PLANS["free"].priority, False),
            lanes["standard"]: (PLANS["standard"].priority, False),
            lanes["pro"]: (PLANS["pro"].priority, False),
            lanes["none"]: (PLANS[DEFAULT_PLAN].priority, False),
            lanes["paused"]: (PLANS["pro"].priority, True),
            lanes["nobody's"]: (PLANS[OWNERLESS_PLAN].priority, False),
            ZERO: (PLANS[OWNERLESS_PLAN].priority, False),
        }
        # the claim in order: pro, then the standard-priority lanes (standard's one ready
        # job, then nobody's campaign's and the ownerless lane's, oldest first), then the
        # free ones; the paused lane waits
        run_id = await f.run(db)
        order = [j.lane for _ in range(10) for j in await q.claim(db, f.lease(), run_id, 1)]
        assert order[:2] == [lanes["pro"]] * 2
        assert order[2:7] == [lanes["standard"], lanes["nobody's"], ZERO, lanes["nobody's"], ZERO]
        assert order[7:] == [lanes["free"], lanes["none"], lanes["free"]]

        # deleting a campaign deletes its lane, and with it the lane's jobs, batches and counters
        await db.execute("DELETE FROM campaigns WHERE id = $1", lanes["free"])
        for table, column in (("lanes", "id"), ("jobs", "lane"), ("batches", "lane"), ("job_lanes", "lane"),
                              ("job_lane_hours", "lane")):
            assert await db.fetchval(f"SELECT count(*) FROM {table} WHERE {column} = $1", lanes["free"]) == 0, table
        assert await db.fetchval("SELECT count(*) FROM jobs WHERE lane = $1", lanes["pro"]) == 3
    finally:
        await db.close()

