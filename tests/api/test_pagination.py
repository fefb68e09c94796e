"""Keyset pages on every list route, strict query strings on every route, and cursors
that cannot be tampered with."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from serving_kit import AUTH, Recorder, assert_error, make_settings

from app.engine import accounts, job_admin
from app.engine.tenancy import tenant_transaction
from app.engine import jobs as q
from app.engine.queries import statement
from bench.explain import explain
from tests import factories as f
from tests.credentials import OTHER_CURSOR_SECRET

LIST_ROUTES = ["/jobs", "/runs"]


async def page_through(client, url: str, between=None) -> list[dict]:
    seen, cursor, pages = [], None, 0
    while True:
        sep = "&" if "?" in url else "?"
        r = await client.get(url + (f"{sep}cursor={cursor}" if cursor else ""))
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"data", "nextCursor"}  # no total, ever
        seen.extend(body["data"])
        cursor = body["nextCursor"]
        pages += 1
        if between is not None:
            await between()
        if cursor is None:
            return seen
        assert pages < 1000


def keys(rows, field="createdAt"):
    return [(datetime.fromisoformat(r[field]), uuid.UUID(r["id"])) for r in rows]


async def test_jobs_page_newest_first_and_filters_apply(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage, Recorder("export").stage])
    c = await f.lane(pool)
    old = await f.jobs(pool, "record", 5)
    mine = await f.jobs(pool, "export", 4, lane=c, start=datetime.now(timezone.utc) - timedelta(minutes=5))
    everything = await page_through(client, "/jobs?limit=2")
    assert [r["id"] for r in everything] == [str(i) for i in reversed(old + mine)]
    assert keys(everything) == sorted(keys(everything), reverse=True)
    only = await page_through(client, f"/jobs?lane={c}&type=export&status=pending&limit=3")
    assert [r["id"] for r in only] == [str(i) for i in reversed(mine)]
    assert (await client.get("/jobs?status=done")).json() == {"data": [], "nextCursor": None}
    # the last page says so: exactly `limit` rows left gives no further cursor
    exact = (await client.get("/jobs?limit=9")).json()
    assert len(exact["data"]) == 9 and exact["nextCursor"] is None


async def test_a_page_of_large_payloads_stops_before_4_mib_and_the_next_goes_on(make_client, pool):
    """200 jobs of 64 KiB payloads were one 13 MB answer: more than AWS Lambda can send back
    (6 MB). A page now stops before 4 MiB of items, with a cursor to the rest."""
    client = await make_client(stages=[Recorder("record").stage])
    blob = "x" * 60_000
    made = await q.enqueue_many(pool, [q.NewJob(type="record", payload={"i": i, "blob": blob}) for i in range(120)])
    first = await client.get("/jobs?limit=200")
    assert first.status_code == 200 and len(first.content) <= 4 * 1024 * 1024 + 1024, len(first.content)
    body = first.json()
    assert 60 <= len(body["data"]) < 120 and body["nextCursor"] is not None, len(body["data"])
    everything = await page_through(client, "/jobs?limit=200")
    assert sorted(r["id"] for r in everything) == sorted(str(i) for i in made)  # each once, none lost


async def test_pages_never_repeat_or_skip_older_jobs_under_concurrent_inserts(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage])
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    seeded = await f.jobs(pool, "record", 120, start=start)
    stop = asyncio.Event()
    inserted: list[uuid.UUID] = []

    async def writer():
        i = 0
        while not stop.is_set():
            ids = await q.enqueue_many(pool, [q.NewJob(type="record", payload={"new": i}) for _ in range(3)])
            inserted.extend(ids)
            # some arrive in the middle of what is being paged: an id of their own, just
            # after a seeded one (jobs list by id)
            placed = uuid.UUID(int=seeded[60 + i % 50].int + 1 + i)
            await pool.execute("INSERT INTO jobs (id, type) VALUES ($1, 'record')", placed)
            inserted.append(placed)
            i += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(writer())
    try:
        seen = await page_through(client, "/jobs?limit=7", between=lambda: asyncio.sleep(0.005))
    finally:
        stop.set()
        await task
    assert inserted, "the writer should have inserted while paging"
    ids = [r["id"] for r in seen]
    assert len(ids) == len(set(ids)), "a row was shown twice"
    assert {str(i) for i in seeded} <= set(ids), "an older row was skipped"
    assert [uuid.UUID(i) for i in ids] == sorted((uuid.UUID(i) for i in ids), reverse=True)
    # offset paging would have shown duplicates here; the seeded rows come in order
    assert [i for i in ids if uuid.UUID(i) in set(seeded)] == [str(i) for i in reversed(seeded)]


async def test_runs_page_newest_first_under_concurrent_runs(make_client, pool):
    client = await make_client(stages=[])
    start = datetime.now(timezone.utc) - timedelta(hours=2)
    seeded = []
    for i in range(30):
        run_id = await f.run(pool, trigger="cron" if i % 2 else "http")
        await pool.execute("UPDATE runs SET started_at = $2 WHERE id = $1", run_id, start + timedelta(seconds=i))
        seeded.append(run_id)
    await pool.execute("UPDATE runs SET stop_reason = 'no_work', finished_at = started_at + interval '1 second' "
                       "WHERE trigger = 'cron'")

    async def another_run():
        await f.run(pool, trigger="manual")

    seen = await page_through(client, "/runs?limit=4", between=another_run)
    ids = [r["id"] for r in seen]
    assert len(ids) == len(set(ids))
    assert [i for i in ids if uuid.UUID(i) in set(seeded)] == [str(i) for i in reversed(seeded)]
    assert keys(seen, "startedAt") == sorted(keys(seen, "startedAt"), reverse=True)
    finished = await page_through(client, "/runs?stop_reason=no_work&trigger=cron&limit=5")
    assert len(finished) == 15 and all(r["durationSeconds"] == 1.0 for r in finished)
    running = await page_through(client, "/runs?stop_reason=running&trigger=http")
    assert len(running) == 15 and all(r["stopReason"] is None for r in running)
    one = (await client.get(f"/runs/{seeded[1]}")).json()
    assert (one["trigger"], one["stopReason"], one["jobsDone"], one["jobsFailed"], one["jobsDeferred"]) == (
        "cron", "no_work", 0, 0, 0)


async def _a_cursor(client, url):
    body = (await client.get(url)).json()
    assert body["nextCursor"], body
    return body["nextCursor"]


def _flip(text: str, at: int) -> str:
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1:]


async def test_tampered_and_foreign_cursors_are_400(make_client, pool, dsn):
    client = await make_client(stages=[Recorder("record").stage])
    await f.jobs(pool, "record", 5)
    for _ in range(3):
        await f.run(pool)
    cursor = await _a_cursor(client, "/jobs?limit=2")
    runs_cursor = await _a_cursor(client, "/runs?limit=1")
    filtered = await _a_cursor(client, "/jobs?limit=2&status=pending")
    payload, signature = cursor.split(".")
    forged_payload = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged_payload["t"] = "2000-01-01T00:00:00+00:00"
    forged = base64.urlsafe_b64encode(json.dumps(forged_payload).encode()).rstrip(b"=").decode() + "." + signature

    other = await make_client(make_settings(dsn, cursor_secret=OTHER_CURSOR_SECRET),
                              stages=[Recorder("record").stage])
    bad = {
        "payload changed": _flip(cursor, 3),
        "signature changed": _flip(cursor, len(cursor) - 2),
        "forged position": forged,
        "garbage": "not-a-cursor",
        "empty": "",
        "three parts": cursor + ".x",
        "not base64": "%%%.%%%",
        "huge": "A" * 5000 + "." + "B" * 10,
        "json not ours": base64.urlsafe_b64encode(b'{"v":1}').decode().rstrip("=") + "." + signature,
    }
    for name, value in bad.items():
        r = await client.get("/jobs", params={"cursor": value})
        error = assert_error(r, 400, "invalid_cursor")
        assert error["details"] == {"parameter": "cursor"}, name
    foreign = assert_error(await client.get("/jobs", params={"cursor": runs_cursor}), 400, "invalid_cursor")
    assert "another list" in foreign["message"]
    refiltered = assert_error(await client.get("/jobs", params={"cursor": filtered, "status": "failed"}),
                              400, "invalid_cursor")
    assert "other filters" in refiltered["message"]
    assert_error(await other.get("/jobs", params={"cursor": cursor}), 400, "invalid_cursor")
    # the untouched cursor still works
    assert (await client.get("/jobs", params={"cursor": cursor, "limit": 2})).status_code == 200


@pytest.mark.parametrize("route", LIST_ROUTES)
async def test_unknown_and_bad_parameters_on_list_routes_are_400(make_client, route):
    client = await make_client(stages=[Recorder("record").stage])
    unknown = assert_error(await client.get(f"{route}?limt=5"), 400, "unknown_parameter")
    assert "'limt'" in unknown["message"] and "limit" in unknown["message"]
    for value in ("0", "-1", "abc", "1.5", "100000", "201", ""):
        error = assert_error(await client.get(route, params={"limit": value}), 400, "invalid_parameter")
        assert "from 1 to 200" in error["message"], value
    twice = assert_error(await client.get(f"{route}?limit=1&limit=2"), 400, "invalid_parameter")
    assert "at most once" in twice["message"]
    assert (await client.get(route, params={"limit": "200"})).status_code == 200


@pytest.mark.parametrize("url, says", [
    ("/jobs?status=canceled", "pending, running, done, failed, cancelled"),
    ("/jobs?status=", "pending"),
    ("/jobs?type=nope", "record"),
    ("/jobs?lane=12", "UUID"),
    ("/jobs?batch_id=x", "UUID"),
    ("/runs?stop_reason=crashed", "no_work"),
    ("/runs?trigger=a%20b", "letters"),
])
async def test_bad_filter_values_are_400_saying_what_to_send(make_client, url, says):
    client = await make_client(stages=[Recorder("record").stage])
    error = assert_error(await client.get(url), 400, "invalid_parameter")
    assert says in error["message"]


async def test_every_route_refuses_unknown_query_parameters(make_client):
    client = await make_client(stages=[Recorder("record").stage])
    document = (await client.get("/openapi.json")).json()
    checked = 0
    for template, item in document["paths"].items():
        path = re.sub(r"\{[^}]+\}", lambda _: str(uuid.uuid4()), template)
        for method in item:
            # the cron route takes its secret; the others the client's API key
            r = await client.request(method.upper(), f"{path}?bogus=1",
                                     headers=AUTH if template.startswith("/cron") else None, json={})
            error = assert_error(r, 400, "unknown_parameter")
            assert "'bogus'" in error["message"], (method, path)
            checked += 1
    assert checked >= 13


async def test_a_deep_page_reads_the_index_not_the_table(pool):
    """The bound is never NULL, so a plan made for the values (as list_jobs asks for) walks
    the primary key back from the cursor's job: no sort, no scan of the newer rows."""
    await pool.execute("""INSERT INTO jobs (type, status, created_at, finished_at)
        SELECT 't', 'done', now() - make_interval(secs => g), now() FROM generate_series(1, 5000) g""")
    await pool.execute("ANALYZE jobs")
    last_id = await pool.fetchval("SELECT id FROM jobs ORDER BY id DESC OFFSET 4000 LIMIT 1")
    async with pool.acquire() as conn:
        sql, *args = statement("jobs_list").bind(status="done", type="t", lane=None, batch_id=None,
                                                 since=None, until=None, error=None, ids=None, after=last_id, limit=51)
        plan = await explain(conn, sql, tuple(args), mode="force_custom_plan")
    assert "Index Scan Backward using jobs_pkey" in plan, plan
    assert f"Index Cond: (id < '{last_id}'::uuid)" in plan, plan  # from the cursor on
    assert not re.search(r"Sort \(actual[^\n]*rows=[1-9]", plan), plan  # nothing sorted (no until: its branch is off)
    assert "rows=51" in plan and "Rows Removed by Filter" not in plan, plan


