"""Job ids grow with creation time (UUID version 7), which lets the jobs list page on the
primary key alone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from app.engine import job_admin
from app.engine import jobs as q
from app.engine.jobs import NewJob


def _millis(job_id) -> datetime:
    return datetime.fromtimestamp(int.from_bytes(job_id.bytes[:6], "big") / 1000, timezone.utc)


async def test_ids_are_version_7_and_carry_the_creation_time(pool):
    before = await pool.fetchval("SELECT clock_timestamp()")
    job_id = await q.enqueue(pool, NewJob(type="t"))
    after = await pool.fetchval("SELECT clock_timestamp()")
    created = await pool.fetchval("SELECT created_at FROM jobs WHERE id = $1", job_id)
    assert job_id.version == 7 and job_id.variant == "specified in RFC 4122"
    ms = timedelta(milliseconds=1)
    assert before - ms <= _millis(job_id) <= after
    assert abs(_millis(job_id) - created) < timedelta(seconds=1)


async def test_ids_ascend_in_the_order_jobs_are_made(pool):
    one_by_one = [await q.enqueue(pool, NewJob(type="t")) for _ in range(50)]
    assert one_by_one == sorted(one_by_one)
    # one statement: the default is computed row by row, to the microsecond
    together = await q.enqueue_many(pool, [NewJob(type="t", payload={"i": i}) for i in range(500)])
    assert together == sorted(together)
    assert together[0] > one_by_one[-1]
    # and the list, newest first, is that order backwards, off the primary key
    listed = [r["id"] for r in await job_admin.list_jobs(pool, job_admin.JobFilter(), None, 1000)]
    assert listed == list(reversed(one_by_one + together))


async def test_an_id_given_in_a_plain_insert_is_kept(pool):
    given = await pool.fetchval("SELECT gen_random_uuid()")
    await pool.execute("INSERT INTO jobs (id, type) VALUES ($1, 't')", given)
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE id = $1", given) == 1
