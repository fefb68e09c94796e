"""The dashboard's and the API's reads at a million jobs (python -m bench --only dashboard).

Issue 41: a page over a million jobs answers in a few milliseconds. The load, in one
fresh database, through the triggers as the migrations leave them (so the lane counters
are real): 1,000,000 jobs created over the last week with time-ordered ids from their
creation time, over 1,000 lanes (600 owned ten each by 60 tenants, 400 ownerless, busy
ones busier) and the all-zero lane; mostly done, some failed (with errors), cancelled
and retrying, the last hours' backlog pending, 200 running, 5,000 waiting for a parent;
10% in 2,000 batches; 20,160 runs (one every 30 s); audit rows for 20,000 jobs. Then
VACUUM ANALYZE and a CHECKPOINT.

Each read goes through the real app (create_app, httpx.ASGITransport: the API key, the
tenant transaction, row-level security, the JSON), as an admin and as two tenants (one
with about 7,000 jobs, one with about 90,000), warm: a few calls first, then the
samples. Every statement the read sent is captured (asyncpg's query logger on the app's
pool) and run again under EXPLAIN (ANALYZE, BUFFERS) in the same tenant's transaction,
with the plan the app runs (the pool's generic plan, or one made for the values after the
read asked for that, as GET /jobs does: plan_for_values.sql) and, for comparison, the plan
made for the values: the buffers are the sum over the read's statements. A read's "database"
time is how long the driver waited for its statements' answers."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from app.api import create_app
from app.engine import accounts
from app.engine.db import create_pool
from app.engine.queries import SQL_DIR, statement
from app.engine.tenancy import Actor, acting, enter_tenant
from app.pipeline.stage import Stage
from app.settings import load_settings
from bench.claim_latency import _summary
from bench.explain import explain
from bench.results_file import sitting_path

TYPES = ("fetch", "parse", "send")
LANES = 1_000
TENANTS = 60            # tenant t owns lanes 10t .. 10t+9
SMALL_TENANT = 50       # lanes 500..509: about 0.7% of the jobs
LARGE_TENANT = 0        # lanes 0..9, the busiest: about 9%
BATCHES = 2_000
RARE = "needle-5f3759df"  # in one job's last_error, a third of the way back


def lane_sql(k: str) -> str:
    """Lane number k (0..LANES-1) as a uuid, never the all-zero lane."""
    return f"('00000000-0000-4000-8000-' || lpad(to_hex(({k}) + 1), 12, '0'))::uuid"


def lane_id(k: int) -> uuid.UUID:
    return uuid.UUID(f"00000000-0000-4000-8000-{k + 1:012x}")


LOAD_USERS = """
INSERT INTO users (id, email)
SELECT ('00000000-0000-4000-9000-' || lpad(to_hex(t + 1), 12, '0'))::uuid, 'tenant-' || t || '@example.invalid'
FROM generate_series(0, $1::int - 1) AS t
"""
# The schema carries the example plug-in's tables (bench/server.py migrates it), whose
# triggers rank lanes from campaigns: a tenant's lanes are its campaigns, ownerless lanes
# plain rows.
LOAD_CAMPAIGNS = f"""
INSERT INTO campaigns (id, user_id, name)
SELECT {lane_sql('k')}, ('00000000-0000-4000-9000-' || lpad(to_hex(k / 10 + 1), 12, '0'))::uuid, 'bench'
FROM generate_series(0, $1::int * 10 - 1) AS k
"""
LOAD_PLANS = """
INSERT INTO subscriptions (user_id, plan)
SELECT ('00000000-0000-4000-9000-' || lpad(to_hex(t + 1), 12, '0'))::uuid, 'standard'
FROM generate_series(0, $1::int - 1) AS t
"""
LOAD_LANES = f"""
INSERT INTO lanes (id) SELECT {lane_sql('k')} FROM generate_series($2::int * 10, $1::int - 1) AS k
"""
# Batch b holds every tenth job of 500 in a row (about five minutes), in lane b % LANES.
LOAD_BATCHES = f"""
INSERT INTO batches (id, lane, status, created_at, updated_at, finished_at)
SELECT ('00000000-0000-4000-a000-' || lpad(to_hex(b + 1), 12, '0'))::uuid, {lane_sql('b % ' + str(LANES))},
       CASE WHEN b >= $1::int - 10 THEN 'running' WHEN b % 7 = 0 THEN 'partially_failed' ELSE 'completed' END,
       t, t, CASE WHEN b < $1::int - 10 THEN t + interval '6 minutes' END
