"""`skiplock jobs …`, `runs …` and `batch show`: what an operator does over the API, from
a shell. The same engine functions as the routes (app.engine.job_admin, app.engine.runs,
app.engine.batches; a cancel ends through app.pipeline.outcomes, the stage's hook
included), in a transaction that names the actor `system`/`cli` for the audit log.

Reads print a table, or with --json the API's JSON shape (camelCase fields)."""

from __future__ import annotations

import argparse
import re
import shlex
import uuid
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, AsyncIterator

from app.cli.accounts import CLI_ACTOR
from app.cli.output import Column, ago, fields, printable, render, span, table
from app.engine import batches, job_admin
from app.engine import runs as run_log
from app.engine.db import connect
from app.engine.one_connection import OneConnection
from app.engine.tenancy import act_as
from app.pipeline import outcomes
from app.pipeline.maintenance import MAINTENANCE_TYPE
from app.pipeline.notifications import NOTIFY_TYPE
from app.pipeline import admission
from app.runtime import run_json
from app.whole_numbers import whole_number

STATUSES = ("pending", "running", "done", "failed", "cancelled", "waiting")
STOP_REASONS = (*run_log.STOP_REASONS, "running")  # 'running': not finished yet
MAX_LIMIT = 1000
DEFAULT_LIMIT = 20
DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*$")  # ASCII digits: float() takes no '²'
MAX_DURATION_DAYS = 36500  # a hundred years; PostgreSQL's interval and now() minus it overflow far later
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

JOB_COLUMNS: list[Column] = [("ID", "id"), ("TYPE", "type"), ("STATUS", "status"), ("ATTEMPTS", "attempts"),
                             ("CREATED", "created"), ("LAST ERROR", "lastError")]
RUN_COLUMNS: list[Column] = [("ID", "id"), ("TRIGGER", "trigger"), ("STOP", "stopReason"),
                             ("DONE", "jobsDone"), ("FAILED", "jobsFailed"), ("RETRIED", "jobsRetried"),
                             ("DEFERRED", "jobsDeferred"),
                             ("TOOK", "took"), ("STARTED", "started")]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    j = sub.add_parser("jobs", help="list, show, retry and cancel jobs (as GET/POST /jobs)")
    jsub = j.add_subparsers(dest="jobs_command", required=True)
    ls = jsub.add_parser("ls", help="jobs, newest first, a page at a time")
    ls.add_argument("--status", choices=STATUSES)
    ls.add_argument("--type", help="a stage's type (or maintenance / notify)")
    ls.add_argument("--lane", type=_uuid("--lane"), help="only jobs of this lane")
    ls.add_argument("--batch", type=_uuid("--batch"), help="only jobs of this batch")
    _page_args(ls)
    ls.set_defaults(run=jobs_ls)
    show = jsub.add_parser("show", help="one job, payload included")
    show.add_argument("id", type=_uuid("job id"))
    _json_arg(show)
    show.set_defaults(run=jobs_show)
    retry = jsub.add_parser("retry", help="a failed job back to pending (or, with --failed, all of them)")
    retry.add_argument("id", nargs="?", type=_uuid("job id"))
    retry.add_argument("--failed", action="store_true", help="every failed job, in one statement")
    retry.add_argument("--type", help="with --failed: only jobs of this type")
    retry.add_argument("--since", type=duration, metavar="DURATION",
                       help="with --failed: only jobs that failed in the last DURATION (90s, 30m, 2h, 7d)")
    retry.add_argument("--cancelled", action="store_true", help="with --failed: cancelled jobs too")
    _json_arg(retry)
    retry.set_defaults(run=jobs_retry)
    cancel = jsub.add_parser("cancel", help="cancel a job: a pending one now, a running one by the run "
                                           "holding it within about 2 s (its stage's hook runs)")
    cancel.add_argument("id", type=_uuid("job id"))
    _json_arg(cancel)
    cancel.set_defaults(run=jobs_cancel)

    r = sub.add_parser("runs", help="the invocation log (as GET /runs)")
    rsub = r.add_subparsers(dest="runs_command", required=True)
    rls = rsub.add_parser("ls", help="runs, newest first")
    rls.add_argument("--stop-reason", choices=STOP_REASONS)
    rls.add_argument("--trigger", help="cron, http, manual, worker, …")
    _page_args(rls)
    rls.set_defaults(run=runs_ls)
    rshow = rsub.add_parser("show", help="one run, its summary included")
    rshow.add_argument("id", type=_uuid("run id"))
    _json_arg(rshow)
    rshow.set_defaults(run=runs_show)

    b = sub.add_parser("batch", help="batches (as GET /batches/{id})")
    bsub = b.add_subparsers(dest="batch_command", required=True)
    bshow = bsub.add_parser("show", help="a batch: counts, progress and its jobs")
    bshow.add_argument("id", type=_uuid("batch id"))
    _json_arg(bshow)
    bshow.set_defaults(run=batch_show)


