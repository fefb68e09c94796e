"""Plans: daily page allowances, credits charged once per draft job and refunded once."""

from __future__ import annotations

import asyncio

from app.engine.batches import BatchRequest, create_batch
from app.outreach import STAGES, allowances
from app.outreach.quota import next_utc_day
from app.pipeline.maintenance import sweep_stuck
from app.pipeline.outcomes import cancel_batch
from app.pipeline.stage import Context, Tally
from app.outreach.plans import PLANS
from app.outreach import DRAFT_STAGE
from app.outreach.draft import refund_draft
from tests.outreach import factories as f
from tests.outreach.conftest import campaign, run, settings


async def use_today(pool, cid, *, pages=0, credits=0):
    await pool.execute(
        "INSERT INTO campaign_usage (campaign_id, day, pages, credits) "
        "VALUES ($1, (now() AT TIME ZONE 'UTC')::date, $2, $3)", cid, pages, credits)


async def test_a_spent_page_allowance_defers_until_the_next_utc_day(pool, site):
    cid = await campaign(pool, site.url + "/", plan="free")
    await use_today(pool, cid, pages=PLANS["free"].daily_pages)
    result = await run(pool, "cron")
    assert result.stop_reason == "no_work" and result.jobs_deferred == 1 and result.jobs_failed == 0
    job = await pool.fetchrow("SELECT * FROM jobs WHERE type = 'brief'")
    assert (job["status"], job["attempts"]) == ("pending", 0)
    assert job["run_after"] == next_utc_day()
    assert site.hits("/") == 0 and result.units == 0  # nothing fetched, no quota spent


async def test_allowances_come_from_the_campaigns_plan(pool, site):
    free = await campaign(pool, site.url + "/", plan="free")
    pro = await campaign(pool, site.url + "/", plan="pro")
    for cid in (free, pro):
        await use_today(pool, cid, pages=PLANS["free"].daily_pages)
    await run(pool, "cron")
    briefs = {r["lane"]: r for r in await pool.fetch("SELECT * FROM jobs WHERE type = 'brief'")}
    assert briefs[free]["status"] == "pending"  # free's 50 pages are used up
    assert briefs[pro]["status"] == "done"      # pro allows more


async def contact_with_draft_job(pool, site, plan="free"):
    """A campaign with one contact and its queued draft job (the rest of the site left out)."""
    cid = await campaign(pool, site.url + "/", plan=plan)
    await pool.execute("DELETE FROM jobs")
    contact = await pool.fetchval(
        "INSERT INTO contacts (campaign_id, kind, value, handle, page_url) "
        "VALUES ($1, 'email', 'sam@acme.test', 'sam', $2) RETURNING id", cid, site.url + "/contacts")
    job = await pool.fetchval(
        "INSERT INTO jobs (type, lane, payload, dedupe_key) VALUES ('draft', $1, $2, $3) RETURNING id",
        cid, {"contact_id": str(contact)}, f"draft:{contact}")
    return cid, contact, job


async def ledger(pool, job):
    return [r["kind"] for r in await pool.fetch(
        "SELECT kind FROM credit_ledger WHERE job_id = $1 ORDER BY id", job)]


async def credits_used(pool, cid):
    return await pool.fetchval("SELECT credits FROM campaign_usage WHERE campaign_id = $1", cid)


async def test_spent_credits_defer_the_draft_until_tomorrow(pool, site):
    cid, contact, job = await contact_with_draft_job(pool, site)
    await use_today(pool, cid, credits=PLANS["free"].daily_credits)
    result = await run(pool, "cron")
    row = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"], row["run_after"]) == ("pending", 0, next_utc_day())
    assert result.jobs_deferred == 1 and await ledger(pool, job) == []


