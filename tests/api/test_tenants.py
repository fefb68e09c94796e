"""Tenants: one account's key never reaches another's rows, on any route.

The route list comes from the OpenAPI document, so a new route is covered (or this
test says which rule it needs) without anyone remembering to add it."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import asyncpg
import pytest
from serving_kit import AUTH, Recorder

from app.engine import accounts
from app.engine.batches import BatchRequest, create_batch
from app.engine.tenancy import tenant_transaction
from app.pipeline.loop import Pipeline
from tests import factories as f

TENANT_PREFIXES = ("/lanes", "/batches", "/jobs", "/runs", "/audit")


@dataclass
class Tenant(f.Tenant):
    pending_job: uuid.UUID
    failed_job: uuid.UUID
    batch: uuid.UUID

    def secrets(self) -> list[str]:
        """Strings that must never appear in another tenant's answers."""
        return [self.email, str(self.lane), str(self.pending_job), str(self.failed_job), str(self.batch)]


async def make_tenant(pool, email: str) -> Tenant:
    """A tenant (tests.factories.tenant) with a pending job, a failed one and a batch in its lane."""
    t = await f.tenant(pool, email)
    pending, failed = await f.jobs(pool, "record", 2, lane=t.lane)
    await pool.execute("UPDATE jobs SET status = 'failed', attempts = 3, finished_at = now(), "
                       "last_error = 'boom' WHERE id = $1", failed)
    batch = (await create_batch(pool, t.lane, [BatchRequest("export")])).batch_id
    return Tenant(email, t.key, t.user_id, t.lane, pending, failed, batch)


@pytest.fixture
async def two_tenants(pool):
    a = await make_tenant(pool, "alice@a.example")
    b = await make_tenant(pool, "bob@b.example")
    await f.run(pool, "cron")  # a run: the operator's, not a tenant's
    return a, b


@pytest.fixture
async def client(make_client):
    return await make_client(stages=[Recorder("brief").stage, Recorder("record").stage,
                                     Recorder("export").stage], api_key=False)


async def snapshot(pool, t: Tenant):
    rows = await pool.fetch("SELECT id, status, attempts, run_after, last_error FROM jobs "
                            "WHERE lane = $1 ORDER BY id", t.lane)
    lane = await pool.fetchrow("SELECT * FROM lanes WHERE id = $1", t.lane)
    batch = await pool.fetchrow("SELECT status FROM batches WHERE id = $1", t.batch)
    return [tuple(r) for r in rows], dict(lane), dict(batch)


def fill(template: str, other: Tenant) -> str:
    ids = {"lane_id": other.lane, "job_id": other.pending_job, "batch_id": other.batch, "run_id": None}

    def one(match: re.Match) -> str:
        name = match.group(1)
        assert name in ids, f"add a rule for the path parameter {{{name}}} to this test"
        return str(ids[name] or uuid.uuid4())
    return re.sub(r"\{([^}]+)\}", one, template)


def bodies(method: str, template: str, other: Tenant) -> list[dict | None]:
    """Request bodies that name the other tenant's things."""
    if method != "post":
        return [None]
    if template == "/jobs":
        return [{"type": "record", "lane": str(other.lane)},
                {"type": "record", "lane": str(other.lane), "dedupe_key": "probe"}]
    if template == "/lanes/{lane_id}/batches":
        return [{"jobs": [{"type": "record"}]}]
    return [None]


def queries(op: dict, other: Tenant) -> list[dict]:
    names = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
    out = [{}]
    if "lane" in names:
        out.append({"lane": str(other.lane)})
    if "batch_id" in names:
        out.append({"batch_id": str(other.batch)})
    return out


async def test_every_route_with_a_key_and_another_tenants_ids_finds_nothing(client, pool, two_tenants):
    a, b = two_tenants
    before = await snapshot(pool, b)
    document = (await client.get("/openapi.json")).json()
    tried = 0
    for template, item in document["paths"].items():
        if not template.startswith(TENANT_PREFIXES):
            continue
        for method, op in item.items():
            path = fill(template, b)
            for params in queries(op, b):
                for body in bodies(method, template, b):
                    r = await client.request(method.upper(), path, params=params, json=body, headers=a.headers)
                    tried += 1
                    where = f"{method.upper()} {path} {params} {body}"
                    assert r.status_code < 500, (where, r.text)
                    for secret in b.secrets():
                        if secret not in where:  # an error may repeat what was asked, nothing more
                            assert secret not in r.text, (where, r.text)
                    if r.status_code == 200 and "data" in r.json():
                        # a list: only the caller's own rows (or none at all)
                        assert all(str(b.lane) not in str(row) for row in r.json()["data"]), where
                    elif r.status_code < 300:
                        pytest.fail(f"{where} succeeded with another tenant's ids: {r.text[:300]}")
                    else:
                        assert r.status_code in (403, 404, 409, 422), (where, r.status_code, r.text)
    assert tried >= 15
    assert await snapshot(pool, b) == before
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE lane = $1", b.lane) == 3


