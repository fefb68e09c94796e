"""python -m bench.chaos (make chaos): every fault at once, then the invariants, from the database.

One seeded, reproducible run, minutes long, through the public entry points only:
  load    8 overlapping `python -m app run-once` started on a schedule, one `python -m app
          worker`, the HTTP API (uvicorn) used by two tenants (enqueue, retry, cancel,
          batches with Idempotency-Key), plain INSERTs of no-op jobs as any client may
          write them, and the example pipeline crawling a generated local site with an
          LLM stand-in; ~50k jobs over ~200 lanes;
  faults  kill -9 of a random invocation every few seconds; PostgreSQL restarted (fast,
          then immediate); Redis killed and revived; the site and the LLM failing 20%,
          hanging 5% and answering 429 with Retry-After 5% of the time;
  then    the load stops, the clock is fast-forwarded (backoffs, leases, maintenance
          ticks, abandoned runs) and run-once drains what is left; the invariants are read
          from the database, and the figures printed and written to
          bench/results/chaos.json (docs/reliability.md keeps them).
`--short` is the same run scaled to seconds (tests/outreach/test_chaos_short.py). Everything runs
on a PostgreSQL, a Redis and HTTP servers of its own, in a temporary folder."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import asyncpg
import httpx

from app import Stage

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


# What the harness's own connections get while PostgreSQL restarts: a refused or cut
# socket, a server shutting down or starting up, or asyncpg's protocol left waiting for a
# sync after the server's goodbye ("another operation (2) is in progress").
DATABASE_DOWN = (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError,
                 asyncpg.InternalClientError)


# ---- the no-op stages the chaos adds (PIPELINE_STAGES=bench.chaos:STAGES) ----

RECORD_EFFECT = "INSERT INTO chaos_effects (job_id, attempt, run_id) VALUES ($1, $2, $3)"


async def _noop(job, ctx) -> None:
    return None


async def _effect(job, ctx) -> None:
    """A handler with an effect outside the queue: one row per attempt it ran. Two rows for
    one (job, attempt) would mean two runs held the same attempt."""
    await ctx.db.execute(RECORD_EFFECT, job.id, job.attempts, job.run_id)
    if random.random() < 0.05:
        raise RuntimeError("chaos: the effect's caller failed after it")


# Short leases: jobs of killed invocations come back within the run, not only at the drain.
STAGES = [
    Stage(type="chaos_effect", handler=_effect, batch=25, concurrency=5, lease=8, max_attempts=3, timeout=4),
    Stage(type="chaos_noop", handler=_noop, batch=50, concurrency=10, lease=8, max_attempts=3, timeout=4),
]
NOOP_TYPES = ("chaos_effect", "chaos_noop")


# ---- scale ----

@dataclass
class Scale:
    seconds: float            # the load phase
    plain_jobs: int           # no-op jobs written by plain INSERTs, over the load phase
    lanes: int                # campaigns (lanes), half per tenant
    full_sites: int           # of those, campaigns crawling the whole generated site
    pages: int                # pages of that site
    start_every: float        # seconds between run-once starts (at most `invocations` alive)
    budget: float             # each run-once's budget
    kill_every: float         # seconds between kill -9s
    restarts: list = field(default_factory=list)   # (fraction of the load phase, mode)
    redis: tuple = (0.2, 0.5)                      # killed at, revived at (fractions)
    invocations: int = 8


FULL = Scale(seconds=150, plain_jobs=36_000, lanes=200, full_sites=20, pages=300, start_every=2.5,
             budget=20, kill_every=4, restarts=[(0.35, "fast"), (0.7, "immediate")])
# Short: one restart, about two kills, few Python starts (each costs ~1 s on a busy box).
SHORT = Scale(seconds=8, plain_jobs=600, lanes=6, full_sites=2, pages=12, start_every=1.5,
              budget=4, kill_every=2, restarts=[(0.4, "fast")], redis=(0.2, 0.55), invocations=3)


# ---- SQL the harness runs itself (its own table, reads, and the fast-forwarded clock) ----

CREATE_EFFECTS = """
CREATE TABLE IF NOT EXISTS chaos_effects (job_id uuid NOT NULL, attempt int NOT NULL, run_id uuid,
                                          at timestamptz NOT NULL DEFAULT clock_timestamp())
"""
LANE_COLUMN = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM information_schema.columns
                         WHERE table_name = 'jobs' AND column_name = 'lane' AND is_generated = 'NEVER')
            THEN 'lane' ELSE 'campaign_id' END
"""
# Plain INSERTs as any client writes them (the jobs' lane column is `lane` once the queue
# knows lanes, `campaign_id` before).
INSERT_PLAIN = {
    "lane": "INSERT INTO jobs (type, payload, lane) SELECT t, '{}', l FROM unnest($1::text[], $2::uuid[]) AS u(t, l)",
    "campaign_id": "INSERT INTO jobs (type, payload, campaign_id) "
                   "SELECT t, '{}', l FROM unnest($1::text[], $2::uuid[]) AS u(t, l)",
}
COUNT_FINISHED = ("SELECT count(*) FILTER (WHERE status = 'done'), "
                  "count(*) FILTER (WHERE status IN ('done', 'failed', 'cancelled')) FROM jobs")
