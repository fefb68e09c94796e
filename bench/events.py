"""What live events cost the drain (issue 13: at most 5% of throughput).

The drain of bench/drain.py (N no-op jobs, W overlapping Pipeline.run calls, batch B,
the `mixed` shape: 100 campaigns of 100 owners and the ownerless lane) with the events
triggers of migration 0021 as migrated (`events`: one 'jobs.settled' per lane, type and
completion statement, 'run.started' and 'run.finished', a NOTIFY per statement) and
disabled (`no-events`: ALTER TABLE ... DISABLE TRIGGER on jobs and runs). The two
alternate run by run, each first in turn, in one sitting; median of `repeats`. Every run
must drain (drain.py's checks), and the `events` runs must have written their events."""

from __future__ import annotations

import statistics
import time

from app.engine.db import create_pool
from app.settings import load_settings

from bench import drain, fixtures

TRIGGERS = (("jobs", "events_update"), ("jobs", "events_insert"), ("runs", "events_started"),
            ("runs", "events_finished"))
VARIANTS = ("events", "no-events")


async def _events_triggers(db, on: bool) -> None:
    for table, name in TRIGGERS:
        # identifiers from the constant above, not from input
        await db.execute(f"ALTER TABLE {table} {'ENABLE' if on else 'DISABLE'} TRIGGER {name}")


async def run(server, *, n: int, workers: int, batch: int, repeats: int, cap: float, log=print) -> dict:
    name = "skiplock_bench_events"
    dsn = await server.fresh_database(name)
    pool = await create_pool(dsn, size=2 * workers)
    settings = load_settings(database_url=dsn, pipeline_budget_seconds=cap,
                             platform_limit_seconds=cap + 60, finish_margin_seconds=10)
    started = time.monotonic()
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    try:
        async with pool.acquire() as conn:
            lanes = [*(await fixtures.campaigns(conn, 100)), None]
        for i in range(repeats):
            for variant in (VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))):
                left = cap - (time.monotonic() - started)
                if left <= 5:
                    log(f"  events: time cap ({cap:.0f} s) reached, skipping {variant} run {i + 1}")
                    continue
                await _events_triggers(pool, on=variant == "events")
                await pool.execute("TRUNCATE events, event_rooms")
                r = await drain._one(pool, settings, lanes, n, workers, batch, left, "loop", server.meter)
                r["events"] = await pool.fetchval("SELECT count(*) FROM events")
                r["ok"] = r["ok"] and (r["events"] > 0) == (variant == "events")
                runs[variant].append(r)
                log(f"  drain mixed batch={batch} {variant:9s} run {i + 1}: {r['jobs_s']:7,.0f} jobs/s, "
                    f"{r['events']:,} events" + ("" if r["ok"] else "  CHECKS FAILED"))
    finally:
        await _events_triggers(pool, on=True)
        await pool.close()
        await server.drop_database(name)
    out: dict = {"n": n, "workers": workers, "batch": batch, "shape": "mixed", "lanes": 101,
                 "repeats": repeats, "results": {}}
    for variant, rs in runs.items():
        if rs:
            out["results"][variant] = {"jobs_s_median": statistics.median(r["jobs_s"] for r in rs),
                                       "jobs_s_all": [round(r["jobs_s"]) for r in rs],
                                       "events_median": statistics.median(r["events"] for r in rs),
                                       "all_ok": all(r["ok"] for r in rs)}
    if all(out["results"].get(v) for v in VARIANTS):
        with_events = out["results"]["events"]["jobs_s_median"]
        without = out["results"]["no-events"]["jobs_s_median"]
        out["throughput_lost"] = round(1 - with_events / without, 4)
        log(f"  events cost {out['throughput_lost']:.1%} of drain throughput (target: at most 5%)")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out