def _json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (the API's shape) instead of a table")


def _page_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=_limit, default=DEFAULT_LIMIT,
                   help=f"rows per page (1-{MAX_LIMIT}, default {DEFAULT_LIMIT})")
    p.add_argument("--after", type=_cursor, metavar="CURSOR", help="the page after this one (printed below a page)")
    _json_arg(p)


def _uuid(what: str):
    def parse(text: str) -> uuid.UUID:
        try:
            return uuid.UUID(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not a uuid") from None
    parse.__name__ = what  # argparse names the argument by it in "invalid … value"
    return parse


def _limit(text: str) -> int:
    limit = whole_number(text)
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"--limit must be a whole number from 1 to {MAX_LIMIT}")
    return limit


def signed_whole(what: str, low: int, high: int):
    """An argument that is a whole number from low to high ('-' before the digits: below zero)."""
    def parse(text: str) -> int:
        negative = text.startswith("-")
        n = whole_number(text[1:] if negative else text)
        if n is None or not low <= (value := -n if negative else n) <= high:
            raise argparse.ArgumentTypeError(f"{what} {text!r} must be a whole number from {low} to {high}")
        return value
    parse.__name__ = what
    return parse


def duration(text: str) -> float:
    """'90s', '30m', '2h', '7d' or plain seconds."""
    m = DURATION.match(text)
    if m is None or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 30m, 2h or 7d")
    seconds = float(m.group(1)) * UNIT_SECONDS[m.group(2)]
    if seconds > MAX_DURATION_DAYS * UNIT_SECONDS["d"]:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {MAX_DURATION_DAYS}d")
    return seconds


def _cursor(text: str) -> tuple[datetime, uuid.UUID]:
    """A keyset cursor: the last row's time and id, as `skiplock … ls` printed it."""
    at, _, row_id = text.rpartition("/")
    try:
        return datetime.fromisoformat(at), uuid.UUID(row_id)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a cursor printed by a previous page") from None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def row_json(row) -> dict[str, Any]:
    """A database row in the API's shape: camelCase keys, ISO times, ids as text."""
    out = {}
    for key, value in dict(row).items():
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, uuid.UUID):
            value = str(value)
        out[_camel(key)] = value
    return out


def _next_cursor(rows: list, limit: int, time_key: str) -> str | None:
    if len(rows) <= limit:
        return None
    last = rows[limit - 1]
    return f"{last[time_key].isoformat()}/{last['id']}"


@asynccontextmanager
async def acting_as_cli(dsn: str) -> AsyncIterator[OneConnection]:
    """One connection in one transaction, its writes audited as `system`/`cli`."""
    conn = await connect(dsn)
    try:
        async with conn.transaction():
            await act_as(conn, CLI_ACTOR)
            yield OneConnection(conn)
    finally:
        await conn.close()


def known_types(cli) -> list[str]:
    """The job types jobs can have here: the pipeline's own, then the stages'."""
    return [MAINTENANCE_TYPE, NOTIFY_TYPE, *(s.type for s in cli.stages
                                             if s.type not in (MAINTENANCE_TYPE, NOTIFY_TYPE))]


def _check_type(cli, type_: str | None) -> None:
    if type_ is not None and type_ not in known_types(cli):
        raise cli.bad_input(f"unknown job type {type_!r}; the types are: {', '.join(known_types(cli))}")


def _job_line(job: dict[str, Any]) -> dict[str, Any]:
    return {**job, "created": ago(job["createdAt"]),
            "lastError": printable(job["lastError"] or "")[:60] or None}  # escaped, then cut: 60 wide


def _page_text(page: dict[str, Any], columns: list[Column], shape, command: str) -> str:
    text = table([shape(r) for r in page["data"]], columns)
    if page["nextCursor"]:
        text += f"\nmore: {command} --after {page['nextCursor']}"
    return text


def _same_listing(command: str, args, filters: tuple[str, ...]) -> str:
    """`skiplock COMMAND` with the filters and --limit given, so the printed next page
    continues the same listing."""
    words = ["skiplock", command]
    for flag in filters:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is not None:
            words.append(f"{flag}={shlex.quote(str(value))}")  # = keeps a value like '-x' the flag's
    if args.limit != DEFAULT_LIMIT:
        words += ["--limit", str(args.limit)]
    return " ".join(words)


async def jobs_ls(args, cli) -> str:
    _check_type(cli, args.type)
    async with acting_as_cli(cli.dsn) as db:
        rows = await job_admin.list_jobs(db, job_admin.JobFilter(args.status, args.type, args.lane, args.batch),
                                         args.after[1] if args.after else None, args.limit + 1)
    page = {"data": [row_json(r) for r in rows[:args.limit]],
            "nextCursor": _next_cursor(rows, args.limit, "created_at")}
    return render(page, args.json, lambda p: _page_text(
        p, JOB_COLUMNS, _job_line, _same_listing("jobs ls", args, ("--status", "--type", "--lane", "--batch"))))


def _job_text(job: dict[str, Any]) -> str:
    return fields([(k, ago(v) if k in ("createdAt", "finishedAt", "lockedAt", "runAfter") and v else v)
                   for k, v in job.items()])


