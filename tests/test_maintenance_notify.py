"""Recurring maintenance (once per period), pruning, and signed webhook notifications."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import uuid
from urllib.parse import urlsplit

from app.engine import batches as b
from app.engine import jobs as q
from app.engine.batches import BatchRequest
from app.engine.jobs import Job
from app.pipeline import notifications
from app.pipeline.loop import Pipeline
from app.pipeline.maintenance import RECURRING, schedule_due
from app.pipeline.stage import Stage
from app.settings import load_settings
from tests import factories as f
from tests.credentials import WEBHOOK_SECRET as SECRET
from tests.receiver import Receiver


def settings(*hooks: Receiver, **kw):
    """Test settings; webhook deliveries may reach exactly `hooks` (the egress guard
    refuses loopback to anything not in FETCH_ALLOW_PRIVATE)."""
    allow = ",".join(urlsplit(hook.url).netloc for hook in hooks)
    return load_settings(database_url="postgresql://unused", fetch_allow_private=allow, **kw)


async def test_two_schedulers_at_once_enqueue_each_period_once(pool):
    results = await asyncio.gather(*(schedule_due(pool) for _ in range(6)))
    scheduled = [task for r in results for task in r]
    assert sorted(scheduled) == sorted(r.task for r in RECURRING)
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'maintenance'") == len(RECURRING)
    # the same period again (the jobs have run meanwhile): still nothing new
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now()")
    assert await schedule_due(pool) == []
    # next period: due again
    await pool.execute("UPDATE recurring_ticks SET period = period - interval '1 day'")
    assert sorted(await schedule_due(pool)) == sorted(r.task for r in RECURRING)


async def test_without_the_scheduler_flag_nothing_is_ticked(pool):
    await Pipeline(pool, [], settings(run_scheduler=False)).run("cron")
    assert await pool.fetchval("SELECT count(*) FROM recurring_ticks") == 0


async def test_prune_removes_old_finished_jobs_only(pool):
    old = await f.jobs(pool, "t", 1500)
    await pool.execute("UPDATE jobs SET status = 'done', attempts = 1, finished_at = now() - interval '10 days'")
    fresh = await f.jobs(pool, "t", 3)
    await pool.execute("UPDATE jobs SET status = 'failed', attempts = 1, finished_at = now() "
                       "WHERE id = $1", fresh[0])
    result = await Pipeline(pool, [], settings(job_retention_hours=24)).run("cron")
    assert result.summary["counts"]["pruned"] == len(old)
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 't'") == 3


def verify(received, secret=SECRET):
    expected = hmac.new(secret.encode(), received.headers["x-skiplock-timestamp"].encode() + b"." +
                        received.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(received.headers["x-skiplock-signature"], "sha256=" + expected)


async def test_finished_batch_is_delivered_signed_and_retried_after_a_500(pool):
    owner = await f.user(pool)
    c = await f.lane(pool, owner)

    async def ok(job, ctx):
        pass

    with Receiver(statuses=[500, 200]) as hook:
        s = settings(hook, webhook_url=hook.url, webhook_secret=SECRET)
        out = await b.create_batch(pool, c, [BatchRequest("a"), BatchRequest("b")])
        pipeline = Pipeline(pool, [Stage(type="a", handler=ok), Stage(type="b", handler=ok)], s)
        await pipeline.run("cron")  # runs a and b
        await pipeline.run("cron")  # reconciles: completed, notify enqueued, first delivery gets 500
        notify = await pool.fetchrow("SELECT * FROM jobs WHERE type = 'notify'")
        assert notify["status"] == "pending" and notify["attempts"] == 1
        assert "HTTP 500" in notify["last_error"]
        await pool.execute("UPDATE jobs SET run_after = now() WHERE type = 'notify'")  # backoff elapsed
        await pipeline.run("cron")
    assert len(hook.received) == 2
    final = hook.received[-1]
    assert verify(final) and not verify(final, "wrong")
    event = json.loads(final.body)
    assert event["event"] == "batch.finished"
    assert event["data"] == {"batchId": str(out.batch_id), "lane": str(c), "status": "completed"}
    assert (await pool.fetchrow("SELECT status FROM jobs WHERE type = 'notify'"))["status"] == "done"


async def test_a_job_failing_for_good_notifies_the_owners_own_url(pool):
    async def broken(job, ctx):
        raise RuntimeError("no luck")

    with Receiver() as account_hook, Receiver() as global_hook:
        owner = await f.user(pool)
        await f.as_system(pool, "UPDATE users SET webhook_url = $2 WHERE id = $1", owner, account_hook.url)
        c = await f.lane(pool, owner)
        [job_id] = await f.jobs(pool, "t", 1, lane=c)
        s = settings(account_hook, global_hook, webhook_url=global_hook.url, webhook_secret=SECRET)
        await Pipeline(pool, [Stage(type="t", handler=broken, max_attempts=1)], s).run("cron")
    assert global_hook.received == []
    [got] = account_hook.received
    event = json.loads(got.body)
    assert event["event"] == "job.failed" and event["data"]["jobId"] == str(job_id)
    assert event["data"]["error"] == "RuntimeError: no luck" and verify(got)


async def test_notifications_are_dormant_without_a_secret(pool):
    async def broken(job, ctx):
        raise RuntimeError("no luck")

    with Receiver() as hook:
        await f.jobs(pool, "t", 1)
        await Pipeline(pool, [Stage(type="t", handler=broken, max_attempts=1)],
                       settings(hook, webhook_url=hook.url)).run("cron")
    assert hook.received == []
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE type = 'notify'") == 0


async def test_a_receiver_asking_to_wait_defers_without_burning_attempts(pool):
    with Receiver(statuses=[429], extra_headers={"Retry-After": "120"}) as hook:
        s = settings(hook, webhook_url=hook.url, webhook_secret=SECRET)
        owner = await f.user(pool)
        c = await f.lane(pool, owner)
        await b.create_batch(pool, c, [BatchRequest("a")])
        await pool.execute("UPDATE jobs SET status = 'done', attempts = 1, finished_at = now()")
        await Pipeline(pool, [], s).run("cron")
    row = await pool.fetchrow("SELECT status, attempts, run_after - now() AS wait FROM jobs WHERE type = 'notify'")
    assert row["status"] == "pending" and row["attempts"] == 0
    assert 100 < row["wait"].total_seconds() <= 120


async def test_a_receiver_asking_to_wait_for_ever_waits_a_day(pool):
    """A Retry-After of 10^20 seconds overflowed the date: every attempt failed on it."""
    with Receiver(statuses=[503], extra_headers={"Retry-After": "9" * 20}) as hook:
        s = settings(hook, webhook_url=hook.url, webhook_secret=SECRET)
        c = await f.lane(pool, await f.user(pool))
        await b.create_batch(pool, c, [BatchRequest("a")])
        await pool.execute("UPDATE jobs SET status = 'done', attempts = 1, finished_at = now()")
        await Pipeline(pool, [], s).run("cron")
    row = await pool.fetchrow("SELECT status, attempts, run_after - now() AS wait, last_error "
                              "FROM jobs WHERE type = 'notify'")
    assert (row["status"], row["attempts"]) == ("pending", 0), row["last_error"]
    assert 86_000 < row["wait"].total_seconds() <= 86_400


async def test_a_receiver_whose_answer_never_ends_is_not_read(pool):
    """Only the status counts: a receiver streaming an endless body was read into memory
    (gigabytes) until the stage's timeout, and the delivery failed."""
    with Receiver(endless_body=True) as hook:
        s = settings(hook, webhook_url=hook.url, webhook_secret=SECRET)
        c = await f.lane(pool, await f.user(pool))
        await b.create_batch(pool, c, [BatchRequest("a")])
        await pool.execute("UPDATE jobs SET status = 'done', attempts = 1, finished_at = now()")
        async with asyncio.timeout(8):  # far less than the stage's 30 s timeout
            await Pipeline(pool, [], s).run("cron")
    assert len(hook.received) == 1
    row = await pool.fetchrow("SELECT status, last_error FROM jobs WHERE type = 'notify'")
    assert row["status"] == "done", row["last_error"]


