"""`skiplock ...` (the same as `python -m app ...`): a thin adapter over the engine and
the pipeline. The commands: migrate, enqueue, run-once, worker, jobs, runs, batch,
lanes, status, user, key, and the plug-ins' own.

Bad input or a broken setup prints one line on stderr and exits 2; a command that could
not be done (no such job, say, or no database) exits 1; never a traceback. When stdout's
reader goes away (`| head -1`) it stops quietly with 141, as SIGPIPE would. run-once and
worker log their progress on stderr (a live line on a terminal, JSON lines otherwise)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import sys
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit, urlunsplit

import asyncpg

from app.cli import accounts, jobs, lanes, stages, status
from app.cli.context import BAD_INPUT, FAILURE, Cli
from app.cli.output import OutputClosed, answer, printable
from app.devdb import DataDirUnusable, LocalPostgresError
from app.engine import jobs as q
from app.engine.db import connect
from app.engine.migrate import migrate
from app.logs import configure_cli_logging
from app.pipeline import admission
from app.pipeline.payloads import MAX_DEPTH
from app.pipeline.registry import StageConfigError
from app.plugin import CommandError, CommandFailed, Plugin, load_plugins
from app.runtime import (DATABASE_ERRORS, DatabaseUnavailable, Runtime, configured_stages, job_json,
                         direct_database_url, run_json, run_limits)
from app.settings import Settings, SettingsError, get_settings, is_utf8


MAX_DELAY_SECONDS = 10 * 366 * 24 * 3600  # `enqueue --in`: any later is a mistake (or a date overflow)
OUTPUT_CLOSED = 128 + signal.SIGPIPE  # what a shell shows for `cmd | head -1` when cmd is killed by SIGPIPE


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """Bad arguments: one line (argparse's usage is a --help away)."""
        option = re.fullmatch(r"argument (\S+): expected one argument", message)
        if option:  # `--since -1h`: argparse takes -1h for an option
            message += f" (a value that starts with '-' goes as {option[1]}=VALUE)"
        self.exit(BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("skiplock")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _parser(plugins: list[Plugin]) -> argparse.ArgumentParser:
    p = _Parser(prog="skiplock", description="Skiplock: jobs in Postgres.")
    p.add_argument("--version", action="version", version=f"skiplock {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="apply the schema migrations (safe to run twice or at once)")
    e = sub.add_parser("enqueue", help="enqueue one job")
    e.add_argument("type", help="the job type (a stage's type)")
    e.add_argument("--payload", default="{}", help="a JSON object")
    e.add_argument("--dedupe-key", help="skip if an open job has this key")
    e.add_argument("--unique-for", type=float, metavar="SECONDS",
                   help="keep the dedupe key taken this long after the job ends (default: the stage's)")
    e.add_argument("--replace", action="store_true",
                   help="a pending job with the dedupe key takes this payload and --in instead (a debounce)")
    e.add_argument("--lane", help="the lane id the job belongs to (a new one is made ownerless; "
                                  "default: the all-zero lane)")
    e.add_argument("--in", dest="delay", type=float, default=0.0, metavar="SECONDS",
                   help="run no sooner than this many seconds from now")
    e.add_argument("--after", action="append", default=[], metavar="JOB_ID",
                   help="wait for this job to be done first (repeatable: wait for every one named)")
    e.add_argument("--run-anyway", action="store_true",
                   help="with --after: run also when a job it waits for failed or was cancelled")
    e.add_argument("--priority", type=jobs.signed_whole("--priority", q.PRIORITY_MIN, q.PRIORITY_MAX), default=0,
                   metavar="N", help="its rank within its lane: higher is claimed first, then oldest (default 0)")
    r = sub.add_parser("run-once", help="run the pipeline once and print its summary")
    r.add_argument("--budget", type=float, help="seconds to keep claiming (capped by the setting)")
    r.add_argument("--trigger", default="manual", help="recorded in the runs row")
    sub.add_parser("worker", help="run the pipeline continuously (for a container); SIGTERM stops it")
    sv = sub.add_parser("serve", help="serve the HTTP API (for a container), slow clients' headers and bodies "
                                      "bounded; SIGTERM stops it")
    sv.add_argument("--host", default="127.0.0.1", help="the address to listen on (a container: 0.0.0.0)")
    sv.add_argument("--port", type=int, default=8000, help="the port to listen on")
    ps = sub.add_parser("psql", help="psql on the database (the embedded one too, whatever its port)")
    ps.add_argument("--url", action="store_true", help="print its connection URL, password included, instead")
    status.add_parser(sub)
    jobs.add_parsers(sub)
    lanes.add_parsers(sub)
    stages.add_parsers(sub)
    accounts.add_parsers(sub)
    for plugin in plugins:  # the plug-ins' own commands
        if plugin.commands is not None:
            plugin.commands(sub)
    return p


def _payload(text: str, type_: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"--payload is not valid JSON: {exc.msg} at position {exc.pos}") from None
    except RecursionError:  # far deeper than a payload may be
        raise CommandError(f"--payload does not fit the {type_!r} stage: payload: is nested more than "
                           f"{MAX_DEPTH} levels deep") from None
    if not isinstance(value, dict):
        raise CommandError("--payload must be a JSON object, like '{\"url\": \"https://example.com\"}'")
    return value


def _job_ids(texts: list[str]) -> list[uuid.UUID]:
    ids = []
    for text in texts:
        try:
            ids.append(uuid.UUID(text))
        except ValueError:
            raise CommandError(f"--after {text!r} is not a job id (a uuid)") from None
    return ids


def _lane(text: str | None) -> uuid.UUID | None:
    if text is None:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        raise CommandError(f"--lane {text!r} is not a lane id (a uuid)") from None


async def _enqueue(args, settings: Settings, plugins: list[Plugin], dsn: str) -> dict:
    """As POST /jobs (app.pipeline.admission), audited as system/cli; the same answer:
    created, and the new job or the open one holding the dedupe key."""
    if args.dedupe_key is not None and not 0 < len(args.dedupe_key) <= q.MAX_DEDUPE_KEY_CHARS:
        # as POST /jobs: a longer key is refused by the index as a database error, not as input
        raise CommandError(f"--dedupe-key must be 1 to {q.MAX_DEDUPE_KEY_CHARS} characters "
                           f"(got {len(args.dedupe_key)})")
    if not 0 <= args.delay <= MAX_DELAY_SECONDS:  # NaN fails both
        raise CommandError(f"--in must be zero or more seconds, at most {MAX_DELAY_SECONDS} (ten years)")
    payload, lane = _payload(args.payload, args.type), _lane(args.lane) or q.DEFAULT_LANE
    after = _job_ids(args.after)
    async with jobs.acting_as_cli(dsn) as db:
        try:
            admitted = await admission.admit(
                db, configured_stages(settings, plugins), args.type, payload, lane=lane, settings=settings,
                dedupe_key=args.dedupe_key,
                run_after=datetime.now(timezone.utc) + timedelta(seconds=args.delay) if args.delay else None,
                unique_for=args.unique_for, replace=args.replace, after=after, run_anyway=args.run_anyway,
                priority=args.priority)
        except admission.NotAdmitted as refused:
            raise (CommandFailed if refused.status == 409 else CommandError)(_refusal(refused, args.type)) from None
    return {"created": admitted.created, "replaced": admitted.replaced, "job": job_json(admitted.job)}


def _refusal(refused: admission.NotAdmitted, type_: str) -> str:
    """A refusal in the CLI's words: the option it is about, where there is one."""
    if refused.code == "invalid_request":
        return f"--payload does not fit the {type_!r} stage: {refused.message}"
    if refused.code == "job_refused":
        return f"the {type_!r} stage refuses this job: {refused.message}"
    if refused.code == "unknown_parent":
        return f"--after names no job to wait for: {', '.join(refused.details['unknown'])}"
    if refused.code == "dedupe_key_needed":
        return f"{refused.message} (--dedupe-key)"
    if refused.code == "invalid_value" and "uniqueFor" in refused.details:
        return f"--unique-for must be 0 to {admission.MAX_UNIQUE_FOR_SECONDS} seconds (ten years)"
    return refused.message


async def _run_once(args, settings: Settings, plugins: list[Plugin]) -> dict:
    if args.budget is not None and not args.budget > 0:  # NaN too
        raise CommandError("--budget must be a positive number of seconds")
    configure_cli_logging(settings.log_level, budget_seconds=run_limits(settings, args.budget, None).budget)
    runtime = Runtime(settings, plugins=plugins, embedded_database=True)
    try:
        result = await runtime.run(args.trigger, args.budget, stoppable=_stop_on_signals(settings))
    finally:
        await runtime.close()
    return run_json(result.row, result.budget_seconds)


def _stop_on_signals(settings: Settings):
    """Ctrl-C or SIGTERM stops a run-once as they stop a worker: no new claims, in-flight
    jobs get WORKER_GRACE_SECONDS and are then handed back (no attempt spent), and the runs
    row is written. A second one quits at once (the run then looks abandoned until the next
    run closes it, and its jobs wait out their lease)."""
    def install(stop) -> None:
        loop = asyncio.get_running_loop()

        def first(sig: signal.Signals) -> None:
            for s in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(s)  # the next one is KeyboardInterrupt, or the default kill
            print(f"skiplock: {sig.name}: stopping the run; in-flight jobs get {settings.worker_grace_seconds:g}s "
                  "(again to quit at once)", file=sys.stderr)
            stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, first, sig)

    return install


async def _worker(settings: Settings, plugins: list[Plugin], dsn: str) -> None:
    from app.pipeline.worker import Worker

    configure_cli_logging(settings.log_level, budget_seconds=settings.pipeline_budget_seconds)
    runtime = Runtime(settings, plugins=plugins, embedded_database=True)
    worker = Worker(await runtime.pool_when_up(), dsn, runtime.stages, settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run()
    finally:
        await runtime.close()


async def _psql(args, dsn: str) -> int:
    """psql on `dsn`, its password handed over in the environment (not on a command line
    others can read), or the URL itself for another tool."""
    if args.url:
        answer(dsn)
        return 0
    psql = shutil.which("psql")
    if psql is None:
        raise CommandFailed("psql is not installed (apt-get install postgresql-client); "
                            "`skiplock psql --url` prints the URL for another client")
    parts = urlsplit(dsn)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    bare = urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}{at}{hostport}"))
    env = {**os.environ, **({"PGPASSWORD": unquote(parts.password)} if parts.password else {})}
    process = await asyncio.create_subprocess_exec(psql, bare, env=env)
    return await process.wait()


async def _main(args, settings: Settings, plugins: list[Plugin]) -> int:
    # a command on your machine may start the embedded server; its own connections (migrate,
    # the worker's LISTEN, one-off commands) keep a session, so they skip a pooler
    dsn = await direct_database_url(settings, embedded=True)
    if args.command == "migrate":
        conn = await connect(dsn)
        try:
            applied = await migrate(conn, plugins)
        finally:
            await conn.close()
        answer(json.dumps({"applied": applied}))
    elif args.command == "enqueue":
        answer(json.dumps(await _enqueue(args, settings, plugins, dsn)))
    elif args.command == "worker":
        await _worker(settings, plugins, dsn)
    elif args.command == "serve":
        from app.logs import configure_logging
        from app.serving import serve

        configure_logging(settings.log_level)  # JSON lines on stdout, as every serving process
        await serve(settings if settings.database_url else settings.model_copy(update={"database_url": dsn}),
                    args.host, args.port)
    elif args.command == "psql":
        return await _psql(args, dsn)
    elif getattr(args, "run", None) is not None:  # jobs, runs, batch, status
        answer(await args.run(args, Cli(settings, plugins, dsn)))
    elif getattr(args, "handler", None) is not None:  # a plug-in's command
        answer(await args.handler(args, settings, dsn))
    elif args.command in ("user", "key"):
        answer(await accounts.run(args, dsn))
    elif args.command == "run-once":
        result = await _run_once(args, settings, plugins)
        answer(json.dumps(result, indent=2))
        if result["stopReason"] == "error":  # recorded, and said in one line on stderr
            _say_error(f"run {result['id']} stopped on an error: {result['error']}")
            return 1
        return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:  # the plug-ins named in the settings bring commands of their own
        settings = get_settings()
        plugins = load_plugins(settings.pipeline_plugins)
        configured_stages(settings, plugins)  # a stage list that cannot load is said before any server starts
    except (SettingsError, StageConfigError) as exc:
        _say_error(str(exc))
        if not _asks_for_help(argv):
            return BAD_INPUT
        # help is what one reads to fix a setting: given, without the plug-ins' commands
        print("(the help below leaves out the commands of the plug-ins)", file=sys.stderr)
        plugins = []
    args = _parser(plugins).parse_args(argv)
    try:
        _check_invocation(argv)
        with _embedded_server(settings):
            return asyncio.run(_main(args, settings, plugins))
    except OutputClosed:  # the Unix way: quiet, as if killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit stays quiet
        return OUTPUT_CLOSED
    except CommandError as exc:  # bad input (2), or a thing that could not be done (1)
        _say_error(str(exc))
        return exc.exit_code
    except (SettingsError, StageConfigError) as exc:
        _say_error(str(exc))
        return BAD_INPUT
    except (DatabaseUnavailable, LocalPostgresError, *DATABASE_ERRORS) as exc:
        _say_error(_database_failure(exc))
    except KeyboardInterrupt:
        _say_error("interrupted")
    return FAILURE


def _say_error(text: str) -> None:
    """The one line a failed command leaves on stderr; what it quotes may be a tenant's."""
    print(f"error: {printable(text)}", file=sys.stderr)


# What a transaction pooler does to a client that takes it for PostgreSQL: it refuses the
# pool's startup parameter, and named prepared statements meet another session that has
# one of that name, or lacks the one this session prepared
_POOLED_STATEMENTS = (asyncpg.DuplicatePreparedStatementError, asyncpg.InvalidSQLStatementNameError)


def _database_failure(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    if isinstance(cause, asyncpg.UndefinedTableError):
        return "the database has no Skiplock tables yet: run `skiplock migrate` first"
    if isinstance(cause, asyncpg.InsufficientPrivilegeError):
        return (f"permission denied: {cause} (the role in DATABASE_URL lacks it: "
                "docs/deploy.md#a-normal-database-role says what Skiplock's role needs)")
    if isinstance(cause, _POOLED_STATEMENTS) or "unsupported startup parameter" in str(cause):
        return (f"DATABASE_URL behaves like a transaction pooler ({type(cause).__name__}): set "
                "DATABASE_DIRECT_URL to PostgreSQL itself beside it (docs/deploy.md)")
    return f"database unreachable or failing: {cause}"


def _asks_for_help(argv: list[str]) -> bool:
    return any(arg in ("-h", "--help") for arg in argv)


def _check_invocation(argv: list[str]) -> None:
    """What is wrong before any command acts: an argument that is not UTF-8 (it would fail
    deep down, looking like a database error), and no stdout to print the answer on (a key
    made by `key create >&-` would never be seen)."""
    for i, arg in enumerate(argv):
        if not is_utf8(arg):
            shown = repr(arg.encode("utf-8", "surrogateescape"))[1:]  # b'\xff' as '\xff'
            raise CommandError(f"argument {i + 1}, {shown}, is not UTF-8 text: give it as UTF-8")
    if sys.stdout is None:
        raise CommandError("stdout is closed (>&-): the answer would be lost; redirect it to a file or /dev/null")


@contextmanager
def _embedded_server(settings: Settings) -> Iterator[None]:
    """Without DATABASE_URL, a command starts the embedded server: say so, and stop it
    after (one a `make run` uses is left alone)."""
    if settings.database_url:
        yield
        return
    from app.devdb import embedded_for_command

    try:
        with embedded_for_command(Path(settings.local_data_dir), lambda text: print(f"skiplock: {text}",
                                                                                     file=sys.stderr)):
            yield
    except DataDirUnusable as exc:
        raise CommandError(f"bad setting LOCAL_DATA_DIR: {exc}") from None
