"""A dedupe key taken for a window after its job ends (unique_for), and replacing a pending
job's payload and due time (a debounce), through app.pipeline.admission on the real queue:
each ending keeps the key, the window's end lets it go, the stage's default and the
enqueue's own, plain SQL, retries, and fifty enqueues of one key at once on fifty
connections, in each mode."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import asyncpg
import pytest

from app.engine import job_admin
from app.engine.db import connect
from app.engine.jobs import DEFAULT_LANE, NewJob, claim, complete, defer, enqueue, fail, holder_of_key
from app.engine.queries import statement
from app.pipeline import admission
from app.pipeline.stage import Stage
from app.settings import Settings
from tests import factories as f

HOUR = 3600.0
AT_ONCE = 50


async def _noop(job, ctx):
    return None


STAGES = [Stage(type="digest", handler=_noop), Stage(type="sync", handler=_noop, unique_for=HOUR),
          Stage(type="other", handler=_noop)]
SETTINGS = Settings()


async def admit(db, type_: str = "digest", key: str | None = "acct:1", payload: dict | None = None,
                **kw) -> admission.Admitted:
    return await admission.admit(db, STAGES, type_, payload or {}, lane=DEFAULT_LANE, settings=SETTINGS,
                                 dedupe_key=key, **kw)


async def end(pool, job_id, how: str) -> None:
    """End the job (claimed first where a run ends it): done, failed or cancelled."""
    if how == "cancelled":
        assert await job_admin.cancel_job(pool, job_id) is not None
        return
    run = await f.run(pool)
    row = await pool.fetchrow("SELECT type FROM jobs WHERE id = $1", job_id)
    claimed = {j.id for j in await claim(pool, f.lease(row["type"], max_attempts=1), run, 10)}
    assert job_id in claimed
    await defer(pool, run, {other: datetime.now(timezone.utc) for other in claimed - {job_id}})
    if how == "done":
        assert await complete(pool, run, [job_id]) == [job_id]
    else:
        assert (await fail(pool, run, job_id, "boom", 1))["status"] == "failed"


async def ended_ago(pool, job_id, seconds: float) -> None:
    """Time travel: the job ended `seconds` ago."""
    await pool.execute("UPDATE jobs SET finished_at = now() - make_interval(secs => $2) WHERE id = $1",
                       job_id, seconds)


async def jobs_of_key(pool, key: str = "acct:1") -> list:
    return await pool.fetch("SELECT id, status, payload, run_after FROM jobs WHERE dedupe_key = $1 "
                            "ORDER BY created_at", key)


@pytest.mark.parametrize("how", ["done", "failed", "cancelled"])
async def test_a_key_stays_taken_for_its_window_after_any_ending(pool, how):
    first = await admit(pool, unique_for=HOUR)
    assert first.created
    await end(pool, first.job["id"], how)

    inside = await admit(pool, payload={"again": True})
    assert (inside.created, inside.replaced, inside.job["id"]) == (False, False, first.job["id"])
    assert inside.job["status"] not in ("pending", "running")

    await ended_ago(pool, first.job["id"], HOUR + 1)
    after = await admit(pool, payload={"again": True})
    assert after.created and after.job["id"] != first.job["id"]
    assert len(await jobs_of_key(pool)) == 2


async def test_without_a_window_the_key_is_free_when_the_job_ends(pool):
    first = await admit(pool)
    await end(pool, first.job["id"], "done")
    assert (await admit(pool)).created


async def test_the_stage_names_a_default_window_and_an_enqueue_may_say_otherwise(pool):
    first = await admit(pool, "sync")
    await end(pool, first.job["id"], "done")
    assert not (await admit(pool, "sync")).created  # the stage's hour

    await admit(pool, "sync", key="acct:2", unique_for=0)  # no window for this one
    row = await pool.fetchrow("SELECT id FROM jobs WHERE dedupe_key = 'acct:2'")
    await end(pool, row["id"], "done")
    again = await admit(pool, "sync", key="acct:2")
    assert again.created
    await end(pool, again.job["id"], "cancelled")

    short = await admit(pool, "sync", key="acct:3", unique_for=60)
    await end(pool, short.job["id"], "done")
    await ended_ago(pool, short.job["id"], 61)
    assert (await admit(pool, "sync", key="acct:3")).created


async def test_a_window_or_a_replace_without_a_key_and_a_bad_window_are_refused(pool):
    for kw in ({"unique_for": 60.0}, {"replace": True}):
        with pytest.raises(admission.NotAdmitted) as refused:
            await admit(pool, key=None, **kw)
        assert refused.value.code == "dedupe_key_needed" and refused.value.status == 422
    for bad in (-1.0, float("nan"), float("inf"), admission.MAX_UNIQUE_FOR_SECONDS + 1.0):
        with pytest.raises(admission.NotAdmitted) as refused:
            await admit(pool, unique_for=bad)
        assert refused.value.code == "invalid_value"
    # a stage's own default needs no key: jobs without one have no window
    assert (await admit(pool, "sync", key=None)).created
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1
    with pytest.raises(ValueError, match="unique_for"):
        Stage(type="x", handler=_noop, unique_for=-5)


async def test_plain_sql_names_the_window_and_meets_it(pool):
    """The INSERT docs/scheduling.md shows, with its unique_for, is a no-op inside the window."""
    insert = ("INSERT INTO jobs (type, dedupe_key, unique_for) VALUES ('digest', 'acct:1', interval '1 hour') "
              "ON CONFLICT (lane, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING RETURNING id")
    job_id = await pool.fetchval(insert)
    await end(pool, job_id, "done")
    assert await pool.fetchval(insert) is None
    await ended_ago(pool, job_id, HOUR + 1)
    assert await pool.fetchval(insert) is not None
    # a handler's own enqueue (the engine's, no stage asked) takes a window too
    assert await enqueue(pool, NewJob("digest", dedupe_key="acct:9", unique_for=HOUR)) is not None
    assert await pool.fetchval("SELECT unique_for FROM jobs WHERE dedupe_key = 'acct:9'") == timedelta(hours=1)


async def test_a_retry_meets_the_window_of_another_job_with_the_key(pool):
    """B failed; A then ran with the key and a window: retrying B inside A's window is the
    dedupe_key_taken conflict, after it the retry goes through (and A lets the key go)."""
    b = (await admit(pool)).job["id"]
    await end(pool, b, "failed")
    a = (await admit(pool, unique_for=HOUR)).job["id"]
    await end(pool, a, "done")
    with pytest.raises(job_admin.DedupeKeyTaken):
        await job_admin.retry_job(pool, b)
    assert await holder_of_key(pool, "acct:1", DEFAULT_LANE) == a
    await ended_ago(pool, a, HOUR + 1)
    assert (await job_admin.retry_job(pool, b))["status"] == "pending"
    assert await holder_of_key(pool, "acct:1", DEFAULT_LANE) == b
    # the bulk retry skips a key a window holds instead of failing the whole statement
    c = (await admit(pool, key="acct:2")).job["id"]
    await end(pool, c, "failed")
    d = (await admit(pool, key="acct:2", unique_for=HOUR)).job["id"]
    await end(pool, d, "done")
    retried = await pool.fetch(*statement("jobs_retry_failed").bind(type=None, within_seconds=None, cancelled=True))
    assert c not in {r["id"] for r in retried}
    # after the window the bulk retry takes the key, d letting it go
    await ended_ago(pool, d, HOUR + 1)
    retried = await pool.fetch(*statement("jobs_retry_failed").bind(type=None, within_seconds=None, cancelled=True))
    assert c in {r["id"] for r in retried}
    assert await holder_of_key(pool, "acct:2", DEFAULT_LANE) == c


async def test_a_plain_sql_reopen_lets_the_key_go_as_docs_scheduling_says(pool):
    """No trigger lets the key go on an update (none runs before every claim and ending):
    a plain-SQL reopen calls jobs_let_go_of_keys first, and without it meets the index."""
    b = (await admit(pool)).job["id"]
    await end(pool, b, "failed")
    a = (await admit(pool, unique_for=HOUR)).job["id"]
    await end(pool, a, "done")
    await ended_ago(pool, a, HOUR + 1)
    reopen = "UPDATE jobs SET status = 'pending', finished_at = NULL WHERE id = $1"
    with pytest.raises(asyncpg.UniqueViolationError):
        await pool.execute(reopen, b)
    await pool.execute(reopen + " AND (SELECT jobs_let_go_of_keys(ARRAY[$1]::uuid[])) >= 0", b)
    assert await holder_of_key(pool, "acct:1", DEFAULT_LANE) == b


async def test_replace_gives_a_pending_job_the_new_payload_and_due_time(pool):
    soon = datetime.now(timezone.utc) + timedelta(minutes=1)
    later = soon + timedelta(hours=1)
    first = await admit(pool, payload={"n": 1}, run_after=soon)
    counts_before = await f.lane_counts(pool, "digest")
    replaced = await admit(pool, payload={"n": 2}, run_after=later, replace=True)
    assert (replaced.created, replaced.replaced, replaced.job["id"]) == (False, True, first.job["id"])
    assert replaced.job["payload"] == {"n": 2} and replaced.job["run_after"] == later
    assert replaced.job["created_at"] == first.job["created_at"]  # its place in the queue is kept
    assert len(await jobs_of_key(pool)) == 1
    # still one pending job in the lane, and the lane's wake-up time is the new due time
    assert await f.lane_counts(pool, "digest") == counts_before == {DEFAULT_LANE: (1, 0)}
    await pool.execute("SELECT job_lanes_fold()")
    assert await pool.fetchval("SELECT ready_at FROM job_lanes WHERE type = 'digest'") == later
    # without replace, the pending job is the answer and stays as it is
    kept = await admit(pool, payload={"n": 3})
    assert (kept.created, kept.replaced, kept.job["payload"]) == (False, False, {"n": 2})


async def test_replace_leaves_a_running_job_and_another_types_job_alone(pool):
    first = await admit(pool, payload={"n": 1})
    run = await f.run(pool)
    assert len(await claim(pool, f.lease("digest"), run, 1)) == 1
    answer = await admit(pool, payload={"n": 2}, replace=True)
    assert (answer.created, answer.replaced, answer.job["id"]) == (False, False, first.job["id"])
    assert answer.job["status"] == "running" and answer.job["payload"] == {"n": 1}

    other = await admit(pool, "other", key="shared", payload={"n": 1})
    answer = await admit(pool, "digest", key="shared", payload={"n": 2}, replace=True)
    assert (answer.created, answer.replaced, answer.job["id"]) == (False, False, other.job["id"])
    assert answer.job["type"] == "other" and answer.job["payload"] == {"n": 1}

    # inside a window, replace is a duplicate too; once the key is free it enqueues anew
    await complete(pool, run, [first.job["id"]])
    assert (await admit(pool, key="fresh", replace=True)).created


# ---- at once, on fifty connections ----

async def _at_once(dsn, call) -> list:
    """`call(conn, i)` on AT_ONCE connections of their own, started together."""
    conns = await asyncio.gather(*(connect(dsn) for _ in range(AT_ONCE)))
    start = asyncio.Event()

    async def one(conn, i):
        await start.wait()
        return await call(conn, i)
    try:
        tasks = [asyncio.create_task(one(c, i)) for i, c in enumerate(conns)]
        await asyncio.sleep(0)
        start.set()
        return await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(c.close() for c in conns))


async def _lanes_agree(pool, type_: str = "digest") -> None:
    counts = {lane: pending for lane, (pending, _) in (await f.lane_counts(pool, type_)).items() if pending}
    assert counts == await f.true_pending(pool, type_)


@pytest.mark.parametrize("replace", [False, True])
async def test_fifty_enqueues_of_one_key_at_once_leave_one_job(dsn, pool, replace):
    answers = await _at_once(dsn, lambda conn, i: admit(conn, payload={"n": i}, unique_for=HOUR,
                                                        replace=replace))
    rows = await jobs_of_key(pool)
    assert len(rows) == 1
    assert sum(a.created for a in answers) == 1 and {a.job["id"] for a in answers} == {rows[0]["id"]}
    if replace:  # the last to replace is what it carries
        assert rows[0]["payload"]["n"] in range(AT_ONCE)
    await _lanes_agree(pool)


@pytest.mark.parametrize("replace", [False, True])
async def test_fifty_enqueues_of_one_key_at_once_after_its_window_leave_one_new_job(dsn, pool, replace):
    old = (await admit(pool, unique_for=60)).job["id"]
    await end(pool, old, "done")
    await ended_ago(pool, old, 61)
    answers = await _at_once(dsn, lambda conn, i: admit(conn, payload={"n": i}, replace=replace))
    rows = await jobs_of_key(pool)
    assert len(rows) == 2 and rows[0]["id"] == old and rows[1]["status"] == "pending"
    assert sum(a.created for a in answers) == 1 and {a.job["id"] for a in answers} == {rows[1]["id"]}
    await _lanes_agree(pool)


@pytest.mark.parametrize("replace", [False, True])
async def test_fifty_enqueues_of_one_key_at_once_inside_its_window_make_none(dsn, pool, replace):
    old = (await admit(pool, unique_for=HOUR)).job["id"]
    await end(pool, old, "done")
    answers = await _at_once(dsn, lambda conn, i: admit(conn, payload={"n": i}, replace=replace))
    assert [r["id"] for r in await jobs_of_key(pool)] == [old]
    assert {(a.created, a.replaced, a.job["id"]) for a in answers} == {(False, False, old)}


async def test_fifty_replacements_of_a_pending_job_at_once_keep_one_pending_job(dsn, pool):
    first = (await admit(pool, payload={"n": -1})).job["id"]
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    answers = await _at_once(dsn, lambda conn, i: admit(conn, payload={"n": i}, replace=True,
                                                        run_after=later + timedelta(seconds=i)))
    rows = await jobs_of_key(pool)
    assert [r["id"] for r in rows] == [first] and rows[0]["status"] == "pending"
    assert all(a.replaced and a.job["id"] == first for a in answers)
    n = rows[0]["payload"]["n"]
    assert rows[0]["run_after"] == later + timedelta(seconds=n)  # payload and due time of one enqueue
    await _lanes_agree(pool)
    assert await f.lane_counts(pool, "digest") == {DEFAULT_LANE: (1, 0)}


async def test_the_bulk_retry_leaves_a_key_a_waiting_job_holds(pool):
    """A waiting job holds its key as an open one does: the bulk retry skips the failed job
    with that key instead of failing the whole statement on the unique index."""
    failed = await pool.fetchval("INSERT INTO jobs (type, dedupe_key, status, finished_at) "
                                 "VALUES ('digest', 'acct:1', 'failed', now()) RETURNING id")
    await pool.execute("INSERT INTO jobs (type, dedupe_key, status) VALUES ('digest', 'acct:1', 'waiting')")
    retried = await pool.fetch(*statement("jobs_retry_failed").bind(type=None, within_seconds=None, cancelled=False))
    assert failed not in {r["id"] for r in retried}