async def _job_or_fail(db, job_id: uuid.UUID, cli):
    row = await job_admin.get_job(db, job_id)
    if row is None:
        raise cli.failure(f"no job {job_id}")
    return row


async def jobs_show(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        job = row_json(await _job_or_fail(db, args.id, cli))
    if job["cancelRequestedAt"] is None:  # as the API shows a job: absent when nobody asked
        del job["cancelRequestedAt"]
    return render(job, args.json, _job_text)


async def jobs_retry(args, cli) -> str:
    if args.failed == (args.id is not None):
        raise cli.bad_input("give a job id, or --failed for every failed job")
    if not args.failed and (args.type or args.since or args.cancelled):
        raise cli.bad_input("--type, --since and --cancelled go with --failed")
    if args.failed:
        _check_type(cli, args.type)
        async with acting_as_cli(cli.dsn) as db:
            rows = await job_admin.retry_failed_jobs(db, type_=args.type, within_seconds=args.since,
                                                     cancelled=args.cancelled)
        by_type: dict[str, int] = {}
        for r in rows:
            by_type[r["type"]] = by_type.get(r["type"], 0) + 1
        out = {"retried": len(rows), "byType": by_type}
        return render(out, args.json, lambda o: f"retried {o['retried']} failed job(s)" + "".join(
            f"\n  {t}: {n}" for t, n in sorted(o["byType"].items())))
    async with acting_as_cli(cli.dsn) as db:
        await _stage_takes_it_again(db, cli, args.id)
        try:
            row = await job_admin.retry_job(db, args.id)
        except job_admin.DedupeKeyTaken:
            raise cli.failure(f"another open job has job {args.id}'s dedupe key; retry it when that one "
                              "has finished") from None
        if row is None:
            current = await _job_or_fail(db, args.id, cli)
            raise cli.failure(f"job {args.id} is {current['status']}; only a failed or cancelled job can be retried")
    return render(row_json(row), args.json, lambda j: f"job {j['id']} is pending again (attempts reset)")


async def _stage_takes_it_again(db, cli, job_id: uuid.UUID) -> None:
    """As the API's retry (admission.retry_admitted): a refusal is bad input (exit 2), as at
    an enqueue. `--failed` retries in one statement and asks no stage."""
    try:
        await admission.retry_admitted(db, cli.stages, job_id)
    except admission.NotAdmitted as refused:
        if refused.code == "job_refused":
            raise cli.bad_input(f"the {refused.stage!r} stage refuses job {job_id} again: {refused.message}") from None
        raise cli.bad_input(f"job {job_id}: {refused.message}") from None


async def jobs_cancel(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        try:
            row = await outcomes.cancel_job(db, cli.stages, args.id, cli.settings)
        except outcomes.HookFailed as exc:
            raise cli.failure(f"{exc.public_message}; the job was not cancelled") from None
        if row is None:
            current = await _job_or_fail(db, args.id, cli)
            raise cli.failure(f"job {args.id} has already ended ({current['status']}); nothing to cancel")
    return render(row_json(row), args.json, lambda j: f"job {j['id']} cancelled" if j["status"] == "cancelled"
                  else f"job {j['id']} is running (run {j['runId']}): asked to cancel; its run stops it "
                       "within about 2 s")


def _run_line(run: dict[str, Any]) -> dict[str, Any]:
    took = span(run["durationSeconds"]) if run["durationSeconds"] is not None else "running"
    return {**run, "took": took, "started": ago(run["startedAt"])}


async def runs_ls(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        rows = await run_log.list_runs(db, stop_reason=args.stop_reason, trigger=args.trigger,
                                       after=args.after, limit=args.limit + 1)
    page = {"data": [run_json(r) for r in rows[:args.limit]],
            "nextCursor": _next_cursor(rows, args.limit, "started_at")}
    return render(page, args.json, lambda p: _page_text(
        p, RUN_COLUMNS, _run_line, _same_listing("runs ls", args, ("--stop-reason", "--trigger"))))


async def runs_show(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        row = await run_log.get_run(db, args.id)
    if row is None:
        raise cli.failure(f"no run {args.id}")
    return render(run_json(row), args.json, lambda r: fields(list(_run_line(r).items())))


async def batch_show(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        row = await batches.get_batch(db, args.id)
        if row is None:
            raise cli.failure(f"no batch {args.id}")
        children = [row_json(c) for c in await batches.batch_jobs(db, args.id)]
    out = {**row_json(row), "progress": row["progress"] or 0, "children": children}

    def human(b: dict[str, Any]) -> str:
        head = fields([("batch", b["id"]), ("status", b["status"]),
                       ("jobs", f"{b['jobs']} (pending {b['pending']}, running {b['running']}, "
                                f"done {b['done']}, failed {b['failed']}, cancelled {b['cancelled']})"),
                       ("progress", f"{b['progress']} of {b['total']}" if b["total"] else b["progress"]),
                       ("created", ago(b["createdAt"])), ("finished", ago(b["finishedAt"]))])
        return head + "\n\n" + table([_job_line(c) for c in b["children"]], JOB_COLUMNS)

    return render(out, args.json, human)