async def _nothing(job, ctx):
    pass


async def _failures_told(pool, s, lane, n: int) -> None:
    """n notifications of jobs of `lane` that failed for good, as the pipeline enqueues them."""
    for _ in range(n):
        job = Job(id=uuid.uuid4(), type="t", payload={}, attempts=1, lane=lane, run_id=None)
        await notifications.job_gave_up(pool, s, job, "boom")


async def test_a_flood_of_slow_deliveries_leaves_the_run_time_for_other_work(pool):
    """The notify stage comes before every user stage; busy, it rests as long as each batch
    took (a tenant can make many failures, and its receiver can take 10 s to answer)."""
    async def quick(job, ctx):
        pass

    with Receiver(delay=0.5) as hook:
        s = settings(hook, webhook_url=hook.url, webhook_secret=SECRET)
        await _failures_told(pool, s, q.DEFAULT_LANE, 40)
        await f.jobs(pool, "t", 200)
        # 6 s of a budget, against 20 s of deliveries waiting: room for a machine busy with
        # the suite's other tests (at 4 s one run under load finished 175 of the 200)
        result = await Pipeline(pool, [Stage(type="t", handler=quick, batch=25)], s).run("cron", budget=6)
    assert result.summary["stages"]["t"]["done"] == 200      # 8 quick batches fit between deliveries
    assert len(hook.received) >= 10                          # and deliveries went on beside them