async def test_a_draft_that_gives_up_is_charged_once_and_refunded_once(pool, site, llm):
    cid, contact, job = await contact_with_draft_job(pool, site)
    llm.reset(500)  # the model is down for good
    on = dict(llm_base_url=f"{llm.url}/v1", llm_model="m")
    for attempt in range(1, DRAFT_STAGE.max_attempts + 1):
        result = await run(pool, **on)
        last = attempt == DRAFT_STAGE.max_attempts
        assert (result.jobs_failed, result.jobs_retried) == ((1, 0) if last else (0, 1))
        # charged on the first attempt only; retries reuse the charge
        assert await ledger(pool, job) == (["charge"] if attempt < DRAFT_STAGE.max_attempts
                                           else ["charge", "refund"])
        await pool.execute("UPDATE jobs SET run_after = now()")
    row = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job)
    assert row["status"] == "failed" and "HTTP 500" in row["last_error"]
    assert result.summary["counts"]["credits_refunded"] == 1
    assert await credits_used(pool, cid) == 0  # the credit is back in today's allowance
    # asking again changes nothing: exactly once
    async with pool.acquire() as conn, conn.transaction():
        tally = Tally()
        await refund_draft(as_job(row), Context(db=conn, run_id=None, trigger="t", settings=settings(),
                                                  deadline=0, tally=tally))
    assert await ledger(pool, job) == ["charge", "refund"] and tally.counts == {}
    assert await allowances.refund_credit(pool, job) == 0
    assert await credits_used(pool, cid) == 0


def as_job(row):
    from app.engine.jobs import Job
    return Job(id=row["id"], type=row["type"], payload=row["payload"], attempts=row["attempts"],
               lane=row["lane"], run_id=row["run_id"])


async def test_a_draft_stuck_on_its_last_attempt_is_swept_and_refunded_once(pool, site):
    cid, contact, job = await contact_with_draft_job(pool, site)
    # its last attempt paid, then its process died: running, lease long expired
    assert await allowances.charge_credit(pool, cid, job, 10) == allowances.CHARGED
    assert await allowances.charge_credit(pool, cid, job, 10) == allowances.ALREADY_CHARGED
    await pool.execute(
        "UPDATE jobs SET status = 'running', attempts = $2, locked_at = now() - interval '1 hour' "
        "WHERE id = $1", job, DRAFT_STAGE.max_attempts)
    assert await credits_used(pool, cid) == 1

    def ctx():
        return Context(db=pool, run_id=None, trigger="cron", settings=settings(), deadline=0, tally=Tally())

    # two sweeps at once (two overlapping runs), then a third later: one refund
    results = await asyncio.gather(sweep_stuck(pool, [DRAFT_STAGE], ctx()),
                                   sweep_stuck(pool, [DRAFT_STAGE], ctx()))
    assert sorted(results) == [0, 1]
    assert await sweep_stuck(pool, [DRAFT_STAGE], ctx()) == 0
    row = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job)
    assert row["status"] == "failed" and "lease expired" in row["last_error"]
    assert await ledger(pool, job) == ["charge", "refund"]
    assert await credits_used(pool, cid) == 0


async def test_a_draft_delivered_before_its_job_died_is_not_refunded(pool, site):
    cid, contact, job = await contact_with_draft_job(pool, site)
    await allowances.charge_credit(pool, cid, job, 10)
    await pool.execute("INSERT INTO drafts (campaign_id, contact_id, job_id, body, model) "
                       "VALUES ($1, $2, $3, 'hi', 'template')", cid, contact, job)
    await pool.execute(
        "UPDATE jobs SET status = 'running', attempts = 3, locked_at = now() - interval '1 hour' WHERE id = $1", job)
    swept = await sweep_stuck(pool, [DRAFT_STAGE], Context(db=pool, run_id=None, trigger="cron",
                                                           settings=settings(), deadline=0, tally=Tally()))
    assert swept == 1 and await ledger(pool, job) == ["charge"]
    assert await credits_used(pool, cid) == 1


