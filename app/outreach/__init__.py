"""The default stage list (PIPELINE_STAGES=app.outreach:STAGES): the example pipeline.

    site -> brief -> crawl -> extract (contacts) -> draft

Order is drain-first: the stages that finish work come before the ones that make more,
and the loop starts again from the top after every batch, so a campaign's contacts and
drafts appear while its crawl is still going rather than after it.

  extract  pull contacts out of fetched pages (a batch handler)
  draft    a first message to each contact; one plan credit each, refunded if it gives up
           or is cancelled
  brief    fetch the campaign's home page, keep what it says (the crawl of that page
           waits for it)
  crawl    fetch one page, store it, queue its extract and its unseen same-site links
  digest   once a day (cron), what each campaign did the day before

Bring your own with PIPELINE_STAGES=yourpackage.module:STAGES: a list of Stage,
earliest stage first (earlier stages win when several have work).
"""

from app.pipeline.stage import Stage
from app.outreach.brief import BRIEF, brief, brief_key
from app.outreach.crawl import CRAWL, EXTRACT, RECRAWL_WINDOW, crawl, crawl_gave_up, extract_key
from app.outreach.digest import DIGEST, DIGEST_CRON, DIGEST_TZ, digest, ownerless_only
from app.outreach.draft import DRAFT, draft, refund_draft
from app.outreach.extract import draft_key, extract
from app.outreach.payloads import BriefPayload, CrawlPayload, DigestPayload, DraftPayload, ExtractPayload
from app.outreach.scope import contact_of_the_campaign, crawl_of_the_campaign, page_of_the_campaign

# The stages ahead of crawl dedupe what people enqueue (one open job per page, contact,
# campaign): earlier stages are claimed first, so a thousand copies of one extract would
# hold every tenant's crawls back while they drained. And they refuse a page or contact
# that is not the lane's campaign's (`accepts`): a thousand distinct random ids did the same.
EXTRACT_STAGE = Stage(type=EXTRACT, batch_handler=extract, batch=25, lease=120, timeout=60,
                      payload=ExtractPayload, dedupe=lambda lane, p: extract_key(p["page_id"]),
                      accepts=page_of_the_campaign)
DRAFT_STAGE = Stage(type=DRAFT, handler=draft, batch=8, concurrency=4, lease=300, timeout=120,
                    max_attempts=3, gave_up=refund_draft, cancelled=refund_draft, payload=DraftPayload,
                    dedupe=lambda lane, p: draft_key(p["contact_id"]), accepts=contact_of_the_campaign)
BRIEF_STAGE = Stage(type=BRIEF, handler=brief, batch=2, concurrency=2, lease=120, timeout=60,
                    payload=BriefPayload, dedupe=lambda lane, p: brief_key(lane))
# A crawl people ask for under a dedupe key stays the answer for RECRAWL_WINDOW after it
# ended: asking again meanwhile queues no second crawl of a page crawled once already.
CRAWL_STAGE = Stage(type=CRAWL, handler=crawl, batch=4, concurrency=4, lease=120, timeout=60,
                    max_attempts=3, gave_up=crawl_gave_up, payload=CrawlPayload, accepts=crawl_of_the_campaign,
                    unique_for=RECRAWL_WINDOW)
DIGEST_STAGE = Stage(type=DIGEST, handler=digest, cron=DIGEST_CRON, tz=DIGEST_TZ, payload=DigestPayload,
                     accepts=ownerless_only)

STAGES = [EXTRACT_STAGE, DRAFT_STAGE, BRIEF_STAGE, CRAWL_STAGE, DIGEST_STAGE]
