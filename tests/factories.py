"""Small builders for test data, written with plain SQL against the real schema."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from app.engine import accounts
from app.engine import jobs as q
from app.engine.jobs import Lease, NewJob
from app.engine.runs import start_run
from app.engine.tenancy import Actor, acting
from app.outreach.store import set_plan

TEST_ACTOR = Actor("system", "tests")


async def as_system(db, sql: str, *args):
    """Run one audited write (users, keys; plans, campaigns) as the actor `system`."""
    async with acting(db, TEST_ACTOR) as conn:
        return await conn.fetchval(sql, *args)


async def user(db, plan: str | None = "free", email: str | None = None) -> uuid.UUID:
    uid = await as_system(db, "INSERT INTO users (email) VALUES ($1) RETURNING id",
                          email or f"{uuid.uuid4().hex[:8]}@example.com")
    if plan:
        await as_system(db, "INSERT INTO subscriptions (user_id, plan) VALUES ($1, $2)", uid, plan)
    return uid


async def campaign(db, owner: uuid.UUID | None = None, status: str = "active", name: str = "") -> uuid.UUID:
    return await as_system(
        db, "INSERT INTO campaigns (user_id, status, name) VALUES ($1, $2, $3) RETURNING id",
        owner, status, name)


async def api_key(db, email: str, admin: bool = False, plan: str = "free") -> str:
    """A user (created when new) with a fresh API key; returns the key."""
    async with acting(db, TEST_ACTOR) as conn:
        user_id = await accounts.add_user(conn, email)
        if plan is not None:  # the example's plans: only where its tables are
            await set_plan(conn, user_id, plan)
        return (await accounts.create_key(conn, email, admin)).key


async def jobs(db, type_: str, n: int, lane=None, start: datetime | None = None, **kw) -> list[uuid.UUID]:
    """n jobs in `lane` (default: the all-zero lane) created one millisecond apart (oldest
    first), from `start` (default an hour ago)."""
    start = start or datetime.now(timezone.utc) - timedelta(hours=1)
    ids = await q.enqueue_many(db, [NewJob(type=type_, lane=lane, payload={"i": i}, **kw)
                                    for i in range(n)])
    for i, job_id in enumerate(ids):
        await db.execute("UPDATE jobs SET created_at = $2 WHERE id = $1",
                         job_id, start + timedelta(milliseconds=i))
    return ids


async def run(db, trigger: str = "test") -> uuid.UUID:
    return await start_run(db, trigger)


def lease(type_: str = "t", seconds: float = 900, max_attempts: int = 3) -> Lease:
    return Lease(type_, seconds, max_attempts)


async def job_row(db, job_id):
    return await db.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)


async def age_lock(db, job_id, seconds: float) -> None:
    """Pretend the job was locked `seconds` ago (time travel by timestamp, not by sleeping)."""
    await db.execute("UPDATE jobs SET locked_at = now() - make_interval(secs => $2) WHERE id = $1",
                     job_id, float(seconds))


async def lane_counts(db, type_: str) -> dict:
    rows = await db.fetch("SELECT lane, pending, served FROM job_lanes WHERE type = $1", type_)
    return {r["lane"]: (r["pending"], r["served"]) for r in rows}


async def true_pending(db, type_: str) -> dict:
    rows = await db.fetch("SELECT lane, count(*) AS n FROM jobs WHERE type = $1 AND status = 'pending' "
                          "GROUP BY lane", type_)
    return {r["lane"]: r["n"] for r in rows}
