"""Drain throughput through the real pipeline loop.

Per run: empty queue, enqueue N no-op jobs with `enqueue_many` (one statement; timed),
VACUUM ANALYZE (what autovacuum does to a table that just grew), then start C
overlapping `Pipeline(pool, [noop stage], settings).run(trigger="bench")` calls that
share one pool, like C cron invocations landing at once. Each run is the real thing:
runs row, start-of-run housekeeping, the pipeline's own stages (maintenance, notify:
claimed ahead of the user's stage, then again only once a second while found empty,
and once more before a run says no_work), the fair claim
(`sql/queries/claim.sql`), bulk completion. t0 = just before the runs start, t1 = when
the last one has returned (each returns when a claim round finds no work).
jobs/s = N / (t1 - t0). Afterwards every no-op job must be `done` with attempts = 1,
and the runs rows must add up to N.

Shapes: `mixed` = the jobs dealt round-robin over 100 campaigns (plans cycling free,
standard, pro) and the ownerless lane; `ownerless` = all in the ownerless lane.

Variants: `loop` is the database as migrated; `no-audit` is the same with the audit
trigger on jobs disabled (`ALTER TABLE jobs DISABLE TRIGGER audit`, right after the
TRUNCATE that starts each run, and enabled again for `loop`). The pipeline never sets
a user or admin actor, so the trigger's WHEN clause is false for every claim and
completion; the pair shows what evaluating it costs the drain (issue 7: the hot path
must not pay for auditing). Both run at every setting, interleaved.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid

from app.engine import jobs as q
from app.engine.db import create_pool
from app.engine.jobs import NewJob
from app.pipeline import loop
from app.pipeline.loop import Pipeline
from app.pipeline.stage import Stage
from app.settings import load_settings

from bench import fixtures
from bench.noop_stage import TYPE, noop
from bench.sampling import Sampler, said


def _lanes(shape: str, campaign_ids: list[uuid.UUID]) -> list[uuid.UUID | None]:
    if shape == "ownerless":
        return [None]
    return [*campaign_ids, None]  # the campaigns (mixed plans) and the ownerless lane


async def mixed_rounds_setup(server, name: str, workers: int):
    """A fresh database for parts that drain the mixed shape round after round: its DSN,
    a pool with room for each run's held connection and heartbeat, the runs' settings
    (a budget no drain reaches) and the mixed lanes."""
    dsn = await server.fresh_database(name)
    pool = await create_pool(dsn, size=2 * workers)
    settings = load_settings(database_url=dsn, pipeline_budget_seconds=240,
                             platform_limit_seconds=300, finish_margin_seconds=10)
    async with pool.acquire() as conn:
        lanes = _lanes("mixed", await fixtures.campaigns(conn, 100))
    return dsn, pool, settings, lanes


async def _reset(pool) -> None:
    tables = ["jobs", "job_lanes", "job_lane_hours", "runs"]
    # so every run does the start-of-period maintenance a cron tick would
    if await pool.fetchval("SELECT to_regclass('recurring_ticks') IS NOT NULL"):
        tables.append("recurring_ticks")
    await pool.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


VARIANTS = ("loop", "no-audit")


async def _audit_trigger(db, on: bool) -> str:
    """Enable or disable the audit trigger on jobs; returns pg_trigger.tgenabled (O: on,
    D: disabled), or 'absent' if this schema has no such trigger."""
    state = await db.fetchval(
        "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'jobs'::regclass AND tgname = 'audit'")
    if state is None:
        return "absent"
    await db.execute(f"ALTER TABLE jobs {'ENABLE' if on else 'DISABLE'} TRIGGER audit")
    return await db.fetchval(
        "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'jobs'::regclass AND tgname = 'audit'")


async def _audit_rows(db) -> int:
    if not await db.fetchval("SELECT to_regclass('audit_log') IS NOT NULL"):
        return 0
    return await db.fetchval("SELECT count(*) FROM audit_log WHERE table_name = 'jobs'")


async def _one(pool, settings, lanes, n: int, workers: int, batch: int, cap: float,
               variant: str, meter, dsn: str | None = None, batch_id: uuid.UUID | None = None) -> dict:
    """One drain; with `dsn`, what the server's backends waited for meanwhile and how far
    apart the lanes of one priority drifted (bench/sampling.py); with `batch_id`, every
    job in that batch."""
    await _reset(pool)
    trigger = await _audit_trigger(pool, on=variant != "no-audit")
    audit_before = await _audit_rows(pool)
    jobs = [NewJob(type=TYPE, lane=lanes[i % len(lanes)], batch_id=batch_id) for i in range(n)]
    t = time.perf_counter()
    ids = await q.enqueue_many(pool, jobs)
    enqueue_s = time.perf_counter() - t
    assert len(ids) == n, (len(ids), n)
    await pool.execute("VACUUM ANALYZE jobs, job_lanes, job_lane_hours")

    stage = Stage(type=TYPE, handler=noop, batch=batch, concurrency=1, lease=300, timeout=60)
    pipelines = [Pipeline(pool, [stage], settings) for _ in range(workers)]
    async with (Sampler(dsn, TYPE) if dsn else contextlib.nullcontext()) as sampler:
        cpu0 = meter.snapshot()
        t0 = time.perf_counter()
        results = await asyncio.wait_for(
            asyncio.gather(*(p.run(trigger="bench") for p in pipelines)), timeout=cap)
        wall = time.perf_counter() - t0
        cpu = meter.share(cpu0, meter.snapshot())

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
    audit_rows = await _audit_rows(pool) - audit_before
    reasons = sorted({r.stop_reason for r in results})
    errors = sorted({e for r in results for e in ([r.error] if r.error else [])
                     + list(r.summary.get("errors", []))})[:5]
    failed = [f"{name}={value}" for name, value, fine in (
        ("jobs", row["total"], row["total"] == n), ("done", row["done"], row["done"] == n),
        ("attempts_ne_1", row["attempts_ne_1"], row["attempts_ne_1"] == 0),
        ("runs_jobs_done", runs_done, runs_done == n), ("stop_reasons", reasons, reasons == ["no_work"]),
        ("errors", errors, not errors), ("audit_rows", audit_rows, audit_rows == 0)) if not fine]
    return {
        "ok": not failed, "failed_checks": failed, "audit_trigger": trigger, "audit_rows_for_jobs": audit_rows,
        "jobs_s": n / wall, "wall_s": wall, "cpu_share": cpu,
        # CPU time per job, this client's and the server's: steadier than jobs/s on a
        # shared box, since a neighbour takes wall time but not (much) CPU time from us
        "cpu_us_per_job": cpu_per_job(cpu, n),
        "enqueue_s": enqueue_s,
        "enqueue_jobs_s": n / enqueue_s, "done": row["done"],
        "attempts_ne_1": row["attempts_ne_1"], "runs_jobs_done": runs_done,
        "stop_reasons": reasons, "errors": errors, "claims": claims,
        "jobs_per_claim": round(n / max(claims, 1), 1),
        "runs_stopped_early": len(early), "most_jobs_claimed_after_an_early_stop": (early or [0])[0],
        "per_run_jobs": sorted(r.jobs_done for r in results),
        "waits": sampler.result() if sampler else None,
    }


def cpu_per_job(cpu: dict | None, n: int) -> dict | None:
    """CPU time per job of a drain of n, this client's and the server's (µs), from the
    meter's share; None where the meter cannot see the server."""
    if not cpu:
        return None
    return {"client": round(cpu["client_s"] / n * 1e6), "server": round(cpu["server_s"] / n * 1e6)}


