"""Schemathesis against the example's routes (/campaigns, /plans), run as
tests/api/test_schemathesis.py runs it against the queue's own routes: every phase, every
check, a real uvicorn and the real database."""

from __future__ import annotations

import asyncio

from app.api import create_app
from app.outreach.payloads import CrawlPayload
from app.pipeline.stage import Stage
from tests.api.serving_kit import Recorder, start_uvicorn
from tests.credentials import CRON_SECRET, CURSOR_SECRET
from tests.api.test_schemathesis import LOOSER_SCHEMAS, assert_found_nothing, fuzz
from tests.outreach import factories as f
from tests.outreach.conftest import settings

# Bodies whose schema is looser than their validation: a schema-valid one can be a 422.
EXAMPLE_LOOSER = LOOSER_SCHEMAS | {
    # whether a URL's host is a public address (127.1, 0x7f000001, [::ffff:10.0.0.1], ...
    # in every spelling) is beyond a pattern
    "POST /campaigns",
    # a batch's payloads, as POST /lanes/{lane_id}/batches's
    "POST /campaigns/{campaign_id}/batches",
}


async def test_schemathesis_on_the_examples_routes_finds_nothing(pool, dsn, admin_key):
    # stand-in stages, so POST /campaigns is served and no run ever fetches the made-up
    # sites it is given; one declares the crawl payload, so declared payloads get fuzzed
    async def noop(job, ctx) -> None:
        return None

    stages = [Recorder("brief").stage, Recorder("record").stage,
              Stage(type="crawl", handler=noop, payload=CrawlPayload, lease=60, timeout=10)]
    app = create_app(settings(database_url=dsn, run_scheduler=False, idempotency_wait_seconds=0.5,
                              cron_secret=CRON_SECRET, cursor_secret=CURSOR_SECRET), stages)
    server, task, sock = await start_uvicorn(app)
    try:
        campaign = await f.campaign(pool, await f.user(pool, "pro"))
        await f.jobs(pool, "record", 3, lane=campaign)
        await f.run(pool)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        document = app.openapi()
        assert "/campaigns" in document["paths"]
        # a campaign's id is its lane's
        outcome = await asyncio.to_thread(fuzz, document, base, admin_key, str(campaign), looser=EXAMPLE_LOOSER,
                                          lane_params=("lane_id", "campaign_id"), paths="^/(campaigns|plans)")
        assert_found_nothing(outcome, at_least=100)
    finally:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
