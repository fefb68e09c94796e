"""Latency of one fair claim of 25 as the done history grows.

One database per size D (10k, 1M, 10M by default), each holding:
  - 1,000 active campaigns, plans cycling free / standard / pro;
  - D `done` jobs of the claimed type from the last day: campaign uniform over the
    1,000, locked_at uniform over the last 23 h, finished_at 50 ms later;
  - the fairness counters (job_lanes.served, job_lane_hours) those jobs would have
    left behind: one INSERT ... SELECT aggregate over the done rows, since in real
    life the counters are built by the triggers as jobs are claimed;
  - a backlog of 20,000 pending jobs over the same campaigns (inserted first, with a
    plain INSERT, so the triggers count them);
  - VACUUM ANALYZE, as autovacuum would have done to a table that grew over a day,
    and a CHECKPOINT once all are loaded, so the load's writes stay out of the samples.

The done rows are loaded with INSERT ... SELECT generate_series. As a superuser the
load runs with session_replication_role = replica (no triggers, no per-row foreign key
check: the campaign ids come from the campaigns table itself), which makes 10M rows
take a minute or two instead of much longer; the triggers would not have counted
done rows anyway (they count pending rows and claims).

Measured: one client, the real claim (`app.engine.jobs.claim`, sql/queries/claim.sql)
of 25, inside BEGIN ... ROLLBACK so every sample sees the same table; client-side
wall time of the call, on a connection set up like the pipeline's pool (its server
settings: plan_cache_mode = force_generic_plan). Warm-up samples are discarded; the
sizes are then sampled in interleaved rounds, so a noisy neighbour hits all of them
alike. For comparison the seed's naive fairness claim (served counted from the day's
rows on every claim), adapted to this schema, is measured the same way at the smaller
sizes, on a second connection with PostgreSQL's default plan caching, as the seed ran it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import asyncpg

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.jobs import Lease
from app.engine.queries import statement

from bench import fixtures
from bench.explain import explain
from bench.server import connect_like_pool

TYPE = "work"
CAMPAIGNS = 1000
LEASE = Lease(TYPE, lease_seconds=300.0, max_attempts=3)

LOAD_PENDING = """
INSERT INTO jobs (type, lane, run_after, created_at)
SELECT $1, c.ids[1 + g % cardinality(c.ids)],
       now() - interval '1 minute', now() - interval '1 hour' + g * interval '1 millisecond'
FROM generate_series(1, $2) AS g,
     (SELECT array_agg(id ORDER BY id) AS ids FROM campaigns) AS c
"""

# Ids: time-ordered uuids made from the row number ($3 + g, version nibble 7), not
# gen_random_uuid(). Random keys cost ~3 us each to make on this kind of VM and write
# all over the primary key index; ordered ones append to it, as uuidv7 ids would. The
# claim reads the primary key only for the 25 rows it updates, so the load is faster
# and the measurement the same. $3 keeps the ids of successive loads apart.
LOAD_DONE = """
INSERT INTO jobs (id, type, lane, status, attempts, run_after, locked_at,
                  finished_at, created_at, payload)
SELECT ('00000000-0000-7000-8000-' || lpad(to_hex($3 + g), 12, '0'))::uuid, $1,
       c.ids[1 + (random() * (cardinality(c.ids) - 1))::int], 'done', 1,
       t - interval '1 second', t, t + interval '50 milliseconds', t - interval '1 second', '{}'
FROM (SELECT g, now() - random() * interval '23 hours' AS t
      FROM generate_series(1, $2::bigint) AS g) AS s,
     (SELECT array_agg(id) AS ids FROM campaigns) AS c