def in_turn(parts: tuple, i: int) -> tuple:
    """Round i's order: a different part first each round (the warm-up, i < 0, as round 0)."""
    k = max(i, 0) % len(parts)
    return parts[k:] + parts[:k]


def cpu_median(rs: list[dict]) -> dict | None:
    """The medians of the runs' CPU per job (cpu_per_job), client and server apart."""
    per = [r["cpu_us_per_job"] for r in rs if r.get("cpu_us_per_job")]
    if not per:
        return None
    return {k: statistics.median(x[k] for x in per) for k in ("client", "server")}


def _sampled_median(rs: list[dict]) -> dict | None:
    """Each sampled figure's median over the runs that were sampled."""
    sampled = [r["waits"] for r in rs if r.get("waits") and r["waits"]["share"]]
    if not sampled:
        return None
    kinds = sorted({k for w in sampled for k in w["share"]}, key=lambda k: -sampled[0]["share"].get(k, 0))
    spreads = [w["lane_spread"] for w in sampled if w.get("lane_spread")]
    return {"active_backends_mean": statistics.median(w["active_backends_mean"] for w in sampled),
            "share": {k: statistics.median(w["share"].get(k, 0) for w in sampled) for k in kinds},
            "lane_spread": ({k: statistics.median(x[k] for x in spreads) for k in ("median", "p90", "max")}
                            if spreads else None)}


