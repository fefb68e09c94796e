"""crawl: fetch one page of a campaign's site, store it, and queue what follows from it:
`extract` for the page, and `crawl` for each same-site link never seen before.

A page is discovered once per campaign (pages is unique per campaign and URL, and only
a new row gets a crawl job), so a page linked from everywhere is fetched once.

    payload: {"page_id": "...", "url": "...", "depth": 0}   (what the pipeline enqueues)
         or: {"url": "https://..."}                          (a campaign's home page, and by hand:
                                                              discovered at depth 0)

Both are scoped by the job's campaign (app/outreach/scope.py): a page id of another
campaign fails the job for good, and so does a URL off the campaign's site (nothing is
fetched). A job by URL crawls the campaign's page for that URL whenever it is still
queued, so its retry fetches the page its failed first attempt discovered.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from app.engine import jobs as q
from app.engine.jobs import Job, NewJob
from app.outreach.sql import statement
from app.pipeline.stage import Context, FailJob
from app.outreach.html import ParsedPage, parse_page
from app.outreach.scope import campaign_of, not_in_campaign, on_the_campaigns_site, payload_id
from app.outreach.settings import outreach_settings
from app.outreach.spend import spend_fetch
from app.outreach.urls import BadUrl, normalize_url, same_site
from app.outreach.web import Response, client_for

CRAWL = "crawl"
EXTRACT = "extract"
MAX_LINKS_PER_PAGE = 200
MAX_HREFS_EXAMINED = 5 * MAX_LINKS_PER_PAGE
RECRAWL_WINDOW = timedelta(hours=1)  # Stage.unique_for of crawls people ask for (app/outreach/__init__.py)


def extract_key(page_id) -> str:
    """One open extract per page (also for the extracts people enqueue: the stage's dedupe)."""
    return f"extract:{page_id}"


def crawl_key(campaign_id, url: str) -> str:
    """One open crawl per page (its normalised URL) of a campaign."""
    return f"crawl:{campaign_id}:{url}"


def crawl_job(campaign_id: uuid.UUID, page: Any) -> NewJob:
    return NewJob(type=CRAWL, lane=campaign_id,
                  payload={"page_id": str(page["id"]), "url": page["url"], "depth": page["depth"]},
                  dedupe_key=crawl_key(campaign_id, page["url"]))


def home_crawl_job(campaign_id: uuid.UUID, url: str) -> NewJob:
    """The crawl of a campaign's home page by URL: the page is recorded (at depth 0) when
    the crawl runs, so a crawl that never runs leaves no page behind."""
    return NewJob(type=CRAWL, lane=campaign_id, payload={"url": url}, dedupe_key=crawl_key(campaign_id, url))


async def lock_pages(conn, campaign_id: uuid.UUID) -> None:
    """Take the campaign's page-recording lock for the rest of the transaction: call it
    first in any transaction that discovers pages."""
    await conn.execute(*statement("pages_lock").bind(campaign_id=campaign_id))


async def discover(conn, campaign_id: uuid.UUID, urls: list[str], depth: int) -> int:
    """Record pages never seen before and queue a crawl for each; returns how many.
    Inside a transaction that holds lock_pages for the campaign."""
    urls = list(dict.fromkeys(urls))
    if not urls:
        return 0
    new = await conn.fetch(*statement("pages_discover").bind(campaign_id=campaign_id, urls=urls,
                                                             depth=depth))
    if new:
        await q.enqueue_many(conn, [crawl_job(campaign_id, p) for p in new])
    return len(new)


async def _record(conn, campaign_id: uuid.UUID, page_id, state: str, resp: Response | None = None, *,
                  title: str | None = None, body: str | None = None, note: str | None = None) -> None:
    await conn.execute(
        *statement("page_record").bind(
            page_id=page_id, state=state, status_code=resp.status if resp else None,
            final_url=resp.final_url if resp else None, content_type=resp.content_type if resp else None,
            title=title, body=body, note=note if note is not None else (resp.note if resp else None),
            campaign_id=campaign_id))


def same_site_links(parsed: ParsedPage, page_url: str) -> list[str]:
    """The page's links to other pages of its own site, normalised, in page order."""
    if parsed.nofollow:
        return []
    base = page_url
    if parsed.base:
        try:
            base = normalize_url(parsed.base, base=page_url)
        except BadUrl:
            pass
    out: dict[str, None] = {}
    # This runs on the event loop: a hostile page of 100k links would hold it for
    # seconds, so only the first few hundred hrefs are looked at.
    for href in parsed.links[:MAX_HREFS_EXAMINED]:
        if href.startswith("#"):
            continue
        try:
            url = normalize_url(href, base=base)
        except BadUrl:  # mailto:, javascript:, tel:, broken, control characters, too long
            continue
        if same_site(url, page_url) and url != page_url:
            out[url] = None
            if len(out) == MAX_LINKS_PER_PAGE:
                break
    return list(out)


async def store_response(ctx: Context, campaign_id: uuid.UUID, page, resp: Response) -> None:
    """Record what the fetch found on the page's row; for a page with text, queue its
    extract and its links. One transaction: a page is never recorded without its follow-ups."""
    async with ctx.db.acquire() as conn, conn.transaction():
        await lock_pages(conn, campaign_id)
        if resp.outcome != "ok":
            state = {"client_error": "fetched", "blocked": "blocked"}.get(resp.outcome, "skipped")
            await _record(conn, campaign_id, page["id"], state, resp)
            return
        target_id, depth = page["id"], page["depth"]
        final = normalize_url(resp.final_url)
        if final != page["url"]:
            # Redirected within the site: the content belongs to the page it landed on.
            await _record(conn, campaign_id, page["id"], "redirected", resp, note=f"redirected to {final}")
            landed = await conn.fetch(*statement("pages_discover").bind(campaign_id=campaign_id,
                                                                        urls=[final], depth=depth))
            if not landed:
                return  # that page is known already: its own crawl fetches it
            target_id = landed[0]["id"]
        body = resp.text.replace("\x00", "")
        parsed = await parse_page(body, is_html=resp.is_html, max_chars=outreach_settings().fetch_max_bytes)
        await _record(conn, campaign_id, target_id, "fetched", resp, title=parsed.title or None, body=body)
        await q.enqueue(conn, NewJob(type=EXTRACT, lane=campaign_id,
                                     payload={"page_id": str(target_id)},
                                     dedupe_key=extract_key(target_id)))
        if resp.is_html and depth < outreach_settings().crawl_max_depth:
            queued = await discover(conn, campaign_id, same_site_links(parsed, final), depth + 1)
            if queued:
                ctx.count("links_queued", queued)


def _payload_url(job: Job) -> str:
    try:
        return normalize_url(job.payload.get("url") or "")
    except BadUrl as exc:
        raise FailJob(f"crawl jobs need a page_id or an http(s) url in their payload: {exc}") from None


async def _page_for(job: Job, ctx: Context, campaign_id: uuid.UUID):
    """The campaign's page the job is about: by page_id, or by URL (recorded when new)."""
    if job.payload.get("page_id"):
        page_id = payload_id(job, "page_id")
        page = await ctx.db.fetchrow(*statement("page_get").bind(page_id=page_id, campaign_id=campaign_id))
        if page is None:
            raise not_in_campaign("page", page_id)
        return page
    url = _payload_url(job)
    on_site, site = await on_the_campaigns_site(ctx.db, campaign_id, url)
    if not on_site:
        raise FailJob(f"{url} is not on this job's campaign's site ({site or 'none'}); nothing was fetched")
    async with ctx.db.acquire() as conn, conn.transaction():
        await lock_pages(conn, campaign_id)
        await conn.execute(*statement("pages_discover").bind(campaign_id=campaign_id, urls=[url], depth=0))
        # new or known already: a retry finds the page its first attempt discovered
        return await conn.fetchrow(*statement("page_by_url").bind(campaign_id=campaign_id, url=url))


async def crawl(job: Job, ctx: Context) -> None:
    campaign_id = campaign_of(job)
    page = await _page_for(job, ctx, campaign_id)
    if page["state"] != "queued":
        return  # fetched already
    client = client_for(ctx)
    if not await client.allowed(page["url"]):
        async with ctx.db.acquire() as conn:
            await _record(conn, campaign_id, page["id"], "blocked", note="robots.txt disallows it")
        ctx.count("pages_blocked")
        return
    await spend_fetch(ctx, campaign_id)
    resp = await client.get(page["url"])
    ctx.count("pages_fetched")
    await ctx.progress(1, 2)  # fetched (the slow half): the campaign's batch bar moves now
    await store_response(ctx, campaign_id, page, resp)
    await ctx.progress(2, 2)


async def crawl_gave_up(job: Job, ctx: Context) -> None:
    """The crawl failed for good (or died on its last attempt): the page says so, if it
    is a page of the job's campaign (by page_id, or else by URL)."""
    try:
        campaign_id = campaign_of(job)
        page_id = payload_id(job, "page_id") if job.payload.get("page_id") else None
        url = None if page_id else _payload_url(job)
    except FailJob:
        return  # the payload named no page of this campaign: there is nothing to mark
    await ctx.db.execute(*statement("page_give_up").bind(campaign_id=campaign_id, page_id=page_id, url=url,
                                                         job_id=job.id))
