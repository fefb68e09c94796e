"""The horizon soak (`python -m bench --only horizon`): a queue under a steady load while
long transactions pin PostgreSQL's MVCC horizon.

While a snapshot is held, VACUUM can remove no row version that died after it was taken:
every claim and completion leaves dead versions in the queue's tables and indexes, and
each pass over them costs more the longer the snapshot stays. This part measures what a
queue does meanwhile, Skiplock and then pgqueuer 1.6.0 on the same server, each in a
fresh database, variant by variant (so each pair sees the same drift of the box):

  overlapping  from 30 s on, a REPEATABLE READ transaction every 40 s that counts the
               queue's table and stays open 120 s (three at once), for --pin-minutes;
  one-long     one such transaction opened at 30 s and held for --pin-minutes;

then every snapshot is released and the run goes on 60 s more. The load throughout:
plain INSERTs of 40 jobs every 50 ms (800 jobs/s), Skiplock's dealt round-robin over 100
lanes of one no-op stage type drained by one real `skiplock worker` process (batch 50,
concurrency 10, bench/noop_stage.py); pgqueuer's into one entrypoint drained by its own
worker (concurrency 10, bench/horizon_pgqueuer.py, in the peers' venv of bench/peers.py).

Once a second, from this process: the backlog (jobs enqueued and not finished: waiting
or running), the oldest waiting job's wait, the dead tuples of the queue's tables and how
long the oldest open snapshot has been held. Each job's enqueue -> done comes from the
database's own clocks (Skiplock: jobs.finished_at - created_at; pgqueuer: its log's
`successful` row against the job's `created`), so jobs done and the p95 are counted in
the second each job finished. The backlog is observed job by job (primary-key lookups of
the jobs this process enqueued, oldest first), not counted from the queue's counters or
by scanning a table the pins keep full of dead rows.

Skiplock's targets: the backlog never above 4,000 jobs; p95 enqueue -> done <= 1 s every
second; done = enqueued (within 5%) over every 30 s window; within 30 s of the release,
backlog, oldest wait and p95 back to what they were unpinned (10-30 s), done/s = enqueued/s
again. pgqueuer's figures are judged the same way, for comparison. Results go to
bench/results/horizon-<date>.json, the plots to docs/horizon-<variant>.png."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import asyncpg

from bench import peers
from bench.results_file import sitting_path
from bench.noop_stage import TYPE

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("overlapping", "one-long")
SYSTEMS = ("skiplock", "pgqueuer")

TICK_S = 0.05            # an INSERT every 50 ms ...
ROWS_PER_TICK = 40       # ... of 40 jobs: 800 jobs/s
LANES = 100
BATCH, CONCURRENCY = 50, 10
PIN_START_S = 30.0
PIN_EVERY_S = 40.0       # overlapping: a new pin this often ...
PIN_HOLD_S = 120.0       # ... each held this long, so three are open at once
AFTER_S = 60.0           # the run goes on this long after the release
BASELINE_S = (10.0, 30.0)  # unpinned, the worker warm
POLL_CAP = 20_000        # jobs looked up per sample, oldest first; newer ones count as waiting

TARGET_BACKLOG = 4_000
TARGET_P95_S = 1.0
RATE_WINDOW_S = 30
RATE_TOLERANCE = 0.05    # done within 5% of enqueued over a window
RECOVERY_S = 30.0
# "back to the unpinned figure": at most the larger of 1.5 x the baseline's worst and the
# baseline's worst plus a floor, so that a baseline near zero does not make noise a failure
RECOVERY_SLACK = {"backlog": 400, "oldest_wait_s": 0.5, "p95_s": 0.25}

WORKER_READY_S = 90.0
WORKER_STOP_S = 30.0

# Skiplock: lanes made first (no owner), jobs as any client's plain INSERT makes them.
SKIPLOCK_LANES = "INSERT INTO lanes (id) SELECT unnest($1::uuid[])"
SKIPLOCK_INSERT = """
INSERT INTO jobs (type, lane) SELECT $1, lane FROM unnest($2::uuid[]) AS lane
RETURNING id, created_at
"""
SKIPLOCK_POLL = "SELECT id, status, finished_at FROM jobs WHERE id = ANY($1::uuid[])"
SKIPLOCK_READY = "SELECT count(*) FROM runs WHERE trigger = 'worker'"
SKIPLOCK_PIN = "SELECT count(*) FROM jobs"
SKIPLOCK_TABLES = ("jobs", "job_lanes", "job_lane_hours", "job_lane_journal", "runs", "events")

# pgqueuer: the rows its enqueue API writes (the job, and its 'queued' line in the log).
PGQ_INSERT = """
WITH job AS (
    INSERT INTO pgqueuer (priority, entrypoint, status)
    SELECT 0, $1, 'queued' FROM generate_series(1, $2)
    RETURNING id, created, entrypoint, priority
), logged AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'queued', entrypoint, priority FROM job
)
SELECT id, created FROM job
"""
PGQ_POLL = "SELECT id, status::text AS status FROM pgqueuer WHERE id = ANY($1::bigint[])"
# pgqueuer deletes a finished job and logs it in the same statement
PGQ_FINISHED = """
SELECT DISTINCT ON (job_id) job_id, status::text AS status, created FROM pgqueuer_log
WHERE job_id = ANY($1::bigint[]) AND status IN ('successful', 'exception', 'canceled', 'deleted')
ORDER BY job_id, created DESC
"""
PGQ_READY = "SELECT to_regclass('pgqueuer_log') IS NOT NULL"
PGQ_PIN = "SELECT count(*) FROM pgqueuer"
PGQ_TABLES = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")
PGQ_ENTRYPOINT = "noop"

TABLE_STATS = """
SELECT relname, n_dead_tup, n_live_tup, autovacuum_count, vacuum_count
FROM pg_stat_user_tables WHERE relname = ANY($1::text[])
"""
# how long the oldest snapshot in this database has been held (the pins, or nobody)
OLDEST_SNAPSHOT = """
SELECT coalesce(extract(epoch FROM clock_timestamp() - min(xact_start)), 0)::float8
FROM pg_stat_activity
WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
"""


def pin_schedule(variant: str, pin_s: float) -> list[tuple[float, float]]:
    """(open, close) of each pinning transaction, seconds from the load's start; all
    are closed at the release, PIN_START_S + pin_s."""
    release = PIN_START_S + pin_s
    if variant == "one-long":
        return [(PIN_START_S, release)]
    out, t = [], PIN_START_S
    while t < release:
        out.append((t, min(t + PIN_HOLD_S, release)))
        t += PIN_EVERY_S
    return out


@dataclass
class _State:
    t0_wall: float
    t0_mono: float
    outstanding: dict = field(default_factory=dict)   # job id -> created (epoch s), oldest first
    enqueued: list = field(default_factory=list)      # (created, seconds from t0, jobs)
    finished: list = field(default_factory=list)      # (finished, seconds from t0, latency s) of done jobs
    failed: int = 0
    samples: list = field(default_factory=list)
    loader_lag_max_s: float = 0.0

    def rel(self, epoch: float) -> float:
        return epoch - self.t0_wall


class _Skiplock:
    name = "skiplock"
    database = "skiplock_bench_horizon"
    tables = SKIPLOCK_TABLES
    pin_sql = SKIPLOCK_PIN
    ready_sql = SKIPLOCK_READY
    open_waiting = ("pending",)

    def __init__(self) -> None:
        self.lanes: list[uuid.UUID] = []

    async def prepare(self, server) -> str:
        dsn = await server.fresh_database(self.database)
        conn = await asyncpg.connect(dsn)
        try:
            self.lanes = [uuid.uuid4() for _ in range(LANES)]
            await conn.execute(SKIPLOCK_LANES, self.lanes)
        finally:
            await conn.close()
        return dsn

    def command(self, dsn: str) -> tuple[list[str], dict]:
        exe = Path(sys.executable).with_name("skiplock")
        cmd = [str(exe), "worker"] if exe.exists() else [sys.executable, "-m", "app", "worker"]
        env = {**os.environ, "DATABASE_URL": dsn, "PIPELINE_PLUGINS": "",
               "PIPELINE_STAGES": "bench.noop_stage:STAGES", "BENCH_BATCH": str(BATCH),
               "BENCH_CONCURRENCY": str(CONCURRENCY), "LOG_LEVEL": "WARNING",
               "SKIPLOCK_ENV_FILE": ""}  # no .env of the folder: the settings are all here
        env.pop("DATABASE_DIRECT_URL", None)
        return cmd, env

    async def insert(self, conn, tick: int) -> tuple[list, float]:
        lanes = [self.lanes[(tick * ROWS_PER_TICK + k) % LANES] for k in range(ROWS_PER_TICK)]
        rows = await conn.fetch(SKIPLOCK_INSERT, TYPE, lanes)
        return [r["id"] for r in rows], rows[0]["created_at"].timestamp()

    async def poll(self, conn, ids: list) -> tuple[dict, list]:
        """The statuses of the jobs still open, and (id, status, finished epoch) of the others."""
        open_, finished = {}, []
        for r in await conn.fetch(SKIPLOCK_POLL, ids):
            if r["status"] in ("done", "failed"):
                at = r["finished_at"].timestamp() if r["finished_at"] else time.time()
                finished.append((r["id"], "done" if r["status"] == "done" else "failed", at))
            else:
                open_[r["id"]] = r["status"]
        return open_, finished


class _Pgqueuer:
    name = "pgqueuer"
    database = "skiplock_bench_horizon_pgqueuer"
    tables = PGQ_TABLES
    pin_sql = PGQ_PIN
    ready_sql = PGQ_READY
    open_waiting = ("queued",)

    def __init__(self, python: Path) -> None:
        self.python = python

    async def prepare(self, server) -> str:
        admin = await asyncpg.connect(server.admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "{self.database}"')
        finally:
            await admin.close()
        server.created.append(self.database)  # dropped by server.close() if we do not get to it
        return server.plain_dsn(self.database)

    def command(self, dsn: str) -> tuple[list[str], dict]:
        script = Path(__file__).resolve().with_name("horizon_pgqueuer.py")
        env = {**os.environ, "HORIZON_DSN": dsn, "HORIZON_CONCURRENCY": str(CONCURRENCY)}
        return [str(self.python), str(script)], env

    async def insert(self, conn, tick: int) -> tuple[list, float]:
        rows = await conn.fetch(PGQ_INSERT, PGQ_ENTRYPOINT, ROWS_PER_TICK)
        return [r["id"] for r in rows], rows[0]["created"].timestamp()

    async def poll(self, conn, ids: list) -> tuple[dict, list]:
        open_ = {r["id"]: r["status"] for r in await conn.fetch(PGQ_POLL, ids)}
        gone = [i for i in ids if i not in open_]
        finished = []
        if gone:
            for r in await conn.fetch(PGQ_FINISHED, gone):
                status = "done" if r["status"] == "successful" else "failed"
                finished.append((r["job_id"], status, r["created"].timestamp()))
        # a job missing from both is not counted finished; it is looked for again
        return open_, finished


async def _start_worker(system, dsn: str, log_file: Path):
    cmd, env = system.command(dsn)
    out = open(log_file, "wb")
    try:
        return await asyncio.create_subprocess_exec(*cmd, cwd=str(ROOT), env=env, stdout=out,
                                                    stderr=asyncio.subprocess.STDOUT)
    finally:
        out.close()  # the child has its own descriptor


async def _stop_worker(proc) -> int | None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)  # both workers stop claiming and finish in-flight jobs
        try:
            await asyncio.wait_for(proc.wait(), WORKER_STOP_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    return proc.returncode


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_bytes()[-chars:].decode(errors="replace")
    except OSError:
        return ""


async def _wait_ready(system, conn, proc, log_file: Path) -> None:
    deadline = time.monotonic() + WORKER_READY_S
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"the {system.name} worker exited ({proc.returncode}): {_tail(log_file)}")
        if system.name == "pgqueuer":
            ready = b"ready" in (log_file.read_bytes() if log_file.exists() else b"")
        else:
            ready = await conn.fetchval(system.ready_sql) > 0
        if ready:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the {system.name} worker was not ready after {WORKER_READY_S:.0f} s: {_tail(log_file)}")


async def _load(system, conn, st: _State, end_s: float) -> None:
    """40 jobs every 50 ms from t0 to end_s; behind schedule, the missed ticks are sent
    back to back so that the rate holds."""
    for tick in itertools.count():
        due = st.t0_mono + tick * TICK_S
        if due >= st.t0_mono + end_s or time.monotonic() >= st.t0_mono + end_s:
            return
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        st.loader_lag_max_s = max(st.loader_lag_max_s, time.monotonic() - due)
        ids, created = await system.insert(conn, tick)
        for i in ids:
            st.outstanding[i] = created
        st.enqueued.append((created, st.rel(created), len(ids)))


async def _pin(dsn: str, sql: str, st: _State, open_s: float, close_s: float, record: dict) -> None:
    await asyncio.sleep(max(0.0, st.t0_mono + open_s - 2 - time.monotonic()))
    conn = await asyncpg.connect(dsn)  # a little ahead, so that the pin opens on the second
    try:
        await asyncio.sleep(max(0.0, st.t0_mono + open_s - time.monotonic()))
        tx = conn.transaction(isolation="repeatable_read")
        await tx.start()
        record["opened_s"] = round(time.monotonic() - st.t0_mono, 2)
        t = time.monotonic()
        record["rows_counted"] = await conn.fetchval(sql)  # the snapshot is taken here
        record["count_ms"] = round((time.monotonic() - t) * 1000, 1)
        await asyncio.sleep(max(0.0, st.t0_mono + close_s - time.monotonic()))
        await tx.rollback()
        record["closed_s"] = round(time.monotonic() - st.t0_mono, 2)
    finally:
        await conn.close()


async def _sample(system, conn, st: _State, end_s: float, log, label: str) -> None:
    """Once a second until end_s: the oldest POLL_CAP open jobs looked up, the tables'
    dead tuples, the oldest snapshot's age."""
    for k in itertools.count(1):
        due = st.t0_mono + k
        if due > st.t0_mono + end_s:
            return
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        elif wait < -1:
            continue  # a slow sample: skip the seconds it took rather than bunch up
        started = time.monotonic()
        ids = list(itertools.islice(st.outstanding, POLL_CAP))
        unseen = len(st.outstanding) - len(ids)  # newer than the oldest POLL_CAP: still waiting
        open_, finished = await system.poll(conn, ids) if ids else ({}, [])
        now = time.time()
        for job_id, status, at in finished:
            created = st.outstanding.pop(job_id)
            if status == "done":
                st.finished.append((at, st.rel(at), at - created))
            else:
                st.failed += 1
        waiting_created = [st.outstanding[i] for i in ids if open_.get(i) in system.open_waiting]
        stats = {r["relname"]: dict(r) for r in await conn.fetch(TABLE_STATS, list(system.tables))}
        held = await conn.fetchval(OLDEST_SNAPSHOT)
        # as of the poll: jobs enqueued before it began and not finished by it
        s = {"t": round(started - st.t0_mono, 2),
             "backlog": len(open_) + unseen,
             "waiting": sum(1 for v in open_.values() if v in system.open_waiting) + unseen,
             "running": sum(1 for v in open_.values() if v not in system.open_waiting),
             "oldest_wait_s": round(now - min(waiting_created), 3) if waiting_created else 0.0,
             "dead_tuples": sum(v["n_dead_tup"] for v in stats.values()),
             "dead_by_table": {n: v["n_dead_tup"] for n, v in sorted(stats.items())},
             "snapshot_held_s": round(held, 1),
             "sample_ms": round((time.monotonic() - started) * 1000, 1)}
        st.samples.append(s)
        if k % 30 == 0:
            recent = [x for x in st.finished[-20_000:] if x[1] >= s["t"] - 10]
            lat = sorted(x[2] for x in recent)
            log(f"  {label} t={s['t']:5.0f} s  backlog {s['backlog']:7,}  oldest waiting "
                f"{s['oldest_wait_s']:6.2f} s  done {len(recent) / 10:5.0f}/s  p95 "
                f"{_pct(lat, 0.95) or 0:6.2f} s  dead tuples {s['dead_tuples']:9,}  "
                f"oldest snapshot {s['snapshot_held_s']:5.0f} s  (sample {s['sample_ms']:.0f} ms)")


