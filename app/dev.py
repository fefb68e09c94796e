"""`make run` (python -m app.dev): the app on your machine, the way Lambda would run it.

1. DATABASE_URL unset: start the embedded PostgreSQL under LOCAL_DATA_DIR (.data/),
   or reuse the one a killed earlier run left behind; it is stopped on the way out.
2. Apply the migrations.
3. Serve the app with uvicorn on LOCAL_HOST:LOCAL_PORT (127.0.0.1:8000) in local dev
   mode, with a cron secret (CRON_SECRET, or one generated once and kept in the data
   folder) and the exact curl that triggers a run; the page cursors' key likewise
   (CURSOR_SECRET, or its own generated one: no secret is derived from another).
4. A local ticker runs the pipeline every LOCAL_TICK_SECONDS (300), like the schedule.

Ctrl-C or SIGTERM stops uvicorn, the ticker, the pool and the Postgres it started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import sys
from pathlib import Path

import uvicorn

from app.api.main import create_app
from app.runtime import DATABASE_ERRORS, DatabaseUnavailable, Runtime, direct_database_url
from app.devdb import DEV_PID_FILE, PASSWORD_FILE, LocalPostgresError, pid_alive, without_password
from app.engine import accounts
from app.engine.db import connect
from app.engine.tenancy import Actor, acting
from app.engine.migrate import migrate
from app.logs import configure_cli_logging
from app.settings import SECRET_MIN_CHARS, Settings, SettingsError, load_settings
from app.plugin import Plugin, load_plugins
from app.serving import uvicorn_config

log = logging.getLogger("skiplock.dev")

PID_FILE = DEV_PID_FILE  # the CLI reads it too: it never stops a server make run uses
SECRET_FILE = "cron-secret"
CURSOR_SECRET_FILE = "cursor-secret"
ADMIN_KEY_FILE = "admin-key"
LOCAL_ADMIN = "admin@localhost"
TICK_GRACE_SECONDS = 10.0


class DevError(Exception):
    """A setup problem, said in one line."""


def _is_dev_process(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return pid_alive(pid)  # no /proc: trust the pid
    return b"app.dev" in cmdline


def claim_data_dir(data_dir: Path) -> None:
    """Refuse to share the data folder with another live `make run`; note a dead one."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pidfile = data_dir / PID_FILE
    try:
        other = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        other = None
    if other and other != os.getpid() and pid_alive(other) and _is_dev_process(other):
        raise DevError(f"another `make run` (pid {other}) is using {data_dir}; stop it first")
    if other:
        log.warning("the previous `make run` (pid %s) did not stop cleanly", other)
    pidfile.write_text(f"{os.getpid()}\n")


def release_data_dir(data_dir: Path) -> None:
    pidfile = data_dir / PID_FILE
    try:
        if int(pidfile.read_text().strip()) == os.getpid():
            pidfile.unlink()
    except (FileNotFoundError, ValueError):
        pass


def start_local_postgres(data_dir: Path):
    """Start the embedded server (or take over the one a killed run left); return it and
    the DSN of its `skiplock` database."""
    from app.devdb import LocalPostgres, local_database_url

    server = LocalPostgres(data_dir)
    left_running = server.running_port()
    dsn = asyncio.run(local_database_url(data_dir))
    if left_running is not None:
        log.warning("reusing the PostgreSQL left running on %s (port %s); it stops with this run",
                    data_dir, left_running)
    return server, dsn


def cron_secret(settings: Settings, data_dir: Path) -> str:
    """CRON_SECRET if set; otherwise one generated on the first `make run` and kept."""
    if settings.cron_secret is not None:
        return settings.cron_secret.get_secret_value()
    return kept_secret(data_dir / SECRET_FILE)


def cursor_secret(settings: Settings, data_dir: Path) -> str:
    """CURSOR_SECRET if set; otherwise its own, generated once and kept beside the cron
    secret, so cursors survive a restart of `make run` and owe nothing to another secret."""
    if settings.cursor_secret is not None:
        return settings.cursor_secret.get_secret_value()
    return kept_secret(data_dir / CURSOR_SECRET_FILE)


def kept_secret(path: Path) -> str:
    """The secret kept in `path` (mode 600), made on first use; one too short for the
    settings (SECRET_MIN_CHARS, say written by hand) is replaced."""
    if path.exists():
        secret = path.read_text().strip()
        if len(secret) >= SECRET_MIN_CHARS:
            return secret
        if secret:
            log.warning("%s held a secret shorter than %d characters: a new one replaces it", path,
                        SECRET_MIN_CHARS)
    secret = secrets.token_urlsafe(32)  # 43 characters
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    return secret


async def local_admin_key(pool, data_dir: Path) -> str:
    """An admin API key for this machine: made on the first `make run`, kept in the data
    folder (mode 600) and reused while it still works."""
    path = data_dir / ADMIN_KEY_FILE
    if path.exists():
        key = path.read_text().strip()
        if key and await accounts.authenticate(pool, key) is not None:
            return key
    async with acting(pool, Actor("system", "make run")) as conn:
        await accounts.add_user(conn, LOCAL_ADMIN)
        key = (await accounts.create_key(conn, LOCAL_ADMIN, admin=True)).key
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


def api_banner(settings: Settings, key: str) -> str:
    url = f"http://{settings.local_host}:{settings.local_port}"
    return "\n".join([
        f"  Admin API key (kept in {settings.local_data_dir}/{ADMIN_KEY_FILE}): {key}",
        f"    curl -s -H 'Authorization: Bearer {key}' {url}/jobs",
        "",
    ])


