"""The test database's tenant login: a login role that is a member of skiplock_api and of
nothing else, made once per session beside the migrated database. The apps the tests
build serve tenant requests through it (TENANT_DATABASE_URL), as a careful deployment
does; admin keys and the pipeline keep the owner's login."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit, urlunsplit

import asyncpg

_LOGINS: dict[str, str] = {}  # the database's URL -> its tenant login's URL


async def new_login(db, url: str, name: str, grant: str) -> str:
    """Create the login role `name` with a fresh password and `grant` (say, IN ROLE
    skiplock_api), through `db` (a connection or pool of the owner); `url` as that login.
    asyncpg.InsufficientPrivilegeError where this server's test role may not make roles."""
    password = secrets.token_urlsafe(16)
    await db.execute(f'DROP ROLE IF EXISTS "{name}"')
    await db.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}' {grant}")
    return as_login(url, name, password)


async def make_tenant_login(conn: asyncpg.Connection, url: str) -> str | None:
    """Create the login for the database at `url` (the owner connected as `conn`); None
    when this server's test role may not create roles (then tenants use the owner's)."""
    try:
        _LOGINS[url] = await new_login(conn, url, f"{urlsplit(url).path.lstrip('/')}_tenant", "IN ROLE skiplock_api")
    except asyncpg.InsufficientPrivilegeError:
        return None
    return _LOGINS[url]


def as_login(url: str, name: str, password: str) -> str:
    """`url` (a database's DSN) as the login `name` with `password`."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{name}:{password}@{parts.hostname}:{parts.port}"))


async def drop_tenant_login(conn: asyncpg.Connection, url: str) -> None:
    login = _LOGINS.pop(url, None)
    if login:
        await conn.execute(f'DROP ROLE IF EXISTS "{urlsplit(login).username}"')


def tenant_login_url(url: str | None) -> str | None:
    """The tenant login of the session's database at `url`, if one was made."""
    return _LOGINS.get(url) if url else None
