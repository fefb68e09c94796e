"""brief: fetch a campaign's home page and keep what it says about the brand (title,
description, keywords, language). The campaign's first crawl waits for it (enqueued with
the brief, `after` it: app/outreach/campaigns.py), so a brief that fails cancels it.

    payload: {} (the campaign is the job's campaign; anything in the payload is ignored,
                 so it cannot point the brief at another campaign: see app/outreach/scope.py)
"""

from __future__ import annotations

from app.engine.jobs import Job, NewJob
from app.outreach.sql import statement
from app.pipeline.stage import Context
from app.outreach.html import parse_page, top_words
from app.outreach.scope import campaign_of
from app.outreach.settings import outreach_settings
from app.outreach.spend import spend_fetch
from app.outreach.urls import BadUrl, normalize_url
from app.outreach.web import Response, client_for

BRIEF = "brief"


def brief_key(campaign_id) -> str:
    """One open brief per campaign (also for the briefs people enqueue: the stage's dedupe)."""
    return f"brief:{campaign_id}"


def brief_job(campaign_id) -> NewJob:
    return NewJob(type=BRIEF, lane=campaign_id, dedupe_key=brief_key(campaign_id))


async def _keep(db, campaign_id, url: str, resp: Response | None, *, title="", description="",
                keywords=(), language=None, note=None) -> None:
    await db.execute(*statement("brief_upsert").bind(
        campaign_id=campaign_id, url=url, final_url=resp.final_url if resp else None,
        status_code=resp.status if resp else None, title=title, description=description,
        keywords=list(keywords), language=language, note=note))


async def brief(job: Job, ctx: Context) -> None:
    campaign_of(job)  # a job with no campaign fails for good here
    campaign = await ctx.db.fetchrow(*statement("campaign_site").bind(campaign_id=job.lane))
    if campaign is None:
        return  # deleted meanwhile
    try:
        url = normalize_url(campaign["url"] or "")
    except BadUrl as exc:
        await _keep(ctx.db, job.lane, campaign["url"] or "", None, note=str(exc))
        return
    client = client_for(ctx)
    if not await client.allowed(url):
        await _keep(ctx.db, job.lane, url, None, note="robots.txt disallows the home page")
        ctx.count("pages_blocked")
        return
    await spend_fetch(ctx, job.lane)
    resp = await client.get(url)
    ctx.count("pages_fetched")
    if resp.outcome != "ok":
        await _keep(ctx.db, job.lane, url, resp, note=resp.note or f"the home page answered HTTP {resp.status}")
        return
    page = await parse_page(resp.text, is_html=resp.is_html, max_chars=outreach_settings().fetch_max_bytes)
    keywords = page.keywords[:20] or top_words(" ".join((page.title, page.description, page.text)))
    await _keep(ctx.db, job.lane, url, resp, title=page.title, description=page.description,
                keywords=keywords, language=page.language)
    ctx.count("briefs_written")
