"""TENANT_DATABASE_URL: tenant requests run on a login that is no more than skiplock_api.

The attack is SQL that a request's transaction runs as if injected into it: drop the
role the request took (RESET ROLE) and read or write what the API role may not. On the
owner's login it becomes the owner again; on the tenant login it stays a tenant."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
from fastapi import Request
from serving_kit import AUTH, assert_error, make_settings

from app.api import create_app
from app.api.auth import TENANT
from tests import factories as f
from tests.tenant_login import tenant_login_url

# What injected SQL would try once it has dropped the request's role.
CLIMBS = {
    "become_admin": "SET ROLE skiplock_admin",
    "read_key_digests": "SELECT hash FROM api_keys",
    "rank_a_lane": "UPDATE lanes SET priority = 99",
    "drop_a_table": "DROP TABLE audit_log",
    "prune_the_audit_log": "SELECT audit_log_prune(now(), 1000)",
}


async def injected(request: Request) -> dict:
    """A route in the tenant transaction, running what an injection would."""
    async with request.state.db.acquire() as conn:
        await conn.execute("RESET ROLE")
        out = {"login": await conn.fetchval("SELECT session_user"),
               "now": await conn.fetchval("SELECT current_user"),
               "users_seen": await conn.fetchval("SELECT count(*) FROM users")}
        for name, sql in CLIMBS.items():
            try:
                async with conn.transaction():  # a savepoint: each attempt on its own
                    await conn.execute(sql)
                    raise _Undo()
            except asyncpg.InsufficientPrivilegeError:
                out[name] = "denied"
            except _Undo:
                out[name] = "done"
    return out


class _Undo(Exception):
    """Roll an attempt that worked back, so the test database stays whole."""


@asynccontextmanager
async def client_for(settings) -> AsyncIterator[tuple[httpx.AsyncClient, object]]:
    """A client on the app with the probe route, and the app; both closed afterwards."""
    app = create_app(settings)
    app.add_api_route("/probe/injected", injected, methods=["GET"], dependencies=[TENANT])
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://skiplock.test")
    try:
        yield client, app
    finally:
        await client.aclose()
        await app.state.runtime.close()


@pytest.fixture
async def two_tenants(pool):
    return [await f.api_key(pool, email) for email in ("ann@a.example", "bob@b.example")]


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


async def test_sql_injected_into_a_tenant_request_cannot_climb_out_of_the_tenant_login(dsn, pool, two_tenants):
    login = tenant_login_url(dsn)
    if login is None:
        pytest.skip("this server's test role may not create roles")
    ann, _ = two_tenants
    async with client_for(make_settings(dsn)) as (client, app):
        r = await client.get("/probe/injected", headers=bearer(ann))
        assert r.status_code == 200, r.text
        seen = r.json()
        assert seen["login"] == seen["now"] == urlsplit(login).username
        assert seen["users_seen"] == 1  # still filtered to Ann after RESET ROLE
        assert {k: seen[k] for k in CLIMBS} == dict.fromkeys(CLIMBS, "denied")
        assert (await client.get("/health/ready")).json()["status"] == "ready"


async def test_on_the_owners_login_the_same_injection_becomes_the_owner(dsn, pool, two_tenants):
    # what TENANT_DATABASE_URL is for: without it, the request's session is the owner's
    ann, _ = two_tenants
    async with client_for(make_settings(dsn, tenant_database_url=None)) as (client, app):
        seen = (await client.get("/probe/injected", headers=bearer(ann))).json()
        assert seen["login"] == seen["now"] == urlsplit(dsn).username
        assert seen["users_seen"] == 2
        assert {k: seen[k] for k in CLIMBS} == dict.fromkeys(CLIMBS, "done")


async def test_admin_keys_and_the_pipeline_keep_the_owners_login(dsn, pool, admin_key):
    if tenant_login_url(dsn) is None:
        pytest.skip("this server's test role may not create roles")
    async with client_for(make_settings(dsn)) as (client, app):
        assert (await client.get("/jobs", headers=bearer(admin_key))).status_code == 200
        assert (await client.post("/cron/pipeline", headers=AUTH,
                                  json={})).status_code == 200
        seen = (await client.get("/probe/injected", headers=bearer(admin_key))).json()
        assert seen["login"] == urlsplit(dsn).username
        assert app.state.runtime._tenant_pool is None  # never opened for an admin


@pytest.mark.parametrize("grant, reason", [
    ("IN ROLE skiplock_api, skiplock_admin", "is a member of skiplock_admin"),
    ("BYPASSRLS IN ROLE skiplock_api", "bypasses row-level security"),
    ("CREATEROLE IN ROLE skiplock_api", "may create roles"),
    ("", "is not a member of skiplock_api"),
    ("owner", "owns the tables"),
])
async def test_a_tenant_login_that_may_do_more_than_the_api_role_is_refused(
        dsn, pool, two_tenants, admin_key, unfit_login, caplog, grant, reason):
    url = dsn if grant == "owner" else await unfit_login(grant)
    ann, _ = two_tenants
    async with client_for(make_settings(dsn, tenant_database_url=url)) as (client, app):
        with caplog.at_level(logging.ERROR, logger="skiplock.runtime"):
            r = await client.get("/jobs", headers=bearer(ann))
        assert_error(r, 503, "tenant_login_refused")
        assert urlsplit(url).username not in r.text  # the reasons are the operator's, in the log
        assert reason in caplog.text
        # refused each time, never served as a fallback; admin keys go on
        assert_error(await client.get("/jobs", headers=bearer(ann)), 503, "tenant_login_refused")
        assert (await client.get("/jobs", headers=bearer(admin_key))).status_code == 200
        # and readiness says so, so a deploy stops here rather than in front of tenants
        error = assert_error(await client.get("/health/ready"), 503, "not_ready")
        assert error["details"] == {"database": "reachable", "tenantLogin": "tenant login refused"}


def test_a_blank_tenant_login_is_unset_and_one_without_the_owners_is_refused():
    from app.settings import SettingsError, load_settings
    assert load_settings(database_url="postgresql://owner@db/app", tenant_database_url=" ").tenant_database_url is None
    with pytest.raises(SettingsError, match="TENANT_DATABASE_URL is set but DATABASE_URL is not"):
        load_settings(database_url=None, tenant_database_url="postgresql://skiplock_tenant@db/app")


async def test_a_refused_login_fixed_in_the_database_serves_without_a_restart(
        dsn, pool, two_tenants, unfit_login):
    url = await unfit_login("IN ROLE skiplock_api, skiplock_admin")
    ann, _ = two_tenants
    async with client_for(make_settings(dsn, tenant_database_url=url)) as (client, app):
        assert_error(await client.get("/jobs", headers=bearer(ann)), 503, "tenant_login_refused")
        await pool.execute(f"REVOKE skiplock_admin FROM {urlsplit(url).username}")
        # until the recheck, the refusal stands (and costs no connection)
        assert_error(await client.get("/jobs", headers=bearer(ann)), 503, "tenant_login_refused")
        app.state.runtime._tenant_refused_until = 0.0  # as TENANT_RECHECK_SECONDS later
        r = await client.get("/jobs", headers=bearer(ann))
        assert r.status_code == 200, r.text
