"""The example's CLI commands, installed into `skiplock` by the plug-in:

    campaign add URL [--owner EMAIL] [--plan PLAN]   a campaign, and its brief queued (the
                                                     owner's campaign on URL if there is one)
    campaign ls [--status S] [--limit N] [--json]    campaigns, newest first, as a table
    campaign pause ID / campaign resume ID           stop / restart claiming its jobs
    contacts CAMPAIGN_ID [--limit N] [--drafts]      what the pipeline found, as a table
    plan set EMAIL PLAN                              a user's plan (the user is made if new)

Changes are made as the actor `system`/`cli`, so the audit log says where they came from.
"""

from __future__ import annotations

import argparse
import json
import uuid

from app.cli.output import printable
from app.engine import accounts
from app.engine.db import connect
from app.engine.tenancy import Actor, act_as
from app.outreach.campaign_json import listed_json
from app.outreach.campaigns import CampaignInputError, add_campaign_in
from app.outreach.plans import PLANS
from app.outreach.settings import outreach_settings
from app.outreach.store import (CAMPAIGN_STATUSES, get_campaign, list_campaigns, list_contacts,
                                 set_campaign_status, set_plan)
from app.outreach.urls import path_of
from app.plugin import CommandError, CommandFailed
from app.whole_numbers import whole_number

LIST_LIMIT = 100
CLI_ACTOR = Actor("system", "cli")


