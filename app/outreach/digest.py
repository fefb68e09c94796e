"""digest: once a day, what each campaign did the day before (pages fetched, contacts found,
drafts written), one log line per campaign that did any of it.

A cron stage (`Stage(cron=DIGEST_CRON, tz=DIGEST_TZ)`): the first run after midnight
enqueues its job, in the ownerless lane, with the payload {"period": the midnight}, and the
digest covers the day that ended then. Owners have no time zone of their own here, so the
day is UTC's, as the allowances' day is.

    payload: {"period": "2027-03-01T00:00:00+00:00"}   (what the scheduler enqueues)
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from app.engine.jobs import DEFAULT_LANE, Job
from app.outreach.sql import statement
from app.pipeline.stage import Context, FailJob, JobRefused

DIGEST = "digest"
DIGEST_CRON = "0 0 * * *"  # midnight: the day just ended
DIGEST_TZ = "UTC"

log = logging.getLogger("skiplock.digest")


def digest_day(period: datetime) -> tuple[datetime, datetime]:
    """The day that ended at `period`, on the digest's clock (a day of 23 or 25 hours where
    the zone changes its clock)."""
    until = period.astimezone(ZoneInfo(DIGEST_TZ))
    return until - timedelta(days=1), until


def _period(job: Job) -> datetime:
    """The payload's period; one no retry can read fails the job for good."""
    try:
        period = datetime.fromisoformat(str(job.payload["period"]))
    except (KeyError, ValueError):
        period = None
    if period is None or period.tzinfo is None:
        raise FailJob("digest jobs need a period (an ISO 8601 instant with its offset) in their payload")
    return period


async def digest(job: Job, ctx: Context) -> dict[str, Any]:
    if job.lane != DEFAULT_LANE:
        raise FailJob("the digest reads every campaign: it runs in the ownerless lane, not a campaign's")
    since, until = digest_day(_period(job))
    rows = await ctx.db.fetch(*statement("digest_day").bind(since=since, until=until))
    for row in rows:
        log.info("digest %s: campaign %s (%s): %d pages fetched, %d contacts found, %d drafts written",
                 since.date(), row["campaign_id"], row["name"], row["pages_fetched"], row["contacts_found"],
                 row["drafts_written"])
    ctx.count("digest_campaigns", len(rows))
    return {"day": since.date().isoformat(), "campaigns": len(rows)}


async def ownerless_only(db, lane: uuid.UUID, payload: dict[str, Any]) -> None:
    """Stage.accepts of digest: one enqueued by hand goes in the ownerless lane, as the
    scheduler's does (a tenant cannot name that lane, so only an admin can)."""
    if lane != DEFAULT_LANE:
        raise JobRefused("the digest reads every campaign: enqueue it without a lane, not in a campaign's")