FROM generate_series(0, $1::int - 1) AS b,
     LATERAL (SELECT now() - interval '7 days' * (1 - b::float8 / $1)) AS x(t)
"""
# A time-ordered id from the creation time, as time_ordered_uuid() (migration 0026) makes
# one from the clock: so the primary key pages by creation time, as in a live table.
JOB_ID = """encode(substring(int8send(m / 1000) FROM 3)
                   || int2send((28672 + (m % 1000) * 4096 / 1000)::smallint)
                   || substring(uuid_send(gen_random_uuid()) FROM 9), 'hex')::uuid"""
ERRORS = ("timeout after 30 s", "HTTP 503 from upstream", "connection reset by peer",
          "rate limited (HTTP 429)", "invalid payload: no url")
# Jobs g = $1 .. $2 of $3, created evenly over the week before now. The newest 50,000
# are the backlog (four in five pending); older ones mostly ended. Lanes skewed: lane
# floor(LANES * r^2), so the first ones are the busiest; 3% in the all-zero lane.
LOAD_JOBS = f"""
INSERT INTO jobs (id, type, lane, payload, status, attempts, run_after, locked_at, last_error, errors,
                  created_at, finished_at, batch_id, total, progress)
SELECT {JOB_ID}, type, lane, jsonb_build_object('url', 'https://example.com/page/' || g), status,
       attempts, run_after, locked_at, last_error,
       CASE WHEN last_error IS NOT NULL AND status <> 'cancelled'
            THEN jsonb_build_array(jsonb_build_object('attempt', greatest(attempts, 1), 'error', last_error,
                                                      'at', coalesce(finished_at, created_at)))
            ELSE '[]'::jsonb END,
       created_at, finished_at, batch, CASE WHEN batch IS NOT NULL THEN 10 END,
       CASE WHEN batch IS NOT NULL AND status = 'done' THEN 10 END