def add_commands(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("campaign", help="campaigns of the example pipeline")
    csub = c.add_subparsers(dest="campaign_command", required=True)
    ca = csub.add_parser("add", help="add a campaign for a site and queue its brief")
    ca.add_argument("url", help="the site's home page, like https://example.com")
    ca.add_argument("--owner", help="the owner's e-mail (created when new; default DEFAULT_OWNER_EMAIL)")
    ca.add_argument("--plan", choices=list(PLANS), help="the plan of a new owner (default: free)")
    ca.set_defaults(handler=campaign_add)
    cl = csub.add_parser("ls", help="campaigns, newest first, as a table")
    cl.add_argument("--status", choices=CAMPAIGN_STATUSES, help="only campaigns in this status")
    cl.add_argument("--limit", type=_positive, default=LIST_LIMIT, help=f"at most this many (default {LIST_LIMIT})")
    cl.add_argument("--json", action="store_true", help="print JSON (GET /campaigns's shape) instead of a table")
    cl.set_defaults(handler=campaign_ls)
    for name, status, what in (("pause", "paused", "stop claiming its jobs (a running one finishes)"),
                               ("resume", "active", "claim its jobs again")):
        cs = csub.add_parser(name, help=f"{name} a campaign: {what}")
        cs.add_argument("campaign_id", help="the campaign id (a uuid)")
        cs.set_defaults(handler=campaign_set_status, status=status)
    k = sub.add_parser("contacts", help="the contacts a campaign's pipeline found, as a table")
    k.add_argument("campaign_id", help="the campaign id (a uuid)")
    k.add_argument("--limit", type=_positive, default=LIST_LIMIT,
                   help=f"at most this many, the first found first (default {LIST_LIMIT})")
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
            user_id = await accounts.add_user(conn, email)
            await set_plan(conn, user_id, args.plan)
    finally:
        await conn.close()
    return json.dumps({"id": str(user_id), "email": email, "plan": args.plan})


def _positive(text: str) -> int:
    number = whole_number(text)
    if number is None or not 1 <= number <= 10_000:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 10000 (got {text!r})")
    return number


def _campaign_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise CommandError(f"{text!r} is not a campaign id (a uuid)") from None


async def campaign_add(args, settings, dsn: str) -> str:
    conn = await connect(dsn)
    try:
        async with conn.transaction():
            await act_as(conn, CLI_ACTOR)
            made = await add_campaign_in(conn, args.url, plan=args.plan,
                                         owner=args.owner or outreach_settings().default_owner_email)
    except CampaignInputError as exc:
        raise CommandError(str(exc)) from None
    finally:
        await conn.close()
    return json.dumps({"id": str(made["id"]), "name": made["name"], "url": made["url"],
                       "status": made["status"], "owner": made["owner"], "plan": made["plan"],
                       "created": made["created"],
                       "briefJob": str(made["brief_job"]) if made["brief_job"] else None})


async def campaign_ls(args, settings, dsn: str) -> str:
    conn = await connect(dsn)
    try:
        found = await list_campaigns(conn, status=args.status, limit=args.limit + 1)
    finally:
        await conn.close()
    shown = found[:args.limit]
    if args.json:  # GET /campaigns's shape
        return json.dumps({"data": [listed_json(c) for c in shown]}, indent=2)
    if not shown:
        return "No campaigns yet: add one with `campaign add URL`."
    rows = [["ID", "STATUS", "PLAN", "OWNER", "PAGES", "CONTACTS", "DRAFTS", "CREATED", "URL"]]
    rows += [[str(c["id"]), c["status"], c["plan"], c["owner"] or "-", str(c["pages_fetched"]),
              str(c["contacts"]), str(c["drafts"]), c["created_at"].strftime("%Y-%m-%d %H:%M"), c["url"] or "-"]
             for c in shown]
    more = [f"(the newest {args.limit}; --limit for more)"] if len(found) > args.limit else []
    return "\n".join([_table(rows), *more])


async def campaign_set_status(args, settings, dsn: str) -> str:
    campaign_id = _campaign_id(args.campaign_id)
    conn = await connect(dsn)
    try:
        async with conn.transaction():
            await act_as(conn, CLI_ACTOR)
            changed = await set_campaign_status(conn, campaign_id, args.status)
    finally:
        await conn.close()
    if changed is None:
        raise CommandFailed(f"no campaign with id {campaign_id}")  # exit 1, as `jobs show`
    word = "paused" if args.status == "paused" else "resumed"
    return f"campaign {campaign_id} {word}" if changed else f"campaign {campaign_id} was {args.status} already"


def _table(rows: list[list[str]]) -> str:
    rows = [[printable(cell) for cell in r] for r in rows]  # URLs, contacts and pages come from crawled sites
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


async def contacts(args, settings, dsn: str) -> str:
    campaign_id = _campaign_id(args.campaign_id)
    conn = await connect(dsn)
    try:
        campaign = await get_campaign(conn, campaign_id)
        if campaign is None:
            raise CommandFailed(f"no campaign with id {campaign_id}")  # exit 1, as `jobs show`
        # one more than asked for says whether there are more: one bounded query, however
        # many contacts a campaign has
        found = await list_contacts(conn, campaign_id, limit=args.limit + 1)
    finally:
        await conn.close()
    shown = found[:args.limit]
    owner = campaign["owner"] or "no owner"
    head = [printable(f"{campaign['url']}  ({campaign['plan']} plan, {owner}, {campaign['status']})"),
            f"{campaign['contacts']} contacts, {campaign['drafts']} drafts; "
            f"pages: {campaign['pages_fetched']} fetched, {campaign['pages_queued']} queued"]
    if not shown:
        return "\n".join(head + ["", "No contacts yet: the pipeline finds them as it crawls."])
    rows = [["KIND", "CONTACT", "FOUND ON", "DRAFT"]]
    rows += [[c["kind"], c["value"], path_of(c["page_url"]), "written" if c["draft_id"] else "queued"]
             for c in shown]
    more = [f"(the first {args.limit} of {campaign['contacts']}; --limit for more)"] if len(found) > args.limit else []
    out = head + ["", _table(rows), *more]
    if args.drafts:
        for c in shown:
            if c["draft"]:
                # a draft is written from the crawled site's own words: its lines stay, its escapes do not
                out += ["", printable(f"--- {c['value']} ({c['draft_model']})"), printable(c["draft"], keep="\n")]
    return "\n".join(out)
