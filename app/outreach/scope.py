"""The outreach stages' tenant rule: every lookup is scoped by the job's campaign.

Handlers run as the table owner, so row-level security does not apply to them. Instead,
every row a handler reads or writes because of a job -- pages, contacts, drafts, briefs,
credits, usage -- is found by SQL that also says `campaign_id = <the job's campaign>`
(jobs.lane: a campaign's id is its lane's, and a tenant can only enqueue into a lane of
their own).
So an id in a payload that belongs to another campaign finds nothing, just like an id
that does not exist, and the job fails for good (FailJob, no retries) saying
"page <id> is not in this job's campaign". A payload never chooses the campaign: a
campaign_id in it is ignored. A job with no campaign touches no campaign row at all.
A crawl by URL must also stay on its campaign's site (campaigns.url, by `same_site`).

Where people enqueue (the API, the CLI, a batch, an API retry) the same rule comes
first, as the stages' `accepts` hooks: a page or contact id that is not the lane's
campaign's is refused there with one answer whether it exists elsewhere or not, so a
flood of them is never queued (each would be claimed ahead of every tenant's crawls only
to fail).
"""

from __future__ import annotations

import uuid
from typing import Any

from app.engine.jobs import DEFAULT_LANE, Job
from app.outreach.sql import statement
from app.outreach.urls import BadUrl, normalize_url, same_site
from app.pipeline.stage import FailJob, JobRefused


def campaign_of(job: Job) -> uuid.UUID:
    """The job's campaign: the only one its handler may touch."""
    if job.lane == DEFAULT_LANE:
        raise FailJob(f"{job.type} jobs need a campaign (its lane); this one has none")
    return job.lane


def payload_id(job: Job, key: str) -> uuid.UUID:
    """The UUID at payload[key]; a job without a usable one can never succeed."""
    raw = job.payload.get(key) if isinstance(job.payload, dict) else None
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise FailJob(f"{job.type} jobs need a {key} (a UUID) in their payload, "
                      f"not {str(raw)[:100]!r}") from None


def not_in_campaign(what: str, row_id: uuid.UUID) -> FailJob:
    """The one answer for an id of another campaign and an id that does not exist, so
    a payload cannot be used to probe which ids exist elsewhere."""
    return FailJob(f"{what} {row_id} is not in this job's campaign")


async def on_the_campaigns_site(db, campaign_id: uuid.UUID, url: str) -> tuple[bool, str | None]:
    """Whether `url` (normalized) is on the campaign's site (campaigns.url), and that site
    (None: no such campaign, or it has none). The crawl's rule, asked by its handler and
    where people enqueue."""
    campaign = await db.fetchrow(*statement("campaign_site").bind(campaign_id=campaign_id))
    site = campaign["url"] if campaign else None
    return bool(site) and same_site(url, site), site


def _needs_a_campaign(lane: uuid.UUID) -> None:
    if lane == DEFAULT_LANE:
        raise JobRefused("this job has no campaign: name the campaign's id as its lane")


async def _must_be_the_campaigns(db, name: str, what: str, row_id: Any, lane: uuid.UUID) -> None:
    """Refuses the job unless statement `name` (of <what>_id and campaign_id) finds the row
    in the lane's campaign. `db` is the enqueuer's: over the API the tenant's, where
    another tenant's row is not found at all.
    A retry asks about a payload as stored, which no model may have checked (one the
    pipeline or an older version queued): an id that is no UUID is refused too."""
    _needs_a_campaign(lane)
    try:
        row_uuid = uuid.UUID(str(row_id))
    except ValueError:
        raise JobRefused(f"{what}_id {str(row_id)[:100]!r} is not a {what} id (a UUID)") from None
    if not await db.fetchval(*statement(name).bind(**{f"{what}_id": row_uuid, "campaign_id": lane})):
        raise JobRefused(f"{what} {row_id} is not in campaign {lane}", {f"{what}_id": row_id})


async def page_of_the_campaign(db, lane: uuid.UUID, payload: dict[str, Any]) -> None:
    """Stage.accepts of extract: the page is the campaign's."""
    await _must_be_the_campaigns(db, "page_in_campaign", "page", payload.get("page_id"), lane)


async def crawl_of_the_campaign(db, lane: uuid.UUID, payload: dict[str, Any]) -> None:
    """Stage.accepts of crawl: a page_id is the campaign's, a URL is on the campaign's
    site (what the handler would refuse after a claim is refused before the queue)."""
    if payload.get("page_id"):  # as the handler reads it (crawl.py's _page_for)
        await _must_be_the_campaigns(db, "page_in_campaign", "page", payload["page_id"], lane)
        return
    _needs_a_campaign(lane)
    try:
        url = normalize_url(payload.get("url"))
    except BadUrl:  # the payload's model checked the URL already; on no site, refused the same way
        url = ""
    on_site, site = await on_the_campaigns_site(db, lane, url)
    if not on_site:
        raise JobRefused(f"{str(payload.get('url'))[:200]} is not on campaign {lane}'s site", {"site": site or None})


async def contact_of_the_campaign(db, lane: uuid.UUID, payload: dict[str, Any]) -> None:
    """Stage.accepts of draft: the contact is the campaign's."""
    await _must_be_the_campaigns(db, "contact_in_campaign", "contact", payload.get("contact_id"), lane)
