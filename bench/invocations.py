"""Invocations as separate processes: `python -m app run-once`, one or several at once.

Each invocation is its own Python process with its own pool, started the way the
scheduler starts one (`run-once`, PIPELINE_STAGES = the no-op stage of
bench/noop_stage.py, no plug-ins), through bench/counted.py, which counts the socket
writes to PostgreSQL (the round trips) and the connections each process used.

Per measurement: empty queue, N no-op jobs enqueued in the shape's lanes, VACUUM
ANALYZE, then k processes started together. Throughput is N over the span from the
first run's start to the last run's finish (the runs rows' own clocks: `started_at`,
`finished_at`), so Python's start-up (imports, a second or so) is left out, as the
peers' scripts leave theirs out; every job must be done with attempts = 1 and the runs
rows must add up to N.

  single:  one invocation, stage batch 50, concurrency 10 (issue 12: >= 3x pgqueuer);
  scaling: 1, 2, 4 and 8 invocations at once, the same stage.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from app.engine import jobs as q
from app.engine.jobs import NewJob

from bench import fixtures
from bench.drain import _lanes, _reset
from bench.noop_stage import TYPE

ROOT = Path(__file__).resolve().parent.parent
TARGET_ROUND_TRIPS_PER_BATCH = 3
TARGET_OVER_PGQUEUER = 3.0


async def _spawn(dsn: str, k: int, batch: int, concurrency: int, cap: float,
                 env: dict[str, str] | None = None) -> list[dict]:
    """k `run-once` processes at once; each one's run JSON and counts. env: settings to
    change for them (other stages or plug-ins: bench/shapes.py)."""
    procs = []
    for _ in range(k):
        counts = Path(tempfile.mkstemp(prefix="skiplock-bench-counts-", suffix=".json")[1])
        child = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_STAGES": "bench.noop_stage:STAGES",
                 "PIPELINE_PLUGINS": "", "BENCH_BATCH": str(batch), "BENCH_CONCURRENCY": str(concurrency),
                 "BENCH_COUNTS": str(counts), "PIPELINE_BUDGET_SECONDS": str(int(cap)), **(env or {})}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.counted", "run-once", "--trigger", "bench", cwd=str(ROOT),
            env=child, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        procs.append((proc, counts))
    out = []
    for proc, counts in procs:
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=cap + 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        try:
            run = json.loads(stdout)
        except ValueError:
            raise RuntimeError(f"run-once failed ({proc.returncode}): {stderr.decode()[-800:]}") from None
        c = json.loads(counts.read_text() or "{}")
        counts.unlink(missing_ok=True)
        out.append({"run": run, "round_trips": c.get("writes"), "connections": c.get("connections"),
                    "claim_statements": c.get("claim_statements")})
    return out


async def _measure(admin, dsn: str, lanes, *, n: int, k: int, batch: int, concurrency: int,
                   cap: float, meter) -> dict:
    await _reset(admin)
    await q.enqueue_many(admin, [NewJob(type=TYPE, lane=lanes[i % len(lanes)]) for i in range(n)])
    await admin.execute("VACUUM ANALYZE jobs, job_lanes, job_lane_hours")
    cpu0 = meter.snapshot()
    procs = await _spawn(dsn, k, batch, concurrency, cap)
    cpu = meter.share(cpu0, meter.snapshot())
    span = await admin.fetchrow("SELECT min(started_at) AS t0, max(finished_at) AS t1, "
                                "coalesce(sum(jobs_done), 0) AS done FROM runs")
    row = await admin.fetchrow(
        "SELECT count(*) FILTER (WHERE status = 'done') AS done, "
        "count(*) FILTER (WHERE attempts <> 1) AS attempts_ne_1 FROM jobs WHERE type = $1", TYPE)
    seconds = (span["t1"] - span["t0"]).total_seconds()
    batches = -(-n // batch)
    trips = sum(p["round_trips"] or 0 for p in procs)
    ok = (row["done"] == n and row["attempts_ne_1"] == 0 and span["done"] == n
          and all(p["run"]["stopReason"] == "no_work" for p in procs))
    return {
        "ok": ok, "invocations": k, "jobs_s": n / seconds, "seconds": seconds,
        "round_trips": trips, "batches": batches, "round_trips_per_batch": round(trips / batches, 2),
        "connections_per_invocation": [p["connections"] for p in procs],
        "jobs_per_invocation": sorted(p["run"]["jobsDone"] for p in procs),
        "cpu_share": cpu,
        "cpu_us_per_job": ({"client": round(cpu["client_s"] / n * 1e6),
                            "server": round(cpu["server_s"] / n * 1e6)} if cpu else None),
    }


async def run(server, *, n: int, counts: list[int], batch: int, concurrency: int, shape: str,
              repeats: int, cap: float, log=print) -> dict:
    """Each count of invocations `repeats` times, interleaved; medians."""
    from app.engine.db import connect

    name = "skiplock_bench_invocations"
    dsn = await server.fresh_database(name)
    admin = await connect(dsn)
    out: dict = {"n": n, "batch": batch, "concurrency": concurrency, "shape": shape,
                 "repeats": repeats, "results": {}}
    started = time.monotonic()
    try:
        lanes = _lanes(shape, await fixtures.campaigns(admin, 100))
        runs: dict[int, list[dict]] = {k: [] for k in counts}
        for i in range(repeats):
            for k in (counts if i % 2 == 0 else list(reversed(counts))):
                left = cap - (time.monotonic() - started)
                if left <= 10:
                    log(f"  invocations: time cap ({cap:.0f} s) reached, skipping {k} x run {i + 1}")
                    continue
                r = await _measure(admin, dsn, lanes, n=n, k=k, batch=batch, concurrency=concurrency,
                                   cap=left, meter=server.meter)
                runs[k].append(r)
                c = r["cpu_us_per_job"]
                log(f"  {k} invocation{'s' if k > 1 else ' '} {shape} batch={batch} run {i + 1}: "
                    f"{r['jobs_s']:7,.0f} jobs/s  {r['round_trips_per_batch']:5.2f} round trips/batch  "
                    f"connections {r['connections_per_invocation']}"
                    + (f"  CPU per job: client {c['client']} us, server {c['server']} us;"
                       f" others {r['cpu_share']['others']:.0%}" if c else "")
                    + ("" if r["ok"] else "  CHECKS FAILED"))
        for k, rs in runs.items():
            if rs:
                out["results"][str(k)] = {
                    "invocations": k, "jobs_s_median": statistics.median(r["jobs_s"] for r in rs),
                    "jobs_s_all": [round(r["jobs_s"]) for r in rs],
                    "round_trips_per_batch_median": statistics.median(r["round_trips_per_batch"] for r in rs),
                    "max_connections_per_invocation": max(max(r["connections_per_invocation"]) for r in rs),
                    "all_ok": all(r["ok"] for r in rs), "runs": rs}
    finally:
        await admin.close()
        await server.drop_database(name)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def _pgqueuer(out: dict) -> float | None:
    v = out.get("peers", {}).get("variants", {}).get("unlimited", {})
    return v.get("process_jobs_s_median")


def targets(out: dict) -> dict:
    """Issue 12's targets for the hot loop, from this run's parts."""
    t: dict = {}
    res = out.get("invocations", {}).get("results", {})
    one, pgq = res.get("1"), _pgqueuer(out)
    if one:
        t["round_trips_per_batch"] = {
            "target": f"<= {TARGET_ROUND_TRIPS_PER_BATCH} (one run-once, batch 50, whole run counted)",
            "value": one["round_trips_per_batch_median"],
            "met": one["round_trips_per_batch_median"] <= TARGET_ROUND_TRIPS_PER_BATCH and one["all_ok"]}
        t["connections_per_invocation"] = {
            "target": "<= 2", "value": max(r["max_connections_per_invocation"] for r in res.values()),
            "met": max(r["max_connections_per_invocation"] for r in res.values()) <= 2}
    if one and pgq:
        ratio = one["jobs_s_median"] / pgq
        t["one_invocation_over_pgqueuer"] = {
            "target": f">= {TARGET_OVER_PGQUEUER} (pgqueuer uncapped, same sitting)",
            "value": round(ratio, 2), "met": ratio >= TARGET_OVER_PGQUEUER}
    head = out.get("drain", {}).get("results", {}).get("mixed batch=25 loop")
    bare = out.get("peers", {}).get("raw_sql", {}).get("drain", {}).get("B=25", {}).get("median_jobs_s")
    if head and pgq:
        ratio = head["jobs_s_median"] / pgq
        t["ten_overlapping_over_pgqueuer"] = {
            "target": f">= {TARGET_OVER_PGQUEUER} (mixed, batch 25)", "value": round(ratio, 2),
            "met": ratio >= TARGET_OVER_PGQUEUER}
    if head and bare:
        ratio = head["jobs_s_median"] / bare
        t["ten_overlapping_over_bare_loop"] = {
            "target": ">= 0.5 (the bare SKIP LOCKED loop, claim 25)", "value": round(ratio, 2),
            "met": ratio >= 0.5}
    return t


def table(out: dict) -> list[str]:
    inv = out.get("invocations", {})
    if "error" in inv:
        return ["", f"Invocations: {inv['error']}"]
    if not inv.get("results"):
        return []
    pgq = _pgqueuer(out)
    lines = ["", f"`run-once` processes at once, {inv['n']:,} no-op jobs ({inv['shape']}), batch {inv['batch']}, "
                 f"concurrency {inv['concurrency']}, median of {inv['repeats']} (jobs/s)"]
    for k, r in inv["results"].items():
        vs = f"  {r['jobs_s_median'] / pgq:4.1f}x pgqueuer" if pgq else ""
        lines.append(f"  {k:>2s} at once {r['jobs_s_median']:8,.0f}  {' '.join(f'{x:,}' for x in r['jobs_s_all']):24s}"
                     f" {r['round_trips_per_batch_median']:5.2f} round trips/batch  at most "
                     f"{r['max_connections_per_invocation']} connections each{vs}  "
                     f"{'ok' if r['all_ok'] else 'FAILED'}")
    return lines