def _swap_pairs(plan: list, k: int) -> list:
    """The plan with each setting's k variants in reverse order."""
    return [x for i in range(0, len(plan), k) for x in reversed(plan[i:i + k])]


async def run(server, *, n: int, workers: int, batches: list[int], shapes: list[str],
              repeats: int, cap: float, campaigns: int, audit: bool = True,
              log=print) -> dict:
    name = "skiplock_bench_drain"
    dsn = await server.fresh_database(name)
    # the pipeline's pool, its settings included; room for each run's held connection and heartbeat
    pool = await create_pool(dsn, size=2 * workers)
    # The budget is the sub-benchmark's cap: a run that hits it did not drain, and the
    # checks below say so.
    settings = load_settings(database_url=dsn, pipeline_budget_seconds=cap,
                             platform_limit_seconds=cap + 60, finish_margin_seconds=10)
    out: dict = {"n": n, "workers": workers, "campaigns": campaigns, "repeats": repeats,
                 "pool_size": 2 * workers, "stage": {"batch": batches, "concurrency": 1},
                 "pool_plan_cache_mode": await pool.fetchval("SHOW plan_cache_mode"),
                 "internal_recheck_seconds": getattr(loop, "INTERNAL_RECHECK_SECONDS", None),
                 "results": {}}
    # loop and no-audit side by side at every setting
    variants = VARIANTS if audit else VARIANTS[:1]
    plan = [(shape, batch, v) for shape in shapes for batch in batches for v in variants]
    started = time.monotonic()
    runs: dict[tuple, list[dict]] = {key: [] for key in plan}
    try:
        async with pool.acquire() as conn:
            campaign_ids = await fixtures.campaigns(conn, campaigns)
        # Repeats outermost: every setting is measured once per pass, so a noisy
        # neighbour (this is a shared 2-core box) spreads over all of them alike; the
        # two variants of a setting run back to back, in turn first and second.
        for i in range(repeats):
            order = plan if i % 2 == 0 else _swap_pairs(plan, len(variants))
            for shape, batch, variant in order:
                left = cap - (time.monotonic() - started)
                if left <= 5:
                    log(f"  drain: time cap ({cap:.0f} s) reached, skipping {shape} batch={batch} "
                        f"{variant} run {i + 1}")
                    continue
                r = await _one(pool, settings, _lanes(shape, campaign_ids), n, workers, batch,
                               left, variant, server.meter, dsn=dsn)
                runs[(shape, batch, variant)].append(r)
                log(f"  drain {shape:9s} batch={batch:<3d} {variant:8s} run {i + 1}: "
                    f"{r['jobs_s']:7,.0f} jobs/s  (enqueue {r['enqueue_jobs_s']:7,.0f} jobs/s)  "
                    f"{r['jobs_per_claim']:5.1f} jobs/claim  {r['runs_stopped_early']} runs stopped early"
                    + (f"  CPU per job: client {c['client']} us, server {c['server']} us;"
                       f" others used {r['cpu_share']['others']:.0%} of the CPUs"
                       if (c := r["cpu_us_per_job"]) else "")
                    + (f"; backends: {w}" if (w := said(r["waits"])) else "")
                    + ("" if r["ok"] else "  CHECKS FAILED: " + ", ".join(
                        f"{k}={r[k]}" for k in ("done", "attempts_ne_1", "runs_jobs_done",
                                                "stop_reasons", "errors", "audit_rows_for_jobs"))))
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
                "cpu_us_per_job_median": cpu_median(rs),
                "waits_median": _sampled_median(rs),
                "others_cpu_share_all": [r["cpu_share"]["others"] if r["cpu_share"] else None for r in rs],
                "runs": rs,
            }
    finally:
        await pool.close()
        await server.drop_database(name)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


# statement_costs: one database per configuration, each set up the same way.
#   audit         as migrated: the pipeline's connection sets no actor, so the audit
#                 trigger's WHEN is false for every row (what production does);
#   audit again   the same in a second database: the control, how far two identical
#                 databases' medians drift apart (the noise floor of this comparison);
#   no audit      the audit trigger on jobs dropped;
#   audit firing  as migrated, but the connection says it acts for a user
#                 (app.current_actor_kind = 'user'), so every claimed and completed row
#                 is written to audit_log: what the WHEN keeps out of the hot path.
STATEMENT_CONFIGS = ("audit", "audit again", "no audit", "audit firing")