async def test_a_page_as_list_jobs_runs_it_reads_the_page_not_the_table(pool):
    """The pools plan generically (plan_cache_mode = force_generic_plan), and a generic plan
    of GET /jobs, not knowing which filters are NULL, reads and sorts every job an admin
    could see, or every job of a tenant's lanes. list_jobs runs the page with a plan made
    for the values: a first page and a deep one read about a page of rows, and the
    caller's transaction is back to generic plans afterwards."""
    tenant = await f.tenant(pool, "t@a.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    lanes = [tenant.lane, await f.lane(pool, tenant.user_id)]
    await pool.execute("""INSERT INTO jobs (type, lane, status, finished_at, last_error)
        SELECT CASE WHEN g % 3 = 0 THEN 'u' ELSE 't' END, ($1::uuid[])[1 + g % 2],
               CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'done' END, now(), CASE WHEN g % 50 = 0 THEN 'boom' END
        FROM generate_series(1, 6000) g""", lanes)
    other = await f.tenant(pool, "o@b.example")
    await pool.execute("INSERT INTO jobs (type, lane, status, finished_at) "
                       "SELECT 't', $1, 'done', now() FROM generate_series(1, 20000) g", other.lane)
    await pool.execute("ANALYZE jobs")
    deep = await pool.fetchval("SELECT id FROM jobs ORDER BY id DESC OFFSET 3000 LIMIT 1")
    # rows the jobs table gave out: by sequential scans and through its indexes
    read = ("SELECT pg_stat_get_xact_tuples_returned('jobs'::regclass) "
            "+ pg_stat_get_xact_tuples_fetched('jobs'::regclass)")
    for who in (admin, tenant):
        actor = await accounts.authenticate(pool, who.key)
        async with tenant_transaction(pool, actor) as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
            for where, after in ((job_admin.JobFilter(), None), (job_admin.JobFilter(), deep),
                                 (job_admin.JobFilter(type="t"), deep), (job_admin.JobFilter(status="done"), None)):
                before = await conn.fetchval(read)
                rows = await job_admin.list_jobs(conn, where, after, 51, own_lanes=not actor.is_admin)
                assert len(rows) == 51 and all(after is None or r["id"] < after for r in rows)
                assert await conn.fetchval(read) - before < 300, (who.email, where, after)
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"


async def test_a_deep_page_of_the_audit_log_reads_the_index_not_the_table(pool):
    """The same for the audit log, which only grows."""
    await pool.execute("""INSERT INTO audit_log (at, actor_kind, table_name, op)
        SELECT now() - make_interval(secs => g), 'system', 'users', 'INSERT' FROM generate_series(1, 3000) g""")
    await pool.execute("ANALYZE audit_log")
    at, last_id = await pool.fetchrow("SELECT at, id FROM audit_log ORDER BY at DESC, id DESC OFFSET 2000 LIMIT 1")
    async with pool.acquire() as conn:
        sql, *args = statement("audit_page").bind(at=at, last_id=last_id, table=None, limit=51)
        plan = await explain(conn, sql, tuple(args))
    assert "using audit_log_at_idx" in plan, plan
    at_ = f"${statement('audit_page').names.index('at') + 1}"
    assert f"Index Cond: (ROW(at, id) < ROW(COALESCE({at_}" in plan, plan
    assert "Sort" not in plan and "Rows Removed by Filter" not in plan, plan
