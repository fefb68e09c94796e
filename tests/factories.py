"""Small builders for the queue's test data, written with plain SQL against the real
schema: the one way the core tests make a user, an API key, a tenant with its lane, jobs
and runs. Nothing here knows a plug-in (the example's builders, plans and campaigns, are
in tests/outreach/factories.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from app.engine import accounts
from app.engine import jobs as q
from app.engine.jobs import Lease, NewJob
from app.engine.runs import start_run
from app.engine.tenancy import Actor, acting

TEST_ACTOR = Actor("system", "tests")


async def as_system(db, sql: str, *args):
    """Run one audited write (users, keys, lanes) as the actor `system`."""
    async with acting(db, TEST_ACTOR) as conn:
        return await conn.fetchval(sql, *args)


async def user(db, email: str | None = None) -> uuid.UUID:
    """A user (found when the e-mail is known already)."""
    async with acting(db, TEST_ACTOR) as conn:
        return await accounts.add_user(conn, email or f"{uuid.uuid4().hex[:8]}@example.com")


async def api_key(db, email: str, admin: bool = False) -> str:
    """A user (created when new) with a fresh API key; returns the key."""
    async with acting(db, TEST_ACTOR) as conn:
        await accounts.add_user(conn, email)
        return (await accounts.create_key(conn, email, admin)).key


async def lane(db, owner: uuid.UUID | None = None, priority: int = 0, paused: bool = False) -> uuid.UUID:
    """A new lane, owned by `owner` (a tenant sees and enqueues into its own lanes)."""
    return await as_system(db, "INSERT INTO lanes (id, owner_id, priority, paused) "
                               "VALUES (gen_random_uuid(), $1, $2, $3) RETURNING id", owner, priority, paused)


@dataclass
class Tenant:
    email: str
    key: str
    user_id: uuid.UUID
    lane: uuid.UUID

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


async def tenant(db, email: str, admin: bool = False) -> Tenant:
    """A user with an API key and a lane of their own."""
    key = await api_key(db, email, admin)
    user_id = await user(db, email)
    return Tenant(email, key, user_id, await lane(db, user_id))


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
    # the rows as the journal's lines count them (folded once a second, docs/queue.md)
    rows = await db.fetch("SELECT lane, pending, served FROM job_lane_counts WHERE type = $1", type_)
    return {r["lane"]: (r["pending"], r["served"]) for r in rows}


async def true_pending(db, type_: str) -> dict:
    rows = await db.fetch("SELECT lane, count(*) AS n FROM jobs WHERE type = $1 AND status = 'pending' "
                          "GROUP BY lane", type_)
    return {r["lane"]: r["n"] for r in rows}