async def statement_costs(server, *, campaigns: int, n: int, calls: int, log=print) -> dict:
    """What one batch costs the database, statement by statement, on one connection with
    no concurrency and the pool's settings (generic plans): the claim of 25, the
    completion of 25, and an empty claim (what a look at an idle internal stage costs).
    In each of STATEMENT_CONFIGS, interleaved call by call (each first in turn); median
    of `calls`."""
    from app.engine.jobs import Lease
    from app.engine.queries import statement

    from bench.server import connect_like_pool

    started = time.monotonic()
    n = max(n, calls * 25 + 1000)  # every call claims (and completes) 25 in each database
    names = {c: f"skiplock_bench_statements_{i}" for i, c in enumerate(STATEMENT_CONFIGS)}
    conns: dict = {}
    out: dict = {"calls": calls, "jobs": n, "configs": list(STATEMENT_CONFIGS), "results": {},
                 "audit_rows": {}}
    try:
        for config, name in names.items():
            conn = conns[config] = await connect_like_pool(await server.fresh_database(name))
            if config == "no audit":
                await conn.execute("DROP TRIGGER audit ON jobs")
        out["plan_cache_mode"] = await conns["audit"].fetchval("SHOW plan_cache_mode")
        lanes_by = {c: await fixtures.campaigns(conn, campaigns) for c, conn in conns.items()}
        lease, empty = Lease(TYPE, 300, 3), Lease("maintenance", 600, 3)
        for shape in ("mixed", "ownerless"):
            runs = {}
            for config, conn in conns.items():
                await conn.execute("SELECT set_config('app.current_actor_kind', '', false)")
                await _reset(conn)
                lanes = _lanes(shape, lanes_by[config])
                await q.enqueue_many(conn, [NewJob(type=TYPE, lane=lanes[i % len(lanes)])
                                            for i in range(n)])
                await conn.execute("VACUUM ANALYZE jobs, job_lanes, job_lane_hours")
                runs[config] = await conn.fetchval(*statement("run_start").bind(trigger="bench"))
                if config == "audit firing":
                    await conn.execute("SELECT set_config('app.current_actor_kind', 'user', false), "
                                       "set_config('app.current_actor_id', 'bench', false)")
            audit_before = {c: await _audit_rows(conn) for c, conn in conns.items()}
            t: dict[str, list[float]] = {}
            order = list(conns)
            for i in range(calls):
                k = i % len(order)
                for config in order[k:] + order[:k]:  # each goes first in turn
                    c, run_id = conns[config], runs[config]
                    a = time.perf_counter()
                    got = await q.claim(c, lease, run_id, 25)
                    b = time.perf_counter()
                    await q.complete(c, run_id, [j.id for j in got])
                    d = time.perf_counter()
                    await q.claim(c, empty, run_id, 4)
                    e = time.perf_counter()
                    if len(got) != 25:
                        raise AssertionError(f"{config}: claim returned {len(got)} jobs")
                    t.setdefault(f"claim 25 ({config})", []).append(b - a)
                    t.setdefault(f"complete 25 ({config})", []).append(d - b)
                    t.setdefault(f"empty claim ({config})", []).append(e - d)
            res = {k: round(statistics.median(v) * 1000, 3) for k, v in t.items()}
            out["results"][shape] = res
            out["audit_rows"][shape] = {c: await _audit_rows(conn) - audit_before[c]
                                        for c, conn in conns.items()}
            for kind in ("claim 25", "complete 25", "empty claim"):
                log(f"  {shape:9s} {kind:11s} median ms: " + "  ".join(
                    f"{c} {res[f'{kind} ({c})']:.3f}" for c in STATEMENT_CONFIGS))
            log(f"  {shape:9s} audit_log rows written for jobs: " + ", ".join(
                f"{c} {v:,}" for c, v in out["audit_rows"][shape].items()))
    finally:
        for c in conns.values():
            await c.close()
        for name in names.values():
            await server.drop_database(name)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