FROM (
    SELECT g, c AS created_at, floor(extract(epoch FROM c) * 1000000)::bigint AS m,
           (ARRAY{list(TYPES)!r})[1 + (g % 10 >= 5)::int + (g % 10 >= 8)::int] AS type,
           CASE WHEN batch IS NOT NULL THEN {lane_sql('(g / 500) % ' + str(LANES))}
                WHEN r1 < 0.03 THEN '00000000-0000-0000-0000-000000000000'::uuid
                ELSE {lane_sql(f'floor({LANES} * r2 * r2)::int')} END AS lane,
           status, batch,
           CASE WHEN status IN ('pending', 'waiting') THEN 0 ELSE 1 + (r3 < 0.1)::int END
               + (status = 'pending' AND last_error IS NOT NULL)::int AS attempts,
           CASE WHEN status = 'pending' AND last_error IS NOT NULL THEN now() + interval '4 minutes' * r3
                WHEN status = 'pending' AND r3 < 0.05 THEN now() + interval '1 hour' * r3
                ELSE c END AS run_after,
           CASE WHEN status IN ('done', 'failed') OR last_error IS NOT NULL
                THEN c + interval '20 seconds' * r3 END AS locked_at,
           last_error,
           CASE WHEN status IN ('done', 'failed', 'cancelled') THEN c + interval '90 seconds' * r3 END AS finished_at
    FROM (
        SELECT g, c, r1, r2, r3, batch,
               CASE WHEN g = $4::int THEN 'failed'
                    WHEN g > $3::int - 50000 THEN CASE WHEN r1 < 0.8 THEN 'pending' ELSE 'done' END
                    WHEN r1 < 0.92 THEN 'done' WHEN r1 < 0.96 THEN 'failed'
                    WHEN r1 < 0.98 THEN 'cancelled' ELSE 'pending' END AS status
        FROM (
            SELECT g, now() - interval '7 days' * (1 - g::float8 / $3) AS c,
                   random() AS r1, random() AS r2, random() AS r3,
                   CASE WHEN g % 10 = 0 AND g / 500 < {BATCHES}
                        THEN ('00000000-0000-4000-a000-' || lpad(to_hex(g / 500 + 1), 12, '0'))::uuid END AS batch
            FROM generate_series($1::int, $2::int) AS g
        ) a
    ) b
    CROSS JOIN LATERAL (
        SELECT CASE WHEN g = $4 THEN 'certificate has expired: {RARE}'
                    WHEN status = 'failed' OR (status = 'pending' AND g <= $3 - 50000)
                    THEN (ARRAY{list(ERRORS)!r})[1 + (g % {len(ERRORS)})] END AS last_error
    ) e
) j
"""
# 200 of the backlog running, held by the last run.
RUN_SOME = """
UPDATE jobs SET status = 'running', attempts = 1, locked_at = now() - interval '30 seconds', run_id = $2
WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND run_after <= now() ORDER BY id LIMIT $1)
"""
# Jobs waiting for a pending parent (the trigger marks them waiting and the parent).
LOAD_WAITING = f"""
INSERT INTO jobs (type, lane, payload, parents)
SELECT '{TYPES[2]}', p.lane, '{{}}'::jsonb, ARRAY[p.id]
FROM (SELECT id, lane FROM jobs WHERE status = 'pending' AND lane <> '00000000-0000-0000-0000-000000000000'
      ORDER BY id DESC LIMIT $1) p
"""
LOAD_RUNS = """
INSERT INTO runs (trigger, stop_reason, jobs_done, jobs_failed, summary, started_at, finished_at, heartbeat_at)
SELECT (ARRAY['cron', 'worker', 'http'])[1 + g % 3], (ARRAY['no_work', 'time_budget', 'error'])[1 + g % 3],
       60, 2, '{"stages": {"fetch": {"done": 30, "failed": 1}, "parse": {"done": 20, "failed": 1},
                           "send": {"done": 10, "failed": 0}}}'::jsonb,
       now() - g * interval '30 seconds', now() - g * interval '30 seconds' + (g % 25) * interval '1 second',
       now() - g * interval '30 seconds' + (g % 25) * interval '1 second'
FROM generate_series(1, $1::int) AS g
"""
OPEN_RUN = "INSERT INTO runs (trigger) VALUES ('worker') RETURNING id"
# What people did: a retry (failed -> pending) and its ending, for failed jobs spread over
# the week, as the audit trigger writes them.
LOAD_AUDIT = """
INSERT INTO audit_log (at, actor_kind, actor_id, table_name, op, row_id, old_row, new_row)
SELECT j.finished_at + s * interval '1 minute', 'admin', 'bench', 'jobs', 'UPDATE', j.id::text,
       jsonb_build_object('status', CASE WHEN s = 1 THEN 'failed' ELSE 'pending' END),
       jsonb_build_object('status', CASE WHEN s = 1 THEN 'pending' ELSE 'failed' END, 'last_error', j.last_error)
FROM (SELECT id, finished_at, last_error FROM jobs WHERE status = 'failed' ORDER BY id LIMIT $1) j,
     generate_series(1, 2) AS s
