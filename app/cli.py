"""python -m app ...: a thin adapter over the engine and the pipeline.

Bad input or a broken setup prints one line on stderr and exits 2, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from datetime import datetime, timedelta, timezone

import asyncpg

from app import cli_accounts
from app.engine import jobs as q
from app.engine.db import connect, create_pool
from app.engine.migrate import migrate
from app.pipeline.loop import run_pipeline
from app.pipeline.registry import StageConfigError, load_stages
from app.outreach.plans import PLANS
from app.settings import Settings, SettingsError, get_settings


class CliError(Exception):
    pass


def _fail(message: str):
    raise CliError(message)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app", description="Skiplock: jobs in Postgres.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="apply the schema migrations (safe to run twice or at once)")
    e = sub.add_parser("enqueue", help="enqueue one job")
    e.add_argument("type", help="the job type (a stage's type)")
    e.add_argument("--payload", default="{}", help="a JSON object")
    e.add_argument("--dedupe-key", help="skip if an open job has this key")
    e.add_argument("--campaign", help="the campaign id the job belongs to")
    e.add_argument("--in", dest="delay", type=float, default=0.0, metavar="SECONDS",
                   help="run no sooner than this many seconds from now")
    r = sub.add_parser("run-once", help="run the pipeline once and print its summary")
    r.add_argument("--budget", type=float, help="seconds to keep claiming (capped by the setting)")
    r.add_argument("--trigger", default="manual", help="recorded in the runs row")
    sub.add_parser("worker", help="run the pipeline continuously (for a container); SIGTERM stops it")
    c = sub.add_parser("campaign", help="campaigns of the example pipeline")
    csub = c.add_subparsers(dest="campaign_command", required=True)
    ca = csub.add_parser("add", help="add a campaign for a site and queue its brief")
    ca.add_argument("url", help="the site's home page, like https://example.com")
    ca.add_argument("--owner", help="the owner's e-mail (created when new; default DEFAULT_OWNER_EMAIL)")
    ca.add_argument("--plan", choices=list(PLANS), help="the plan of a new owner (default: free)")
    k = sub.add_parser("contacts", help="the contacts a campaign's pipeline found, as a table")
    k.add_argument("campaign_id", help="the campaign id (a uuid)")
    k.add_argument("--drafts", action="store_true", help="print each contact's drafted message too")
    cli_accounts.add_parsers(sub)
    return p


async def database_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    from app.devdb import local_database_url
    return await local_database_url()


def _payload(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--payload is not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise CliError("--payload must be a JSON object, like '{\"url\": \"https://example.com\"}'")
    return value


def _campaign(text: str | None, flag: str = "--campaign ") -> uuid.UUID | None:
    if text is None:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        raise CliError(f"{flag}{text!r} is not a campaign id (a uuid)") from None


async def _enqueue(args, settings: Settings, dsn: str) -> dict:
    known = [s.type for s in load_stages(settings.pipeline_stages)]
    if args.type not in known:
        raise CliError(f"unknown job type {args.type!r}; the stages are: {', '.join(known) or 'none'}")
    if args.delay < 0:
        raise CliError("--in must be zero or more seconds")
    job = q.NewJob(type=args.type, payload=_payload(args.payload), dedupe_key=args.dedupe_key,
                   campaign_id=_campaign(args.campaign),
                   run_after=datetime.now(timezone.utc) + timedelta(seconds=args.delay) if args.delay else None)
    conn = await connect(dsn)
    try:
        job_id = await q.enqueue(conn, job)
    except asyncpg.ForeignKeyViolationError:
        raise CliError(f"no campaign with id {job.campaign_id}") from None
    finally:
        await conn.close()
    return {"id": str(job_id) if job_id else None, "deduplicated": job_id is None}


async def _run_once(args, settings: Settings, dsn: str) -> dict:
    if args.budget is not None and args.budget <= 0:
        raise CliError("--budget must be a positive number of seconds")
    stages = load_stages(settings.pipeline_stages)
    pool = await create_pool(dsn, settings.db_pool_size)
    try:
        result = await run_pipeline(pool, stages, trigger=args.trigger, budget=args.budget,
                                    settings=settings)
    finally:
        await pool.close()
    return result.to_json()


async def _worker(settings: Settings, dsn: str) -> None:
    import signal

    from app.pipeline.worker import Worker

    stages = load_stages(settings.pipeline_stages)
    pool = await create_pool(dsn, settings.db_pool_size)
    worker = Worker(pool, dsn, stages, settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run()
    finally:
        await pool.close()


async def _campaign_add(args, settings: Settings, dsn: str) -> dict:
    from app.outreach.brief import BRIEF
    from app.outreach.campaigns import CampaignInputError, add_campaign

    known = [s.type for s in load_stages(settings.pipeline_stages)]
    if BRIEF not in known:
        raise CliError(f"a campaign starts the example pipeline (app.outreach:STAGES), but PIPELINE_STAGES="
                       f"{settings.pipeline_stages} has no {BRIEF!r} stage, so nothing would run it")
    pool = await create_pool(dsn, 2)
    try:
        made = await add_campaign(pool, args.url, owner=args.owner or settings.default_owner_email,
                                  plan=args.plan)
    except CampaignInputError as exc:
        raise CliError(str(exc)) from None
    finally:
        await pool.close()
    return {"id": str(made["id"]), "name": made["name"], "url": made["url"], "status": made["status"],
            "owner": made["owner"], "plan": made["plan"],
            "briefJob": str(made["brief_job"]) if made["brief_job"] else None}


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


async def _contacts(args, dsn: str) -> str:
    from app.outreach.store import get_campaign, list_contacts
    from app.outreach.urls import path_of

    campaign_id = _campaign(args.campaign_id, "")
    conn = await connect(dsn)
    try:
        campaign = await get_campaign(conn, campaign_id)
        if campaign is None:
            raise CliError(f"no campaign with id {campaign_id}")
        contacts, after = [], None
        while True:  # keyset pages, so a big campaign is never one huge query
            page = await list_contacts(conn, campaign_id, after=after, limit=500)
            contacts += page
            if len(page) < 500:
                break
            after = (page[-1]["created_at"], page[-1]["id"])
    finally:
        await conn.close()
    owner = campaign["owner"] or "no owner"
    head = [f"{campaign['url']}  ({campaign['plan']} plan, {owner}, {campaign['status']})",
            f"{len(contacts)} contacts, {campaign['drafts']} drafts; "
            f"pages: {campaign['pages_fetched']} fetched, {campaign['pages_queued']} queued"]
    if not contacts:
        return "\n".join(head + ["", "No contacts yet: the pipeline finds them as it crawls."])
    rows = [["KIND", "CONTACT", "FOUND ON", "DRAFT"]]
    rows += [[c["kind"], c["value"], path_of(c["page_url"]), "written" if c["draft_id"] else "queued"]
             for c in contacts]
    out = head + ["", _table(rows)]
    if args.drafts:
        for c in contacts:
            if c["draft"]:
                out += ["", f"--- {c['value']} ({c['draft_model']})", c["draft"]]
    return "\n".join(out)


async def _main(args) -> int:
    settings = get_settings()
    dsn = await database_url(settings)
    if args.command == "migrate":
        conn = await connect(dsn)
        try:
            applied = await migrate(conn)
        finally:
            await conn.close()
        print(json.dumps({"applied": applied}))
    elif args.command == "enqueue":
        print(json.dumps(await _enqueue(args, settings, dsn)))
    elif args.command == "worker":
        await _worker(settings, dsn)
    elif args.command == "campaign":
        print(json.dumps(await _campaign_add(args, settings, dsn)))
    elif args.command == "contacts":
        print(await _contacts(args, dsn))
    elif args.command in ("user", "key"):
        print(await cli_accounts.run(args, dsn, _fail))
    elif args.command == "run-once":
        result = await _run_once(args, settings, dsn)
        print(json.dumps(result, indent=2))
        return 1 if result["stopReason"] == "error" else 0
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return asyncio.run(_main(args))
    except (CliError, SettingsError, StageConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        print(f"error: database unreachable or failing: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
    return 2