async def overlap_check(server, log=print) -> dict:
    """Two claims at the same moment. A pro campaign has 25 ready jobs, a standard and a
    free campaign 1,000 each. Claim A takes the 25 pro jobs and has not committed yet
    when claim B runs. B should get 25 jobs of the next lanes (the heads probe skips
    locked rows since c9cc411); if it gets none, its run stops with `no_work` while
    2,000 jobs are ready (what `runs stopped early` in the mixed drains counts)."""
    from app.engine.jobs import Lease
    from app.engine.queries import statement

    from bench.server import connect_like_pool as connect

    name = "skiplock_bench_overlap"
    dsn = await server.fresh_database(name)
    a, b = await connect(dsn), await connect(dsn)
    try:
        free, standard, pro = await fixtures.campaigns(a, 3)  # plans cycle free, standard, pro
        for campaign, count in ((pro, 25), (standard, 1000), (free, 1000)):
            await q.enqueue_many(a, [NewJob(type="t", lane=campaign) for _ in range(count)])
        run_a = await a.fetchval(*statement("run_start").bind(trigger="bench"))
        run_b = await b.fetchval(*statement("run_start").bind(trigger="bench"))
        lease = Lease("t", 300, 3)
        tr = a.transaction()
        await tr.start()
        got_a = await q.claim(a, lease, run_a, 25)
        got_b = await q.claim(b, lease, run_b, 25)
        ready = await b.fetchval(
            "SELECT count(*) FROM jobs WHERE status = 'pending' AND run_after <= now() "
            "AND lane <> $1", pro)
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


# The lanes drain: the same n no-op jobs through the same loop, once all in one campaign's
# lane and once one per lane over n lanes, in a database holding `campaigns` campaigns.
# A claim reads the best few lanes off an index, so the spread drain should keep at least
# TARGET_SPREAD_RATIO of the one-lane drain's throughput (it still probes, locks and
# counts 25 lanes per claim where the other does one).
TARGET_SPREAD_RATIO = 0.5


async def run_lanes(server, *, n: int, workers: int, batch: int, campaigns: int, repeats: int,
                    cap: float, log=print) -> dict:
    name = "skiplock_bench_drain_lanes"
    dsn = await server.fresh_database(name)
    pool = await create_pool(dsn, size=2 * workers)  # a run holds one and borrows one (the connection budget)
    settings = load_settings(database_url=dsn, pipeline_budget_seconds=cap,
                             platform_limit_seconds=cap + 60, finish_margin_seconds=10)
    out: dict = {"n": n, "workers": workers, "batch": batch, "campaigns": campaigns,
                 "repeats": repeats, "target_ratio": TARGET_SPREAD_RATIO, "results": {}}
    started = time.monotonic()
    try:
        async with pool.acquire() as conn:
            t = time.perf_counter()
            ids = await fixtures.campaigns(conn, campaigns)
            log(f"    {campaigns:,} campaigns (users, plans, lanes) made in {time.perf_counter() - t:.1f} s")
        shapes = {"one lane": ids[:1], "spread": ids[:n]}
        runs: dict[str, list[dict]] = {s: [] for s in shapes}
        for i in range(repeats):
            for shape in (list(shapes) if i % 2 == 0 else list(reversed(shapes))):
                left = cap - (time.monotonic() - started)
                if left <= 5:
                    log(f"  lanes drain: time cap ({cap:.0f} s) reached, skipping {shape} run {i + 1}")
                    continue
                r = await _one(pool, settings, shapes[shape], n, workers, batch, left, "loop", server.meter)
                runs[shape].append(r)
                log(f"  drain {shape:8s} ({len(shapes[shape]):>6,} lanes) run {i + 1}: {r['jobs_s']:7,.0f} jobs/s"
                    f"  {r['jobs_per_claim']:5.1f} jobs/claim" + ("" if r["ok"] else "  CHECKS FAILED"))
        for shape, rs in runs.items():
            if rs:
                out["results"][shape] = {
                    "lanes": len(shapes[shape]), "jobs_s_median": statistics.median(r["jobs_s"] for r in rs),
                    "jobs_s_all": [round(r["jobs_s"]) for r in rs], "all_ok": all(r["ok"] for r in rs),
                    "cpu_us_per_job_median": cpu_median(rs), "runs": rs}
    finally:
        await pool.close()
        await server.drop_database(name)
    res = out["results"]
    if "one lane" in res and "spread" in res:
        out["ratio"] = round(res["spread"]["jobs_s_median"] / res["one lane"]["jobs_s_median"], 2)
        log(f"    spread over one lane: {out['ratio']:.2f} (target >= {TARGET_SPREAD_RATIO}: "
            f"{'met' if out['ratio'] >= TARGET_SPREAD_RATIO else 'NOT met'})")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out
