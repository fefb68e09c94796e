"""Where the ten-run drain's distance to the bare loop goes (`python -m bench --only floor`).

Issue 12 asks ten overlapping runs for half the bare SKIP LOCKED loop. This part climbs
from that loop to the pipeline one step at a time, every step drained by the same ten
connections from this process (claim 25 and commit, then complete them and commit, as
the peers' raw_sql_drain.py does), so a step's cost is what it adds and nothing else:

  bare       the peers' table: a bigint key, five small columns, an index on (status,
             run_after) and a partial one in claim order;
  wide       Skiplock's job columns (a uuid key, type, lane, payload, run id, finish time,
             ...) with the same three indexes, no foreign keys, no triggers;
  jobs       Skiplock's jobs table as migrated (its eight indexes, foreign keys and
             checks), its triggers off: a queue with nothing counted;
  counted    the same with its triggers on: the lanes' counters, served hours and
             journal, the settled counts parked for live events;
  one lane   ten Pipeline.run calls (bench/drain.py's drain), every job in one lane: the
             fair claim, the completion carried on the next claim, the runs rows and
             the loop;
  pipeline   the same over the mixed lanes: the ten-run target's shape.

Jobs are dealt over the mixed lanes (100 campaigns and the ownerless lane), but for
`one lane`. The steps from `wide` to `counted` claim in (lane, created_at) order, which
the claim index serves, so each claim takes its 25 jobs from one lane and counts one lane
row, as `one lane` does; the fair claim of `pipeline` deals 25 over up to 25 lanes and
counts each of them. A round drains each step once, a different one first each round;
figures are medians over the rounds (a first warm-up round is not counted), jobs/s and
CPU time per job (this process and the server's backends, bench/machine.py), so a
neighbour's share of the box shows as wall time, not as cost."""

from __future__ import annotations

import asyncio
import statistics
import time

import asyncpg

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.jobs import NewJob

from bench import drain
from bench.noop_stage import TYPE

WORKERS = 10
BATCH = 25
STEPS = ("bare", "wide", "jobs", "counted", "one lane", "pipeline")

# The peers' raw_sql_drain.py table and statements (its --index partial).
BARE_DDL = """
CREATE TABLE floor_bare (
    id bigserial PRIMARY KEY,
    status text NOT NULL DEFAULT 'pending',
    attempts int NOT NULL DEFAULT 0,
    run_after timestamptz NOT NULL DEFAULT now(),
    locked_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON floor_bare (status, run_after);
CREATE INDEX ON floor_bare (created_at) WHERE status = 'pending';
"""
BARE_FILL = """
INSERT INTO floor_bare (status, attempts, run_after, created_at)
SELECT 'pending', 0, t, t
FROM generate_series(1, $1) AS i, LATERAL (SELECT now() - interval '10 minutes' + i * interval '1 microsecond') AS x(t)
"""
BARE_CLAIM = """
WITH c AS (SELECT id FROM floor_bare WHERE status = 'pending' AND run_after <= now()
           ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE floor_bare SET status = 'running', locked_at = now(), attempts = floor_bare.attempts + 1
FROM c WHERE floor_bare.id = c.id RETURNING floor_bare.id
"""
BARE_COMPLETE = "UPDATE floor_bare SET status = 'done' WHERE id = ANY ($1::bigint[])"

# Skiplock's columns, the bare loop's three indexes (the claim's in lane order).
WIDE_DDL = """
CREATE TABLE floor_wide (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE floor_wide ADD PRIMARY KEY (id);
CREATE INDEX ON floor_wide (status, run_after);
CREATE INDEX ON floor_wide (type, lane, created_at) WHERE status = 'pending';
"""
# The same claim and completion on either table: no SQL is built from pieces.
WIDE_CLAIM = """
WITH c AS (SELECT id FROM floor_wide WHERE status = 'pending' AND type = $1 AND run_after <= now()
           ORDER BY lane, created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE floor_wide j SET status = 'running', locked_at = now(), attempts = j.attempts + 1, run_id = $3
FROM c WHERE j.id = c.id RETURNING j.id, j.payload, j.lane
"""
WIDE_COMPLETE = "UPDATE floor_wide SET status = 'done', finished_at = now() WHERE id = ANY ($1::uuid[]) AND run_id = $2"
JOBS_CLAIM = """
WITH c AS (SELECT id FROM jobs WHERE status = 'pending' AND type = $1 AND run_after <= now()
           ORDER BY lane, created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE jobs j SET status = 'running', locked_at = now(), attempts = j.attempts + 1, run_id = $3
FROM c WHERE j.id = c.id RETURNING j.id, j.payload, j.lane
"""
JOBS_COMPLETE = "UPDATE jobs SET status = 'done', finished_at = now() WHERE id = ANY ($1::uuid[]) AND run_id = $2"

# a raw step's claim, completion, VACUUM before it and count of its jobs done after it
RAW = {
    "bare": (BARE_CLAIM, BARE_COMPLETE, "VACUUM ANALYZE floor_bare",
             "SELECT count(*) FROM floor_bare WHERE status = 'done'"),
    "wide": (WIDE_CLAIM, WIDE_COMPLETE, "VACUUM ANALYZE floor_wide",
             "SELECT count(*) FROM floor_wide WHERE status = 'done'"),
    "jobs": (JOBS_CLAIM, JOBS_COMPLETE, "VACUUM ANALYZE jobs, job_lanes, job_lane_hours",
             "SELECT count(*) FROM jobs WHERE status = 'done'"),
}
RAW["counted"] = RAW["jobs"]


