"""Webhook notifications when a batch finishes or a job fails for good.

Each notification is a `notify` job, enqueued in the same transaction as the change it
reports, so delivery gets retries, backoff and dedupe from the queue itself. Dormant
unless WEBHOOK_SECRET is set and a URL is known (the account's, else WEBHOOK_URL).

Receivers check `X-Skiplock-Signature: sha256=<hex>`, the HMAC-SHA256 with the secret of
`<X-Skiplock-Timestamp>.<raw body>`.

An account sets its own URL, so a delivery goes through the egress guard like any fetch:
a URL that is not public (nor in FETCH_ALLOW_PRIVATE) fails for good with "blocked",
at once and without retries, and nothing is sent."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from app.engine.jobs import Job, NewJob, enqueue
from app.engine.queries import statement
from app.pipeline.stage import Context, DeferJob, FailJob, Stage
from app.retry_after import retry_after

NOTIFY_TYPE = "notify"
DELIVERY_SECONDS = 10.0  # the whole delivery, connect to answer


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


async def _enqueue(db, settings, lane: uuid.UUID, event: str, key: str,
                   data: dict[str, Any]) -> uuid.UUID | None:
    """A notification job, to the lane owner's webhook URL, else the global one. It goes
    in the lane it tells about, so the fair claim shares deliveries between tenants: one
    tenant's flood of failures to a slow receiver does not hold another's back."""
    if settings is None or settings.webhook_secret is None:
        return None
    # The job is the tenant's to read (its lane): it carries the owner's own URL, never
    # the operator's WEBHOOK_URL (read at delivery; null here), which tenants must not learn.
    url = await db.fetchval(*statement("owner_webhook").bind(lane=lane))
    if not url and not settings.webhook_url:
        return None
    return await enqueue(db, NewJob(type=NOTIFY_TYPE, lane=lane, dedupe_key=f"notify:{event}:{key}",
                                    payload={"url": url or None, "event": event, "data": data}))


async def job_gave_up(db, settings, job: Job, error: str) -> None:
    if job.type == NOTIFY_TYPE:
        return  # a notification that cannot be delivered is not itself notified
    await _enqueue(db, settings, job.lane, "job.failed", str(job.id), {
        "jobId": str(job.id), "type": job.type, "lane": str(job.lane),
        "batchId": str(job.batch_id) if job.batch_id else None, "attempts": job.attempts,
        "error": error})


async def batch_finished(db, settings, batch_id: uuid.UUID, lane: uuid.UUID, status: str) -> None:
    await _enqueue(db, settings, lane, "batch.finished", str(batch_id), {
        "batchId": str(batch_id), "lane": str(lane), "status": status})


async def deliver(job: Job, ctx: Context) -> None:
    """The notify stage: POST the signed event; a non-2xx answer is a failure (retried).
    Only the answer's status and headers are read: a receiver's body (endless, or a
    gigabyte behind a little gzip) costs nothing."""
    body = json.dumps({"id": str(job.id), "event": job.payload["event"],
                       "data": job.payload["data"]}).encode()
    timestamp = str(int(time.time()))
    secret = ctx.settings.webhook_secret
    url = job.payload.get("url") or ctx.settings.webhook_url  # null: the operator's, read now
    if not url:
        raise FailJob("no webhook URL")
    headers = {"content-type": "application/json", "user-agent": "skiplock-webhooks/1",
               "x-skiplock-event": job.payload["event"], "x-skiplock-timestamp": timestamp}
    if secret is not None:
        headers["x-skiplock-signature"] = sign(secret.get_secret_value(), timestamp, body)
    # the web client comes with the first webhook, not with every cold start
    import httpx

    from app.egress import EgressRefused, guarded_client, parse_allow_list

    allow = parse_allow_list(ctx.settings.fetch_allow_private)
    try:
        async with asyncio.timeout(DELIVERY_SECONDS), \
                guarded_client(allow, timeout=DELIVERY_SECONDS, follow_redirects=False) as client, \
                client.stream("POST", url, content=body, headers=headers) as response:
            pass  # the status and headers are the answer; the body, whatever its size, is never read
    except EgressRefused:
        raise FailJob("blocked") from None  # the same address tomorrow: retrying cannot help
    except (httpx.TransportError, TimeoutError):
        # No errno text: the last error must not say which ports are open where.
        raise RuntimeError("webhook: no answer (could not connect, or timed out)") from None
    if response.status_code in (429, 503):
        wait = retry_after(response.headers.get("retry-after"))
        if wait is not None:
            raise DeferJob(wait, f"webhook asked to retry after {response.headers['retry-after'][:40]}")
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"webhook answered HTTP {response.status_code}")
    ctx.count("webhooks_delivered")


NOTIFY_STAGE = Stage(type=NOTIFY_TYPE, handler=deliver, batch=10, concurrency=5, lease=120,
                     timeout=30, max_attempts=8)
