"""One invocation against pgqueuer, pair by pair (`python -m bench --only paired`).

Issue 12's first target compares two figures of one sitting: one `run-once` draining
20,000 no-op jobs (ownerless, batch 50, concurrency 10) and pgqueuer 1.6.0 uncapped on
the same server. Measured part after part, minutes apart, the ratio moves with the box
(pgqueuer alone gave 1,698 and 2,253 jobs/s half an hour apart on one day). Here each
pair is one pgqueuer drain and one `run-once` drain back to back, each first in turn,
and the figure is the median of the pairs' ratios: a pair sees the same drift. A first
pair warms both up and is not counted.

pgqueuer runs through the peers' own script (bench/peers.py): two runs in one process,
the second counted, as a worker that has been up for a while. The invocation is a fresh
process, as a scheduled one is, measured by bench/invocations.py (Python's start-up left
out, as the peer's script leaves its own out)."""

from __future__ import annotations

import statistics
import time

from bench import invocations, peers
from bench.invocations import TARGET_OVER_PGQUEUER


async def run(server, *, peers_dir, pairs: int, n: int, cap: float, log=print) -> dict:
    from app.engine.db import connect

    name = "skiplock_bench_paired"
    dsn = await server.fresh_database(name)
    admin = await connect(dsn)
    out: dict = {"n": n, "batch": 50, "concurrency": 10, "shape": "ownerless", "pairs": []}
    started = time.monotonic()
    try:
        lanes = [None]  # the ownerless lane, as pgqueuer has no lanes
        # a warm-up pair, not counted: pgqueuer's first run on a fresh server (its schema,
        # its venv's first start) and ours (the first plans, a cold cache) are slower
        for i in range(-1, pairs):
            left = cap - (time.monotonic() - started)
            if left <= 30:
                log(f"  paired: time cap ({cap:.0f} s) reached after {max(i, 0)} pairs")
                break
            pair: dict = {}
            for part in (("pgqueuer", "skiplock") if i % 2 == 0 else ("skiplock", "pgqueuer")):
                if part == "pgqueuer":
                    got = await peers.pgqueuer_warm(server, peers_dir=peers_dir, n=n, concurrency=10, cap=left)
                    if isinstance(got, dict):
                        return got
                    pair["pgqueuer_jobs_s"] = got
                else:
                    # the run's budget must fit the default platform limit (300 s)
                    r = await invocations._measure(admin, dsn, lanes, n=n, k=1, batch=50, concurrency=10,
                                                   cap=min(left, 200), meter=server.meter)
                    if not r["ok"]:
                        return {"error": "a run-once did not drain every job exactly once", "run": r}
                    pair["skiplock_jobs_s"] = r["jobs_s"]
                    # our drain left dead rows; vacuum them now, untimed, so that autovacuum
                    # does not take the CPUs from the pgqueuer drain that may come next
                    await admin.execute("VACUUM jobs, job_lanes, job_lane_hours, runs, events, event_rooms")
            pair["ratio"] = pair["skiplock_jobs_s"] / pair["pgqueuer_jobs_s"]
            if i < 0:
                out["warm_up"] = pair
                log(f"  warm-up: run-once {pair['skiplock_jobs_s']:7,.0f} jobs/s, pgqueuer "
                    f"{pair['pgqueuer_jobs_s']:7,.0f} jobs/s (not counted)")
                continue
            out["pairs"].append(pair)
            log(f"  pair {i + 1}: run-once {pair['skiplock_jobs_s']:7,.0f} jobs/s, pgqueuer "
                f"{pair['pgqueuer_jobs_s']:7,.0f} jobs/s: {pair['ratio']:.2f}x")
    finally:
        await admin.close()
        await server.drop_database(name)
    if out["pairs"]:
        out["ratio_median"] = statistics.median(p["ratio"] for p in out["pairs"])
        out["skiplock_jobs_s_median"] = statistics.median(p["skiplock_jobs_s"] for p in out["pairs"])
        out["pgqueuer_jobs_s_median"] = statistics.median(p["pgqueuer_jobs_s"] for p in out["pairs"])
        log(f"  one invocation over pgqueuer: {out['ratio_median']:.2f}x, median of {len(out['pairs'])} pairs")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def targets(out: dict) -> dict:
    pairs = out.get("paired", {})
    if "ratio_median" not in pairs:
        return {}
    return {"one_invocation_over_pgqueuer_paired": {
        "target": f">= {TARGET_OVER_PGQUEUER} (median of {len(pairs['pairs'])} back-to-back pairs)",
        "value": round(pairs["ratio_median"], 2), "met": pairs["ratio_median"] >= TARGET_OVER_PGQUEUER}}


def table(out: dict) -> list[str]:
    pairs = out.get("paired", {})
    if "ratio_median" in pairs:
        return ["", f"One run-once against pgqueuer uncapped, back to back, {pairs['n']:,} jobs: "
                    f"{pairs['ratio_median']:.2f}x, median of {len(pairs['pairs'])} pairs "
                    f"(run-once {pairs['skiplock_jobs_s_median']:,.0f}, pgqueuer {pairs['pgqueuer_jobs_s_median']:,.0f} jobs/s)",
                "  each pair: " + " ".join(f"{p['ratio']:.2f}" for p in pairs["pairs"])]
    if pairs:
        return ["", f"Paired: {(pairs.get('error') or pairs.get('skipped') or 'no pairs')[:200]}"]
    return []
