"""Ten overlapping runs against pgqueuer and the bare loop, round by round
(`python -m bench --only paired-ten`).

The drain of ten overlapping runs (mixed lanes, batch 25) is set beside two figures of the
same sitting: pgqueuer 1.6.0 uncapped, which it must stay at least twice as fast as (a
guard), and the bare SKIP LOCKED loop at claim 25, reported only (the job row alone drains
at about half of it: `--only floor`). Measured as separate parts, minutes apart, each ratio
carries the box's drift between them: on 12-03 the hypervisor took 6% of the CPUs during
the drain part and 26% during the peers that followed. Here a round is one drain of each,
back to back, the first of the three in turn, and each figure is the median of the
rounds' ratios. A first round warms all three up and is not counted.

The drain is bench/drain.py's own (`_one`: the same database setup, checks and pool);
pgqueuer and the bare loop are the peers' scripts (bench/peers.py), pgqueuer's second
run in its process counted (peers.pgqueuer_warm), as in bench/paired.py."""

from __future__ import annotations

import statistics
import time


from bench import drain, peers

GUARD_OVER_PGQUEUER = 2.0
WORKERS = 10
BATCH = 25
PARTS = ("skiplock", "pgqueuer", "bare")


async def run(server, *, peers_dir, rounds: int, n: int, cap: float, log=print) -> dict:
    name = "skiplock_bench_paired_ten"
    _, pool, settings, lanes = await drain.mixed_rounds_setup(server, name, WORKERS)
    out: dict = {"n": n, "workers": WORKERS, "batch": BATCH, "shape": "mixed", "rounds": []}
    started = time.monotonic()
    try:
        for i in range(-1, rounds):
            left = cap - (time.monotonic() - started)
            if left <= 60:
                log(f"  paired-ten: time cap ({cap:.0f} s) reached after {max(i, 0)} rounds")
                break
            got: dict = {}
            for part in drain.in_turn(PARTS, i):
                if part == "skiplock":
                    r = await drain._one(pool, settings, lanes, n, WORKERS, BATCH, min(left, 240), "loop",
                                         server.meter)
                    if not r["ok"]:
                        return {"error": f"a drain failed its checks: {r['failed_checks']}"}
                    got["skiplock_jobs_s"] = r["jobs_s"]
                    await drain._reset(pool)  # untimed: no dead rows for autovacuum beside the peers
                elif part == "pgqueuer":
                    p = await peers.pgqueuer_warm(server, peers_dir=peers_dir, n=n, concurrency=WORKERS, cap=left)
                    if isinstance(p, dict):
                        return p
                    got["pgqueuer_jobs_s"] = p
                else:
                    b = await peers.bare_loop(server, peers_dir=peers_dir, n=n, concurrency=WORKERS, repeats=1,
                                              cap=left, batches=(str(BATCH),), log=lambda _: None)
                    figure = b.get("drain", {}).get(f"B={BATCH}", {}).get("median_jobs_s")
                    if figure is None:
                        return {"error": (b.get("error") or b.get("skipped") or "the bare loop gave no figure")[:300]}
                    got["bare_jobs_s"] = figure
            got["over_pgqueuer"] = got["skiplock_jobs_s"] / got["pgqueuer_jobs_s"]
            got["over_bare"] = got["skiplock_jobs_s"] / got["bare_jobs_s"]
            line = (f"ten runs {got['skiplock_jobs_s']:7,.0f}, pgqueuer {got['pgqueuer_jobs_s']:7,.0f}, "
                    f"bare loop {got['bare_jobs_s']:7,.0f} jobs/s: {got['over_pgqueuer']:.2f}x pgqueuer, "
                    f"{got['over_bare']:.0%} of the bare loop")
            if i < 0:
                out["warm_up"] = got
                log(f"  warm-up: {line} (not counted)")
                continue
            out["rounds"].append(got)
            log(f"  round {i + 1}: {line}")
    finally:
        await pool.close()
        await server.drop_database(name)
    if out["rounds"]:
        for key in ("skiplock_jobs_s", "pgqueuer_jobs_s", "bare_jobs_s", "over_pgqueuer", "over_bare"):
            out[f"{key}_median"] = statistics.median(r[key] for r in out["rounds"])
        log(f"  ten runs over pgqueuer {out['over_pgqueuer_median']:.2f}x, over the bare loop "
            f"{out['over_bare_median']:.0%}: medians of {len(out['rounds'])} rounds")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def targets(out: dict) -> dict:
    ten = out.get("paired_ten", {})
    if "over_pgqueuer_median" not in ten:
        return {}
    k = len(ten["rounds"])
    return {
        "ten_overlapping_over_pgqueuer_rounds": {
            "target": f">= {GUARD_OVER_PGQUEUER} (a guard; mixed, batch 25; median of {k} rounds)",
            "value": round(ten["over_pgqueuer_median"], 2),
            "met": ten["over_pgqueuer_median"] >= GUARD_OVER_PGQUEUER}}


def table(out: dict) -> list[str]:
    ten = out.get("paired_ten", {})
    if "over_pgqueuer_median" in ten:
        return ["", f"Ten overlapping runs (mixed, batch 25) against pgqueuer uncapped and the bare loop, "
                    f"round by round, {ten['n']:,} jobs: {ten['over_pgqueuer_median']:.2f}x pgqueuer, "
                    f"{ten['over_bare_median']:.0%} of the bare loop, medians of {len(ten['rounds'])} rounds "
                    f"(ten runs {ten['skiplock_jobs_s_median']:,.0f}, pgqueuer {ten['pgqueuer_jobs_s_median']:,.0f}, "
                    f"bare loop {ten['bare_jobs_s_median']:,.0f} jobs/s)",
                "  each round: " + " ".join(f"{r['over_pgqueuer']:.2f}x/{r['over_bare']:.0%}" for r in ten["rounds"])]
    if ten:
        return ["", f"Paired ten: {(ten.get('error') or ten.get('skipped') or 'no rounds')[:200]}"]
    return []