def _pct(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def _series(st: _State, seconds: int) -> list[dict]:
    """One row per second from the load's start: jobs enqueued and done in it (by the
    database's timestamps), the p50/p95 of the jobs done in it, and the sample taken in it."""
    enq = [0] * seconds
    lat: list[list[float]] = [[] for _ in range(seconds)]
    for _, rel, n in st.enqueued:
        if 0 <= rel < seconds:
            enq[int(rel)] += n
    for _, rel, latency in st.finished:
        if 0 <= rel < seconds:
            lat[int(rel)].append(latency)
    by_second = {}
    for s in st.samples:
        by_second[int(s["t"])] = s
    rows = []
    for sec in range(seconds):
        ls = sorted(lat[sec])
        p95, p50 = _pct(ls, 0.95), _pct(ls, 0.5)
        row = {"t": sec, "enqueued": enq[sec], "done": len(ls),
               "p50_s": round(p50, 3) if p50 is not None else None,
               "p95_s": round(p95, 3) if p95 is not None else None}
        sample = by_second.get(sec)
        for k in ("backlog", "waiting", "running", "oldest_wait_s", "dead_tuples", "dead_by_table",
                  "snapshot_held_s", "sample_ms"):
            row[k] = sample[k] if sample else None
        rows.append(row)
    return rows


def _worst(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r[key] is not None]
    return max(vals) if vals else None


def judge(series: list[dict], release_s: float) -> dict:
    """The four targets on one run's series. The last two seconds are left out of every
    figure but the backlog: their jobs may still finish after the last sample."""
    rows = series[:-2]
    out: dict = {}
    peak = max(series, key=lambda r: r["backlog"] or 0)
    out["backlog"] = {"target": f"<= {TARGET_BACKLOG:,} jobs every second", "value": peak["backlog"] or 0,
                      "at_s": peak["t"], "met": (peak["backlog"] or 0) <= TARGET_BACKLOG}
    # a second in which nothing finished while jobs waited counts against the p95
    bad = [r for r in rows if (r["p95_s"] is not None and r["p95_s"] > TARGET_P95_S)
           or (r["done"] == 0 and (r["backlog"] or 0) > 0)]
    worst = _worst(rows, "p95_s")
    out["p95"] = {"target": f"<= {TARGET_P95_S:g} s every second", "value": worst,
                  "seconds_over": len(bad), "stalled_seconds": sum(1 for r in bad if r["done"] == 0),
                  "first_over_s": bad[0]["t"] if bad else None, "met": not bad}
    windows = []
    for start in range(0, len(rows) - RATE_WINDOW_S + 1, RATE_WINDOW_S):
        w = rows[start:start + RATE_WINDOW_S]
        enq, done = sum(r["enqueued"] for r in w), sum(r["done"] for r in w)
        windows.append({"from_s": start, "enqueued": enq, "done": done,
                        "ratio": round(done / enq, 3) if enq else None})
    off = [w for w in windows if w["ratio"] is None or abs(w["ratio"] - 1) > RATE_TOLERANCE]
    out["rate"] = {"target": f"done = enqueued within {RATE_TOLERANCE:.0%} over every {RATE_WINDOW_S} s window",
                   "value": min((w["ratio"] for w in windows if w["ratio"] is not None), default=None,
                                key=lambda x: -abs(x - 1)),
                   "windows": windows, "windows_off": len(off), "met": bool(windows) and not off}
    out["recovery"] = _recovery(rows, release_s)
    return out


def _recovery(rows: list[dict], release_s: float) -> dict:
    """Whether, from release + RECOVERY_S on, backlog, oldest wait and p95 stay within the
    unpinned baseline's worst (with RECOVERY_SLACK) and done = enqueued over that stretch;
    and the first second after the release from which they all stayed there."""
    base = [r for r in rows if BASELINE_S[0] <= r["t"] < BASELINE_S[1]]
    after = [r for r in rows if r["t"] >= release_s]
    if not base or not after:
        return {"target": "back to unpinned within 30 s of the release", "met": False,
                "error": "no baseline or no seconds after the release"}
    limits = {}
    for key, slack in RECOVERY_SLACK.items():
        b = _worst(base, key) or 0.0
        limits[key] = round(max(1.5 * b, b + slack), 3)

    def within(r: dict) -> bool:
        return all(r[k] is None or r[k] <= lim for k, lim in limits.items()) and not (
            r["done"] == 0 and (r["backlog"] or 0) > 0)

    back_at = None
    for i in range(len(after)):
        if all(within(r) for r in after[i:]):
            back_at = after[i]["t"]
            break
    tail = [r for r in rows if r["t"] >= release_s + RECOVERY_S]
    enq, done = sum(r["enqueued"] for r in tail), sum(r["done"] for r in tail)
    ratio = done / enq if enq else None
    took = None if back_at is None else round(back_at - release_s, 1)
    met = (took is not None and took <= RECOVERY_S and ratio is not None
           and abs(ratio - 1) <= RATE_TOLERANCE)
    return {"target": f"within {RECOVERY_S:.0f} s of the release: backlog, oldest wait, p95 at the unpinned "
                      f"figure (limits {limits}), done = enqueued within {RATE_TOLERANCE:.0%}",
            "value": took, "limits": limits,
            "baseline_worst": {k: _worst(base, k) for k in RECOVERY_SLACK},
            "after_worst": {k: _worst(tail, k) for k in RECOVERY_SLACK},
            "done_over_enqueued_after": round(ratio, 3) if ratio is not None else None, "met": met}


async def _soak(server, system, variant: str, pin_s: float, log) -> dict:
    release_s = PIN_START_S + pin_s
    end_s = release_s + AFTER_S
    label = f"{system.name:8s} {variant:11s}"
    dsn = await system.prepare(server)
    log_file = Path(tempfile.mkstemp(prefix=f"skiplock-horizon-{system.name}-", suffix=".log")[1])
    sampler = await asyncpg.connect(dsn, command_timeout=60)
    loader = await asyncpg.connect(dsn, command_timeout=60)
    proc, cpu0 = None, None
    pins = [{"planned_open_s": o, "planned_close_s": c} for o, c in pin_schedule(variant, pin_s)]
    out: dict = {"system": system.name, "variant": variant, "pin_minutes": pin_s / 60,
                 "release_s": release_s, "end_s": end_s, "pins": pins}
    try:
        proc = await _start_worker(system, dsn, log_file)
        await _wait_ready(system, sampler, proc, log_file)
        cpu0 = server.meter.snapshot()
        st = _State(t0_wall=time.time(), t0_mono=time.monotonic())
        tasks = [asyncio.create_task(_load(system, loader, st, end_s)),
                 asyncio.create_task(_sample(system, sampler, st, end_s, log, label))]
        tasks += [asyncio.create_task(_pin(dsn, system.pin_sql, st, p["planned_open_s"], p["planned_close_s"], p))
                  for p in pins]
        # the worker dying ends the run at once, as any task's failure does
        watch = asyncio.create_task(proc.wait())
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending | {watch}, return_when=asyncio.FIRST_COMPLETED)
                for t in done - {watch}:
                    t.result()
                if watch in done:
                    raise RuntimeError(f"the {system.name} worker exited ({proc.returncode}) during the run: "
                                       f"{_tail(log_file)}")
                pending.discard(watch)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            watch.cancel()
        stats = await sampler.fetch(TABLE_STATS, list(system.tables))
        out["vacuums"] = {r["relname"]: {"autovacuum": r["autovacuum_count"], "vacuum": r["vacuum_count"]}
                          for r in stats}
        seconds = int(end_s)
        out["series"] = _series(st, seconds)
        out["enqueued"] = sum(n for _, _, n in st.enqueued)
        out["done"] = len(st.finished)
        out["failed"] = st.failed
        out["open_at_end"] = len(st.outstanding)
        out["loader_lag_max_s"] = round(st.loader_lag_max_s, 3)
        out["samples"] = len(st.samples)
        out["sample_ms_max"] = max((s["sample_ms"] for s in st.samples), default=None)
        out["judged"] = judge(out["series"], release_s)
    finally:
        if proc is not None:
            out["worker_exit"] = await _stop_worker(proc)
            out["worker_log_tail"] = _tail(log_file, 800)
        if cpu0 is not None:  # once the worker is reaped, its CPU time counts as this client's
            out["cpu_share"] = server.meter.share(cpu0, server.meter.snapshot())
        log_file.unlink(missing_ok=True)
        await sampler.close()
        await loader.close()
        await server.drop_database(system.database)
    return out


