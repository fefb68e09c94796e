"""Drain throughput through the real pipeline loop.

Per run: empty queue, enqueue N no-op jobs with `enqueue_many` (one statement; timed),
VACUUM ANALYZE (what autovacuum does to a table that just grew), then start C
overlapping `Pipeline(pool, [noop stage], settings).run(trigger="bench")` calls that
share one pool, like C cron invocations landing at once. Each run is the real thing:
runs row, start-of-run housekeeping, the pipeline's own stages (maintenance, notify)
claimed before the user's stage after every batch, the fair claim
(`sql/queries/claim.sql`), bulk completion. t0 = just before the runs start, t1 = when
the last one has returned (each returns when a claim round finds no work).
jobs/s = N / (t1 - t0). Afterwards every no-op job must be `done` with attempts = 1,
and the runs rows must add up to N.

Shapes: `mixed` = the jobs dealt round-robin over 100 campaigns (plans cycling free,
standard, pro) and the ownerless lane; `ownerless` = all in the ownerless lane.

Variants other than `loop` are diagnostics, not headlines; each changes one thing
the engine could change, to show what it is worth (see docs/performance.md):
  user-stage-only  the pipeline's own stages (maintenance, notify) taken out of the
                   run's stage list: what their two empty claims per batch cost;
  generic-plan     the pool's connections run with plan_cache_mode=force_generic_plan:
                   what re-planning the claim on every call costs;
  generic-plan+user-stage-only  both.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from app.engine import jobs as q
from app.engine.db import create_pool
from app.engine.jobs import NewJob
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Stage
from app.settings import load_settings

from bench import fixtures

TYPE = "noop"


async def noop(job, ctx) -> None:
    return None


def _lanes(shape: str, campaign_ids: list[uuid.UUID]) -> list[uuid.UUID | None]:
    if shape == "ownerless":
        return [None]
    return [*campaign_ids, None]  # the campaigns (mixed plans) and the ownerless lane


async def _reset(pool) -> None:
    tables = ["jobs", "job_lanes", "job_lane_hours", "runs"]
    # so every run does the start-of-period maintenance a cron tick would
    if await pool.fetchval("SELECT to_regclass('recurring_ticks') IS NOT NULL"):
        tables.append("recurring_ticks")
    await pool.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


VARIANTS = ("loop", "user-stage-only", "generic-plan", "generic-plan+user-stage-only")


def _pipeline(pool, stage: Stage, settings, variant: str) -> Pipeline:
    p = Pipeline(pool, [stage], settings)
    if "user-stage-only" in variant:
        p.stages = [stage]
    return p


async def _one(pool, settings, lanes, n: int, workers: int, batch: int, cap: float,
               variant: str) -> dict:
    await _reset(pool)
    jobs = [NewJob(type=TYPE, campaign_id=lanes[i % len(lanes)]) for i in range(n)]
    t = time.perf_counter()
    ids = await q.enqueue_many(pool, jobs)
    enqueue_s = time.perf_counter() - t
    assert len(ids) == n, (len(ids), n)
    await pool.execute("VACUUM ANALYZE jobs, job_lanes, job_lane_hours")

    stage = Stage(type=TYPE, handler=noop, batch=batch, concurrency=1, lease=300, timeout=60)
    pipelines = [_pipeline(pool, stage, settings, variant) for _ in range(workers)]
    t0 = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(*(p.run(trigger="bench") for p in pipelines)), timeout=cap)
    wall = time.perf_counter() - t0

    row = await pool.fetchrow(
        "SELECT count(*) AS total, count(*) FILTER (WHERE status = 'done') AS done, "
        "count(*) FILTER (WHERE attempts <> 1) AS attempts_ne_1 FROM jobs WHERE type = $1", TYPE)
    runs_done = await pool.fetchval("SELECT coalesce(sum(jobs_done), 0) FROM runs")
    # Claims that returned jobs (one claim = one statement = one locked_at per run), and
    # runs that said no_work while other runs went on to claim more.
    claims = await pool.fetchval(
        "SELECT count(*) FROM (SELECT DISTINCT run_id, locked_at FROM jobs WHERE type = $1) c", TYPE)
    later = await pool.fetch(
        "SELECT (SELECT count(*) FROM jobs j WHERE j.type = $1 AND j.locked_at > r.finished_at) AS n "
        "FROM runs r", TYPE)
    early = sorted((r["n"] for r in later if r["n"] > 0), reverse=True)
    reasons = sorted({r.stop_reason for r in results})
    errors = sorted({e for r in results for e in ([r.error] if r.error else [])
                     + list(r.summary.get("errors", []))})[:5]
    ok = (row["total"] == n and row["done"] == n and row["attempts_ne_1"] == 0
          and runs_done == n and reasons == ["no_work"] and not errors)
    return {
        "ok": ok, "jobs_s": n / wall, "wall_s": wall, "enqueue_s": enqueue_s,
        "enqueue_jobs_s": n / enqueue_s, "done": row["done"],
        "attempts_ne_1": row["attempts_ne_1"], "runs_jobs_done": runs_done,
        "stop_reasons": reasons, "errors": errors, "claims": claims,
        "jobs_per_claim": round(n / max(claims, 1), 1),
        "runs_stopped_early": len(early), "most_jobs_claimed_after_an_early_stop": (early or [0])[0],
        "per_run_jobs": sorted(r.jobs_done for r in results),
    }


async def run(server, *, n: int, workers: int, batches: list[int], shapes: list[str],
              repeats: int, cap: float, campaigns: int, diagnostics: bool = True,
              log=print) -> dict:
    name = "skiplock_bench_drain"
    dsn = await server.fresh_database(name)
    pool = await create_pool(dsn, size=workers)
    # asyncpg passes unknown DSN parameters on as server settings
    sep = "&" if "?" in dsn else "?"
    generic_pool = await create_pool(f"{dsn}{sep}plan_cache_mode=force_generic_plan", size=workers)
    # The budget is the sub-benchmark's cap: a run that hits it did not drain, and the
    # checks below say so.
    settings = load_settings(database_url=dsn, pipeline_budget_seconds=cap,
                             platform_limit_seconds=cap + 60, finish_margin_seconds=10)
    out: dict = {"n": n, "workers": workers, "campaigns": campaigns, "repeats": repeats,
                 "pool_size": workers, "stage": {"batch": batches, "concurrency": 1},
                 "results": {}}
    plan = [(shape, batch, "loop") for shape in shapes for batch in batches]
    if diagnostics:
        plan += [(shape, min(batches), v) for v in VARIANTS[1:] for shape in shapes]
    started = time.monotonic()
    runs: dict[tuple, list[dict]] = {key: [] for key in plan}
    try:
        async with pool.acquire() as conn:
            campaign_ids = await fixtures.campaigns(conn, campaigns)
        # Repeats outermost: every setting is measured once per pass, so a noisy
        # neighbour (this is a shared 2-core box) spreads over all of them alike.
        for i in range(repeats):
            for shape, batch, variant in plan:
                left = cap - (time.monotonic() - started)
                if left <= 5:
                    log(f"  drain: time cap ({cap:.0f} s) reached, skipping {shape} batch={batch} "
                        f"{variant} run {i + 1}")
                    continue
                r = await _one(generic_pool if "generic-plan" in variant else pool, settings,
                               _lanes(shape, campaign_ids), n, workers, batch, left, variant)
                runs[(shape, batch, variant)].append(r)
                log(f"  drain {shape:9s} batch={batch:<3d} {variant:28s} run {i + 1}: "
                    f"{r['jobs_s']:7,.0f} jobs/s  (enqueue {r['enqueue_jobs_s']:7,.0f} jobs/s)  "
                    f"{r['jobs_per_claim']:5.1f} jobs/claim  {r['runs_stopped_early']} runs stopped early"
                    + ("" if r["ok"] else "  CHECKS FAILED: " + ", ".join(
                        f"{k}={r[k]}" for k in ("done", "attempts_ne_1", "runs_jobs_done",
                                                "stop_reasons", "errors"))))
        for (shape, batch, variant), rs in runs.items():
            if not rs:
                continue
            out["results"][f"{shape} batch={batch} {variant}"] = {
                "shape": shape, "batch": batch, "variant": variant,
                "lanes": len(_lanes(shape, campaign_ids)),
                "jobs_s_median": statistics.median(r["jobs_s"] for r in rs),
                "jobs_s_all": [round(r["jobs_s"]) for r in rs],
                "enqueue_jobs_s_median": statistics.median(r["enqueue_jobs_s"] for r in rs),
                "enqueue_jobs_s_all": [round(r["enqueue_jobs_s"]) for r in rs],
                "all_ok": all(r["ok"] for r in rs),
                "runs": rs,
            }
    finally:
        await pool.close()
        await generic_pool.close()
        await server.drop_database(name)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


async def statement_costs(server, *, campaigns: int, n: int, calls: int, log=print) -> dict:
    """What one batch costs the database, statement by statement, on one connection with
    no concurrency: the claim of 25, an empty claim (what each of the pipeline's own
    stages costs when it has nothing, after every batch), the completion of 25. Each
    with PostgreSQL's default plan caching and with plan_cache_mode=force_generic_plan,
    interleaved call by call."""
    from app.engine.db import connect
    from app.engine.jobs import Lease
    from app.engine.queries import query

    name = "skiplock_bench_statements"
    dsn = await server.fresh_database(name)
    conns = {"default": await connect(dsn), "generic": await connect(dsn)}
    await conns["generic"].execute("SET plan_cache_mode = force_generic_plan")
    out: dict = {"calls": calls, "results": {}}
    try:
        conn = conns["default"]
        campaign_ids = await fixtures.campaigns(conn, campaigns)
        lease, empty = Lease(TYPE, 300, 3), Lease("maintenance", 600, 3)
        for shape in ("mixed", "ownerless"):
            await _reset(conn)
            lanes = _lanes(shape, campaign_ids)
            await q.enqueue_many(conn, [NewJob(type=TYPE, campaign_id=lanes[i % len(lanes)])
                                        for i in range(n)])
            await conn.execute("VACUUM ANALYZE jobs, job_lanes, job_lane_hours")
            run_id = await conn.fetchval(query("run_start"), "bench")
            t: dict[str, list[float]] = {}
            for _ in range(calls):
                for mode, c in conns.items():
                    a = time.perf_counter()
                    got = await q.claim(c, lease, run_id, 25)
                    b = time.perf_counter()
                    await q.complete(c, run_id, [j.id for j in got])
                    d = time.perf_counter()
                    await q.claim(c, empty, run_id, 4)
                    e = time.perf_counter()
                    t.setdefault(f"claim 25 ({mode})", []).append(b - a)
                    t.setdefault(f"complete 25 ({mode})", []).append(d - b)
                    t.setdefault(f"empty claim ({mode})", []).append(e - d)
            res = {k: round(statistics.median(v) * 1000, 3) for k, v in t.items()}
            out["results"][shape] = res
            log(f"  {shape:9s} median ms: " + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))
    finally:
        for c in conns.values():
            await c.close()
        await server.drop_database(name)
    return out


async def overlap_check(server, log=print) -> dict:
    """Two claims at the same moment. A pro campaign has 25 ready jobs, a standard and a
    free campaign 1,000 each. Claim A takes the 25 pro jobs and has not committed yet
    when claim B runs. B should get 25 jobs of the next lanes; if it gets none, its
    run stops with `no_work` while 2,000 jobs are ready (what `runs stopped early` in
    the mixed drains counts)."""
    from app.engine.db import connect
    from app.engine.jobs import Lease
    from app.engine.queries import query

    name = "skiplock_bench_overlap"
    dsn = await server.fresh_database(name)
    a, b = await connect(dsn), await connect(dsn)
    try:
        free, standard, pro = await fixtures.campaigns(a, 3)  # plans cycle free, standard, pro
        for campaign, count in ((pro, 25), (standard, 1000), (free, 1000)):
            await q.enqueue_many(a, [NewJob(type="t", campaign_id=campaign) for _ in range(count)])
        run_a = await a.fetchval(query("run_start"), "bench")
        run_b = await b.fetchval(query("run_start"), "bench")
        lease = Lease("t", 300, 3)
        tr = a.transaction()
        await tr.start()
        got_a = await q.claim(a, lease, run_a, 25)
        got_b = await q.claim(b, lease, run_b, 25)
        ready = await b.fetchval(
            "SELECT count(*) FROM jobs WHERE status = 'pending' AND run_after <= now() "
            "AND campaign_id <> $1", pro)
        await tr.rollback()
    finally:
        await a.close()
        await b.close()
        await server.drop_database(name)
    out = {"claim_a": len(got_a), "claim_b": len(got_b), "ready_in_other_lanes": ready,
           "ok": len(got_b) == 25}
    log(f"  claim A took {len(got_a)} pro jobs (uncommitted); claim B then got {len(got_b)} "
        f"with {ready:,} jobs ready in other lanes: {'ok' if out['ok'] else 'B was starved'}")
    return out
