"""Campaigns of the example pipeline over HTTP: add one (its owner is created when new
and its brief is queued; the same URL again answers with the one there), list them,
read one with what the pipeline found so far, pause and resume one, and page through
its contacts. Thin over app.outreach.campaigns and app.outreach.store."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.deps import pool_of
from app.api.errors import ApiError, invalid_request
from app.api.pagination import ListQuery, enum_param
from app.api.batches import CREATE_RESPONSES, BatchCreated, BatchIn, create_batch_in_lane
from app.api.params import only_params
from app.outreach import allowances
from app.outreach import store
from app.outreach.plans import PLANS
from app.outreach.settings import outreach_settings
from app.outreach.brief import BRIEF
from app.outreach.payloads import MAX_URL_LENGTH, URL_PATTERN, address_problem, url_shape_problem
from app.json_values import iso
from app.outreach.campaign_json import listed_json
from app.outreach.campaigns import CampaignInputError, CampaignLimitError, PlanConflictError, add_campaign

router = APIRouter(tags=["campaigns"])

CONTACT_LIST = ListQuery("campaign_contacts")
CAMPAIGN_LIST = ListQuery("campaigns", [enum_param("status", "only campaigns in this status",
                                                   store.CAMPAIGN_STATUSES)])

EMAIL_PATTERN = r"^[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]{1,255}$"
PlanName = Literal[tuple(PLANS)]  # type: ignore[valid-type]


class CampaignIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"url": "https://example.com"}]})
    url: str = Field(max_length=MAX_URL_LENGTH, json_schema_extra={"pattern": URL_PATTERN},
                     description="the site's home page, like https://example.com")
    owner: str | None = Field(None, max_length=320, json_schema_extra={"pattern": EMAIL_PATTERN},
                              description="the owner's e-mail; created when new (default DEFAULT_OWNER_EMAIL)")
    plan: PlanName | None = Field(None, description="a new owner's plan (default free); an existing owner "
                                                    "keeps theirs")

    # the patterns, checked here to say in words what is wrong
    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        why = url_shape_problem(value)
        if why:
            raise ValueError(why)
        return value

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str | None) -> str | None:
        if value is not None and (not _printable(value) or not re.fullmatch(EMAIL_PATTERN, value)):
            raise ValueError("must be an e-mail address, like ann@example.com")
        return value


def _printable(value: str) -> bool:
    try:
        value.encode("utf-8")  # a lone surrogate cannot be stored
    except UnicodeEncodeError:
        return False
    return True


class BriefOut(BaseModel):
    title: str
    description: str
    keywords: list[str]
    language: str | None
    note: str | None = Field(description="why there is no crawl, when there is none")
    updatedAt: datetime


class CampaignCounts(BaseModel):
    pagesFound: int
    pagesFetched: int
    pagesQueued: int
    contacts: int
    drafts: int


class CampaignToday(BaseModel):
    pages: int = Field(description="pages fetched today (UTC) for this campaign")
    credits: int = Field(description="credits spent today (UTC), refunds given back")
    dailyPages: int | None = Field(description="the plan's daily page allowance")
    dailyCredits: int | None = Field(description="the plan's daily credits")


class CampaignOut(BaseModel):
    id: uuid.UUID
    name: str
    url: str | None
    status: str
    owner: str | None
    plan: str = Field(description="the owner's plan, which orders the campaign's work and sets its allowances")
    createdAt: datetime
    brief: BriefOut | None = Field(description="null until the brief stage has run")
    counts: CampaignCounts
    today: CampaignToday
    briefJob: uuid.UUID | None = Field(None, description="on creation: the queued brief job")
    created: bool | None = Field(None, description="POST only: false when the owner had a campaign on "
                                                   "this URL already (that one is the answer, 200)")


class CampaignListed(BaseModel):
    id: uuid.UUID
    name: str
    url: str | None
    status: str
    owner: str | None
    plan: str
    createdAt: datetime
    counts: CampaignCounts


class CampaignPage(BaseModel):
    data: list[CampaignListed] = Field(description="newest first")
    nextCursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null on the last")


class DraftOut(BaseModel):
    body: str
    model: str = Field(description="'template', or the LLM model that wrote it")
    createdAt: datetime


class ContactOut(BaseModel):
    id: uuid.UUID
    kind: str = Field(description="email, youtube, instagram, tiktok, x, twitch, linkedin, facebook")
    value: str = Field(description="the address, or the profile's URL")
    handle: str
    pageUrl: str = Field(description="the page it was found on")
    createdAt: datetime
    draft: DraftOut | None = Field(description="the drafted first message, once written")


class ContactPage(BaseModel):
    data: list[ContactOut] = Field(description="newest first")
    nextCursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null on the last")


async def _campaign_json(pool, campaign_id: uuid.UUID) -> dict[str, Any]:
    row = await store.get_campaign(pool, campaign_id)
    if row is None:
        raise ApiError(404, "not_found", f"no campaign {campaign_id}")
    plan = PLANS.get(row["plan"])
    used = await allowances.usage_today(pool, campaign_id)
    brief = None
    if row["brief_updated_at"] is not None:
        brief = {"title": row["brief_title"], "description": row["brief_description"],
                 "keywords": row["brief_keywords"], "language": row["brief_language"],
                 "note": row["brief_note"], "updatedAt": iso(row["brief_updated_at"])}
    return {
        **listed_json(row),
        "brief": brief,
        "today": {"pages": used["pages"], "credits": used["credits"],
                  "dailyPages": plan.daily_pages if plan else None,
                  "dailyCredits": plan.daily_credits if plan else None},
    }


def _contact_json(r) -> dict[str, Any]:
    return {
        "id": str(r["id"]), "kind": r["kind"], "value": r["value"], "handle": r["handle"],
        "pageUrl": r["page_url"], "createdAt": iso(r["created_at"]),
        "draft": ({"body": r["draft"], "model": r["draft_model"], "createdAt": iso(r["drafted_at"])}
                  if r["draft_id"] else None),
    }


@router.post("/campaigns", status_code=201, response_model=CampaignOut, summary="Add a campaign",
             dependencies=[Depends(only_params())],
             responses={200: {"model": CampaignOut,
                              "description": "the owner has a campaign on this URL already: that one, "
                                             "created false (nothing new is queued)"},
                        409: {"description": "plan_conflict: the owner is on another plan; "
                                             "campaign_limit: the owner has as many campaigns as "
                                             "their plan allows"},
                        422: {"description": "invalid_request: not an http(s) URL, a host that is not "
                                             "a public address, not an e-mail address, an unknown plan, "
                                             "or a malformed body"},
                        503: {"description": "this deployment's stages have no 'brief' stage"}})
async def create_campaign(body: CampaignIn, request: Request):
    """A campaign for a site. Its owner is created (on `plan`) when new, and its first job,
    `brief`, is queued: the next run reads the home page and starts the crawl. An owner has
    one campaign per URL: asking again answers 200 with that one, `created` false."""
    runtime = request.app.state.runtime
    if BRIEF not in {s.type for s in runtime.stages}:
        raise ApiError(503, "unavailable",
                       f"this deployment's stages ({runtime.settings.pipeline_stages}) have no {BRIEF!r} "
                       "stage, so nothing would run a new campaign")
    refused = address_problem(body.url, runtime.settings)
    if refused:
        raise invalid_request([(("body", "url"), refused)])
    pool = await pool_of(request)
    actor = request.state.actor
    owner_id = None
    if actor.is_admin:
        owner = body.owner or outreach_settings().default_owner_email
    elif body.owner and body.owner.strip().lower() != actor.email:
        raise ApiError(403, "forbidden", "a user's API key adds campaigns to its own account only; "
                                         "leave out 'owner' (or use an admin key)")
    else:
        owner, owner_id = actor.email, actor.user_id
    try:
        made = await add_campaign(pool, body.url, owner=owner, plan=body.plan, owner_id=owner_id)
    except PlanConflictError as exc:
        raise ApiError(409, "plan_conflict", str(exc)) from None
    except CampaignLimitError as exc:
        raise ApiError(409, "campaign_limit", str(exc),
                       {"plan": exc.plan.name, "maxCampaigns": exc.plan.max_campaigns,
                        "campaigns": exc.campaigns}) from None
    except CampaignInputError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    out = await _campaign_json(pool, made["id"])
    out["briefJob"] = str(made["brief_job"]) if made["brief_job"] else None
    out["created"] = made["created"]
    return JSONResponse(status_code=201 if made["created"] else 200, content=out,
                        headers={"Location": f"/campaigns/{made['id']}"})


@router.get("/campaigns", response_model=CampaignPage, summary="List campaigns, newest first",
            openapi_extra={"parameters": CAMPAIGN_LIST.openapi()})
async def list_campaigns(request: Request) -> dict[str, Any]:
    """The caller's campaigns (every one with an admin key), newest first, in keyset pages
    over (created_at, id); no total: follow nextCursor until it is null."""
    page = CAMPAIGN_LIST.parse(request)
    rows = await store.list_campaigns(await pool_of(request), status=page.filters["status"],
                                      after=page.after, limit=page.limit + 1,
                                      own=not request.state.actor.is_admin)
    return page.answer(rows, listed_json, lambda r: (r["created_at"], r["id"]))


_STATUS_RESPONSES = {404: {"description": "no such campaign"}}


@router.post("/campaigns/{campaign_id}/pause", response_model=CampaignOut, summary="Pause a campaign",
             dependencies=[Depends(only_params())], responses=_STATUS_RESPONSES)
async def pause_campaign(campaign_id: uuid.UUID, request: Request) -> dict[str, Any]:
    """Stop claiming the campaign's jobs: its lane is skipped until it is resumed (a job
    already running finishes). Pausing a paused campaign changes nothing."""
    return await _set_status(request, campaign_id, "paused")


@router.post("/campaigns/{campaign_id}/resume", response_model=CampaignOut, summary="Resume a campaign",
             dependencies=[Depends(only_params())], responses=_STATUS_RESPONSES)
async def resume_campaign(campaign_id: uuid.UUID, request: Request) -> dict[str, Any]:
    """Claim the campaign's jobs again, in their turn."""
    return await _set_status(request, campaign_id, "active")