async def test_lists_show_only_the_callers_rows(client, pool, two_tenants):
    a, b = two_tenants
    jobs = (await client.get("/jobs", headers=a.headers)).json()["data"]
    assert {j["lane"] for j in jobs} == {str(a.lane)}
    assert (await client.get("/runs", headers=a.headers)).json()["data"] == []  # the operator's view
    assert (await client.get("/audit", headers=a.headers)).status_code == 403
    admin = {"Authorization": f"Bearer {await f.api_key(pool, 'root@ops.example', admin=True)}"}
    seen = {j["lane"] for j in (await client.get("/jobs?limit=200", headers=admin)).json()["data"]}
    assert {str(a.lane), str(b.lane)} <= seen
    assert len((await client.get("/runs", headers=admin)).json()["data"]) == 1


async def test_an_unfiltered_query_in_a_tenant_transaction_returns_only_its_rows(pool, two_tenants):
    a, b = two_tenants
    actor = await accounts.authenticate(pool, a.key)
    assert actor.user_id == a.user_id
    async with tenant_transaction(pool, actor) as conn:
        # deliberately no WHERE: row-level security is the filter
        assert {r["lane"] for r in await conn.fetch("SELECT lane FROM jobs")} == {a.lane}
        assert [r["id"] for r in await conn.fetch("SELECT id FROM lanes")] == [a.lane]
        assert [r["email"] for r in await conn.fetch("SELECT email FROM users")] == [a.email]
        assert await conn.fetchval("SELECT count(*) FROM runs") == 0
        assert await conn.fetchval("SELECT count(*) FROM batches") == 1
        # and a write aimed at another tenant's row changes nothing
        assert await conn.execute("UPDATE jobs SET attempts = 0 WHERE lane = $1", b.lane) == "UPDATE 0"
        assert await conn.execute("DELETE FROM batches WHERE id = $1", b.batch) == "DELETE 0"
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("INSERT INTO jobs (type, lane) VALUES ('record', $1)", b.lane)


