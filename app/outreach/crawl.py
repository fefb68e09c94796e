"""crawl: fetch one page of a campaign's site, store it, and queue what follows from it:
`extract` for the page, and `crawl` for each same-site link never seen before.

A page is discovered once per campaign (pages is unique per campaign and URL, and only
a new row gets a crawl job), so a page linked from everywhere is fetched once.

    payload: {"page_id": "...", "url": "...", "depth": 0}   (what the pipeline enqueues)
         or: {"url": "https://..."}                          (by hand: discovered at depth 0)
"""

from __future__ import annotations

import uuid
from typing import Any

from app.engine import jobs as q
from app.engine.jobs import Job, NewJob
from app.engine.queries import query
from app.pipeline.stage import Context
from app.outreach.html import ParsedPage, parse_html, parse_plain
from app.outreach.spend import spend_fetch
from app.outreach.urls import BadUrl, normalize_url, same_site
from app.outreach.web import Response, client_for

CRAWL = "crawl"
EXTRACT = "extract"
MAX_LINKS_PER_PAGE = 200


def crawl_job(campaign_id: uuid.UUID, page: Any) -> NewJob:
    return NewJob(type=CRAWL, campaign_id=campaign_id,
                  payload={"page_id": str(page["id"]), "url": page["url"], "depth": page["depth"]},
                  dedupe_key=f"crawl:{campaign_id}:{page['url']}")


async def lock_pages(conn, campaign_id: uuid.UUID) -> None:
    """Take the campaign's page-recording lock for the rest of the transaction: call it
    first in any transaction that discovers pages."""
    await conn.execute(query("pages_lock"), campaign_id)


async def discover(conn, campaign_id: uuid.UUID, urls: list[str], depth: int) -> int:
    """Record pages never seen before and queue a crawl for each; returns how many.
    Inside a transaction that holds lock_pages for the campaign."""
    urls = list(dict.fromkeys(urls))
    if not urls:
        return 0
    new = await conn.fetch(query("pages_discover"), campaign_id, urls, depth)
    if new:
        await q.enqueue_many(conn, [crawl_job(campaign_id, p) for p in new])
    return len(new)


async def _record(conn, page_id, state: str, resp: Response | None = None, *, title: str | None = None,
                  body: str | None = None, note: str | None = None) -> None:
    await conn.execute(
        query("page_record"), page_id, state,
        resp.status if resp else None, resp.final_url if resp else None,
        resp.content_type if resp else None, title, body, note if note is not None else (resp.note if resp else None))


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
    out = []
    for href in parsed.links:
        if href.startswith("#"):
            continue
        try:
            url = normalize_url(href, base=base)
        except BadUrl:  # mailto:, javascript:, tel:, broken
            continue
        if same_site(url, page_url) and url != page_url:
            out.append(url)
    return list(dict.fromkeys(out))[:MAX_LINKS_PER_PAGE]


async def store_response(ctx: Context, campaign_id: uuid.UUID, page, resp: Response) -> None:
    """Record what the fetch found on the page's row; for a page with text, queue its
    extract and its links. One transaction: a page is never recorded without its follow-ups."""
    async with ctx.db.acquire() as conn, conn.transaction():
        await lock_pages(conn, campaign_id)
        if resp.outcome != "ok":
            state = {"client_error": "fetched", "blocked": "blocked"}.get(resp.outcome, "skipped")
            await _record(conn, page["id"], state, resp)
            return
        target_id, depth = page["id"], page["depth"]
        final = normalize_url(resp.final_url)
        if final != page["url"]:
            # Redirected within the site: the content belongs to the page it landed on.
            await _record(conn, page["id"], "redirected", resp, note=f"redirected to {final}")
            landed = await conn.fetch(query("pages_discover"), campaign_id, [final], depth)
            if not landed:
                return  # that page is known already: its own crawl fetches it
            target_id = landed[0]["id"]
        body = resp.text.replace("\x00", "")
        parsed = parse_html(body) if resp.is_html else parse_plain(body)
        await _record(conn, target_id, "fetched", resp, title=parsed.title or None, body=body)
        await q.enqueue(conn, NewJob(type=EXTRACT, campaign_id=campaign_id,
                                     payload={"page_id": str(target_id)},
                                     dedupe_key=f"extract:{target_id}"))
        if resp.is_html and depth < ctx.settings.crawl_max_depth:
            queued = await discover(conn, campaign_id, same_site_links(parsed, final), depth + 1)
            if queued:
                ctx.count("links_queued", queued)


async def _page_for(job: Job, ctx: Context):
    if job.campaign_id is None:
        raise ValueError("a crawl job needs a campaign")
    page_id = job.payload.get("page_id")
    if page_id:
        return await ctx.db.fetchrow(query("page_get"), uuid.UUID(str(page_id)))
    url = normalize_url(job.payload.get("url") or "")
    async with ctx.db.acquire() as conn, conn.transaction():
        await lock_pages(conn, job.campaign_id)
        rows = await conn.fetch(query("pages_discover"), job.campaign_id, [url], 0)
    if rows:
        return await ctx.db.fetchrow(query("page_get"), rows[0]["id"])
    return None  # known already: it has (or had) its own crawl job


async def crawl(job: Job, ctx: Context) -> None:
    page = await _page_for(job, ctx)
    if page is None or page["state"] != "queued":
        return  # gone, or fetched already
    client = client_for(ctx)
    if not await client.allowed(page["url"]):
        async with ctx.db.acquire() as conn:
            await _record(conn, page["id"], "blocked", note="robots.txt disallows it")
        ctx.count("pages_blocked")
        return
    await spend_fetch(ctx, job.campaign_id)
    resp = await client.get(page["url"])
    ctx.count("pages_fetched")
    await store_response(ctx, job.campaign_id, page, resp)


async def crawl_gave_up(job: Job, ctx: Context) -> None:
    """The crawl failed for good (or died on its last attempt): the page says so."""
    page_id = job.payload.get("page_id")
    if page_id:
        await ctx.db.execute(query("page_give_up"), uuid.UUID(str(page_id)), job.id)