QUOTA_WRONG = "SELECT count(*) FROM quota_ledger WHERE spent < 0 OR spent > units OR units > $1"
OPEN_JOBS = "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')"
# The drain's clock: what only time would free (backoffs, deferrals, leases of killed
# runs, this minute's maintenance tick) is made due now. Nothing else runs meanwhile.
FAST_FORWARD = [
    "UPDATE jobs SET run_after = now() WHERE status = 'pending' AND run_after > now()",
    "UPDATE jobs SET locked_at = locked_at - interval '1 day' WHERE status = 'running'",
    "DELETE FROM recurring_ticks",
]
# Runs still open once every process has stopped: make them old (every timestamp column,
# a heartbeat included), so the next run closes them as abandoned.
AGE_OPEN_RUNS = """
DO $$
DECLARE c text;
BEGIN
    FOR c IN SELECT column_name FROM information_schema.columns
             WHERE table_name = 'runs' AND data_type LIKE 'timestamp%' AND column_name <> 'finished_at' LOOP
        EXECUTE format('UPDATE runs SET %I = %I - interval ''1 day'' WHERE finished_at IS NULL', c, c);
    END LOOP;
END $$
"""
# Each invariant: a count of what breaks it (0: held), and the arguments it reads:
# max_attempts and leases per stage type, the configured daily units, the API's changes.
INVARIANTS = {
    "every job done, failed or cancelled": (
        "SELECT count(*) FROM jobs WHERE status NOT IN ('done', 'failed', 'cancelled')", ()),
    # A person's retry gives a failed job a fresh set of attempts (attempts back to 0), so
    # an attempt number may come back once per retry of that job through the API.
    "no effect recorded twice for one attempt": (
        "SELECT count(*) FROM (SELECT job_id, attempt, count(*) AS n FROM chaos_effects GROUP BY 1, 2) d "
        "LEFT JOIN (SELECT id, count(*) AS n FROM unnest($1::text[]) AS id GROUP BY id) r ON r.id = d.job_id::text "
        "WHERE d.n > 1 + coalesce(r.n, 0)", ("retried_ids",)),
    "every done chaos_effect job has its effect": (
        "SELECT count(*) FROM jobs j WHERE j.type = 'chaos_effect' AND j.status = 'done' "
        "AND NOT EXISTS (SELECT 1 FROM chaos_effects e WHERE e.job_id = j.id)", ()),
    "attempts never above the stage's max": (
        "SELECT count(*) FROM jobs j JOIN unnest($1::text[], $2::int[]) AS m(type, max) ON m.type = j.type "
        "WHERE j.attempts > m.max", ("types", "max_attempts")),
    "no job running without a live lease": (
        "SELECT count(*) FROM jobs j JOIN unnest($1::text[], $2::float8[]) AS m(type, lease) ON m.type = j.type "
        "WHERE j.status = 'running' AND j.locked_at < now() - make_interval(secs => m.lease)", ("types", "leases")),
    "no run left open": (
        "SELECT count(*) FROM runs WHERE finished_at IS NULL", ()),
    "every batch reconciled": (
        "SELECT count(*) FROM batches WHERE status IN ('pending', 'running')", ()),
    # what claims left for a held lane row, and the settled counts parked, go in at the last run's end
    "nothing left in the lane journal or the settled backlog": (
        "SELECT (SELECT count(*) FROM job_lane_journal) + (SELECT count(*) FROM settled_backlog)", ()),
    "lane counters equal a recount (pending) and the hourly buckets (served)": (
        "SELECT count(*) FROM job_lanes l "
        "WHERE l.pending <> (SELECT count(*) FROM jobs j WHERE j.type = l.type AND j.lane = l.lane "
        "                    AND j.status = 'pending') "
        "   OR l.served <> (SELECT coalesce(sum(h.served), 0) FROM job_lane_served_hours h "
        "                   WHERE h.type = l.type AND h.lane = l.lane)", ()),
    "every room's events numbered up to its head, without a hole": (
        "SELECT count(*) FROM (SELECT r.room FROM event_rooms r LEFT JOIN events e ON e.room = r.room "
        "GROUP BY r.room, r.head_seq "
        "HAVING coalesce(max(e.seq), 0) <> r.head_seq "
        "    OR count(e.seq) <> coalesce(max(e.seq) - min(e.seq) + 1, 0)) x", ()),
    "credit ledger balanced (charges - refunds = drafts kept), per campaign": (
        "SELECT count(*) FROM (SELECT c.id, "
        "  (SELECT count(*) FROM credit_ledger l WHERE l.campaign_id = c.id AND l.kind = 'charge') "
        "- (SELECT count(*) FROM credit_ledger l WHERE l.campaign_id = c.id AND l.kind = 'refund') AS net, "
        "  (SELECT count(*) FROM drafts d WHERE d.campaign_id = c.id) AS drafts FROM campaigns c) x "
        "WHERE net <> drafts", ()),
    "shared quota never negative nor above its daily units": (
        "SELECT count(*) FROM quota_ledger WHERE spent < 0 OR spent > units OR units > $1", ("daily_units",)),
    "an audit row for every API change": (
        "SELECT count(*) FROM unnest($1::text[], $2::text[]) AS c(id, op) WHERE NOT EXISTS ("
        "SELECT 1 FROM audit_log a WHERE a.table_name = 'jobs' AND a.row_id = c.id AND a.op = c.op "
        "AND a.actor_kind IN ('user', 'admin'))", ("changed_ids", "changed_ops")),
}
FIGURES = """
SELECT (SELECT count(*) FROM jobs) AS jobs,
       (SELECT count(DISTINCT lane) FROM jobs) AS lanes,
       (SELECT count(*) FROM jobs WHERE status = 'done') AS done,
       (SELECT count(*) FROM jobs WHERE status = 'cancelled') AS cancelled,
       (SELECT count(*) FROM jobs WHERE status = 'failed') AS failed,
       (SELECT count(*) FROM runs) AS runs,
       (SELECT count(*) FROM runs WHERE stop_reason = 'error') AS runs_error,
       (SELECT count(*) FROM drafts) AS drafts,
       (SELECT count(*) FROM pages) AS pages
"""
# The failed jobs, by type and last error: the figures say how many, this says why.
FAILED_WHY = """
SELECT type, left(last_error, 120) AS last_error, count(*) AS jobs, max(attempts) AS attempts
FROM jobs WHERE status = 'failed'
GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 10
"""