async def _set_status(request: Request, campaign_id: uuid.UUID, status: str) -> dict[str, Any]:
    pool = await pool_of(request)
    if await store.set_campaign_status(pool, campaign_id, status) is None:
        raise ApiError(404, "not_found", f"no campaign {campaign_id}")
    return await _campaign_json(pool, campaign_id)


@router.get("/campaigns/{campaign_id}", response_model=CampaignOut, summary="Read a campaign",
            dependencies=[Depends(only_params())], responses={404: {"description": "no such campaign"}})
async def get_campaign(campaign_id: uuid.UUID, request: Request) -> dict[str, Any]:
    """The campaign, its owner and plan, its brief, what the pipeline found so far, and
    what it used today of its plan's allowances."""
    return await _campaign_json(await pool_of(request), campaign_id)


@router.get("/campaigns/{campaign_id}/contacts", response_model=ContactPage, summary="List a campaign's contacts",
            openapi_extra={"parameters": CONTACT_LIST.openapi()},
            responses={404: {"description": "no such campaign"}})
async def list_contacts(campaign_id: uuid.UUID, request: Request) -> dict[str, Any]:
    """The contacts the pipeline found, newest first, each with its draft once written.
    Keyset pages over (created_at, id); no total."""
    page = CONTACT_LIST.parse(request)
    pool = await pool_of(request)
    if not await store.campaign_exists(pool, campaign_id):
        raise ApiError(404, "not_found", f"no campaign {campaign_id}")
    rows = await store.list_contacts(pool, campaign_id, after=page.after, limit=page.limit + 1,
                                     newest_first=True)
    return page.answer(rows, _contact_json, lambda r: (r["created_at"], r["id"]))


@router.post("/campaigns/{campaign_id}/batches", status_code=201, response_model=BatchCreated,
             summary="Start a batch of work on a campaign", dependencies=[Depends(only_params())],
             responses=CREATE_RESPONSES)
async def create_campaign_batch(campaign_id: uuid.UUID, body: BatchIn, request: Request) -> JSONResponse:
    """One job per requested type in the campaign's lane (a campaign's id is its lane's),
    skipping types that already have an open job there."""
    return await create_batch_in_lane(campaign_id, body, request, "campaign")