def _loopback(dsn: str) -> bool:
    return urlparse(dsn).hostname in ("127.0.0.1", "localhost", "::1")


async def run(server, *, pin_minutes: float, variants: list[str], systems: list[str], log=print) -> dict:
    if not _loopback(server.admin_dsn):
        return {"skipped": "the horizon soak runs on a server at 127.0.0.1 only (DATABASE_URL names another host)"}
    if not pin_minutes > 0:
        return {"error": f"--pin-minutes must be more than 0, not {pin_minutes:g}"}
    # SIGTERM unwinds like Ctrl-C, so that the workers are stopped and the databases dropped
    loop, me = asyncio.get_running_loop(), asyncio.current_task()
    loop.add_signal_handler(signal.SIGTERM, me.cancel)
    try:
        return await _run(server, pin_minutes, variants, systems, log)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _run(server, pin_minutes: float, variants: list[str], systems: list[str], log) -> dict:
    pin_s = pin_minutes * 60
    out: dict = {"pin_minutes": pin_minutes, "rate_jobs_s": ROWS_PER_TICK / TICK_S, "lanes": LANES,
                 "batch": BATCH, "concurrency": CONCURRENCY, "pin_start_s": PIN_START_S,
                 "pin_every_s": PIN_EVERY_S, "pin_hold_s": PIN_HOLD_S, "after_s": AFTER_S,
                 "baseline_s": list(BASELINE_S), "poll_cap": POLL_CAP, "variants": {}}
    # pgqueuer's venv is made (pip) on first use, off the event loop
    made = {"skiplock": _Skiplock, "pgqueuer": lambda: _Pgqueuer(peers._venv_python())}
    for variant in variants:
        out["variants"][variant] = {}
        for name in systems:
            log(f"\n  {name}, {variant}: {pin_minutes:g} min pinned from {PIN_START_S:.0f} s, "
                f"{AFTER_S:.0f} s after ({PIN_START_S + pin_s + AFTER_S:.0f} s in all)")
            try:
                system = await asyncio.to_thread(made[name])
                r = await _soak(server, system, variant, pin_s, log)
            except Exception as exc:  # noqa: BLE001 - one run failing does not stop the others
                log(f"  {name} {variant}: {type(exc).__name__}: {exc}")
                r = {"error": f"{type(exc).__name__}: {exc}"[:3000]}
            out["variants"][variant][name] = r
            for line in _verdict(name, r):
                log(line)
    return out