async def _drain_one(conn: asyncpg.Connection, claim: str, complete: str, args: tuple) -> None:
    """Claim and complete on one connection until a claim comes back empty."""
    claim_s, complete_s = await conn.prepare(claim), await conn.prepare(complete)
    while True:
        async with conn.transaction():
            rows = await claim_s.fetch(*args)
        if not rows:
            return
        await complete_s.fetch([r[0] for r in rows], *args[2:])


async def _step(step: str, pool, dsn: str, settings, lanes, n: int, meter) -> dict:
    """One drain of `step`: set up untimed, then timed. Its jobs/s, CPU per job, and
    whether every job ended done."""
    await drain._reset(pool)
    # what `counted` journaled and parked: no run of its own ended to fold or number it
    await pool.execute("TRUNCATE floor_bare, floor_wide, job_lane_journal, settled_backlog")
    if step in ("one lane", "pipeline"):
        r = await drain._one(pool, settings, lanes if step == "pipeline" else [None], n, WORKERS, BATCH, 240,
                             "loop", meter)
        return {"jobs_s": r["jobs_s"], "cpu_us_per_job": r["cpu_us_per_job"], "ok": r["ok"],
                "failed_checks": r["failed_checks"]}
    claim, complete, vacuum, count_done = RAW[step]
    if step == "bare":
        await pool.execute(BARE_FILL, n)
        args: tuple = (BATCH,)
    else:
        await q.enqueue_many(pool, [NewJob(type=TYPE, lane=lanes[i % len(lanes)]) for i in range(n)])
        if step == "wide":  # the same rows, in a table with nothing else on it
            await pool.execute("INSERT INTO floor_wide SELECT * FROM jobs")
            await drain._reset(pool)
        args = (TYPE, BATCH, await pool.fetchval("INSERT INTO runs (trigger) VALUES ('bench') RETURNING id"))
    await pool.execute(vacuum)
    if step == "jobs":
        await pool.execute("ALTER TABLE jobs DISABLE TRIGGER USER")
    conns = [await connect(dsn) for _ in range(WORKERS)]
    try:
        cpu0 = meter.snapshot()
        t0 = time.perf_counter()
        await asyncio.gather(*(_drain_one(c, claim, complete, args) for c in conns))
        wall = time.perf_counter() - t0
        cpu = meter.share(cpu0, meter.snapshot())
    finally:
        for c in conns:
            await c.close()
        if step == "jobs":
            await pool.execute("ALTER TABLE jobs ENABLE TRIGGER USER")
    done = await pool.fetchval(count_done)
    return {"jobs_s": n / wall, "ok": done == n, "cpu_us_per_job": drain.cpu_per_job(cpu, n)}


async def run(server, *, rounds: int, n: int, cap: float, log=print) -> dict:
    name = "skiplock_bench_floor"
    dsn, pool, settings, lanes = await drain.mixed_rounds_setup(server, name, WORKERS)
    out: dict = {"n": n, "workers": WORKERS, "batch": BATCH, "shape": "mixed", "rounds": []}
    started = time.monotonic()
    try:
        await pool.execute(BARE_DDL)
        await pool.execute(WIDE_DDL)
        for i in range(-1, rounds):
            if time.monotonic() - started > cap - 60:
                log(f"  floor: time cap ({cap:.0f} s) reached after {max(i, 0)} rounds")
                break
            got = {}
            for step in drain.in_turn(STEPS, i):
                got[step] = await _step(step, pool, dsn, settings, lanes, n, server.meter)
                if not got[step]["ok"]:
                    return {"error": f"the {step} drain failed its checks: {got[step].get('failed_checks', 'jobs left undone')}"}
            line = ", ".join(f"{s} {got[s]['jobs_s']:,.0f}" for s in STEPS)
            if i < 0:
                log(f"  warm-up: {line} jobs/s (not counted)")
                continue
            out["rounds"].append(got)
            log(f"  round {i + 1}: {line} jobs/s")
    finally:
        await pool.close()
        await server.drop_database(name)
    if out["rounds"]:
        out["steps"] = {}
        for s in STEPS:
            rs = [r[s] for r in out["rounds"]]
            out["steps"][s] = {
                "jobs_s_median": statistics.median(r["jobs_s"] for r in rs),
                "over_bare_median": statistics.median(r[s]["jobs_s"] / r["bare"]["jobs_s"] for r in out["rounds"]),
                "cpu_us_per_job_median": drain.cpu_median(rs)}
        for line in table(out):
            log(line)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def table(out: dict) -> list[str]:
    steps = out.get("steps")
    if not steps:
        return [f"Floor: {(out.get('error') or out.get('skipped') or 'no rounds')[:200]}"] if out else []
    lines = [f"From the bare loop to the pipeline, ten connections, batch 25, {out['n']:,} jobs, "
             f"medians of {len(out['rounds'])} rounds:",
             "  step        jobs/s   of bare   CPU us/job (client + server)"]
    for s, r in steps.items():
        c = r["cpu_us_per_job_median"]
        lines.append(f"  {s:9s} {r['jobs_s_median']:8,.0f}   {r['over_bare_median']:6.0%}   "
                     + (f"{c['client']:.0f} + {c['server']:.0f}" if c else "-"))
    return lines