# ---- the site and the LLM stand-in, failing on purpose ----

class Faults:
    """The seeded dice of the site and the LLM: 20% 500, 5% hang, 5% 429 with Retry-After."""

    def __init__(self, seed: int, hang_seconds: float) -> None:
        self.rng = random.Random(seed)
        self.hang_seconds = hang_seconds
        self.counts: Counter = Counter()
        self.on = True

    def roll(self, who: str) -> str:
        if self.on:
            r = self.rng.random()
            kind = "500" if r < 0.20 else "hang" if r < 0.25 else "429" if r < 0.30 else "ok"
        else:
            # On a slow box a short load can end before `who` served a single failure (CI saw
            # it); its first request after the load then fails, so every run meets the fault.
            kind = "ok" if self.failed(who) else "500"
        self.counts[f"{who} {kind}"] += 1
        return kind

    def failed(self, who: str) -> bool:
        return any(self.counts[f"{who} {kind}"] for kind in ("500", "hang", "429"))


def site_and_llm(faults: Faults, pages: int):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
    from starlette.routing import Route

    async def fault(who: str, request: Request):
        await request.body()  # read first: a client that gives up mid-hang is no error of ours
        kind = faults.roll(who)
        if kind == "500":
            return PlainTextResponse("chaos", status_code=500)
        if kind == "429":
            return PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "1"})
        if kind == "hang":
            await asyncio.sleep(faults.hang_seconds)
        return None

    def html(title: str, body: str) -> HTMLResponse:
        return HTMLResponse(f"<!doctype html><html><head><title>{title}</title>"
                            f"<meta name=description content='{title}'></head><body>{body}</body></html>")

    async def robots(request: Request):
        return PlainTextResponse("not here", status_code=404)

    async def page(request: Request):
        failed = await fault("site", request)
        if failed is not None:
            return failed
        site, i = request.path_params["site"], int(request.path_params.get("i", -1))
        if site.startswith("t"):  # a one-page site
            return html(f"Tiny {site}", f"<p>Write to hello@{site}.test</p>")
        links = range(20) if i < 0 else [(i * 7 + k) % pages for k in range(1, 6)]
        a = "".join(f'<a href="/s/{site}/p/{n}">page {n}</a> ' for n in links)
        return html(f"Brand {site} {i}", f"<p>{a}</p><p>person{i % 40}@brand{site}.test</p>")

    async def completions(request: Request):
        failed = await fault("llm", request)
        if failed is not None:
            return failed
        body = await request.json()
        return JSONResponse({"id": "chaos", "object": "chat.completion", "model": body.get("model", "m"),
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "Hello, from the model."}}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    return Starlette(routes=[
        Route("/robots.txt", robots), Route("/s/{site}/", page), Route("/s/{site}/p/{i:int}", page),
        Route("/v1/chat/completions", completions, methods=["POST"]),
    ])


class ServedInThread:
    def __init__(self, app) -> None:
        import uvicorn
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the run ----

@dataclass
class Invocation:
    pid: int
    started: float
    ended: float | None = None
    rc: int | None = None
    killed: bool = False
    run_id: str | None = None
    stop_reason: str | None = None
    error_line: str | None = None


