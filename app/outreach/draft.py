"""draft: a first message to one contact, from the campaign's brief.

Written from a template, or by an OpenAI-compatible LLM when one is configured (see
app/outreach/llm.py). Each draft costs one credit of the campaign's plan, charged once per
job before the work (a retry reuses the charge). A draft job that gives up -- its last
attempt failed, or its process died on it and the stuck sweep failed it -- gets its
credit back exactly once, through the `gave_up` hook, unless its draft was written.

    payload: {"contact_id": "..."}   (a contact of the job's campaign; see app/outreach/scope.py)
"""

from __future__ import annotations

from urllib.parse import urlsplit

from app.outreach import allowances
from app.engine.jobs import Job
from app.outreach.sql import statement
from app.outreach.quota import next_utc_day
from app.outreach.scope import campaign_of, not_in_campaign, payload_id
from app.outreach.settings import outreach_settings
from app.pipeline.stage import Context, DeferJob
from app.outreach import llm

DRAFT = "draft"
TEMPLATE = "template"

SYSTEM_PROMPT = (
    "You write short first-contact messages from a brand to a person it would like to work "
    "with (a creator, a journalist, a partner). Warm, specific, plain text, under 120 words, "
    "no subject line, no placeholders in brackets. Sign off as the brand's team.")


_GENERIC_MAILBOXES = {"info", "hello", "contact", "press", "team", "office", "partnerships", "partners",
                      "media", "support", "sales", "jobs", "careers", "admin", "marketing", "mail", "hi"}
_TITLE_SEPARATORS = (" — ", " – ", " - ", " | ", " · ", ": ")


def _brand(row) -> str:
    """The brand's name: the home page's title up to its tagline, else the campaign's name."""
    title = (row["title"] or "").strip()
    for sep in _TITLE_SEPARATORS:
        title = title.split(sep, 1)[0].strip()
    return title or row["campaign_name"] or urlsplit(row["campaign_url"] or "").hostname or "our team"


def _greeting_name(row) -> str:
    handle = (row["handle"] or "").lstrip("@")
    if row["kind"] == "email" and handle.lower() in _GENERIC_MAILBOXES:
        return "there"
    return handle or "there"


def template_draft(row) -> str:
    brand = _brand(row)
    about = (row["description"] or "").strip()
    keywords = [k for k in (row["keywords"] or []) if k][:3]
    topics = f" on {', '.join(keywords[:-1])} and {keywords[-1]}" if len(keywords) > 1 else (
        f" on {keywords[0]}" if keywords else "")
    return "\n".join([
        f"Hi {_greeting_name(row)},",
        "",
        f"I'm writing from {brand} ({row['campaign_url']}).{(' ' + about) if about else ''}",
        "",
        f"We found you through {row['page_url']} and think your work{topics} would be a great fit "
        f"for us. Would you be open to a short chat about working together?",
        "",
        "Best,",
        f"The {brand} team",
    ])


def llm_messages(row) -> list[dict[str, str]]:
    facts = [
        f"Brand: {_brand(row)}",
        f"Website: {row['campaign_url']}",
        f"What the brand says about itself: {row['description'] or '(nothing)'}",
        f"Keywords: {', '.join(row['keywords'] or []) or '(none)'}",
        f"Write in the language: {row['language'] or 'en'}",
        f"Contact: {row['handle'] or row['value']} ({row['kind']}: {row['value']})",
        f"Found on the brand's page: {row['page_url']}",
    ]
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "\n".join(facts) + "\n\nWrite the first message."}]


async def draft(job: Job, ctx: Context) -> None:
    campaign_id = campaign_of(job)
    contact_id = payload_id(job, "contact_id")
    row = await ctx.db.fetchrow(*statement("draft_context").bind(contact_id=contact_id,
                                                                 campaign_id=campaign_id))
    if row is None:
        raise not_in_campaign("contact", contact_id)
    if row["draft_id"] is not None:
        return  # already has its draft: nothing to pay for
    plan = await allowances.campaign_plan(ctx.db, campaign_id)
    charged = await allowances.charge_credit(ctx.db, campaign_id, job.id, plan.daily_credits)
    if charged == allowances.SPENT:
        raise DeferJob(next_utc_day(), f"the {plan.label} plan's {plan.daily_credits} credits a day are used up")
    if charged == allowances.CHARGED:
        ctx.count("credits_spent")
    prompt_tokens = completion_tokens = 0
    settings = outreach_settings()
    if settings.llm_enabled:
        answer = await llm.chat(settings, llm_messages(row))
        body, model = answer.text, answer.model
        prompt_tokens, completion_tokens = answer.prompt_tokens, answer.completion_tokens
        ctx.count("llm_calls")
        ctx.count("tokens_spent", answer.tokens)
    else:
        body, model = template_draft(row), TEMPLATE
    written = await ctx.db.fetchval(*statement("draft_insert").bind(campaign_id=campaign_id,
                                                                    contact_id=contact_id, job_id=job.id,
                                                                    body=body, model=model,
                                                                    prompt_tokens=prompt_tokens,
                                                                    completion_tokens=completion_tokens))
    if written:
        ctx.count("drafts_written")


async def refund_draft(job: Job, ctx: Context) -> None:
    """gave_up and cancelled: hand the job's credit back, once. ctx.db is the transaction
    that fails (or cancels) the job, so the refund commits with it or not at all."""
    if await ctx.db.fetchval(*statement("draft_by_job").bind(job_id=job.id)) is not None:
        return  # the draft was delivered; the job died afterwards
    refunded = await allowances.refund_credit(ctx.db, job.id)
    if refunded:
        ctx.count("credits_refunded", refunded)
