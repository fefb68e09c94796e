"""The /metrics scrape with 1M jobs in the table (python -m bench --only metrics).

950,000 done jobs (loaded without triggers: the scrape never reads them), 50,000
pending over 2,000 lanes (through the triggers, so the counters are real), 200
running, and 20,000 finished runs with per-stage summaries (two months of five-minute
schedules and a worker). Then the scrape as the route does it (app.api.metrics:
every query in one snapshot, and the text rendered), timed; target: p95 < 20 ms. For
scale, the two run families are timed alone, from the running totals the scrape reads
(migration 0022) and recounted over every run as the scrape did before them."""

from __future__ import annotations

import time

from app.api.metrics import read_metrics
from app.engine import queue_stats
from app.engine.db import create_pool
from bench.claim_latency import _summary, pct

TARGET_P95_MS = 20.0
TYPES = ("crawl", "extract", "draft")

LOAD_DONE = """
INSERT INTO jobs (type, lane, status, attempts, run_after, locked_at, finished_at, created_at)
SELECT $1, ('00000000-0000-4000-8000-' || lpad(to_hex(g % 2000), 12, '0'))::uuid, 'done', 1,
       now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour', now() - interval '2 hours'
FROM generate_series(1, $2::int) AS g
"""
LOAD_PENDING = """
INSERT INTO jobs (type, lane, run_after)
SELECT $1, ('00000000-0000-4000-8000-' || lpad(to_hex(g % 2000), 12, '0'))::uuid,
       now() - (g % 600) * interval '1 second'
FROM generate_series(1, $2::int) AS g
"""
RUN_SOME = """
UPDATE jobs SET status = 'running', attempts = 1, locked_at = now()
WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND type = $1 LIMIT $2)
"""
LOAD_RUNS = """
INSERT INTO runs (trigger, stop_reason, jobs_done, jobs_failed, summary, started_at, finished_at)
SELECT (ARRAY['cron', 'worker', 'http'])[1 + g % 3], (ARRAY['no_work', 'time_budget', 'error'])[1 + g % 3],
       30, 2, '{"stages": {"crawl": {"done": 10, "failed": 1, "deferred": 0},
                           "extract": {"done": 10, "failed": 1, "deferred": 0},
                           "draft": {"done": 10, "failed": 0, "deferred": 2}}}'::jsonb,
       now() - g * interval '5 minutes', now() - g * interval '5 minutes' + (g % 220) * interval '1 second'
FROM generate_series(1, $1::int) AS g
"""
# What the two run families cost before the running totals: a pass over every run each.
RECOUNT_RUNS = """
SELECT trigger, stop_reason, width_bucket(-extract(epoch FROM finished_at - started_at)::float8, $1::float8[]),
       count(*), sum(extract(epoch FROM finished_at - started_at))::float8
FROM runs WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3
"""
RECOUNT_ENDINGS = """
SELECT s.key, sum((s.value ->> 'done')::bigint), sum((s.value ->> 'failed')::bigint),
       sum((s.value ->> 'deferred')::bigint)
FROM runs r CROSS JOIN LATERAL jsonb_each(r.summary -> 'stages') AS s
WHERE r.finished_at IS NOT NULL AND jsonb_typeof(r.summary -> 'stages') = 'object'
GROUP BY s.key
"""


async def _timed(call, times: int) -> list[float]:
    lat = []
    for _ in range(times):
        t = time.perf_counter()
        await call()
        lat.append((time.perf_counter() - t) * 1000)
    return lat


async def run(server, *, done: int = 950_000, pending: int = 50_000, runs: int = 20_000,
              scrapes: int = 50, log) -> dict:
    dsn = await server.fresh_database("bench_metrics")
    pool = await create_pool(dsn, 2)
    try:
        t = time.perf_counter()
        async with pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute("SET LOCAL session_replication_role = replica")  # no triggers
                for type_ in TYPES:
                    await conn.execute(LOAD_DONE, type_, done // len(TYPES))
            for type_ in TYPES:
                await conn.execute(LOAD_PENDING, type_, pending // len(TYPES))
                await conn.execute(RUN_SOME, type_, 200 // len(TYPES))
            await conn.execute(LOAD_RUNS, runs)
            await conn.execute("VACUUM ANALYZE jobs, job_lanes, runs")
            total = await conn.fetchval("SELECT count(*) FROM jobs")
        log(f"  loaded {total:,} jobs and {runs:,} runs in {time.perf_counter() - t:.1f} s")
        from prometheus_client import CollectorRegistry, generate_latest

        from app.api.metrics import _Families

        lat = []
        for i in range(scrapes + 5):
            t = time.perf_counter()
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Families(await read_metrics(pool, [], None)))
            body = generate_latest(registry)
            if i >= 5:  # the first few warm the plans and the cache
                lat.append((time.perf_counter() - t) * 1000)
        out = {"jobs": total, "runs": runs, "bytes": len(body), **_summary(lat),
               "target_p95_ms": TARGET_P95_MS}
        out["met"] = out["p95_ms"] < TARGET_P95_MS
        log(f"  scrape: p50 {out['p50_ms']:.2f} ms, p95 {out['p95_ms']:.2f} ms ({len(body):,} bytes); "
            f"target p95 < {TARGET_P95_MS:g} ms: {'met' if out['met'] else 'NOT met'}")
        bounds = [-b for b in reversed(queue_stats.DURATION_BOUNDS)]
        async with pool.acquire() as conn:
            families = {
                "runs_totals": await _timed(lambda: queue_stats.run_totals(conn), 50),
                "endings_totals": await _timed(lambda: queue_stats.endings_by_type(conn), 50),
                "runs_recount": await _timed(lambda: conn.fetch(RECOUNT_RUNS, bounds), 5),
                "endings_recount": await _timed(lambda: conn.fetch(RECOUNT_ENDINGS), 5),
            }
        out["families_p50_ms"] = {k: round(pct(v, 50), 3) for k, v in families.items()}
        f = out["families_p50_ms"]
        log(f"  run families, p50: from the totals {f['runs_totals']:.2f} + {f['endings_totals']:.2f} ms; "
            f"recounted over every run {f['runs_recount']:.1f} + {f['endings_recount']:.1f} ms")
        return out
    finally:
        await pool.close()
