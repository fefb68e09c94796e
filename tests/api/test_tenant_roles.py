"""Admin is a database role and the tenant is the key a transaction presents. Each test
runs the attack as the API's own role, on the real database, and shows what it gets:
nothing that is not its own. (The example's billing: tests/outreach/test_tenant_roles.py.)"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
import pytest

from app.engine import accounts
from app.engine.tenancy import Actor, KeyProof, enter_tenant, tenant_transaction
from tests import factories as f
from tests.tenant_login import tenant_login_url



@dataclass
class Tenant:
    email: str
    key: str
    actor: Actor
    lane: uuid.UUID
    job: uuid.UUID

    @property
    def user_id(self) -> uuid.UUID:
        return self.actor.user_id


async def make_tenant(pool, email: str, admin: bool = False) -> Tenant:
    t = await f.tenant(pool, email, admin=admin)
    [job] = await f.jobs(pool, "record", 1, lane=t.lane)
    return Tenant(email, t.key, await accounts.authenticate(pool, t.key), t.lane, job)


@pytest.fixture
async def tenants(pool):
    a = await make_tenant(pool, "alice@a.example")
    b = await make_tenant(pool, "bob@b.example")
    await f.run(pool, "cron")  # a run: the operator's view
    return a, b


async def visible_lanes(conn) -> set[uuid.UUID]:
    return {r["id"] for r in await conn.fetch("SELECT id FROM lanes")}


async def test_a_tenant_that_calls_itself_admin_in_a_setting_sees_only_its_own_rows(pool, tenants):
    a, b = tenants
    async with tenant_transaction(pool, a.actor) as conn:
        await conn.execute("SELECT set_config('app.current_actor_kind', 'admin', true), "
                           "set_config('app.current_actor_id', 'root', true)")
        assert await conn.fetchval("SELECT current_user") == "skiplock_api"
        assert await conn.fetchval("SELECT app_is_admin()") is False
        assert await visible_lanes(conn) == {a.lane}
        assert {r["lane"] for r in await conn.fetch("SELECT lane FROM jobs")} == {a.lane}
        assert await conn.fetchval("SELECT count(*) FROM runs") == 0
        assert await conn.fetchval("SELECT count(*) FROM users") == 1


async def test_a_tenant_cannot_name_another_tenant_in_the_settings(pool, tenants):
    a, b = tenants
    b_prefix = b.key[:12]
    async with tenant_transaction(pool, a.actor) as conn:
        # the old way: a setting naming the tenant is no longer read at all
        await conn.execute("SELECT set_config('app.current_user_id', $1, true)", str(b.user_id))
        assert await visible_lanes(conn) == {a.lane}
        # another tenant's key prefix with anything but that key's digest: nobody at all
        for digest in (a.actor.key.digest, accounts.digest(b.key + "x"), "", "%"):
            async with conn.transaction():
                await conn.execute("SELECT set_config('app.current_key_prefix', $1, true), "
                                   "set_config('app.current_key_digest', $2, true)", b_prefix, digest)
                assert await visible_lanes(conn) == set()
                assert await conn.fetchval("SELECT app_user_id()") is None
                assert await conn.execute("UPDATE jobs SET status = 'failed'") == "UPDATE 0"
        # and the stored digests, which would name a tenant, cannot be read
        await enter_tenant(conn, a.actor)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with conn.transaction():
                await conn.fetch("SELECT hash FROM api_keys")
        assert [r["prefix"] for r in await conn.fetch("SELECT prefix FROM api_keys")] == [a.key[:12]]
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", b.job) == "pending"


async def test_a_revoked_key_sees_nothing_even_inside_an_open_transaction(pool, tenants):
    a, _ = tenants
    async with tenant_transaction(pool, a.actor) as conn:
        assert await visible_lanes(conn) == {a.lane}
        await f.as_system(pool, "UPDATE api_keys SET revoked_at = now() WHERE prefix = $1", a.key[:12])
        assert await visible_lanes(conn) == set()


async def test_an_admin_key_is_the_admin_role_and_sees_every_tenant(pool, tenants):
    a, b = tenants
    admin = await make_tenant(pool, "root@ops.example", admin=True)
    async with tenant_transaction(pool, admin.actor) as conn:
        assert await conn.fetchval("SELECT current_user") == "skiplock_admin"
        assert await visible_lanes(conn) == {a.lane, b.lane, admin.lane}
        assert await conn.fetchval("SELECT count(*) FROM runs") == 1
    # the same person's transaction presenting the admin key as a user key's role is not admin
    as_user = Actor("user", admin.actor.id, admin.user_id, admin.email, admin.actor.key)
    async with tenant_transaction(pool, as_user) as conn:
        assert await conn.fetchval("SELECT current_user") == "skiplock_api"
        assert await visible_lanes(conn) == {admin.lane}


async def test_a_request_cannot_rename_itself_in_the_audit_log(pool, tenants):
    a, _ = tenants
    await pool.execute("TRUNCATE audit_log")
    async with tenant_transaction(pool, a.actor) as conn:
        await conn.execute("SELECT set_config('app.current_actor_kind', 'system', true), "
                           "set_config('app.current_actor_id', 'cli', true)")
        await conn.execute("UPDATE users SET email = 'renamed@a.example'")
        # the jobs trigger skips the pipeline's own work: calling itself that changes nothing
        await conn.execute("SELECT set_config('app.current_actor_kind', 'pipeline', true)")
        await conn.execute("UPDATE jobs SET run_after = now() + interval '1 hour'")
    rows = await pool.fetch("SELECT actor_kind, actor_id, table_name FROM audit_log ORDER BY id")
    assert [tuple(r) for r in rows] == [("user", str(a.user_id), "users"), ("user", str(a.user_id), "jobs")]


@pytest.fixture
def api_only_login(dsn):
    """The session's tenant login: a member of skiplock_api and of nothing else (what
    TENANT_DATABASE_URL connects the API's tenant requests as)."""
    login = tenant_login_url(dsn)
    if login is None:
        pytest.skip("the test database's role may not create roles")
    return login


async def test_a_session_with_only_the_api_role_cannot_become_admin_or_anyone_else(api_only_login, pool, tenants):
    a, b = tenants
    conn = await asyncpg.connect(api_only_login)
    try:
        async with conn.transaction():
            await enter_tenant(conn, a.actor)
            assert await visible_lanes(conn) == {a.lane}
            for sql in ("SET ROLE skiplock_admin", "SELECT set_config('role', 'postgres', true)"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied to set role"):
                    async with conn.transaction():
                        await conn.execute(sql)
            # a key it made up names nobody
            forged = Actor("user", str(b.user_id), b.user_id, b.email, KeyProof(b.key[:12], "0" * 64))
            await enter_tenant(conn, forged)
            assert await visible_lanes(conn) == set()
            # and dropping the role leaves the login role, no more than the API's: still filtered
            await conn.execute("RESET ROLE")
            assert await conn.fetchval("SELECT current_user") == api_only_login.split("//")[1].split(":")[0]
            assert await visible_lanes(conn) == set()
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    await conn.execute("UPDATE lanes SET priority = 99")
    finally:
        await conn.close()