def _verdict(name: str, r: dict) -> list[str]:
    j = r.get("judged")
    if not j:
        return [f"  {name}: {r.get('error', 'no result')[:300]}"]
    head = "targets" if name == "skiplock" else "the same figures, for comparison"
    lines = [f"  {name} {r['variant']} ({head}): enqueued {r['enqueued']:,}, done {r['done']:,}, "
             f"failed {r['failed']}, open at the end {r['open_at_end']:,}"]
    b, p, rt, rc = j["backlog"], j["p95"], j["rate"], j["recovery"]
    word = (lambda ok: "PASS" if ok else "FAIL") if name == "skiplock" else (lambda ok: "met" if ok else "not met")
    lines.append(f"    {word(b['met']):7s} backlog at most {b['value']:,} (at {b['at_s']} s); target {b['target']}")
    lines.append(f"    {word(p['met']):7s} p95 enqueue->done worst {p['value'] if p['value'] is not None else '-'} s, "
                 f"{p['seconds_over']} s over ({p['stalled_seconds']} with nothing done); target {p['target']}")
    lines.append(f"    {word(rt['met']):7s} done/enqueued furthest from 1: {rt['value']}, {rt['windows_off']} of "
                 f"{len(rt['windows'])} windows off; target {rt['target']}")
    back = f"{rc['value']:g} s after the release" if rc.get("value") is not None else "not back by the end"
    lines.append(f"    {word(rc['met']):7s} back to unpinned {back} (done/enqueued from release + "
                 f"{RECOVERY_S:.0f} s: {rc.get('done_over_enqueued_after')}); target within {RECOVERY_S:.0f} s")
    c = r.get("cpu_share")
    if c:
        lines.append(f"    (CPUs meanwhile: this process and the worker {c['client']:.0%}, the server {c['server']:.0%}, "
                     f"other processes {c['others']:.0%}, steal {c['steal']:.0%})")
    return lines


