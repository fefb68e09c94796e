"""The test database's tenant login: a login role that is a member of skiplock_api and of
nothing else, made once per session beside the migrated database. The apps the tests
build serve tenant requests through it (TENANT_DATABASE_URL), as a careful deployment
does; admin keys and the pipeline keep the owner's login."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit, urlunsplit

import asyncpg

_LOGINS: dict[str, str] = {}  # the database's URL -> its tenant login's URL


async def make_tenant_login(conn: asyncpg.Connection, url: str) -> str | None:
    """Create the login for the database at `url` (the owner connected as `conn`); None
    when this server's test role may not create roles (then tenants use the owner's)."""
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/')}_tenant"
    password = secrets.token_urlsafe(16)
    try:
        await conn.execute(f'DROP ROLE IF EXISTS "{name}"')
        await conn.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}' IN ROLE skiplock_api")
    except asyncpg.InsufficientPrivilegeError:
        return None
    _LOGINS[url] = as_login(url, name, password)
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