async def test_revoked_and_malformed_keys_are_401(client, pool, two_tenants):
    a, _ = two_tenants
    assert (await client.get("/jobs", headers=a.headers)).status_code == 200
    prefix = a.key[:12]  # slk_ and 8 hex digits
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT set_config('app.current_actor_kind', 'system', true)")
        assert await accounts.revoke_key(conn, prefix)
    for headers in (a.headers, {"Authorization": "Bearer slk_nothing"},
                    {"Authorization": f"Bearer {prefix}_{'x' * 43}"}, {"Authorization": "Basic abc"}, {}):
        r = await client.get("/jobs", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", headers
    # the cron secret is not an API key either
    assert (await client.get("/jobs", headers=AUTH)).status_code == 401


async def test_a_pooled_connection_carries_nothing_after_a_request(make_client, pool, two_tenants, dsn):
    from serving_kit import make_settings
    a, _ = two_tenants
    client = await make_client(make_settings(dsn, db_pool_size=2), stages=[Recorder("record").stage],
                               api_key=False)
    assert (await client.get("/jobs", headers=a.headers)).status_code == 200
    assert (await client.post("/jobs", json={"type": "record", "lane": str(a.lane)},
                              headers=a.headers)).status_code == 201
    # a lane that is nobody's yet is not a tenant's to make
    nowhere = await client.post("/jobs", json={"type": "record", "lane": str(uuid.uuid4())}, headers=a.headers)
    assert nowhere.status_code == 422 and nowhere.json()["error"]["code"] == "unknown_lane"
    # no lane at all (ownerless work) answers as docs/api.md says, not row-level security's 403;
    # nor may a tenant name the all-zero lane itself
    for body in ({"type": "record"}, {"type": "record", "lane": str(uuid.UUID(int=0))}):
        missing = await client.post("/jobs", json=body, headers=a.headers)
        assert missing.status_code == 422 and missing.json()["error"]["code"] == "unknown_lane", missing.text
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE lane = $1", uuid.UUID(int=0)) == 0
    runtime = client._transport.app.state.runtime
    pool = await runtime.pool()
    async with pool.acquire() as one, pool.acquire() as other:  # every connection those requests used
        for conn in (one, other):
            row = await conn.fetchrow(
                "SELECT current_user AS role, current_setting('app.current_key_prefix', true) AS key, "
                "current_setting('app.current_key_digest', true) AS digest, "
                "current_setting('app.current_actor_kind', true) AS kind, "
                "current_setting('app.current_actor_id', true) AS actor")
            assert row["role"] not in ("skiplock_api", "skiplock_admin")
            assert not row["key"] and not row["digest"] and not row["kind"] and not row["actor"]


async def test_audit_records_who_changed_what(client, pool, two_tenants):
    a, _ = two_tenants
    await pool.execute("TRUNCATE audit_log")
    enq = await client.post("/jobs", json={"type": "record", "lane": str(a.lane)}, headers=a.headers)
    retried = await client.post(f"/jobs/{a.failed_job}/retry", headers=a.headers)
    cancelled = await client.post(f"/jobs/{a.pending_job}/cancel", headers=a.headers)
    assert (enq.status_code, retried.status_code, cancelled.status_code) == (201, 200, 200)
    rows = await pool.fetch("SELECT * FROM audit_log ORDER BY id")
    by_table = {(r["table_name"], r["op"], r["row_id"]) for r in rows}
    assert ("jobs", "INSERT", enq.json()["job"]["id"]) in by_table
    assert ("jobs", "UPDATE", str(a.failed_job)) in by_table
    assert ("jobs", "UPDATE", str(a.pending_job)) in by_table
    assert {(r["actor_kind"], r["actor_id"]) for r in rows} == {("user", str(a.user_id))}
    cancel = next(r for r in rows if r["row_id"] == str(a.pending_job))
    assert (cancel["old_row"]["status"], cancel["new_row"]["status"]) == ("pending", "cancelled")

    # the pipeline's own work is not audited
    before = len(rows)
    await Pipeline(pool, [Recorder("record").stage, Recorder("export").stage]).run("cron")
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'done'") >= 2
    assert await pool.fetchval("SELECT count(*) FROM audit_log") == before


async def test_users_and_keys_are_audited_from_the_cli_without_secrets(pool, dsn):
    import subprocess
    import sys
    env = {"DATABASE_URL": dsn, "PATH": "/usr/bin:/bin", "PIPELINE_PLUGINS": ""}
    for args in (["user", "add", "carol@c.example"], ["key", "create", "carol@c.example"]):
        done = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
    rows = await pool.fetch("SELECT * FROM audit_log WHERE actor_kind = 'system' ORDER BY id")
    assert {r["actor_id"] for r in rows} == {"cli"}
    assert {r["table_name"] for r in rows} == {"users", "api_keys"}
    key_row = next(r for r in rows if r["table_name"] == "api_keys")
    assert "hash" not in key_row["new_row"] and key_row["new_row"]["prefix"].startswith("slk_")


async def test_a_write_with_no_actor_is_refused(pool):
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="without an actor"):
        await pool.execute("INSERT INTO users (email) VALUES ('ghost@x.example')")
    assert await pool.fetchval("SELECT count(*) FROM users") == 0
    # a plain INSERT of a job still works: jobs are audited only for what people do via the API
    await pool.execute("INSERT INTO jobs (type) VALUES ('record')")


async def test_audit_rows_cannot_be_changed_or_deleted(client, pool, two_tenants):
    assert await pool.fetchval("SELECT count(*) FROM audit_log") > 0
    for sql in ("UPDATE audit_log SET actor_id = 'someone else'", "DELETE FROM audit_log"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await pool.execute(sql)
    admin = {"Authorization": f"Bearer {await f.api_key(pool, 'root@ops.example', admin=True)}"}
    page = (await client.get("/audit?table=lanes&limit=1", headers=admin)).json()
    assert len(page["data"]) == 1 and page["nextCursor"]
    following = await client.get(f"/audit?table=lanes&limit=1&cursor={page['nextCursor']}", headers=admin)
    assert following.status_code == 200 and following.json()["data"][0]["id"] < page["data"][0]["id"]