"""


def _noop_stages() -> list[Stage]:
    async def noop(job, ctx) -> None:
        return None
    return [Stage(type=t, handler=noop) for t in TYPES]


async def load(pool, n: int, log) -> dict[str, Any]:
    t0 = time.perf_counter()
    async with pool.acquire() as conn:
        async with conn.transaction():
            # the audit triggers on users and lanes want to know who acts
            await conn.execute("SELECT set_config('app.current_actor_kind', 'system', true), "
                               "set_config('app.current_actor_id', 'bench', true)")
            await conn.execute(LOAD_USERS, TENANTS)
            await conn.execute(LOAD_PLANS, TENANTS)
            await conn.execute(LOAD_CAMPAIGNS, TENANTS)
            await conn.execute(LOAD_LANES, LANES, TENANTS)
            await conn.execute(LOAD_BATCHES, BATCHES)
        await conn.execute(LOAD_RUNS, 20_160)
        run_id = await conn.fetchval(OPEN_RUN)
        rare_at = n - n // 3
        await conn.execute("SELECT setseed(0.41)")
        step = 100_000  # per statement: the triggers' transition tables stay small
        for first in range(1, n + 1, step):
            await conn.execute(LOAD_JOBS, first, min(n, first + step - 1), n, rare_at)
        await conn.execute(RUN_SOME, 200, run_id)
        await conn.execute(LOAD_WAITING, 5_000)
        await conn.execute(LOAD_AUDIT, 20_000)
        loaded = time.perf_counter() - t0
        # the enqueues' lines folded into the lane counters, as a running queue's claims
        # fold them within a second; left unfolded, every lane count read 14,500 of them
        await conn.execute("SELECT job_lanes_fold()")
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
        counts = {r["status"]: r["n"] for r in await conn.fetch(
            "SELECT status, count(*)::int AS n FROM jobs GROUP BY status ORDER BY status")}
        size = await conn.fetchval("SELECT pg_size_pretty(pg_total_relation_size('jobs'))")
    log(f"  loaded {sum(counts.values()):,} jobs ({', '.join(f'{k} {v:,}' for k, v in counts.items())}; "
        f"jobs with its indexes {size}) in {loaded:.0f} s, then VACUUM ANALYZE")
    return {"jobs": counts, "jobs_size": size, "load_s": round(loaded, 1), "rare_job_index": rare_at}


async def _keys(pool) -> dict[str, tuple[str, Actor]]:
    """API keys: the admin's and the two tenants', with the Actor each stands for."""
    async with acting(pool, Actor("system", "bench")) as conn:
        await accounts.add_user(conn, "admin@example.invalid")
        made = {"admin": (await accounts.create_key(conn, "admin@example.invalid", True)).key,
                "tenant_small": (await accounts.create_key(conn, f"tenant-{SMALL_TENANT}@example.invalid")).key,
                "tenant_large": (await accounts.create_key(conn, f"tenant-{LARGE_TENANT}@example.invalid")).key}
    return {who: (key, await accounts.authenticate(pool, key)) for who, key in made.items()}


class Captured:
    """Every statement the app's connections send while `on`: (sql, args), and the time
    the driver waited for their answers (the rest of a read is the app's own)."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list[tuple[str, tuple]] = []
        self.waited = 0.0

    def __call__(self, record) -> None:
        if self.on:
            self.seen.append((record.query, tuple(record.args or ())))
            self.waited += record.elapsed

    async def attach(self, pool) -> None:
        """On each of the pool's connections: hold them all at once, so each is one of them."""
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        for conn in held:
            conn.add_query_logger(self)
        for conn in held:
            await pool.release(conn)


def _names() -> dict[str, str]:
    """The queue's statements by their SQL, to name what a read sent."""
    out = {}
    for f in (SQL_DIR / "queries").iterdir():
        if f.name.endswith(".sql"):
            out[statement(f.name[:-4]).sql] = f.name[:-4]
    return out


# Not the read's own: the key's lookup and the tenant transaction's set-up.
SKIPPED = ("api_key_lookup", "act_as_tenant", "act_as", "act_as_default")
# Statements that switch the plans the read's next statements get (None: from the args).
MODE = {"plan_for_values": "force_custom_plan", "plan_cache_mode_set": None}


async def _explain(pool, actor: Actor, seen: list[tuple[str, tuple]], names: dict[str, str]) -> list[dict]:
    out = []
    mode = "force_generic_plan"  # the pool's, until the read asks for plans made for the values
    async with pool.acquire() as conn:
        for sql, args in seen:
            name = names.get(sql, sql.strip().split("\n")[0][:60])
            if name in MODE:
                mode = MODE[name] or str(args[0])
                continue
            if name in SKIPPED or "pg_advisory_unlock_all" in sql or not sql.lstrip().upper().startswith(("SELECT", "WITH", "(", "--")):
                continue
            tr = conn.transaction()
            await tr.start()
            try:
                await enter_tenant(conn, actor)
                # the plan the app runs (the pool's generic plan, or one made for the values
                # where the read asked: GET /jobs); and, for comparison, the plan made for
                # these very values
                plan = await explain(conn, sql, args, mode=mode, options="ANALYZE, BUFFERS, FORMAT JSON")
                custom = await explain(conn, sql, args, mode="force_custom_plan",
                                       options="ANALYZE, BUFFERS, FORMAT JSON")
            except Exception as exc:  # noqa: BLE001 - reported, the others still explained
                out.append({"statement": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
                continue
            finally:
                await tr.rollback()
            top, other = json.loads(plan)[0], json.loads(custom)[0]
            node = top["Plan"]
            out.append({"statement": name, "plan_cache_mode": mode, "ms": round(top["Execution Time"], 3),
                        "planning_ms": round(top.get("Planning Time", 0), 3),
                        "buffers": _buffers(node),
                        "read": node.get("Shared Read Blocks", 0), "rows": node.get("Actual Rows"),
                        "plan": _outline(node), "custom_ms": round(other["Execution Time"], 3),
                        "custom_buffers": _buffers(other["Plan"]), "custom_plan": _outline(other["Plan"])})
    return out


def _buffers(node: dict) -> int:
    return node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)


def _outline(node: dict, depth: int = 0) -> list[str]:
    """A plan, one line a node: what it read, how many rows came out, its buffers."""
    on = node.get("Index Name") or node.get("Relation Name") or ""
    line = (f"{'  ' * depth}{node['Node Type']}{' ' + on if on else ''} rows={node.get('Actual Rows')}"
            f" loops={node.get('Actual Loops')} buffers={node.get('Shared Hit Blocks', 0) + node.get('Shared Read Blocks', 0)}"
            + (f" removed={node['Rows Removed by Filter']}" if node.get("Rows Removed by Filter") else ""))
    return [line] + [x for child in node.get("Plans", []) for x in _outline(child, depth + 1)]


def _reads(who: str, facts: dict[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    """(label, path, query) of each read, for one caller; the jobs lists twice each (the
    first page, then one 1,000 rows on) but the rare error's (one row: no later page)."""
    lane, batch = facts[f"{who}_lane"], facts[f"{who}_batch"]
    day = facts["day"]
    lists = [("none", {}), ("type", {"type": TYPES[1]}), ("status=failed", {"status": "failed"}),
             ("status=pending", {"status": "pending"}), ("lane", {"lane": lane}),
             *([("batch", {"batch_id": batch})] if batch else []),
             ("since/until (an hour, 3 days ago)", {"since": day[0], "until": day[1]}),
             ("error (common)", {"error": "timeout"}), ("error (rare)", {"error": RARE})]
    out = [("GET /stats", "/stats", {})]
    for label, q in lists:
        out.append((f"GET /jobs {label}", "/jobs", {**q, "limit": "50"}))
        if label not in ("error (rare)", "batch"):
            out.append((f"GET /jobs {label}, later page", "/jobs", {**q, "limit": "50", "deep": "1"}))
    out += [("GET /jobs/{id}/timeline", f"/jobs/{facts[f'{who}_job']}/timeline", {}),
            ("GET /trends?window=hour", "/trends", {"window": "hour"}),
            ("GET /trends?window=day", "/trends", {"window": "day"}),
            ("GET /lanes", "/lanes", {}), ("GET /runs", "/runs", {})]
    return out


async def _deep_cursor(client, path: str, query: dict[str, str], rows: int = 1_000) -> str | None:
    """The cursor `rows` rows into the list (pages of 200), as a person paging would hold."""
    q, cursor, seen = {**query, "limit": "200"}, None, 0
    while seen < rows:
        r = await client.get(path, params={**q, **({"cursor": cursor} if cursor else {})})
        r.raise_for_status()
        body = r.json()
        seen += len(body["data"])
        cursor = body["nextCursor"]
        if cursor is None:
            return None
    return cursor


async def run(server, *, n: int = 1_000_000, warmup: int = 3, samples: int = 20, log) -> dict:
    dsn = await server.fresh_database("bench_dashboard")
    pool = await create_pool(dsn, 2)
    app = None
    try:
        out: dict[str, Any] = {"n": n, "method": "httpx.ASGITransport into create_app (no plug-in; stages "
                               f"{', '.join(TYPES)}), one request at a time; EXPLAIN (ANALYZE, BUFFERS) of each "
                               "statement the read sent, in the caller's tenant transaction, under the plan_cache_mode the read ran "
                               "it with (the pool's generic plans; plans made for the values for GET /jobs)",
                               "warmup": warmup, "samples": samples}
        out["load"] = await load(pool, n, log)
        keys = await _keys(pool)
        facts = await _facts(pool, keys)
        out["facts"] = {k: str(v) for k, v in facts.items()}
        settings = load_settings(database_url=dsn, cron_secret="bench-cron-secret-0123456789abcdefgh",
                                 cursor_secret="bench-cursor-secret-0123456789abcdefg", local_dev=False,
                                 pipeline_plugins="", run_scheduler=False)
        app = create_app(settings, _noop_stages(), plugins=[])
        app_pool = await app.state.runtime.pool()
        captured = Captured()
        await captured.attach(app_pool)
        names = _names()
        out["reads"] = {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench.test",
                                     timeout=120) as client:
            for who, (key, actor) in keys.items():
                client.headers["Authorization"] = f"Bearer {key}"
                results = out["reads"][who] = {}
                log(f"  as {who}:")
                for label, path, query in _reads(who, facts):
                    q = dict(query)
                    if q.pop("deep", None):
                        cursor = await _deep_cursor(client, path, q)
                        if cursor is None:
                            results[label] = {"skipped": "fewer than 1,000 rows"}
                            continue
                        q["cursor"] = cursor
                    lat, waited, rows = [], [], None
                    for i in range(warmup + samples):
                        captured.on, captured.seen, captured.waited = True, [], 0.0
                        t = time.perf_counter()
                        r = await client.get(path, params=q)
                        ms = (time.perf_counter() - t) * 1000
                        captured.on = False
                        if r.status_code != 200:  # reported in its row; the other reads still run
                            break
                        if i == warmup:
                            body = r.json()
                            rows = len(body["data"]) if isinstance(body.get("data"), list) else None
                            seen = list(captured.seen)
                        if i >= warmup:
                            lat.append(ms)
                            waited.append(captured.waited * 1000)
                    if r.status_code != 200:
                        results[label] = {"error": f"{r.status_code} {r.text[:300]}"}
                        log(f"    {label:44s} {results[label]['error']}")
                        continue
                    plans = await _explain(app_pool, actor, seen, names)
                    res = {**_summary(lat), "database_p50_ms": round(sorted(waited)[len(waited) // 2], 3),
                           "rows": rows, "statements": len(plans),
                           "buffers": sum(p.get("buffers", 0) for p in plans),
                           "buffers_custom_plans": sum(p.get("custom_buffers", 0) for p in plans),
                           "explain_ms": round(sum(p.get("ms", 0) for p in plans), 3), "plans": plans}
                    results[label] = res
                    log(f"    {label:44s} p50 {res['p50_ms']:8.2f}  p95 {res['p95_ms']:8.2f} ms  "
                        f"(database {res['database_p50_ms']:7.2f})  "
                        f"buffers {res['buffers']:>8,} (custom plans {res['buffers_custom_plans']:>7,})" + (f"  rows {rows}" if rows is not None else ""))
        return out
    finally:
        if app is not None:
            await app.state.runtime.close()
        await pool.close()


async def _facts(pool, keys) -> dict[str, Any]:
    """What the reads name: per caller a lane of its own (its busiest), a batch in it, and
    a failed job with audit rows; a one-hour window three days back."""
    out: dict[str, Any] = {}
    async with pool.acquire() as conn:
        for who, tenant in (("admin", None), ("tenant_small", SMALL_TENANT), ("tenant_large", LARGE_TENANT)):
            lanes = ([lane_id(k) for k in range(LANES)] if tenant is None
                     else [lane_id(k) for k in range(10 * tenant, 10 * tenant + 10)])
            out[f"{who}_lane"] = await conn.fetchval(
                "SELECT lane FROM jobs WHERE lane = ANY($1::uuid[]) GROUP BY lane ORDER BY count(*) DESC LIMIT 1",
                lanes)
            out[f"{who}_batch"] = await conn.fetchval(
                "SELECT batch_id FROM jobs WHERE lane = ANY($1::uuid[]) AND batch_id IS NOT NULL "
                "ORDER BY id DESC LIMIT 1", lanes)
            out[f"{who}_job"] = await conn.fetchval(
                "SELECT j.id FROM jobs j WHERE j.status = 'failed' AND j.lane = ANY($1::uuid[]) "
                "AND EXISTS (SELECT 1 FROM audit_log a WHERE a.table_name = 'jobs' AND a.row_id = j.id::text) "
                "ORDER BY j.id LIMIT 1", lanes)
        start = await conn.fetchval("SELECT date_trunc('hour', now() - interval '3 days')")
    out["day"] = (start.isoformat(), (start + timedelta(hours=1)).isoformat())
    return out


def table(out: dict) -> list[str]:
    d = out.get("dashboard")
    if not d:
        return []
    if "error" in d:
        return ["", f"Dashboard reads: {d['error']}"]
    who = list(d["reads"])
    lines = ["", f"Dashboard reads at {sum(d['load']['jobs'].values()):,} jobs, through the app (ASGI), warm, "
                 f"{d['samples']} samples: p50 / p95 ms, buffers (EXPLAIN of the read's statements)",
             "  (in brackets: the buffers had each statement been planned for its values)",
             f"  {'read':56s}" + "".join(f"{w:>38s}" for w in who)]
    labels = list(d["reads"][who[0]])
    for label in labels:
        cells = []
        for w in who:
            r = d["reads"][w].get(label, {})
            cells.append(f"{('error' if 'error' in r else 'skipped'):>38s}" if "p50_ms" not in r else
                         f"{r['p50_ms']:>8.2f} / {r['p95_ms']:>8.2f}  {r['buffers']:>8,} "
                         f"({r['buffers_custom_plans']:>7,})")
        lines.append(f"  {label:56s}" + "".join(cells))
    return lines


def record(out: dict, results_dir: Path, log=print) -> None:
    """The part's own results file, with the machine and the server."""
    if not (out.get("dashboard") or {}).get("reads"):
        return
    path = sitting_path(results_dir, "dashboard", out["machine"]["date"][:10])
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: out.get(k) for k in ("machine", "postgres", "args", "dashboard")},
                               indent=1, default=str) + "\n")
    log(f"  dashboard results in bench/results/{path.name}")
