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
"""

from __future__ import annotations

import uuid

from app.engine.jobs import DEFAULT_LANE, Job
from app.pipeline.stage import FailJob


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