async def test_one_tenants_slow_receiver_does_not_hold_anothers_notifications_back(pool):
    """A notification goes in the lane it tells about: the fair claim shares deliveries."""
    ann, bob = await f.user(pool), await f.user(pool)
    with Receiver(delay=1.0) as slow, Receiver() as fast:
        await f.as_system(pool, "UPDATE users SET webhook_url = $2 WHERE id = $1", ann, slow.url)
        await f.as_system(pool, "UPDATE users SET webhook_url = $2 WHERE id = $1", bob, fast.url)
        anns, bobs = await f.lane(pool, ann), await f.lane(pool, bob)
        s = settings(slow, fast, webhook_secret=SECRET)
        await _failures_told(pool, s, anns, 30)    # first: 30 of Ann's, 6 s of deliveries
        await _failures_told(pool, s, bobs, 1)     # then Bob's one
        assert await pool.fetchval("SELECT count(DISTINCT lane) FROM jobs WHERE type = 'notify'") == 2
        # 3 s: time for a few of Ann's 1 s deliveries and Bob's turn among them, with room for a
        # busy machine (at 1.5 s a run under load spent it before Bob's turn); in one queue
        # for all, Bob's would wait behind all 30 of Ann's
        await Pipeline(pool, [Stage(type="t", handler=_nothing)], s).run("cron", budget=3)
    assert len(fast.received) == 1 and len(slow.received) < 30


async def test_a_tenants_notification_does_not_carry_the_operators_url(pool):
    """A notify job is in its tenant's lane, so the tenant reads it (GET /jobs?type=notify):
    an attack pass read WEBHOOK_URL (a Slack-style URL is its own secret) off its payload.
    The job names only the owner's own URL; the operator's is read at delivery."""
    async def broken(job, ctx):
        raise RuntimeError("no luck")

    with Receiver() as global_hook:
        owner = await f.user(pool)
        c = await f.lane(pool, owner)
        await f.jobs(pool, "t", 1, lane=c)
        operators = global_hook.url.rstrip("/") + "/services/T0OPERATOR"
        s = settings(global_hook, webhook_url=operators, webhook_secret=SECRET)
        await Pipeline(pool, [Stage(type="t", handler=broken, max_attempts=1)], s).run("cron")
    [got] = global_hook.received
    assert json.loads(got.body)["event"] == "job.failed" and verify(got)
    [row] = await pool.fetch("SELECT lane, status, payload FROM jobs WHERE type = 'notify'")
    assert row["lane"] == c and row["status"] == "done"
    assert "T0OPERATOR" not in json.dumps(row["payload"]) and row["payload"]["url"] is None
