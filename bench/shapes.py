"""Pipelines of the shapes people run (`python -m bench --only shapes`; issue 37).

The other parts drain one user stage. Real pipelines have several, often a plug-in's
ahead of them, and handlers that await an API. This part measures, in one sitting on one
server, one `run-once` process at a time (as bench/paired.py and bench/invocations.py
run one, through bench/counted.py), ownerless jobs, throughput over the runs row's own
clock (`started_at` to `finished_at`):

Throughput: N no-op jobs, every stage batch 50, concurrency 10 (bench/shape_stages.py),
round after round, each round every shape once and pgqueuer once, a different one first
each round; a first run of `one` warms up and is not counted. Each ratio is the median
of the rounds' ratios (a round sees the same drift on both sides):
  one               one user stage: the reference;
  last-of-8         eight user stages, the work in the last (target >= 0.9 x one);
  spread-8          eight user stages, the work dealt evenly over all eight (>= 0.8 x one);
  plugin            the example plug-in loaded (app.outreach.plugin:PLUGIN, the default
                    deployment), the work in one user stage after its stages
                    (>= 3 x pgqueuer);
  plugin-last-of-8, plugin-spread-8: the issue's wording of the two eight-stage targets,
                    with the plug-in's stages ahead too (the same targets);
  pgqueuer          1.6.0 uncapped: the peers' own script, its process's second run
                    counted (bench/peers.py, as bench/paired.py), else bench/shapes_pgqueuer.py.
Per batch (over N / 50), counted by bench/counted.py: the claim statements (every
stage's claim-and-settle statement, empty looks and the pipeline's own stages included;
target <= 3 for the eight-stage shapes), and the round trips (every socket write of the
process: connection start-up, the runs row, its heartbeat and housekeeping too).

Handlers that wait (one user stage, no plug-in), each drain sized to about N / 2,000
seconds of ideal work, skiplock and pgqueuer (bench/shapes_pgqueuer.py, its entrypoint
capped at the same concurrency) back to back, a different one first each round:
  sleep-50ms-c10    every handler sleeps 50 ms; batch 50, concurrency 10: % of 200 jobs/s;
  sleep-50ms-c100   the same, batch 100, concurrency 100: % of 2,000 jobs/s (both >= 90%);
  mixed-c10         handlers of 5-500 ms (log-uniform, seeded; the same jobs for both
                    queues), batch 50, concurrency 10: % of the ideal (concurrency x N
                    over the sum of the waits) and slot occupancy: the share of the slots'
                    time spent in a handler between the first handler's start and the
                    last's, while some job was still ready and waiting (target >= 90%).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from app.engine import jobs as q
from app.engine.jobs import NewJob

from bench import invocations, peers
from bench.drain import _reset, cpu_per_job, in_turn
from bench.results_file import sitting_path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "app.outreach.plugin:PLUGIN"
BATCH, CONCURRENCY = 50, 10
TARGET_LAST_OF_8 = 0.9
TARGET_SPREAD_8 = 0.8
TARGET_PLUGIN_OVER_PGQUEUER = 3.0
TARGET_ROUND_TRIPS = invocations.TARGET_ROUND_TRIPS_PER_BATCH
TARGET_OF_IDEAL = 0.9
TARGET_OCCUPANCY = 0.9
MIXED_MS = (5, 500)
SEED = 37


@dataclass(frozen=True)
class Shape:
    stages: int      # user stages, s1 ... sN
    plugin: bool     # the example plug-in's stages ahead of them
    spread: bool     # the work dealt over every user stage, else all in the last
    what: str


SHAPES = {
    "one": Shape(1, False, False, "one user stage"),
    "last-of-8": Shape(8, False, False, "8 user stages, the work in the last"),
    "spread-8": Shape(8, False, True, "8 user stages, the work spread over all"),
    "plugin": Shape(1, True, False, "the example plug-in, the work in a user stage after it"),
    "plugin-last-of-8": Shape(8, True, False, "the plug-in and 8 user stages, the work in the last"),
    "plugin-spread-8": Shape(8, True, True, "the plug-in and 8 user stages, the work spread over all"),
}


@dataclass(frozen=True)
class Waiting:
    batch: int
    concurrency: int
    ms: float | None  # every handler's wait, or None for MIXED_MS
    what: str


WAITS = {
    "sleep-50ms-c10": Waiting(50, 10, 50, "handlers sleep 50 ms, batch 50, concurrency 10"),
    "sleep-50ms-c100": Waiting(100, 100, 50, "handlers sleep 50 ms, batch 100, concurrency 100"),
    "mixed-c10": Waiting(50, 10, None, "handlers wait 5-500 ms (log-uniform, seeded), batch 50, concurrency 10"),
}


def _jobs(shape: Shape, waits: list[float | None]) -> list[NewJob]:
    types = [f"s{i}" for i in range(1, shape.stages + 1)]
    return [NewJob(type=types[i % len(types)] if shape.spread else types[-1],
                   payload={} if ms is None else {"ms": ms}) for i, ms in enumerate(waits)]


def occupancy(slots: list, concurrency: int) -> float | None:
    """The share of `concurrency` slots' time spent in a handler between the first
    handler's start and the last's: every job was enqueued before the run, so until the
    last one started some job was ready and waiting."""
    if len(slots) < 2:
        return None
    w0, w1 = min(s for s, _ in slots), max(s for s, _ in slots)
    if w1 <= w0:
        return None
    busy = sum(max(0.0, min(e, w1) - max(s, w0)) for s, e in slots)
    return busy / (concurrency * (w1 - w0))


async def _skiplock(admin, dsn: str, shape: Shape, waits: list, *, batch: int, concurrency: int,
                    cap: float, meter, slots: bool = False) -> dict:
    """One `run-once` drain of `waits` (one job each) through `shape`'s stages."""
    await _reset(admin)
    jobs = _jobs(shape, waits)
    await q.enqueue_many(admin, jobs)
    await admin.execute("VACUUM ANALYZE jobs, job_lanes, job_lane_hours")
    slots_file = Path(tempfile.mkstemp(prefix="skiplock-bench-slots-", suffix=".json")[1]) if slots else None
    env = {"PIPELINE_STAGES": "bench.shape_stages:STAGES", "PIPELINE_PLUGINS": PLUGIN if shape.plugin else "",
           "BENCH_STAGES": str(shape.stages), **({"BENCH_SLOTS": str(slots_file)} if slots_file else {})}
    cpu0 = meter.snapshot()
    try:
        [proc] = await invocations._spawn(dsn, 1, batch, concurrency, cap, env=env)
        intervals = json.loads(slots_file.read_text() or "[]") if slots_file else None
    finally:
        if slots_file:
            slots_file.unlink(missing_ok=True)
    cpu = meter.share(cpu0, meter.snapshot())
    n = len(jobs)
    types = sorted({j.type for j in jobs})
    span = await admin.fetchrow("SELECT min(started_at) AS t0, max(finished_at) AS t1, "
                                "coalesce(sum(jobs_done), 0) AS done FROM runs")
    row = await admin.fetchrow(
        "SELECT count(*) FILTER (WHERE status = 'done') AS done, "
        "count(*) FILTER (WHERE attempts <> 1) AS attempts_ne_1 FROM jobs WHERE type = ANY($1)", types)
    # our drain left dead rows: vacuumed now, untimed, so autovacuum does not take the
    # CPUs from whatever runs next (as bench/paired.py does)
    await admin.execute("VACUUM jobs, job_lanes, job_lane_hours, runs, events, event_rooms")
    seconds = (span["t1"] - span["t0"]).total_seconds()
    # the runs may also have done a loaded plug-in's periodic jobs (the example's daily digest)
    ok = (row["done"] == n and row["attempts_ne_1"] == 0 and span["done"] >= n
          and proc["run"]["stopReason"] == "no_work")
    batches = -(-n // batch)
    out = {"ok": ok, "jobs_s": n / seconds, "seconds": seconds, "batches": batches,
           "claim_statements": proc["claim_statements"],
           "claims_per_batch": round((proc["claim_statements"] or 0) / batches, 2),
           "round_trips": proc["round_trips"], "round_trips_per_batch": round((proc["round_trips"] or 0) / batches, 2),
           "connections": proc["connections"], "stop_reason": proc["run"]["stopReason"],
           "cpu_share": cpu, "cpu_us_per_job": cpu_per_job(cpu, n)}
    if intervals is not None:
        out["occupancy"] = occupancy(intervals, concurrency)
    return out


async def _pgqueuer(server, name: str, waits: list, *, concurrency: int, warmup: int, cap: float) -> dict:
    """One pgqueuer drain of `waits` by bench/shapes_pgqueuer.py in the peers' venv, in a
    fresh database of its own."""
    admin = await asyncpg.connect(server.admin_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    server.created.append(name)
    py = await asyncio.to_thread(peers._venv_python)
    jobs_file = Path(tempfile.mkstemp(prefix="skiplock-bench-pgq-", suffix=".json")[1])
    jobs_file.write_text(json.dumps(waits))
    env = {**os.environ, "SHAPES_DSN": server.plain_dsn(name), "SHAPES_JOBS": str(jobs_file), "SHAPES_CONCURRENCY": str(concurrency),
           "SHAPES_WARMUP": str(warmup), "SHAPES_CAP": str(cap)}
    proc = await asyncio.create_subprocess_exec(
        str(py), str(Path(__file__).with_name("shapes_pgqueuer.py")), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=cap * 2 + 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"error": f"over the {cap * 2 + 60:.0f} s cap"}
    finally:
        jobs_file.unlink(missing_ok=True)
        await server.drop_database(name)
    try:
        got = json.loads(stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"pgqueuer failed ({proc.returncode}): {stderr.decode(errors='replace')[-800:]}"}
    slots = got.pop("slots")
    if slots:
        got["occupancy"] = occupancy(slots, concurrency)
    return got


async def _pgqueuer_noop(server, *, peers_dir: Path, n: int, cap: float) -> dict:
    """pgqueuer 1.6.0 uncapped on n no-op jobs: the peers' own script as bench/paired.py
    runs it, or, without the peer scripts, bench/shapes_pgqueuer.py after a warm-up drain."""
    got = await peers.pgqueuer_warm(server, peers_dir=peers_dir, n=n, concurrency=CONCURRENCY, cap=cap)
    if not isinstance(got, dict):
        return {"ok": True, "jobs_s": got, "how": "the peers' bench_pgqueuer.py, unlimited, second run"}
    if "skipped" not in got:
        return got
    r = await _pgqueuer(server, "skiplock_bench_shapes_pgqueuer", [None] * n, concurrency=0,
                        warmup=min(n, 5_000), cap=cap)
    return {**r, "how": "bench/shapes_pgqueuer.py, uncapped, after a warm-up drain"}


def _waits(kind: Waiting, n: int) -> list[float]:
    if kind.ms is not None:
        return [kind.ms] * n
    rng = random.Random(SEED)
    lo, hi = (math.log(x) for x in MIXED_MS)
    return [round(math.exp(rng.uniform(lo, hi)), 1) for _ in range(n)]


def _ideal(kind: Waiting, waits: list[float]) -> float:
    """jobs/s if every slot were always in a handler."""
    return kind.concurrency * len(waits) / (sum(waits) / 1000)


async def run(server, *, peers_dir: Path, n: int, rounds: int, cap: float, log=print) -> dict:
    from app.engine.db import connect

    name = "skiplock_bench_shapes"
    dsn = await server.fresh_database(name)
    admin = await connect(dsn)
    out: dict = {"n": n, "batch": BATCH, "concurrency": CONCURRENCY, "lane": "ownerless",
                 "shapes": {k: s.what for k, s in SHAPES.items()}, "rounds": [], "waits": {}}
    started = time.monotonic()
    try:
        noops: list[None] = [None] * n
        w = await _skiplock(admin, dsn, SHAPES["one"], noops, batch=BATCH, concurrency=CONCURRENCY,
                            cap=min(cap, 200), meter=server.meter)
        out["warm_up"] = w
        log(f"  warm-up: one {w['jobs_s']:7,.0f} jobs/s (not counted)")
        parts = (*SHAPES, "pgqueuer")
        for i in range(rounds):
            rnd: dict = {}
            for part in in_turn(parts, i):
                left = cap - (time.monotonic() - started)
                if left <= 20:
                    break
                if part == "pgqueuer":
                    rnd[part] = await _pgqueuer_noop(server, peers_dir=peers_dir, n=n, cap=left)
                else:
                    rnd[part] = await _skiplock(admin, dsn, SHAPES[part], noops, batch=BATCH,
                                                concurrency=CONCURRENCY, cap=min(left, 200), meter=server.meter)
            if len(rnd) < len(parts):
                log(f"  shapes: time cap ({cap:.0f} s) reached in round {i + 1}; it is not counted")
                break
            out["rounds"].append(rnd)
            log(f"  round {i + 1}: " + "  ".join(
                f"{k} {r['jobs_s']:,.0f}" + (f" ({r['claims_per_batch']:.2f} claims/batch)" if "claims_per_batch" in r
                                             else "") + ("" if r.get("ok") else " FAILED")
                if r.get("jobs_s") else f"{k} {r.get('error') or 'no figure'}" for k, r in rnd.items()))
        _summarise(out)

        wait_cap = 1.5 * cap  # its drains are sized in seconds: about 6 x N / 2,000 a round
        wait_started = time.monotonic()
        for kname, kind in WAITS.items():
            waits = _waits(kind, max(100, round(n / 2_000 * _ideal(kind, _waits(kind, 200)))))
            ideal = _ideal(kind, waits)
            runs: dict[str, list] = {"skiplock": [], "pgqueuer": []}
            for i in range(rounds):
                for side in in_turn(("skiplock", "pgqueuer"), i):
                    left = wait_cap - (time.monotonic() - wait_started)
                    if left <= 20:
                        break
                    if side == "skiplock":
                        r = await _skiplock(admin, dsn, SHAPES["one"], waits, batch=kind.batch,
                                            concurrency=kind.concurrency, cap=min(left, 200),
                                            meter=server.meter, slots=True)
                    else:
                        r = await _pgqueuer(server, "skiplock_bench_shapes_pgqueuer", waits,
                                            concurrency=kind.concurrency, warmup=min(len(waits), 50),
                                            cap=min(left, 200))
                    if r.get("jobs_s"):
                        r["of_ideal"] = r["jobs_s"] / ideal
                    runs[side].append(r)
            out["waits"][kname] = res = {"what": kind.what, "n": len(waits), "ideal_jobs_s": ideal,
                                         "sum_of_waits_s": sum(waits) / 1000, **_medians(runs)}
            log(f"  {kname}: {len(waits):,} jobs, ideal {ideal:,.0f} jobs/s: " + "; ".join(
                f"{side} {res[side]['jobs_s_median']:,.0f} jobs/s = {res[side]['of_ideal_median']:.0%}"
                + (f", slots busy {res[side]['occupancy_median']:.0%}" if res[side].get("occupancy_median") else "")
                for side in ("skiplock", "pgqueuer") if "jobs_s_median" in res.get(side, {})))
            if time.monotonic() - wait_started > wait_cap - 20:
                log(f"  waits: time cap ({wait_cap:.0f} s) reached after {kname}")
                break
    finally:
        await admin.close()
        await server.drop_database(name)
    out["targets"] = _targets(out)  # PASS / FAIL printed with the table
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def _medians(runs: dict[str, list]) -> dict:
    res: dict = {}
    for side, rs in runs.items():
        good = [r for r in rs if r.get("jobs_s")]
        if not good:
            if rs:
                res[side] = {"error": rs[-1].get("error", "no figure"), "runs": rs}
            continue
        occ = [r["occupancy"] for r in good if r.get("occupancy") is not None]
        res[side] = {"jobs_s_median": statistics.median(r["jobs_s"] for r in good),
                     "jobs_s_all": [round(r["jobs_s"]) for r in good],
                     "of_ideal_median": statistics.median(r["of_ideal"] for r in good),
                     "occupancy_median": statistics.median(occ) if occ else None,
                     "occupancy_all": [round(x, 3) for x in occ],
                     "all_ok": all(r.get("ok") for r in rs), "runs": rs}
    return res


def _summarise(out: dict) -> None:
    rounds = out["rounds"]
    if not rounds:
        return
    res = out["results"] = {}
    for part in (*SHAPES, "pgqueuer"):
        rs = [r[part] for r in rounds if r[part].get("jobs_s")]
        if not rs:
            continue
        res[part] = {"jobs_s_median": statistics.median(r["jobs_s"] for r in rs),
                     "jobs_s_all": [round(r["jobs_s"]) for r in rs],
                     "all_ok": all(r.get("ok") for r in rs)}
        if part != "pgqueuer":
            res[part]["claims_per_batch_median"] = statistics.median(r["claims_per_batch"] for r in rs)
            res[part]["round_trips_per_batch_median"] = statistics.median(r["round_trips_per_batch"] for r in rs)
            res[part]["connections_max"] = max(r["connections"] or 0 for r in rs)

    def ratio(a: str, b: str) -> dict | None:
        per = [r[a]["jobs_s"] / r[b]["jobs_s"] for r in rounds if r[a].get("jobs_s") and r[b].get("jobs_s")]
        return {"median": statistics.median(per), "all": [round(x, 2) for x in per]} if per else None

    out["ratios"] = {k: v for k, v in {
        "last-of-8/one": ratio("last-of-8", "one"), "spread-8/one": ratio("spread-8", "one"),
        "plugin-last-of-8/one": ratio("plugin-last-of-8", "one"),
        "plugin-spread-8/one": ratio("plugin-spread-8", "one"),
        "plugin/one": ratio("plugin", "one"),
        "plugin/pgqueuer": ratio("plugin", "pgqueuer"), "one/pgqueuer": ratio("one", "pgqueuer")}.items() if v}


def _targets(out: dict) -> dict:
    t: dict = {}
    ratios, res = out.get("ratios", {}), out.get("results", {})
    for key, target in (("last-of-8/one", TARGET_LAST_OF_8), ("spread-8/one", TARGET_SPREAD_8),
                        ("plugin-last-of-8/one", TARGET_LAST_OF_8), ("plugin-spread-8/one", TARGET_SPREAD_8),
                        ("plugin/pgqueuer", TARGET_PLUGIN_OVER_PGQUEUER)):
        if key in ratios:
            a, b = key.split("/")
            ok = res[a]["all_ok"] and res[b]["all_ok"]
            t[f"shapes {key}"] = {"target": f">= {target} (median of {len(ratios[key]['all'])} rounds' ratios)",
                                  "value": round(ratios[key]["median"], 2),
                                  "met": ratios[key]["median"] >= target and ok}
    for key in ("last-of-8", "spread-8", "plugin-last-of-8", "plugin-spread-8"):
        if key in res:
            v = res[key]["claims_per_batch_median"]
            t[f"shapes {key} claim statements/batch"] = {
                "target": f"<= {TARGET_ROUND_TRIPS} (every stage's claims and settles over the batches of 50)",
                "value": v, "met": v <= TARGET_ROUND_TRIPS}
    w = out.get("waits", {})
    for key in ("sleep-50ms-c10", "sleep-50ms-c100"):
        s = w.get(key, {}).get("skiplock")
        if s and "of_ideal_median" in s:
            t[f"waits {key} of ideal"] = {
                "target": f">= {TARGET_OF_IDEAL:.0%} of {w[key]['ideal_jobs_s']:,.0f} jobs/s",
                "value": f"{s['of_ideal_median']:.1%}", "met": s["of_ideal_median"] >= TARGET_OF_IDEAL and s["all_ok"]}
    s = w.get("mixed-c10", {}).get("skiplock")
    if s and s.get("occupancy_median") is not None:
        t["waits mixed-c10 slot occupancy"] = {
            "target": f">= {TARGET_OCCUPANCY:.0%} of the slots busy while ready work waited",
            "value": f"{s['occupancy_median']:.1%}", "met": s["occupancy_median"] >= TARGET_OCCUPANCY and s["all_ok"]}
    return t


def targets(out: dict) -> dict:
    return (out.get("shapes") or {}).get("targets", {})


def table(out: dict) -> list[str]:
    s = out.get("shapes")
    if not s:
        return []
    if "error" in s:
        return ["", f"Shapes: {s['error']}"]
    lines = ["", f"Pipeline shapes: one run-once, {s['n']:,} no-op jobs, batch {s['batch']}, concurrency "
                 f"{s['concurrency']}, median of {len(s['rounds'])} rounds (jobs/s, runs row's clock)"]
    for key, r in s.get("results", {}).items():
        rt, cl = r.get("round_trips_per_batch_median"), r.get("claims_per_batch_median")
        lines.append(f"  {key:17s} {r['jobs_s_median']:8,.0f}  {' '.join(f'{x:,}' for x in r['jobs_s_all']):24s}"
                     + (f" per batch: {cl:5.2f} claims {rt:5.2f} round trips" if rt is not None else " " * 41)
                     + f"  {'ok' if r['all_ok'] else 'FAILED'}  {SHAPES[key].what if key in SHAPES else 'pgqueuer 1.6.0 uncapped'}")
    for key, v in s.get("ratios", {}).items():
        lines.append(f"  {key:22s} {v['median']:5.2f}x  (rounds: {' '.join(f'{x:.2f}' for x in v['all'])})")
    if s.get("waits"):
        lines += ["", "Handlers that wait: one run-once against pgqueuer 1.6.0 at the same concurrency"]
        for key, w in s["waits"].items():
            for side in ("skiplock", "pgqueuer"):
                r = w.get(side)
                if not r:
                    continue
                if "error" in r:
                    lines.append(f"  {key:16s} {side:9s} {r['error'][:200]}")
                    continue
                occ = r.get("occupancy_median")
                lines.append(f"  {key:16s} {side:9s} {r['jobs_s_median']:7,.0f} jobs/s  {r['of_ideal_median']:6.1%} "
                             f"of {w['ideal_jobs_s']:,.0f}" + (f"  slots busy {occ:6.1%}" if occ is not None else "")
                             + f"  ({w['n']:,} jobs; runs {' '.join(f'{x:,}' for x in r['jobs_s_all'])})")
    t = s.get("targets", {})
    if t:
        lines += ["", "Shapes targets:"]
        lines += [f"  {'PASS' if v['met'] else 'FAIL'}  {k}: {v['value']} (target {v['target']})" for k, v in t.items()]
    return lines


def record(out: dict, results_dir: Path, log=print) -> None:
    """The part's own results file, with the machine and the server."""
    if not (out.get("shapes") or {}).get("rounds"):
        return
    date = out["machine"]["date"][:10]
    path = sitting_path(results_dir, "shapes", date)
    results_dir.mkdir(parents=True, exist_ok=True)
    kept = {k: out.get(k) for k in ("machine", "postgres", "args", "shapes")}
    # a committed result names no path outside the repository (the peers' scripts live elsewhere)
    kept["args"] = {k: v for k, v in (kept["args"] or {}).items()
                    if not (isinstance(v, str) and v.startswith("/") and not Path(v).is_relative_to(ROOT))}
    path.write_text(json.dumps(kept, indent=1, default=str) + "\n")
    log(f"  shapes results in {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
