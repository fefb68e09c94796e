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
from app.engine.db import connect
from app.engine.migrate import migrate
from app.pipeline.payloads import PayloadRefused, check_payload
from app.pipeline.registry import StageConfigError
from app.plugin import CommandError, Plugin, load_plugins
from app.runtime import (DATABASE_ERRORS, DatabaseUnavailable, Runtime, configured_stages, database_url,
                         run_json)
from app.settings import Settings, SettingsError, get_settings


class CliError(Exception):
    pass


MAX_DELAY_SECONDS = 10 * 366 * 24 * 3600  # `enqueue --in`: any later is a mistake (or a date overflow)


def _fail(message: str):
    raise CliError(message)


def _parser(plugins: list[Plugin]) -> argparse.ArgumentParser:
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
    cli_accounts.add_parsers(sub)
    for plugin in plugins:  # the plug-ins' own commands (the example's: campaign, contacts)
        if plugin.commands is not None:
            plugin.commands(sub)
    return p


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


async def _enqueue(args, settings: Settings, plugins: list[Plugin], dsn: str) -> dict:
    stages = {s.type: s for s in configured_stages(settings, plugins)}
    if args.type not in stages:
        raise CliError(f"unknown job type {args.type!r}; the stages are: {', '.join(stages) or 'none'}")
    if not 0 <= args.delay <= MAX_DELAY_SECONDS:  # NaN fails both
        raise CliError(f"--in must be zero or more seconds, at most {MAX_DELAY_SECONDS} (ten years)")
    try:
        payload = check_payload(_payload(args.payload), stages[args.type].payload,
                                max_bytes=settings.max_payload_bytes, context={"settings": settings})
    except PayloadRefused as exc:
        raise CliError(f"--payload does not fit the {args.type!r} stage: {exc}") from None
    job = q.NewJob(type=args.type, payload=payload, dedupe_key=args.dedupe_key,
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


async def _run_once(args, settings: Settings, plugins: list[Plugin]) -> dict:
    if args.budget is not None and args.budget <= 0:
        raise CliError("--budget must be a positive number of seconds")
    runtime = Runtime(settings, plugins=plugins, embedded_database=True)
    try:
        result = await runtime.run(args.trigger, args.budget)
    finally:
        await runtime.close()
    return run_json(result.row, result.budget_seconds)


async def _worker(settings: Settings, plugins: list[Plugin], dsn: str) -> None:
    import signal

    from app.pipeline.worker import Worker

    runtime = Runtime(settings, plugins=plugins, embedded_database=True)
    worker = Worker(await runtime.pool(), dsn, runtime.stages, settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run()
    finally:
        await runtime.close()


async def _main(args, settings: Settings, plugins: list[Plugin]) -> int:
    dsn = await database_url(settings, embedded=True)  # a command on your machine may start the embedded server
    if args.command == "migrate":
        conn = await connect(dsn)
        try:
            applied = await migrate(conn)
        finally:
            await conn.close()
        print(json.dumps({"applied": applied}))
    elif args.command == "enqueue":
        print(json.dumps(await _enqueue(args, settings, plugins, dsn)))
    elif args.command == "worker":
        await _worker(settings, plugins, dsn)
    elif getattr(args, "handler", None) is not None:  # a plug-in's command
        print(await args.handler(args, settings, dsn))
    elif args.command in ("user", "key"):
        print(await cli_accounts.run(args, dsn, _fail))
    elif args.command == "run-once":
        result = await _run_once(args, settings, plugins)
        print(json.dumps(result, indent=2))
        return 1 if result["stopReason"] == "error" else 0
    return 0


def main(argv: list[str] | None = None) -> int:
    try:  # the plug-ins named in the settings bring commands of their own
        settings = get_settings()
        plugins = load_plugins(settings.pipeline_plugins)
    except (SettingsError, StageConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = _parser(plugins).parse_args(argv)
    try:
        return asyncio.run(_main(args, settings, plugins))
    except (CliError, CommandError, SettingsError, StageConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except (DatabaseUnavailable, *DATABASE_ERRORS) as exc:
        print(f"error: database unreachable or failing: {exc.__cause__ or exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
    return 2
