"""A real PgBouncer (Debian's `pgbouncer`, 1.18) in transaction mode in front of a test
server, for the pooler tests (tests/pooler/). Its ini and userlist live in a temporary
folder; every database of the server is reachable through it under its own name.

PgBouncer refuses to run as root, so as root it runs as the embedded server's system
user (app.devdb.SYSTEM_USER), which owns the folder."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from app.devdb import SYSTEM_USER


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _login(dsn: str) -> tuple[str, str]:
    """The user and password a DSN logs in with."""
    url = urlsplit(dsn)
    return unquote(url.username or "postgres"), unquote(url.password or "")


class PgBouncer:
    def __init__(self, folder: Path, server_dsn: str, *, pool_size: int = 2, also: tuple[str, ...] = ()) -> None:
        """also: DSNs of other logins the pooler should let in (their user and password)."""
        self.folder = folder
        url = urlsplit(server_dsn)
        self.user, self.password = _login(server_dsn)
        self.logins = [(self.user, self.password)] + [_login(dsn) for dsn in also]
        self.server_host, self.server_port = url.hostname or "127.0.0.1", url.port or 5432
        self.pool_size = pool_size
        self.port = 0
        self.proc: subprocess.Popen | None = None

    def dsn(self, database: str, login: str | None = None) -> str:
        """The DSN of `database` through the pooler: as the server's login, or as the DSN
        `login` (one of `also`) names."""
        user, password = (self.user, self.password) if login is None else _login(login)
        return f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{self.port}/{database}"

    def _write(self, name: str, text: str) -> Path:
        path = self.folder / name
        path.write_text(text)
        path.chmod(0o600)
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return path

    def start(self) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        self.port = _free_port()
        userlist = self._write("userlist.txt", "".join(f'"{u}" "{p}"\n' for u, p in self.logins))
        ini = self._write("pgbouncer.ini", f"""\
[databases]
* = host={self.server_host} port={self.server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {userlist}
pool_mode = transaction
default_pool_size = {self.pool_size}
max_client_conn = 500
server_lifetime = 3600
server_login_retry = 1
logfile = {self.folder / 'pgbouncer.log'}
""")
        command = [pgbouncer_binary(), str(ini)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", SYSTEM_USER]
        # stderr to a file, never an unread pipe: PgBouncer logs every connection and cancel
        # to stderr too, and once a pipe's 64 KiB are full its next write blocks the whole
        # pooler (every client then hangs)
        errors = self.folder / "stderr.log"
        with errors.open("wb") as err:
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {errors.read_text(errors='replace')[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self.port
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("pgbouncer did not listen within 15 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