"""

# The counters the triggers would have built while those jobs were claimed: one served
# attempt per done job, in the hour it was claimed. Recounted from scratch each time.
COUNT_SERVED_HOURS = """
INSERT INTO job_lane_hours AS h (type, lane, hour, served)
SELECT type, lane, date_trunc('hour', locked_at), count(*)::int
FROM jobs WHERE type = $1 AND status = 'done'
GROUP BY 1, 2, 3
ON CONFLICT (type, lane, hour) DO UPDATE SET served = excluded.served
"""
COUNT_SERVED_LANES = """
INSERT INTO job_lanes AS l (type, lane, served)
SELECT type, lane, sum(served)::int FROM job_lane_hours WHERE type = $1 GROUP BY 1, 2
ON CONFLICT (type, lane) DO UPDATE SET served = excluded.served
"""

# The seed's fairness, adapted to this schema: "served" counted from the day's rows on
# every claim (in-flight counts), then plan priority (joined on every claim, ownerless
# work as 'standard', no subscription as 'free'), fewest served, oldest first.
NAIVE_CLAIM = """
WITH served AS (
    SELECT lane, count(*) AS n
    FROM jobs
    WHERE type = $1 AND status IN ('done', 'running')
      AND coalesce(finished_at, locked_at) >= now() - interval '1 day'
    GROUP BY lane
), c AS (
    SELECT j.id
    FROM jobs j
    LEFT JOIN campaigns ON campaigns.id = j.lane
    LEFT JOIN subscriptions ON subscriptions.user_id = campaigns.user_id
    LEFT JOIN plan_priorities plan ON plan.plan = CASE WHEN campaigns.user_id IS NULL THEN 'standard'
                                                       ELSE coalesce(subscriptions.plan, 'free') END
    LEFT JOIN served ON served.lane = j.lane
    WHERE j.status = 'pending' AND j.type = $1 AND j.run_after <= now()
      AND (campaigns.id IS NULL OR campaigns.status = 'active')
    ORDER BY plan.priority DESC, coalesce(served.n, 0), j.created_at
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs SET status = 'running', locked_at = now(), attempts = jobs.attempts + 1, run_id = $3
FROM c WHERE jobs.id = c.id
RETURNING jobs.id
"""


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def _summary(lat: list[float]) -> dict:
    return {"p50_ms": round(pct(lat, 50), 3), "p95_ms": round(pct(lat, 95), 3),
            "p99_ms": round(pct(lat, 99), 3), "mean_ms": round(statistics.mean(lat), 3),
            "max_ms": round(max(lat), 3), "samples": len(lat)}


def _claim_of_25(run_id) -> tuple:
    """claim.sql bound for a plain claim of 25 (nothing finished first)."""
    return statement("claim").bind(type=TYPE, limit=25, run_id=run_id, lease_seconds=LEASE.lease_seconds,
                                   max_attempts=LEASE.max_attempts, done=[], hand_back=[], hand_back_until=[])


async def _plan(conn, sql: str, args: tuple, mode: str = "force_generic_plan") -> str:
    """The plan as the results keep it: with costs and buffers (bench/explain.py)."""
    return await explain(conn, sql, args, mode=mode, options="ANALYZE, BUFFERS")


async def _sample(conn, call, warmup: int, samples: int, cap: float, want: int,
                  raw: list[float] | None = None) -> dict | None:
    """Time `call` inside BEGIN ... ROLLBACK, warmup + samples times (stopping early
    after `cap` seconds); append the timings to `raw` if given."""
    lat: list[float] = []
    deadline = time.monotonic() + cap
    for i in range(warmup + samples):
        tr = conn.transaction()
        await tr.start()
        t = time.perf_counter()
        got = await call()
        ms = (time.perf_counter() - t) * 1000
        await tr.rollback()
        if got != want:
            raise AssertionError(f"claim returned {got} jobs, expected {want}")
        if i >= warmup:
            lat.append(ms)
        if time.monotonic() > deadline and len(lat) >= 5:
            break
    if raw is not None:
        raw.extend(lat)
    return _summary(lat) if lat else None


async def _load_done(dsn: str, first: int, n: int, fast_path: bool, loaders: int) -> float:
    """Insert n done rows, numbered from `first`, in chunks of 500k, `loaders` at a time."""
    chunk = 500_000
    chunks = [(first + i, min(chunk, n - i)) for i in range(0, n, chunk)]

    async def loader() -> None:
        conn = await connect(dsn)
        try:
            while chunks:
                start, size = chunks.pop(0)
                async with conn.transaction():
                    if fast_path:
                        await conn.execute("SET LOCAL session_replication_role = replica")
                    await conn.execute(LOAD_DONE, TYPE, size, start)
        finally:
            await conn.close()

    t = time.perf_counter()
    await asyncio.gather(*(loader() for _ in range(max(1, loaders))))
    return time.perf_counter() - t


async def _build(server, name: str, size: int, pending: int, log) -> tuple[str, dict]:
    """A database holding `size` done jobs, the matching counters and the backlog."""
    dsn = await server.fresh_database(name)
    conn = await connect(dsn)
    try:
        superuser = await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        await fixtures.campaigns(conn, CAMPAIGNS)
        await conn.execute(LOAD_PENDING, TYPE, pending)
        t = time.perf_counter()
        load_s = await _load_done(dsn, 0, size, bool(superuser), min(2, os.cpu_count() or 1))
        t2 = time.perf_counter()
        await conn.execute(COUNT_SERVED_HOURS, TYPE)
        await conn.execute(COUNT_SERVED_LANES, TYPE)
        count_s = time.perf_counter() - t2
        t3 = time.perf_counter()
        await conn.execute("VACUUM ANALYZE jobs, job_lanes, job_lane_hours, campaigns, subscriptions, users")
        vacuum_s = time.perf_counter() - t3
        facts = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM jobs WHERE status = 'done') AS done, "
            "(SELECT count(*) FROM jobs WHERE status = 'pending') AS pending, "
            "(SELECT sum(served) FROM job_lanes WHERE type = $1) AS served, "
            "(SELECT count(*) FROM job_lanes WHERE type = $1 AND pending > 0) AS lanes, "
            "pg_total_relation_size('jobs') AS jobs_bytes", TYPE)
        if not (facts["done"] == size and facts["served"] == size and facts["pending"] == pending):
            raise AssertionError(f"bad load for {size}: {dict(facts)}")
        info = {"insert_s": round(load_s, 1), "counters_s": round(count_s, 1),
                "vacuum_analyze_s": round(vacuum_s, 1), "total_s": round(time.perf_counter() - t, 1),
                "jobs_table_mb": round(facts["jobs_bytes"] / 2**20), "lanes_with_work": facts["lanes"],
                "fast_load": bool(superuser)}
        log(f"  done={size:>10,}: loaded in {info['total_s']:5.1f} s (insert {load_s:.1f}, counters "
            f"{count_s:.1f}, vacuum {vacuum_s:.1f}), jobs table {facts['jobs_bytes'] / 2**20:,.0f} MB")
        return dsn, info
    finally:
        await conn.close()


class _Target:
    """One database and the two claims measured on it."""

    def __init__(self, size: int, dsn: str) -> None:
        self.size, self.dsn = size, dsn
        self.fair: list[float] = []
        self.rounds: list[dict] = []

    async def open(self) -> None:
        self.conn = await connect_like_pool(self.dsn)
        self.naive_conn = await connect(self.dsn)
        self.run_id = await self.conn.fetchval(*statement("run_start").bind(trigger="bench"))
        self.naive_stmt = await self.naive_conn.prepare(NAIVE_CLAIM)

    async def fair_call(self) -> int:
        return len(await q.claim(self.conn, LEASE, self.run_id, 25))

    async def naive_call(self) -> int:
        return len(await self.naive_stmt.fetch(TYPE, 25, self.run_id))


async def run(server, *, sizes: list[int], pending: int, warmup: int, samples: int,
              rounds: int, naive_sizes: list[int], naive_samples: int, naive_cap: float,
              cap: float, log=print) -> dict:
    """Build one database per size, then sample the fair claim on all of them in
    interleaved rounds (so a noisy neighbour hits every size alike), then the naive
    claim at naive_sizes, then EXPLAIN both."""
    started = time.monotonic()
    out: dict = {"type": TYPE, "campaigns": CAMPAIGNS, "pending": pending, "batch": 25,
                 "warmup": warmup, "rounds": rounds, "results": {}, "naive": {}, "plans": {},
                 "load": {}, "load_method": {
                     "done_ids": "time-ordered uuids from the row number",
                     "parallel_loaders": min(2, os.cpu_count() or 1)}}
    targets: list[_Target] = []
    try:
        for size in sorted(sizes):
            if time.monotonic() - started > cap * 0.6:
                log(f"  claim latency: loading has used {cap * 0.6:.0f} s of the {cap:.0f} s cap, "
                    f"skipping done={size:,}")
                out.setdefault("skipped", []).append(size)
                continue
            dsn, info = await _build(server, f"skiplock_bench_claim_{size}", size, pending, log)
            out["load"][str(size)] = info
            targets.append(_Target(size, dsn))
        # Let the loads' dirty pages reach disk now rather than during the samples
        # (a checkpoint spreads its writes over minutes; this is a 2-core box).
        admin = await asyncpg.connect(server.admin_dsn)
        try:
            await admin.execute("CHECKPOINT")
        except asyncpg.InsufficientPrivilegeError:
            pass
        finally:
            await admin.close()

        for t in targets:
            await t.open()
            await _sample(t.conn, t.fair_call, warmup, 0, 0, 25)  # warm up
        per_round = max(1, samples // rounds)
        for i in range(rounds):
            order = targets[i % len(targets):] + targets[:i % len(targets)]
            for t in order:
                r = await _sample(t.conn, t.fair_call, 0, per_round, 60, 25, raw=t.fair)
                t.rounds.append(r)
        for t in targets:
            r = _summary(t.fair)
            r["round_p95_ms"] = [x["p95_ms"] for x in t.rounds]
            out["results"][str(t.size)] = r
            log(f"    done={t.size:>10,} fair claim: p50 {r['p50_ms']:6.2f} ms  p95 {r['p95_ms']:6.2f} ms"
                f"  ({r['samples']} samples in {rounds} rounds; round p95s "
                f"{', '.join(f'{x:.2f}' for x in r['round_p95_ms'])})")
        for t in targets:
            if t.size in naive_sizes:
                r = await _sample(t.naive_conn, t.naive_call, 2, naive_samples, naive_cap, 25)
                out["naive"][str(t.size)] = r
                log(f"    done={t.size:>10,} naive CTE : p50 {r['p50_ms']:6.2f} ms  p95 {r['p95_ms']:6.2f} ms"
                    f"  ({r['samples']} samples)")
        for t in targets:
            sql, *args = _claim_of_25(t.run_id)
            out["plans"][f"fair done={t.size}"] = await _plan(t.conn, sql, tuple(args))
            out["plans"][f"fair done={t.size} custom"] = await _plan(
                t.conn, sql, tuple(args), mode="force_custom_plan")
            if t.size in naive_sizes:
                out["plans"][f"naive done={t.size}"] = await _plan(
                    t.naive_conn, NAIVE_CLAIM, (TYPE, 25, t.run_id), mode="auto")
    finally:
        for t in targets:
            for c in (getattr(t, "conn", None), getattr(t, "naive_conn", None)):
                if c is not None:
                    await c.close()
        for size in sizes:
            await server.drop_database(f"skiplock_bench_claim_{size}")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


# How the claim grows with the number of lanes rather than with the done history:
# (campaigns in the database, lanes with pending work). Each row: 20,000 pending jobs
# dealt over the first `lanes` campaigns, no history, VACUUM ANALYZE, then samples. Shapes
# with the same number of campaigns share one database (the queue tables emptied between
# them). The target: p95 at the last shape <= TARGET_LANES_RATIO x p95 at the first.
LANE_SHAPES = [(1_000, 1_000), (100_000, 1_000), (100_000, 20_000)]
TARGET_LANES_RATIO = 1.5

LOAD_PENDING_OVER = """
INSERT INTO jobs (type, lane, run_after, created_at)
SELECT $1, c.ids[1 + g % $3], now() - interval '1 minute',
       now() - interval '1 hour' + g * interval '1 millisecond'
FROM generate_series(1, $2) AS g, (SELECT $4::uuid[] AS ids) AS c
"""


async def run_lanes(server, *, shapes: list[tuple[int, int]], pending: int, warmup: int,
                    samples: int, cap: float, log=print) -> dict:
    name = "skiplock_bench_lanes"
    started = time.monotonic()
    out: dict = {"pending": pending, "results": [], "plans": {}, "plans_custom": {},
                 "target_ratio": TARGET_LANES_RATIO}
    conn = None
    made_for = None
    try:
        for total, lanes in shapes:
            if time.monotonic() - started > cap:
                log(f"  lanes: time cap ({cap:.0f} s) reached, skipping campaigns={total:,} lanes={lanes:,}")
                continue
            if made_for != total:
                if conn is not None:
                    await conn.close()
                dsn = await server.fresh_database(name)
                conn = await connect_like_pool(dsn)
                t = time.perf_counter()
                ids = await fixtures.campaigns(conn, total)
                log(f"    {total:,} campaigns (users, plans, lanes) made in {time.perf_counter() - t:.1f} s")
                made_for = total
            else:
                await conn.execute("TRUNCATE jobs, job_lanes, job_lane_hours")
            await conn.execute(LOAD_PENDING_OVER, TYPE, pending, min(lanes, total), ids)
            await conn.execute("VACUUM ANALYZE")
            run_id = await conn.fetchval(*statement("run_start").bind(trigger="bench"))

            async def call():
                return len(await q.claim(conn, LEASE, run_id, 25))

            r = await _sample(conn, call, warmup, samples, 30, 25)
            r.update({"campaigns": total, "lanes_with_work": await conn.fetchval(
                "SELECT count(*) FROM job_lanes WHERE type = $1 AND pending > 0", TYPE)})
            out["results"].append(r)
            log(f"    campaigns={total:>8,} lanes with work={r['lanes_with_work']:>8,}: fair claim p50 "
                f"{r['p50_ms']:6.2f} ms  p95 {r['p95_ms']:6.2f} ms")
            sql, *args = _claim_of_25(run_id)
            out["plans"][f"campaigns={total} lanes={lanes}"] = await _plan(conn, sql, tuple(args))
            out["plans_custom"][f"campaigns={total} lanes={lanes}"] = await _plan(
                conn, sql, tuple(args), mode="force_custom_plan")
    finally:
        if conn is not None:
            await conn.close()
        await server.drop_database(name)
    res = out["results"]
    if len(res) == len(shapes) and len(res) > 1:
        out["ratio"] = round(res[-1]["p95_ms"] / res[0]["p95_ms"], 2)
        log(f"    p95 at {res[-1]['campaigns']:,} campaigns / {res[-1]['lanes_with_work']:,} with work over "
            f"p95 at {res[0]['campaigns']:,} / {res[0]['lanes_with_work']:,}: {out['ratio']:.2f} "
            f"(target <= {TARGET_LANES_RATIO}: {'met' if out['ratio'] <= TARGET_LANES_RATIO else 'NOT met'})")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out