def banner(settings: Settings, secret: str, dsn: str, data_dir: Path | None) -> str:
    url = f"http://{settings.local_host}:{settings.local_port}"
    where = f" (data in {data_dir}, password in {data_dir / PASSWORD_FILE})" if data_dir else ""
    tick = (f"every {settings.local_tick_seconds:g} s (LOCAL_TICK_SECONDS)"
            if settings.local_tick_seconds else "off (LOCAL_TICK_SECONDS=0)")
    return "\n".join([
        "",
        f"Skiplock is serving on {url} (local dev mode)",
        f"  PostgreSQL:   {without_password(dsn)}{where}",
        f"  Cron secret:  {secret}",
        f"  Local ticker: {tick}",
        "  Trigger a run:",
        f"    curl -s -X POST -H 'Authorization: Bearer {secret}' {url}/cron/pipeline",
        f"  Health:       {url}/health/ready",
        "  Stop:         Ctrl-C",
        "",
    ])




class Ticker:
    """Runs the pipeline every `every` seconds, the way the five-minute schedule does."""

    def __init__(self, runtime: Runtime, every: float) -> None:
        self.runtime = runtime
        self.every = every
        self.running = False
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            self.running = True
            try:
                await self.runtime.run("cron")
            except DatabaseUnavailable as exc:
                log.error("local tick: the database is not reachable: %s", exc)
            except Exception:
                log.exception("local tick failed")
            finally:  # a finished run is logged by the pipeline itself
                self.running = False

    async def stop(self) -> None:
        """Cancel; a run in flight first gets TICK_GRACE_SECONDS to finish and be recorded."""
        if self.task is None:
            return
        waited = 0.0
        while self.running and waited < TICK_GRACE_SECONDS:
            await asyncio.sleep(0.05)
            waited += 0.05
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def dev_overrides(settings: Settings, plugins: list[Plugin]) -> dict:
    """What the plug-ins change for local dev (their sample sites on loopback, say)."""
    out: dict = {}
    for plugin in plugins:
        if plugin.dev_settings is not None:
            out.update(plugin.dev_settings(settings))
    return out


async def _say_when_serving(server: uvicorn.Server, text: str) -> None:
    """The banner, once uvicorn listens: not before the database and the port are known good."""
    while not server.started:
        if server.should_exit:
            return
        await asyncio.sleep(0.05)
    print(text, flush=True)


async def serve(settings: Settings, plugins: list[Plugin], signals: "_Signals", *, embedded: bool,
                banner_text: str = "") -> None:
    conn = await connect(await direct_database_url(settings, embedded=False))  # a session: not the pooler
    try:
        applied = await migrate(conn, plugins)
        if embedded and not settings.tenant_database_url:
            # tenants' requests on a login that is no more than the API role, as a deployment should
            from app.devdb import local_tenant_login_url
            settings = settings.model_copy(update={
                "tenant_database_url": await local_tenant_login_url(conn, Path(settings.local_data_dir))})
    finally:
        await conn.close()
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    app = create_app(settings, plugins=plugins)
    runtime: Runtime = app.state.runtime
    pool = await runtime.pool()
    for plugin in plugins:  # the example's: its sample site, and a demo campaign
        if plugin.dev_setup is not None:
            await plugin.dev_setup(app, pool, settings)
    banner_text += api_banner(settings, await local_admin_key(pool, Path(settings.local_data_dir)))
    # as `skiplock serve` serves: slow clients' headers and bodies bounded, and capped
    server = uvicorn.Server(uvicorn_config(app, settings, host=settings.local_host, port=settings.local_port))
    signals.server = server
    tick = Ticker(runtime, settings.local_tick_seconds)
    if settings.local_tick_seconds > 0:
        tick.start()
    said = asyncio.create_task(_say_when_serving(server, banner_text))
    try:
        await server.serve()
    finally:
        said.cancel()
        await tick.stop()
        await runtime.close()


class _Signals:
    """SIGINT/SIGTERM: before serving, abort the start (KeyboardInterrupt); while serving,
    uvicorn's own handlers run and, when it is done, hand the signal back here; later
    signals are ignored so that Postgres is always stopped."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.server: uvicorn.Server | None = None

    def __call__(self, sig: int, frame) -> None:
        first = self.received is None
        if first:
            self.received = sig
        if self.server is not None:
            self.server.should_exit = True
        elif first:
            raise KeyboardInterrupt

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)


def main() -> int:
    signals = _Signals()
    signals.install()
    try:
        settings = load_settings(local_dev=True)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # on a terminal, each tick's progress as a live line; JSON lines otherwise
    configure_cli_logging(settings.log_level, sys.stdout, budget_seconds=settings.pipeline_budget_seconds)
    data_dir = Path(settings.local_data_dir).resolve()
    local = None  # the embedded server this run started or took over
    owns_dir = False
    try:
        claim_data_dir(data_dir)
        owns_dir = True
        if settings.database_url:
            dsn = settings.database_url
        else:
            local, dsn = start_local_postgres(data_dir)
        secret = cron_secret(settings, data_dir)
        plugins = load_plugins(settings.pipeline_plugins)
        settings = load_settings(**{**settings.model_dump(), "database_url": dsn, "cron_secret": secret,
                                    "cursor_secret": cursor_secret(settings, data_dir),
                                    **dev_overrides(settings, plugins)})
        asyncio.run(serve(settings, plugins, signals, embedded=local is not None,
                          banner_text=banner(settings, secret, dsn, data_dir if local else None) + "\n"))
    except KeyboardInterrupt:
        pass
    except (DevError, LocalPostgresError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DATABASE_ERRORS as exc:
        print(f"error: database: {exc}", file=sys.stderr)
        return 2
    finally:
        signals.server = None
        signals.received = signals.received or -1  # from here on, signals are ignored
        if local is not None:
            log.info("stopping the PostgreSQL under %s", data_dir)
            local.stop()
        if owns_dir:
            release_data_dir(data_dir)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
