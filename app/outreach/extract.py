"""extract (a batch handler): pull contacts out of fetched pages -- e-mail addresses
(mailto: links and plain text) and profile links on the usual video and social sites --
into `contacts`, unique per campaign and value, with the page each came from. Every new
contact gets a `draft` job.

A page is hostile input: it is read in a parse worker with the parser's deadline
(app.outreach.html.off_the_loop), addresses are looked for around each `@` in bounded
windows (never one regex search over the whole page, which holds the GIL until it ends),
and one page gives at most MAX_CONTACTS_PER_PAGE contacts, the first in page order.

    payload: {"page_id": "..."}   (a page of the job's campaign; see app/outreach/scope.py)
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from app.engine import jobs as q
from app.engine.jobs import Job, NewJob
from app.outreach.sql import statement
from app.pipeline.stage import Context, FailJob
from app.outreach.html import MAX_PARSE_CHARS, PageNotParsed, off_the_loop, parse_html
from app.outreach.scope import campaign_of, not_in_campaign, payload_id
from app.outreach.settings import outreach_settings

DRAFT = "draft"


def draft_key(contact_id) -> str:
    """One open draft per contact (also for the drafts people enqueue: the stage's dedupe)."""
    return f"draft:{contact_id}"


MAX_CONTACTS_PER_PAGE = 50   # the first ones in page order; the rest of the page's are not kept
MAX_LOCAL_PART = 64          # RFC 5321 4.5.3.1: longer parts or domains are no addresses
MAX_DOMAIN = 255
MAX_ATS_EXAMINED = 10_000    # `@`s of a page's text looked at: a page of more is no contact page
_CLOCK_EVERY = 256           # links or `@`s between looks at the deadline

EMAIL = re.compile(r"(?<![\w.%+-])([A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24})(?![\w-])")
_NOT_A_TLD = {"png", "jpg", "jpeg", "gif", "svg", "webp", "css", "js"}
_LOCAL_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-"
# an `@` that may be in an address (a literal first: the search skips to each `@` at C speed)
_AT = re.compile(r"@(?<=[A-Za-z0-9._%+-]@)(?=[A-Za-z0-9-])")
_DOMAIN_RUN = re.compile(rf"[A-Za-z0-9.-]{{0,{MAX_DOMAIN + 1}}}")

# host (without www./m./mobile.) -> (kind, canonical host, path pattern, case matters)
_PROFILES = {
    "youtube.com": ("youtube", "www.youtube.com",
                    re.compile(r"^/(@[\w.-]+|c/[\w.-]+|user/[\w.-]+|channel/UC[\w-]{10,})/?$"), True),
    "instagram.com": ("instagram", "www.instagram.com", re.compile(r"^/([A-Za-z0-9_.]{1,30})/?$"), False),
    "tiktok.com": ("tiktok", "www.tiktok.com", re.compile(r"^/(@[\w.-]{2,})/?$"), False),
    "twitter.com": ("x", "x.com", re.compile(r"^/([A-Za-z0-9_]{1,15})/?$"), False),
    "x.com": ("x", "x.com", re.compile(r"^/([A-Za-z0-9_]{1,15})/?$"), False),
    "twitch.tv": ("twitch", "www.twitch.tv", re.compile(r"^/([A-Za-z0-9_]{3,25})/?$"), False),
    "linkedin.com": ("linkedin", "www.linkedin.com", re.compile(r"^/((?:in|company)/[\w%-]+)/?$"), False),
    "facebook.com": ("facebook", "www.facebook.com", re.compile(r"^/([A-Za-z0-9.]{5,50})/?$"), False),
}
# first path segments that are pages of the site itself, not somebody's profile
_RESERVED = {"p", "reel", "reels", "explore", "accounts", "stories", "intent", "share", "home", "i",
             "search", "hashtag", "login", "signup", "about", "help", "privacy", "terms", "settings",
             "directory", "videos", "watch", "results", "feed", "sharer", "sharer.php", "legal", "jobs",
             "policies", "messages", "notifications", "tv", "live"}


@dataclass(frozen=True)
class Found:
    kind: str
    value: str   # normalised: lower-case address, or canonical profile URL
    handle: str  # how to greet them: the address's name part, or @handle


def email_contact(text: str) -> Found | None:
    text = text.strip()
    if len(text) > MAX_LOCAL_PART + 1 + MAX_DOMAIN:
        return None
    m = EMAIL.fullmatch(text)
    if not m:
        return None
    address = m.group(1).lower()
    if address.rsplit(".", 1)[-1] in _NOT_A_TLD:
        return None  # logo@2x.png and friends
    return Found("email", address, address.split("@", 1)[0])


def profile_contact(url: str) -> Found | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https"):
        return None
    host = (parts.hostname or "").lower()
    for prefix in ("www.", "m.", "mobile."):
        host = host.removeprefix(prefix)
    site = _PROFILES.get(host)
    if site is None:
        return None
    kind, canonical, pattern, case_matters = site
    m = pattern.match(unquote(parts.path))
    if not m:
        return None
    path = m.group(1)
    if path.lstrip("@").split("/")[0].lower() in _RESERVED:
        return None
    if not case_matters or path.startswith(("@", "c/", "user/")):
        path = path.lower()
    name = path.rsplit("/", 1)[-1]
    handle = "" if path.startswith("channel/") else name if name.startswith("@") else f"@{name}"
    return Found(kind, f"https://{canonical}/{path}", handle)


def addresses(text: str, deadline: float | None = None):
    """What EMAIL.finditer(text) finds, in order, but for local parts and domains longer
    than RFC 5321 allows, and around the first MAX_ATS_EXAMINED `@`s only, at a bounded
    cost per `@`: each regex call reads a few hundred characters around one `@`. Raises
    PageNotParsed once time.monotonic() passes `deadline`."""
    done_to, seen = 0, 0  # where the last address ended; `@`s looked at
    at = _AT.search(text)
    while at and seen < MAX_ATS_EXAMINED:
        i = at.start()
        seen += 1
        if deadline is not None and not seen % _CLOCK_EVERY and time.monotonic() > deadline:
            raise PageNotParsed("the page took too long to read")
        # the local part can only start where its run of local characters does (EMAIL's
        # lookbehind); a run cut by the window is longer than MAX_LOCAL_PART, and the
        # lookbehind refuses it
        lo = max(done_to, i - MAX_LOCAL_PART)
        start = lo + len(text[lo:i].rstrip(_LOCAL_CHARS))
        end = _DOMAIN_RUN.match(text, i + 1).end()
        if end - i - 1 <= MAX_DOMAIN:  # the domain's run ends here: EMAIL sees the next character
            m = EMAIL.match(text, start, end + 1)
            if m:
                yield m.group(1)
                done_to = m.end()
        at = _AT.search(text, i + 1)


def read_contacts(body: str, content_type: str | None, max_chars: int = MAX_PARSE_CHARS, *,
                  deadline: float | None = None) -> list[Found]:
    """Contacts on one page, each once, in page order: links first, then plain text; the
    first MAX_CONTACTS_PER_PAGE of them. Raises PageNotParsed past `deadline`."""
    first: dict[str, Found] = {}

    def keep(c: Found | None) -> bool:
        """Keep a contact; True once the page has given as many as it may."""
        if c:
            first.setdefault(c.value, c)
        return len(first) >= MAX_CONTACTS_PER_PAGE

    body = body[:max_chars]
    if content_type in ("text/html", "application/xhtml+xml"):
        page = parse_html(body, deadline=deadline)
        for n, href in enumerate(page.links, 1):
            if deadline is not None and not n % _CLOCK_EVERY and time.monotonic() > deadline:
                raise PageNotParsed("the page took too long to read")
            if href.lower().startswith("mailto:"):
                address = unquote(href[7:].split("?", 1)[0])
                if any(keep(email_contact(one)) for one in address.split(",", 100)[:100]):
                    return list(first.values())
            elif keep(profile_contact(href)):
                return list(first.values())
        text = page.text
    else:
        text = body
    for address in addresses(text, deadline):
        if keep(email_contact(address)):
            break
    return list(first.values())


async def find_contacts(body: str, content_type: str | None, max_chars: int = MAX_PARSE_CHARS) -> list[Found]:
    """read_contacts in a parse worker, within its deadline (PageNotParsed past it)."""
    return await off_the_loop(read_contacts, body, content_type, max_chars)


async def extract(jobs: list[Job], ctx: Context) -> dict[uuid.UUID, BaseException]:
    problems: dict[uuid.UUID, BaseException] = {}
    wanted: list[tuple[Job, uuid.UUID, uuid.UUID]] = []  # (job, its campaign, its page)
    for job in jobs:
        try:
            wanted.append((job, campaign_of(job), payload_id(job, "page_id")))
        except FailJob as exc:
            problems[job.id] = exc
    # each page is looked up in its own job's campaign, so one batch can mix campaigns
    looked_up = await ctx.db.fetch(*statement("pages_for_extract").bind(
        page_ids=[page for _, _, page in wanted],
        campaign_ids=[campaign for _, campaign, _ in wanted])) if wanted else []
    found = {(p["id"], p["campaign_id"]): p for p in looked_up}
    for job, campaign_id, page_id in wanted:
        if (page_id, campaign_id) not in found:
            problems[job.id] = not_in_campaign("page", page_id)
    pages = [p for p in found.values() if p["readable"]]  # a page not fetched has nothing to read
    rows: list[tuple] = []
    for page in pages:
        for c in await find_contacts(page["body"], page["content_type"], outreach_settings().fetch_max_bytes):
            rows.append((page["campaign_id"], c.kind, c.value, c.handle, page["id"], page["final_url"]))
    if rows:
        # one order for every inserter (two overlapping runs cannot deadlock); within a
        # campaign, a contact found on several pages keeps the first page of the batch
        rows = sorted(enumerate(rows), key=lambda r: (str(r[1][0]), r[1][2], r[0]))
        rows = [r for _, r in rows]
        async with ctx.db.acquire() as conn, conn.transaction():
            campaign_ids, kinds, values, handles, page_ids, page_urls = map(list, zip(*rows))
            new = await conn.fetch(*statement("contacts_insert").bind(
                campaign_ids=campaign_ids, kinds=kinds, values=values, handles=handles,
                page_ids=page_ids, page_urls=page_urls))
            if new:
                await q.enqueue_many(conn, [
                    NewJob(type=DRAFT, lane=r["campaign_id"], payload={"contact_id": str(r["id"])},
                           dedupe_key=draft_key(r["id"])) for r in new])
        ctx.count("contacts_found", len(new))
    ctx.count("pages_read", len(pages))
    return problems