async def test_concurrent_charges_of_one_job_pay_once(pool, site):
    cid, contact, job = await contact_with_draft_job(pool, site)
    results = await asyncio.gather(*(allowances.charge_credit(pool, cid, job, 10) for _ in range(8)))
    assert results.count(allowances.CHARGED) == 1
    assert await credits_used(pool, cid) == 1 and await ledger(pool, job) == ["charge"]


async def test_a_refunded_job_that_is_retried_pays_again_and_can_be_refunded_again(pool, site):
    cid, _, job = await contact_with_draft_job(pool, site)
    daily = PLANS["free"].daily_credits
    assert await allowances.charge_credit(pool, cid, job, daily) == allowances.CHARGED
    assert await allowances.charge_credit(pool, cid, job, daily) == allowances.ALREADY_CHARGED
    assert await allowances.refund_credit(pool, job) == 1
    assert await allowances.refund_credit(pool, job) == 0
    # a person retries the job that gave up: its next attempt is paid for again
    assert await allowances.charge_credit(pool, cid, job, daily) == allowances.CHARGED
    assert await allowances.charge_credit(pool, cid, job, daily) == allowances.ALREADY_CHARGED
    assert await allowances.usage_today(pool, cid) == {"pages": 0, "credits": 1}
    assert await allowances.refund_credit(pool, job) == 1
    assert await ledger(pool, job) == ["charge", "refund", "charge", "refund"]
    assert (await allowances.usage_today(pool, cid))["credits"] == 0


async def test_a_spent_allowance_defers_the_lanes_whole_backlog_not_one_claim_per_job(pool, site):
    # A free tenant with its pages spent floods crawl jobs. Each deferral hands its `served`
    # back, so one claim per job kept that lane "served least", ahead of every other lane of
    # its plan, until its whole flood had been claimed and deferred one by one. Now the first
    # deferral sends the lane's other waiting fetches to the same wake-up time.
    from app.engine.jobs import NewJob, enqueue_many
    flood = await campaign(pool, site.url + "/", plan="free", owner="flood@example.com")
    other = await campaign(pool, site.url + "/", plan="free", owner="other@example.com")
    await pool.execute("DELETE FROM jobs")
    await use_today(pool, flood, pages=PLANS["free"].daily_pages)
    await enqueue_many(pool, [NewJob(type="crawl", lane=flood, payload={"url": f"{site.url}/fair/a/{i}"})
                              for i in range(200)])
    await enqueue_many(pool, [NewJob(type="crawl", lane=other, payload={"url": f"{site.url}/fair/b/{i}"})
                              for i in range(20)])
    result = await run(pool, "cron")
    done = await pool.fetchval("SELECT count(*) FROM jobs WHERE lane = $1 AND type = 'crawl' AND status = 'done'", other)
    assert done == 20
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE lane = $1 AND run_after < $2",
                               flood, next_utc_day()) == 0
    assert result.jobs_deferred <= 8, result.jobs_deferred  # a batch or two, not 200 claims


async def test_cancelling_a_batch_refunds_a_job_that_had_paid(pool):
    c = await f.campaign(pool, await f.user(pool, "standard"))
    out = await create_batch(pool, c, [BatchRequest("draft")])
    job = out.created["draft"]
    # an earlier attempt paid a credit, failed, and the job waits for its retry
    assert await allowances.charge_credit(pool, c, job, 10) == allowances.CHARGED
    await pool.execute("UPDATE jobs SET attempts = 1 WHERE id = $1", job)
    # the refund is the draft stage's cancelled hook
    done = await cancel_batch(pool, STAGES, out.batch_id, settings())
    assert (done.was_open, done.cancelled) == (True, 1)
    kinds = [r["kind"] for r in await pool.fetch("SELECT kind FROM credit_ledger WHERE job_id = $1 ORDER BY id", job)]
    assert kinds == ["charge", "refund"]
    assert (await allowances.usage_today(pool, c))["credits"] == 0