class Chaos:
    def __init__(self, scale: Scale, seed: int, folder: Path, log=print) -> None:
        self.scale, self.seed, self.folder, self.log = scale, seed, folder, log
        self.rng = random.Random(seed)
        self.t0 = self.started = 0.0
        self.stopping = False
        self.invocations: list[Invocation] = []
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.faults: Counter = Counter()
        self.down: list[list[float]] = []       # [start, end] of each database restart
        self.recovery: list[dict] = []
        self.samples: list[tuple[float, int, int]] = []  # (t, done, finished)
        self.responses: list[tuple[float, str, int]] = []
        self.changes: list[tuple[str, str]] = []          # (job id, audit op) the API made
        self.retried: list[str] = []                      # job ids the API retried (attempts start over)
        self.idempotency_mismatch = 0
        self.errors_5xx: list[str] = []
        self.quota_wrong_seen = 0
        self.site_faults = Faults(seed + 1, hang_seconds=2.0)
        self.api_log = folder / "api.log"
        self.worker_died: str | None = None  # the worker's last log lines, if it ended on its own

    def now(self) -> float:
        return time.monotonic() - self.t0

    # -- processes --

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "PIPELINE_"))}
        env.update(
            DATABASE_URL=self.dsn, PIPELINE_STAGES="bench.chaos:STAGES", LOG_LEVEL="ERROR",
            FETCH_ALLOW_PRIVATE=f"127.0.0.1:{self.site.port}", FETCH_TIMEOUT_SECONDS="1",
            LLM_BASE_URL=f"http://127.0.0.1:{self.site.port}/v1", LLM_MODEL="chaos", LLM_TIMEOUT_SECONDS="1",
            QUOTA_DAILY_UNITS=str(self.daily_units), QUOTA_RESERVE_UNITS="0", DB_POOL_SIZE="4",
            WORKER_POLL_SECONDS="1", WORKER_GRACE_SECONDS="10", PYTHONPATH=str(ROOT),
            CRON_SECRET="chaos-cron-secret-0123456789abcdefgh")  # 32+: shorter is refused
        env.update(extra)
        return env

    async def cli(self, *args: str, timeout: float = 120, **env) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", *args, cwd=ROOT, env=self.env(**env),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        return proc.returncode, out.decode(), err.decode()

    async def invoke(self) -> None:
        """One scheduled `run-once`, recorded with how it ended."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "run-once", "--budget", str(self.scale.budget), cwd=ROOT,
            env=self.env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        inv = Invocation(proc.pid, self.now())
        self.invocations.append(inv)
        self.procs[proc.pid] = proc
        out, err = await proc.communicate()
        inv.ended, inv.rc = self.now(), proc.returncode
        self.procs.pop(proc.pid, None)
        try:
            run = json.loads(out.decode())
            inv.run_id, inv.stop_reason = run.get("id"), run.get("stopReason")
        except ValueError:
            lines = err.decode().strip().splitlines()
            inv.error_line = lines[-1][:300] if lines else None

    async def schedule(self) -> None:
        tasks = []
        while not self.stopping:
            if len(self.procs) < self.scale.invocations:
                tasks.append(asyncio.create_task(self.invoke()))
            await asyncio.sleep(self.scale.start_every)
        await asyncio.gather(*tasks)

    async def killer(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.scale.kill_every * (0.5 + self.rng.random()))
            # a round waits for a victim rather than passing: runs that drained what they
            # found end early, and a short run could otherwise pass every round (no kill)
            alive: list[Invocation] = []
            while not self.stopping and not alive:
                alive = [i for i in self.invocations if i.rc is None and not i.killed and self.now() - i.started > 1.5]
                if not alive:
                    await asyncio.sleep(0.1)
            if self.stopping:
                break
            victim = self.rng.choice(sorted(alive, key=lambda i: i.pid))
            try:
                os.kill(victim.pid, signal.SIGKILL)
                victim.killed = True
                self.faults["kill -9 of a run-once"] += 1
            except ProcessLookupError:
                pass

    # -- the database, Redis --

    def pg_ctl(self, *args: str) -> None:
        from app.devdb import SYSTEM_USER, _bin_dir
        subprocess.run([str(_bin_dir() / "pg_ctl"), "-D", str(self.folder / "pg" / "pgdata"), *args],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       **({"user": SYSTEM_USER} if os.geteuid() == 0 else {}))

    async def restart_postgres(self, mode: str) -> None:
        window = [self.now(), None]
        self.down.append(window)
        done_before = self.samples[-1][1] if self.samples else 0
        # -l: the new postmaster must not inherit our pipe (pg_ctl would wait on it for good)
        await asyncio.to_thread(self.pg_ctl, "restart", "-m", mode, "-w", "-t", "60", "-l", str(self.pg.log_path))
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=2)
                await conn.close()
                break
            except DATABASE_DOWN:
                await asyncio.sleep(0.05)
        window[1] = self.now()
        self.faults[f"PostgreSQL restart ({mode})"] += 1
        resumed = None
        while resumed is None and not self.stopping:
            await asyncio.sleep(0.1)
            for t, done, _ in reversed(self.samples):
                if t > window[1] and done > done_before:
                    resumed = t
        self.recovery.append({"mode": mode, "database_back_s": round(window[1] - window[0], 2),
                              "jobs_finishing_again_s": round(resumed - window[0], 2) if resumed else None})

    async def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.redis_port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.02)

    async def timeline(self) -> None:
        s = self.scale
        events = [(s.redis[0], "redis kill"), (s.redis[1], "redis revive")]
        events += [(at, f"pg {mode}") for at, mode in s.restarts]
        for at, what in sorted(events):
            await asyncio.sleep(max(0.0, at * s.seconds - self.now()))
            if what == "redis kill":
                self.redis.kill()
                self.redis.wait()
                self.faults["Redis killed"] += 1
            elif what == "redis revive":
                await self.start_redis()
                self.faults["Redis revived"] += 1
            else:
                await self.restart_postgres(what.split()[1])

    async def monitor(self) -> None:
        while not self.stopping:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=1)
                try:
                    done, finished = await conn.fetchrow(COUNT_FINISHED)
                    self.samples.append((self.now(), done, finished))
                    self.quota_wrong_seen += await conn.fetchval(QUOTA_WRONG, self.daily_units)
                finally:
                    await conn.close()
            except DATABASE_DOWN:
                pass
            await asyncio.sleep(0.25)

    async def plain_inserts(self, lanes: list[uuid.UUID]) -> None:
        """No-op jobs written by plain INSERTs spread over the load phase, as any client may."""
        rounds = max(1, int(self.scale.seconds / 0.5))
        per_round = self.scale.plain_jobs // rounds
        for _ in range(rounds):
            if self.stopping:
                return
            types = [self.rng.choice(NOOP_TYPES) for _ in range(per_round)]
            picks = [self.rng.choice(lanes) for _ in range(per_round)]
            try:
                conn = await asyncpg.connect(self.dsn, timeout=2)
                try:
                    await conn.execute(INSERT_PLAIN[self.lane_column], types, picks)
                finally:
                    await conn.close()
            except DATABASE_DOWN:
                pass  # the database is restarting: this round is lost, as a client's would be
            await asyncio.sleep(0.5)

    # -- the API, two tenants --

    async def api_call(self, client: httpx.AsyncClient, method: str, path: str, **kw) -> httpx.Response | None:
        try:
            response = await client.request(method, path, **kw)
        except httpx.HTTPError:
            self.responses.append((self.now(), path, 0))
            return None
        route = f"{method} {re.sub(r'[0-9a-f-]{36}', '{id}', path)}"
        self.responses.append((self.now(), route, response.status_code))
        if response.status_code >= 500:
            self.errors_5xx.append(f"{self.now():.1f} s {route} {response.status_code} {response.text[:200]}")
        return response

    async def tenant(self, key: str, lanes: list[uuid.UUID], rng: random.Random) -> None:
        async with httpx.AsyncClient(base_url=self.api_url, timeout=15,
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            while not self.stopping:
                op = rng.choices(["enqueue", "idempotent", "batch", "retry", "cancel"], [45, 15, 10, 12, 18])[0]
                lane = str(rng.choice(lanes))
                body = {"type": rng.choice(NOOP_TYPES), "payload": {}, self.lane_field: lane}
                if op == "enqueue":
                    if rng.random() < 0.3:
                        body["dedupe_key"] = f"k{rng.randrange(20)}"
                    r = await self.api_call(client, "POST", "/jobs", json=body)
                    if r is not None and r.status_code == 201:
                        self.changes.append((r.json()["job"]["id"], "INSERT"))
                elif op in ("idempotent", "batch"):
                    path, payload = ("/jobs", body) if op == "idempotent" else (
                        f"/campaigns/{lane}/batches", {"jobs": [{"type": "chaos_noop", "payload": {}}]})
                    headers = {"Idempotency-Key": str(uuid.UUID(int=rng.getrandbits(128)))}
                    first = await self.api_call(client, "POST", path, json=payload, headers=headers)
                    again = await self.api_call(client, "POST", path, json=payload, headers=headers)
                    if first is not None and first.status_code in (200, 201):
                        made = first.json()
                        ids = [made["job"]["id"]] if op == "idempotent" else list(made.get("created", {}).values())
                        if first.status_code == 201:
                            self.changes += [(i, "INSERT") for i in ids]
                        if again is not None and again.status_code < 500 and again.json() != made:
                            self.idempotency_mismatch += 1
                else:
                    status = rng.choice(["failed", "cancelled"]) if op == "retry" else "pending"
                    r = await self.api_call(client, "GET", f"/jobs?status={status}&limit=5")
                    if r is not None and r.status_code == 200 and r.json()["data"]:
                        job = rng.choice(r.json()["data"])
                        done = await self.api_call(client, "POST", f"/jobs/{job['id']}/{op}")
                        if done is not None and done.status_code == 200:
                            self.changes.append((job["id"], "UPDATE"))
                            if op == "retry":
                                self.retried.append(job["id"])
                await asyncio.sleep(rng.uniform(0.01, 0.06))

    # -- setup, load, drain, check --

    async def setup(self) -> None:
        from app.devdb import LocalPostgres
        # Durable: the run crashes PostgreSQL (an immediate stop), and a commit the server
        # acknowledged must survive that, as in production. A throwaway cluster's
        # synchronous_commit = off loses the last acknowledged commits in a crash, which
        # read as an API change without its audit row or a cancel that did not happen.
        self.pg = LocalPostgres(self.folder / "pg", fast=False)
        port = await asyncio.to_thread(self.pg.start)
        admin = await asyncpg.connect(self.pg.dsn(port))
        await admin.execute("CREATE DATABASE chaos")
        await admin.close()
        from app.runtime import in_schema
        self.dsn = in_schema(self.pg.dsn(port, "chaos"), "skiplock")  # as the app's own URLs
        self.daily_units = 1_000_000
        self.site = ServedInThread(site_and_llm(self.site_faults, self.scale.pages))
        self.redis_port = free_port()
        await self.start_redis()
        # The schema and the tenants' keys are made in this process (each Python start
        # costs a second on a busy machine); the load uses only the public entry points.
        from app.engine import accounts
        from app.engine.db import connect
        from app.engine.migrate import migrate
        from app.engine.tenancy import Actor, acting
        from app.outreach.store import set_plan
        from app.plugin import load_plugins
        from app.settings import load_settings
        conn = await connect(self.dsn)
        try:
            await migrate(conn, load_plugins(load_settings().pipeline_plugins))
            await conn.execute(CREATE_EFFECTS)
            self.lane_column = await conn.fetchval(LANE_COLUMN)
        finally:
            await conn.close()
        self.log(f"chaos: database ready at {time.monotonic() - self.started:.1f} s")
        api_port = free_port()
        self.api_url = f"http://127.0.0.1:{api_port}"
        self.api = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "uvicorn", "--factory", "app.api.main:create_app", "--host", "127.0.0.1",
            "--port", str(api_port), "--log-level", "error", cwd=ROOT,
            env=self.env(REDIS_URL=f"redis://127.0.0.1:{self.redis_port}/0", RATE_LIMIT_PER_MINUTE="0",
                         DB_POOL_SIZE="8"),
            stdout=asyncio.subprocess.DEVNULL, stderr=self.api_log.open("wb"))
        keys = []
        admin = await asyncpg.create_pool(self.dsn, min_size=1, max_size=1)
        try:
            for email in ("ann@chaos.test", "bob@chaos.test"):
                async with acting(admin, Actor("system", "chaos")) as conn:
                    await set_plan(conn, await accounts.add_user(conn, email), "pro")
                    keys.append((await accounts.create_key(conn, email)).key)
        finally:
            await admin.close()
        async with httpx.AsyncClient(base_url=self.api_url, timeout=10) as client:
            for _ in range(1200):
                try:
                    if (await client.get("/health/ready")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if self.api.returncode is not None:
                    raise RuntimeError(f"the API exited with {self.api.returncode} before it was ready")
                await asyncio.sleep(0.1)
            self.log(f"chaos: API ready at {time.monotonic() - self.started:.1f} s")
            spec = (await client.get("/openapi.json")).json()
            self.lane_field = "lane" if "lane" in json.dumps(spec["components"]["schemas"].get("JobIn", {})) \
                else "campaign_id"
            self.tenants = []
            for n, key in enumerate(keys):  # each tenant makes its half of the lanes
                client.headers["Authorization"] = f"Bearer {key}"
                lanes = []
                for i in range(self.scale.lanes // 2):
                    full = i < self.scale.full_sites // 2
                    site = f"{n}{i}" if full else f"t{n}{i}"
                    r = await client.post("/campaigns", json={"url": f"http://127.0.0.1:{self.site.port}/s/{site}/"})
                    if r.status_code != 201:
                        raise RuntimeError(f"POST /campaigns: {r.status_code} {r.text[:300]}")
                    lanes.append(uuid.UUID(r.json()["id"]))
                self.tenants.append((key, lanes))

    async def drain(self, rounds: int) -> int:
        """Fast-forward the clock and run-once until no job is open (or `rounds` are spent)."""
        self.site_faults.on = False  # the dice stop with the load; what they left is drained
        for _ in range(rounds):
            conn = await asyncpg.connect(self.dsn)
            try:
                for statement in FAST_FORWARD:
                    await conn.execute(statement)
                open_jobs = await conn.fetchval(OPEN_JOBS)
            finally:
                await conn.close()
            self.log(f"chaos: {open_jobs} jobs open at {self.now():.1f} s")
            if open_jobs == 0:
                return 0
            ran = await asyncio.gather(*(self.cli("run-once", "--budget", "20") for _ in range(2)))
            self.log("chaos: drain runs: " + "; ".join(summary(out, err) for _, out, err in ran))
        return open_jobs

    async def check(self) -> dict:
        from app.plugin import load_plugins
        from app.settings import load_settings
        stages = [*STAGES]
        for plugin in load_plugins(load_settings().pipeline_plugins):
            stages += list(plugin.stages)
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(AGE_OPEN_RUNS)
        finally:
            await conn.close()
        await self.cli("run-once", "--budget", "5")  # closes the abandoned rows, reconciles batches
        conn = await asyncpg.connect(self.dsn)
        try:
            args = {"types": [s.type for s in stages], "max_attempts": [s.max_attempts for s in stages],
                    "leases": [float(s.lease) for s in stages], "daily_units": self.daily_units,
                    "changed_ids": [c[0] for c in self.changes], "changed_ops": [c[1] for c in self.changes],
                    "retried_ids": self.retried}
            found = {}
            for name, (sql, reads) in INVARIANTS.items():
                found[name] = await conn.fetchval(sql, *(args[a] for a in reads))
            figures = dict(await conn.fetchrow(FIGURES))
            figures["failed_why"] = [dict(row) for row in await conn.fetch(FAILED_WHY)]
        finally:
            await conn.close()
        found["shared quota never negative nor above its daily units"] += self.quota_wrong_seen
        found["Idempotency-Key answered the same twice"] = self.idempotency_mismatch
        found["no 5xx from the API but 503s while the database was down"] = sum(
            1 for t, _, code in self.responses if code >= 500 and not (code == 503 and self.was_down(t)))
        found["every invocation not killed wrote its own runs row"] = sum(
            1 for i in self.invocations if not i.killed and i.run_id is None)
        return {"invariants": found, "figures": figures}

    def was_down(self, t: float) -> bool:
        return any(start - 0.5 <= t <= (end or 1e9) + 3.0 for start, end in self.down)

    async def run(self) -> dict:
        started = self.started = time.monotonic()
        await self.setup()
        self.log(f"chaos: set up in {time.monotonic() - started:.1f} s; seed {self.seed}, "
                 f"{self.scale.lanes} lanes, load for {self.scale.seconds:.0f} s")
        self.t0 = time.monotonic()
        with (self.folder / "worker.log").open("wb") as worker_log:  # the child keeps its own copy
            worker = self.worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app", "worker", cwd=ROOT,
                env=self.env(PIPELINE_BUDGET_SECONDS=str(self.scale.budget)),
                stdout=asyncio.subprocess.DEVNULL, stderr=worker_log)
        every_lane = [lane for _, lanes in self.tenants for lane in lanes]
        background = [asyncio.create_task(c) for c in (
            self.schedule(), self.killer(), self.monitor(), self.timeline(), self.plain_inserts(every_lane),
            *(self.tenant(key, lanes, random.Random(self.seed * 10 + n))
              for n, (key, lanes) in enumerate(self.tenants)))]
        await asyncio.sleep(self.scale.seconds)
        # A slow box may not reach the site before the load's time is up, and then no fault of the
        # site would have been tried: the load goes on until the site has failed once (or twice its time).
        deadline = time.monotonic() + 2 * self.scale.seconds
        while not self.site_faults.failed("site") and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
        self.stopping = True
        load_seconds = self.now()
        finished_in_load = self.samples[-1][2] if self.samples else 0
        await asyncio.gather(*background)
        self.log(f"chaos: the load's tasks ended at {self.now():.1f} s")
        ended_on_its_own = worker.returncode is not None
        if not ended_on_its_own:
            try:
                worker.send_signal(signal.SIGTERM)
            except ProcessLookupError:  # it ended between the look and the signal
                ended_on_its_own = True
        if ended_on_its_own:  # a finding: the worker is meant to outlive every fault here
            self.faults["the worker died on its own"] += 1
            self.worker_died = (self.folder / "worker.log").read_text(errors="replace")[-2000:]
        await worker.wait()
        self.api.send_signal(signal.SIGTERM)
        await self.api.wait()
        self.log(f"chaos: load stopped at {self.now():.1f} s; draining")
        drain_started = self.now()
        left = await self.drain(rounds=12)
        self.log(f"chaos: drained at {self.now():.1f} s ({left} open); checking")
        drain_seconds = self.now() - drain_started
        result = await self.check()
        kills = Counter("killed" if i.killed else "exit %s" % i.rc for i in self.invocations)
        result.update({
            "seed": self.seed, "scale": asdict(self.scale), "seconds_total": round(time.monotonic() - started, 1),
            "load_seconds": round(load_seconds, 1), "drain_seconds": round(drain_seconds, 1),
            "open_after_drain": left,
            "jobs_per_second_under_chaos": round(finished_in_load / load_seconds, 1),
            "jobs_finished_under_chaos": finished_in_load,
            "faults": {**self.faults, **self.site_faults.counts},
            "recovery": self.recovery, "invocations": dict(kills),
            "invocation_errors": sorted({i.error_line for i in self.invocations if i.error_line and not i.killed}),
            "api": dict(Counter(f"{code}" for _, _, code in self.responses)),
            "api_changes": len(self.changes), "api_5xx": self.errors_5xx[:20], "api_log_errors": self.api_errors(),
            "database_down": [[round(a, 1), round(b or 0, 1)] for a, b in self.down],
            "worker_died": self.worker_died,
        })
        return result

    def api_errors(self) -> list[str]:
        """The exception lines of the API's log (LOG_LEVEL=ERROR: what it answered 500 for)."""
        try:
            text = self.api_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return sorted({line.strip()[:300] for line in text.splitlines()
                       if re.match(r"^[\w.]+(Error|Exception)\b", line.strip())})[:20]

    async def close(self) -> None:
        """Stop everything this run started, inside the event loop (a subprocess left to
        the garbage collector after the loop closed only says "Event loop is closed")."""
        procs = [*self.procs.values(), *(p for p in (getattr(self, "api", None), getattr(self, "worker", None))
                                         if p is not None)]
        for proc in procs:
            if proc.returncode is None:
                with_suppress(proc.kill)
        for proc in procs:
            await proc.wait()
        if getattr(self, "redis", None) is not None:
            with_suppress(self.redis.kill)
            self.redis.wait()
        if getattr(self, "site", None) is not None:
            self.site.stop()
        if getattr(self, "pg", None) is not None:
            await asyncio.to_thread(self.pg.stop)

    async def run_and_close(self) -> dict:
        try:
            return await self.run()
        finally:
            await self.close()


