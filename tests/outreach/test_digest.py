"""The daily digest, a cron stage: the first run after midnight (UTC) enqueues it, and it
says, per campaign that did anything, what the day before brought."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from app.engine.jobs import DEFAULT_LANE
from app.outreach import DIGEST_STAGE, STAGES
from app.pipeline.maintenance import schedule_periodic
from tests.outreach import factories as f
from tests.outreach.conftest import campaign, run


async def digests(pool) -> list:
    return await pool.fetch("SELECT * FROM jobs WHERE type = 'digest' ORDER BY created_at")


async def test_the_digest_counts_each_campaigns_day_once_the_day_is_over(pool, site, caplog):
    assert (DIGEST_STAGE.cron, DIGEST_STAGE.tz) == ("0 0 * * *", "UTC")
    busy = await campaign(pool, site.url + "/")
    idle = await campaign(pool, "http://127.0.0.1:9/", owner="idle@example.com")
    await pool.execute("DELETE FROM jobs WHERE lane = $1", idle)  # a campaign that does nothing
    today = await pool.fetchval("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'")

    with caplog.at_level(logging.INFO, logger="skiplock.digest"):
        crawled = await run(pool, "cron")
        # the run enqueued today's digest, which covers yesterday: nothing happened then
        [first] = await digests(pool)
        assert datetime.fromisoformat(first["payload"]["period"]) == today
        assert (first["status"], first["lane"]) == ("done", DEFAULT_LANE)  # where the scheduler puts it
        assert first["result"] == {"day": (today - timedelta(days=1)).date().isoformat(), "campaigns": 0}
        assert crawled.summary["counts"]["periodic_enqueued"] == 1
        assert not [r for r in caplog.records if r.name == "skiplock.digest"]

        # tomorrow's first run: the digest of today, the busy campaign's only
        await schedule_periodic(pool, STAGES, at=today + timedelta(days=1, minutes=5))
        result = await run(pool, "cron")
    second = (await digests(pool))[-1]
    assert datetime.fromisoformat(second["payload"]["period"]) == today + timedelta(days=1)
    assert second["status"] == "done" and second["result"] == {"day": today.date().isoformat(), "campaigns": 1}
    assert result.summary["counts"]["digest_campaigns"] == 1
    fetched, found, written = [await pool.fetchval(sql, busy) for sql in (
        "SELECT count(*) FROM pages WHERE campaign_id = $1 AND state = 'fetched'",
        "SELECT count(*) FROM contacts WHERE campaign_id = $1",
        "SELECT count(*) FROM drafts WHERE campaign_id = $1")]
    assert (found, written) == (5, 5) and fetched > 0
    lines = [r.getMessage() for r in caplog.records if r.name == "skiplock.digest"]
    assert lines == [f"digest {today.date()}: campaign {busy} (127.0.0.1:{site.url.rsplit(':', 1)[1]}): "
                     f"{fetched} pages fetched, {found} contacts found, {written} drafts written"]


async def test_a_digest_by_hand_is_the_ownerless_lanes_only(api, pool, admin_key):
    tenant = {"Authorization": f"Bearer {await f.api_key(pool, 'ann@example.com')}"}
    lane = (await api.post("/campaigns", headers=tenant, json={"url": "https://ann.example"})).json()["id"]
    ask = {"type": "digest", "payload": {"period": "2027-03-02T00:00:00Z"}}
    refused = await api.post("/jobs", headers=tenant, json={**ask, "lane": lane})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "job_refused", refused.text
    made = await api.post("/jobs", headers={"Authorization": f"Bearer {admin_key}"}, json=ask)
    assert made.status_code == 201 and made.json()["job"]["lane"] == str(DEFAULT_LANE), made.text
