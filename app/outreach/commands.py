"""The example's CLI commands, installed into `skiplock` by the plug-in:

    campaign add URL [--owner EMAIL] [--plan PLAN]   a campaign, and its brief queued
    contacts CAMPAIGN_ID [--drafts]                  what the pipeline found, as a table
    plan set EMAIL PLAN                              a user's plan (the user is made if new)

Changes are made as the actor `system`/`cli`, so the audit log says where they came from.
"""

from __future__ import annotations

import argparse
import json
import uuid

from app.engine import accounts
from app.engine.db import connect, create_pool
from app.engine.tenancy import Actor, act_as
from app.outreach.campaigns import CampaignInputError, add_campaign
from app.outreach.plans import PLANS
from app.outreach.store import get_campaign, list_contacts
from app.outreach.urls import path_of
from app.plugin import CommandError

CONTACTS_PAGE = 500
CLI_ACTOR = Actor("system", "cli")


def add_commands(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("campaign", help="campaigns of the example pipeline")
    csub = c.add_subparsers(dest="campaign_command", required=True)
    ca = csub.add_parser("add", help="add a campaign for a site and queue its brief")
    ca.add_argument("url", help="the site's home page, like https://example.com")
    ca.add_argument("--owner", help="the owner's e-mail (created when new; default DEFAULT_OWNER_EMAIL)")
    ca.add_argument("--plan", choices=list(PLANS), help="the plan of a new owner (default: free)")
    ca.set_defaults(handler=campaign_add)
    k = sub.add_parser("contacts", help="the contacts a campaign's pipeline found, as a table")
    k.add_argument("campaign_id", help="the campaign id (a uuid)")
    k.add_argument("--drafts", action="store_true", help="print each contact's drafted message too")
    k.set_defaults(handler=contacts)
    p = sub.add_parser("plan", help="users' plans (the example's: priority, allowances, limits)")
    psub = p.add_subparsers(dest="plan_command", required=True)
    ps = psub.add_parser("set", help="set a user's plan (the user is made if new)")
    ps.add_argument("email")
    ps.add_argument("plan", choices=list(PLANS))
    ps.set_defaults(handler=plan_set)


async def plan_set(args, settings, dsn: str) -> str:
    try:
        email = accounts.check_email(args.email)
    except accounts.AccountError as exc:
        raise CommandError(str(exc)) from None
    conn = await connect(dsn)
    try:
        async with conn.transaction():
            await act_as(conn, CLI_ACTOR)
            user_id = await accounts.add_user(conn, email, args.plan)
    finally:
        await conn.close()
    return json.dumps({"id": str(user_id), "email": email, "plan": args.plan})


async def campaign_add(args, settings, dsn: str) -> str:
    pool = await create_pool(dsn, 2)
    try:
        made = await add_campaign(pool, args.url, owner=args.owner or settings.default_owner_email,
                                  plan=args.plan)
    except CampaignInputError as exc:
        raise CommandError(str(exc)) from None
    finally:
        await pool.close()
    return json.dumps({"id": str(made["id"]), "name": made["name"], "url": made["url"],
                       "status": made["status"], "owner": made["owner"], "plan": made["plan"],
                       "briefJob": str(made["brief_job"]) if made["brief_job"] else None})


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


async def contacts(args, settings, dsn: str) -> str:
    try:
        campaign_id = uuid.UUID(args.campaign_id)
    except ValueError:
        raise CommandError(f"{args.campaign_id!r} is not a campaign id (a uuid)") from None
    conn = await connect(dsn)
    try:
        campaign = await get_campaign(conn, campaign_id)
        if campaign is None:
            raise CommandError(f"no campaign with id {campaign_id}")
        found, after = [], None
        while True:  # keyset pages, so a big campaign is never one huge query
            page = await list_contacts(conn, campaign_id, after=after, limit=CONTACTS_PAGE)
            found += page
            if len(page) < CONTACTS_PAGE:
                break
            after = (page[-1]["created_at"], page[-1]["id"])
    finally:
        await conn.close()
    owner = campaign["owner"] or "no owner"
    head = [f"{campaign['url']}  ({campaign['plan']} plan, {owner}, {campaign['status']})",
            f"{len(found)} contacts, {campaign['drafts']} drafts; "
            f"pages: {campaign['pages_fetched']} fetched, {campaign['pages_queued']} queued"]
    if not found:
        return "\n".join(head + ["", "No contacts yet: the pipeline finds them as it crawls."])
    rows = [["KIND", "CONTACT", "FOUND ON", "DRAFT"]]
    rows += [[c["kind"], c["value"], path_of(c["page_url"]), "written" if c["draft_id"] else "queued"]
             for c in found]
    out = head + ["", _table(rows)]
    if args.drafts:
        for c in found:
            if c["draft"]:
                out += ["", f"--- {c['value']} ({c['draft_model']})", c["draft"]]
    return "\n".join(out)
