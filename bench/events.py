"""What live events cost the drain (issue 13: at most 5% of throughput).

The drain of bench/drain.py (N no-op jobs through Pipeline.run) in three shapes:
- `mixed`: W overlapping runs, batch B, the jobs dealt over 100 campaigns of 100 owners
  and the ownerless lane, so a batch of 25 settles jobs of up to 25 lanes: the worst case
  for 'jobs.settled';
- `one lane`: one run, batch 50, all jobs in one lane: the scheduled invocation draining
  a backlog, the shape issue 12 calls the one that matters most in production;
- `one batch`: the same, every job in one batch (seed 004's shape), so every settling
  statement moves the batch's progress;
each with live events as migrated (`events`: nobody follows a lane, so the runs' heartbeats
and ends number what they settle), with events and every lane followed live (`followed`: an
event hub of this process, app/events/hub.py, subscribed to each lane's room (and the
batch's) and reading what arrives as a WebSocket would, so the hub numbers every quarter
second), and turned off for the database (`no-events`: ALTER DATABASE ... SET
skiplock.events = off, the pool's connections renewed; every trigger then writes none).
The three take turns run by run, in one sitting.

The cost is the median over pairs of 1 - events/no-events (and followed/no-events), each
pair drains back to back: on a shared box the speed drifts over a minute, and a pair sees
the same drift.
The medians of each variant are reported beside it, with the server's CPU per job and
what events add to it: a steadier figure than a few pairs of drains on a shared box
(seven pairs gave 4.7% where twenty-four gave 12.2%, with 12.6% more server CPU).
Every run must drain (drain.py's checks), and the `events` runs must have written their
events."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time

from app.engine import events as store
from app.engine.db import connect, create_pool
from app.engine.jobs import DEFAULT_LANE
from app.events.hub import EventHub
from app.settings import load_settings

from bench import drain, fixtures

VARIANTS = ("events", "followed", "no-events")


@contextlib.asynccontextmanager
async def _following(dsn: str, pool, rooms: list[str], window: int):
    """Every room followed live, as WebSockets would: a hub's subscriptions, each read as
    it fills (a subscriber that fell behind catches up from the database, as a socket
    does). Yields a dict whose "events" counts what reached the followers."""
    async def get_pool():
        return pool

    hub = EventHub(lambda: connect(dsn), get_pool, queue=1000)
    seen = {"events": 0}

    async def follow(sub) -> None:
        while True:
            batch = await sub.wait()
            if batch is None:
                page = await store.read_after(pool, sub.room, sub.cursor, window, 1000)
                batch = page.events
                sub.cursor = page.cursor
            elif batch:
                sub.cursor = batch[-1].seq
            seen["events"] += len(batch)

    async with contextlib.AsyncExitStack() as stack:
        subs = [await stack.enter_async_context(hub.subscribe(room, 0)) for room in rooms]
        readers = [asyncio.create_task(follow(sub)) for sub in subs]
        try:
            yield seen
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    await hub.close()


async def _events(pool, name: str, on: bool) -> None:
    # the database's name comes from run() below, not from input
    await pool.execute(f"ALTER DATABASE {name} {'RESET skiplock.events' if on else 'SET skiplock.events = off'}")
    await pool.expire_connections()  # new sessions read the database's setting
    assert await pool.fetchval("SELECT events_on()") == on


SHAPES = {"mixed": "the mixed lanes", "one lane": "one lane, one run, batch 50",
          "one batch": "one batch of every job in one lane, one run, batch 50"}


async def run(server, *, n: int, workers: int, batch: int, repeats: int, cap: float, log=print) -> dict:
    out: dict = {"n": n, "shapes": {}}
    started = time.monotonic()
    for shape in SHAPES:
        mixed = shape == "mixed"
        out["shapes"][shape] = await _shape(
            server, shape, n=n, workers=workers if mixed else 1, batch=batch if mixed else 50,
            repeats=repeats, cap=cap / len(SHAPES), log=log)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


async def _shape(server, shape: str, *, n: int, workers: int, batch: int, repeats: int, cap: float,
                 log=print) -> dict:
    name = "skiplock_bench_events"
    dsn = await server.fresh_database(name)
    pool = await create_pool(dsn, size=2 * workers)
    settings = load_settings(database_url=dsn, pipeline_budget_seconds=cap,
                             platform_limit_seconds=cap + 60, finish_margin_seconds=10)
    started = time.monotonic()
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    pairs: dict[str, list[float]] = {"events": [], "followed": []}
    try:
        async with pool.acquire() as conn:
            lanes = ([*(await fixtures.campaigns(conn, 100)), None] if shape == "mixed"
                     else await fixtures.campaigns(conn, 1) if shape == "one batch" else [None])
            # a batch lives in a lane and survives the drains' TRUNCATE of jobs
            batch_id = (await conn.fetchval("INSERT INTO batches (lane) VALUES ($1) RETURNING id", lanes[0])
                        if shape == "one batch" else None)
        for i in range(repeats):
            pair: dict[str, float] = {}
            for variant in (VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))):
                left = cap - (time.monotonic() - started)
                # a drain that would not fit in what is left is not started: cut off by
                # the cap, it would count nothing and leave the part without its results
                longest = max((r["wall_s"] + r["enqueue_s"] for rs in runs.values() for r in rs), default=0.0)
                if left <= max(5.0, 1.5 * longest):
                    log(f"  events: time cap ({cap:.0f} s) reached, skipping {variant} run {i + 1}")
                    continue
                await _events(pool, name, on=variant != "no-events")
                await pool.execute("TRUNCATE events, event_rooms")
                rooms = ([f"lane:{lane or DEFAULT_LANE}" for lane in lanes]
                         + ([f"batch:{batch_id}"] if batch_id else [])) if variant == "followed" else []
                async with (_following(dsn, pool, rooms, settings.events_replay) if rooms
                            else contextlib.nullcontext({})) as seen:
                    r = await drain._one(pool, settings, lanes, n, workers, batch, left, "loop", server.meter,
                                         batch_id=batch_id)
                    await asyncio.sleep(1.0 if rooms else 0)  # what the hub numbers last reaches its followers
                r["events"] = await pool.fetchval("SELECT count(*) FROM events")
                r["followed_events"] = seen.get("events")
                if (r["events"] > 0) != (variant != "no-events") or (rooms and not seen["events"]):
                    r["failed_checks"].append(f"events={r['events']}, followed={r['followed_events']}")
                    r["ok"] = False
                runs[variant].append(r)
                pair[variant] = r["jobs_s"]
                cpu = r["cpu_us_per_job"]
                log(f"  drain {shape} batch={batch} runs={workers} {variant:9s} run {i + 1}: {r['jobs_s']:7,.0f} jobs/s, "
                    f"{r['events']:,} events" + (f" ({r['followed_events']:,} followed)" if rooms else "")
                    + (f", server CPU {cpu['server']} us/job" if cpu else "")
                    + ("" if r["ok"] else "  CHECKS FAILED: " + ", ".join(r["failed_checks"])))
            if "no-events" in pair:
                for v in ("events", "followed"):
                    if v in pair:
                        pairs[v].append(1 - pair[v] / pair["no-events"])
    finally:
        await _events(pool, name, on=True)
        await pool.close()
        await server.drop_database(name)
    out: dict = {"n": n, "workers": workers, "batch": batch, "shape": shape, "lanes": len(lanes),
                 "repeats": repeats, "results": {}}
    for variant, rs in runs.items():
        if rs:
            cpu = [r["cpu_us_per_job"]["server"] for r in rs if r.get("cpu_us_per_job")]
            out["results"][variant] = {"jobs_s_median": statistics.median(r["jobs_s"] for r in rs),
                                       "jobs_s_all": [round(r["jobs_s"]) for r in rs],
                                       "server_cpu_us_per_job_median": statistics.median(cpu) if cpu else None,
                                       "events_median": statistics.median(r["events"] for r in rs),
                                       "all_ok": all(r["ok"] for r in rs)}
    cpu = {v: (out["results"].get(v) or {}).get("server_cpu_us_per_job_median") for v in VARIANTS}
    for v, key in (("events", ""), ("followed", "followed_")):
        if pairs[v]:
            out[f"{key}pairs_lost"] = [round(p, 4) for p in pairs[v]]
            out[f"{key}throughput_lost"] = round(statistics.median(pairs[v]), 4)
            log(f"  {shape}: {v} cost {out[f'{key}throughput_lost']:.1%} of drain throughput, median of "
                f"{len(pairs[v])} pairs (target: at most 5%); each pair: {', '.join(f'{p:.1%}' for p in pairs[v])}")
        if cpu[v] and cpu["no-events"]:
            # steadier than the drains' pairs: a neighbour takes wall time, not the server's CPU
            out[f"{key}server_cpu_added"] = round(cpu[v] / cpu["no-events"] - 1, 4)
            log(f"  {shape}: the server's CPU per job {v} / without events: {cpu[v]:.0f} / "
                f"{cpu['no-events']:.0f} us, {out[f'{key}server_cpu_added']:+.1%}")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out