def summary(out: str, err: str) -> str:
    """One line for a run-once: its stop reason, jobs done and seconds, or its last error."""
    try:
        run = json.loads(out)
    except ValueError:
        lines = err.strip().splitlines()
        return lines[-1][:200] if lines else "no output"
    return f"{run.get('stopReason')}, {run.get('jobsDone')} done in {run.get('durationSeconds')} s"


def with_suppress(fn) -> None:
    try:
        fn()
    except (ProcessLookupError, OSError):
        pass


def report(result: dict) -> str:
    lines = [f"jobs: {result['figures']['jobs']:,} over {result['figures']['lanes']} lanes; "
             f"{result['jobs_finished_under_chaos']:,} finished during {result['load_seconds']} s of chaos "
             f"= {result['jobs_per_second_under_chaos']} jobs/s; drain {result['drain_seconds']} s",
             "", "| fault | injected |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in sorted(result["faults"].items())]
    lines += ["", "| restart | database back | jobs finishing again |", "|---|---|---|"]
    lines += [f"| {r['mode']} | {r['database_back_s']} s | {r['jobs_finishing_again_s']} s |" for r in result["recovery"]]
    lines += ["", "| invariant | held | violations |", "|---|---|---|"]
    lines += [f"| {k} | {'held' if v == 0 else 'VIOLATED'} | {v} |" for k, v in result["invariants"].items()]
    lines += ["", f"invocations: {result['invocations']}; API answers: {result['api']}"]
    if result["api_5xx"]:
        lines += ["API 5xx: " + " | ".join(result["api_5xx"])[:1500]]
    if result["api_log_errors"]:
        lines += ["the API's log: " + " | ".join(result["api_log_errors"])[:1500]]
    if result["invocation_errors"]:
        lines += ["invocations that failed (not killed): " + " | ".join(result["invocation_errors"])[:1500]]
    if result["worker_died"]:
        lines += ["the worker died on its own; its log ends: " + result["worker_died"][-1500:]]
    lines += [f"failed: {f['jobs']} {f['type']} job(s) after {f['attempts']} attempt(s): {f['last_error']}"
              for f in result["figures"]["failed_why"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--short", action="store_true", help="seconds, not minutes (what make test runs)")
    p.add_argument("--seconds", type=float, help="length of the load phase")
    p.add_argument("--out", type=Path, help="the JSON result (default bench/results/chaos.json; "
                                            "--short: not written)")
    args = p.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("error: redis-server is not installed (make chaos installs it: apt-get install redis-server)",
              file=sys.stderr)
        return 2
    scale = SHORT if args.short else FULL
    if args.seconds:
        scale = Scale(**{**asdict(scale), "seconds": args.seconds})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped from outside: clean up all the same
    folder = Path(tempfile.mkdtemp(prefix="skiplock-chaos-"))
    chaos = Chaos(scale, args.seed, folder, log=lambda line: print(line, file=sys.stderr, flush=True))
    try:
        result = asyncio.run(chaos.run_and_close())
    except Exception as exc:  # the harness itself failed: say why on the last line
        import traceback
        traceback.print_exc()
        print(f"chaos: the harness failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(report(result))
    out = args.out or (None if args.short else RESULTS / "chaos.json")
    if out:
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({"invariants_violated": sum(1 for v in result["invariants"].values() if v)}))
    return 1 if any(result["invariants"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