def table(out: dict) -> list[str]:
    h = out.get("horizon")
    if not h:
        return []
    if "skipped" in h or "error" in h:
        return ["", f"Horizon soak: {h.get('skipped') or h.get('error')}"]
    lines = ["", f"Horizon soak: {h['rate_jobs_s']:.0f} jobs/s over {h['lanes']} lanes, pinned "
                 f"{h['pin_minutes']:g} min from {h['pin_start_s']:.0f} s"]
    for variant, runs in h["variants"].items():
        for name, r in runs.items():
            lines += [f"  [{variant}]"] + _verdict(name, r)
    return lines


def record(out: dict, results_dir: Path, docs_dir: Path, log=print) -> None:
    """The part's own results file (with the machine and the server) and one plot per variant."""
    h = out.get("horizon") or {}
    if not h.get("variants"):
        return
    date = out["machine"]["date"][:10]
    path = sitting_path(results_dir, "horizon", date)
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: out.get(k) for k in ("machine", "postgres", "args", "horizon")},
                               indent=1, default=str) + "\n")
    log(f"  horizon results in {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    try:
        from bench import horizon_plot
    except ImportError as exc:
        log(f"  no plots: {exc} (pip install -e '.[bench]')")
        return
    for variant, runs in h["variants"].items():
        if any("series" in r for r in runs.values()):
            png = docs_dir / f"horizon-{variant}.png"
            horizon_plot.draw(variant, runs, h, out, png)
            log(f"  plot in {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}")
