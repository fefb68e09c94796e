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
