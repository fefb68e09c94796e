"""GET /metrics: the queue in the Prometheus text format, read from PostgreSQL at scrape
time (so it is right across processes and on Lambda, where no process lives long
enough to keep counters). Every number comes from the job_lanes counters, the partial
indexes or the runs' running totals (app.engine.queue_stats), never from counting jobs
or runs, so a scrape costs the same at any size.

Behind `Authorization: Bearer <METRICS_TOKEN>` or an admin API key: the numbers span
every tenant. prometheus-client is imported on the first scrape, not at start-up (the
Lambda cold start does not pay for it)."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.api.bearer import bearer_token, challenge
from app.api.deps import owner_pool_of
from app.api.errors import ApiError
from app.api.params import only_params
from app.engine import queue_stats
from app.engine import stages as stages_engine
from app.engine.accounts import authenticate
from app.runtime import database_errors, handled_types

router = APIRouter(tags=["operations"])

PREFIX = "skiplock"


async def require_metrics_reader(request: Request) -> None:
    """Bearer METRICS_TOKEN (constant-time compare), else an admin API key."""
    token = bearer_token(request, "metrics", "<METRICS_TOKEN or an admin API key>")
    configured = request.app.state.runtime.settings.metrics_token
    expected = configured.get_secret_value().strip() if configured else ""
    if expected and hmac.compare_digest(token.encode(), expected.encode()):
        return
    actor = await authenticate(await owner_pool_of(request), token)
    if actor is None:
        raise ApiError(401, "unauthorized", "wrong METRICS_TOKEN, or an unknown or revoked API key",
                       headers=challenge("metrics"))
    if not actor.is_admin:
        raise ApiError(403, "forbidden", "metrics span every tenant: they need METRICS_TOKEN or an admin API key")


async def read_metrics(pool, plugins, settings, handled: list[str] | None = None) -> list:
    """Every metric family, read in one read-only snapshot. `handled`: the job types this
    process runs (runtime.handled_types); None leaves the unhandled gauge out."""
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)

    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        depth = await queue_stats.queue_depth(conn)
        runs = await queue_stats.run_totals(conn)
        open_runs = await queue_stats.open_runs(conn)
        endings = await queue_stats.endings_by_type(conn)
        tick = await queue_stats.last_maintenance_tick(conn)
        holders = await queue_stats.horizon_holders(conn)
        tables = await queue_stats.queue_tables(conn)
        stopped = await stages_engine.paused_stages(conn)
        plugin_gauges = [(p.name, g) for p in plugins if p.metrics is not None
                         for g in await p.metrics(conn, settings)]

    jobs = GaugeMetricFamily(f"{PREFIX}_queue_jobs", "jobs waiting (pending) or being worked (running), by type",
                             labels=["type", "status"])
    paused = GaugeMetricFamily(f"{PREFIX}_queue_paused_jobs", "of the pending jobs, those in paused lanes",
                               labels=["type"])
    oldest = GaugeMetricFamily(f"{PREFIX}_queue_oldest_ready_seconds",
                               "how long the oldest ready job of the type has been due (0: none is)",
                               labels=["type"])
    for row in depth:
        jobs.add_metric([row["type"], "pending"], row["pending"])
        jobs.add_metric([row["type"], "running"], row["running"])
        paused.add_metric([row["type"]], row["paused"])
        oldest.add_metric([row["type"]], max(0.0, row["oldest_ready_seconds"] or 0.0))

    run_count = CounterMetricFamily(f"{PREFIX}_runs", "finished runs, by trigger and stop reason",
                                    labels=["trigger", "stop_reason"])
    duration = HistogramMetricFamily(f"{PREFIX}_run_duration_seconds", "how long finished runs took",
                                     labels=["trigger", "stop_reason"])
    bounds = [f"{b:g}" for b in queue_stats.DURATION_BOUNDS]
    for t in runs:
        labels = [t.trigger, t.stop_reason]
        run_count.add_metric(labels, t.runs)
        duration.add_metric(labels, [*zip(bounds, t.buckets), ("+Inf", t.runs)], sum_value=t.seconds)
    running = GaugeMetricFamily(f"{PREFIX}_runs_in_progress", "runs started and not finished, by trigger",
                                labels=["trigger"])
    for trigger, n in open_runs.items():
        running.add_metric([trigger], n)

    ended = CounterMetricFamily(f"{PREFIX}_jobs", "job attempts ended by finished runs, by type and outcome "
                                "(done; failed: the job ended failed; retried: a failed attempt tried again; "
                                "deferred), and jobs that ended cancelled, in a run or not (cancelled)",
                                labels=["type", "outcome"])
    for row in endings:
        for outcome in ("done", "failed", "retried", "deferred", "cancelled"):
            ended.add_metric([row["type"], outcome], row[outcome] or 0)

    known = [h["seconds"] for h in holders if h["seconds"] is not None]
    snapshot_age = GaugeMetricFamily(
        f"{PREFIX}_oldest_snapshot_age_seconds",
        "how long the oldest of what holds back VACUUM's horizon (a transaction, a prepared transaction, "
        "an inactive slot) has held on (0: none; another role's session needs pg_read_all_stats)",
        value=max(known, default=0.0))
    snapshot_xids = GaugeMetricFamily(
        f"{PREFIX}_oldest_snapshot_xid_age",
        "how many transaction ids VACUUM's horizon is behind, held by the oldest snapshot, transaction, "
        "prepared transaction or replication slot (0: none)", value=holders[0]["xid_age"] if holders else 0)
    dead = GaugeMetricFamily(f"{PREFIX}_dead_tuples", "dead row versions of the queue's table, not yet vacuumed "
                             "(the server's estimate)", labels=["table"])
    live = GaugeMetricFamily(f"{PREFIX}_live_tuples", "live rows of the queue's table (the server's estimate)",
                             labels=["table"])
    for t in tables:
        dead.add_metric([t["table_name"]], t["dead"])
        live.add_metric([t["table_name"]], t["live"])

    paused_stages = GaugeMetricFamily(f"{PREFIX}_stage_paused", "1 while an operator has paused the stage "
                                      "for every lane (PATCH /stages/{type})", labels=["type"])
    for type_ in stopped:
        paused_stages.add_metric([type_], 1)

    families = [jobs, paused, oldest, run_count, duration, running, ended, snapshot_age, snapshot_xids, dead, live,
                paused_stages]
    if handled is not None:
        stray = GaugeMetricFamily(f"{PREFIX}_unhandled_jobs", "pending jobs of a type no stage loaded here "
                                  "handles (a typo in an INSERT, a plug-in left out): they wait for ever",
                                  labels=["type"])
        for row in queue_stats.unhandled(depth, handled):
            stray.add_metric([row["type"]], row["pending"])
        families.append(stray)
    if tick is not None:
        families.append(GaugeMetricFamily(
            f"{PREFIX}_maintenance_tick_age_seconds",
            "seconds since some deployment last enqueued the recurring maintenance (RUN_SCHEDULER)", value=tick))
    for plugin, g in plugin_gauges:
        family = GaugeMetricFamily(f"{PREFIX}_{plugin}_{g.name}", g.help, labels=[k for k, _ in g.labels])
        family.add_metric([v for _, v in g.labels], g.value)
        families.append(family)
    return families


class _Families:
    """A Collector over families already read (the registry's collect() is synchronous)."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)


@router.get("/metrics", dependencies=[Depends(only_params()), Depends(require_metrics_reader)],
            summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "the Prometheus text format"},
                       401: {"description": "no or a wrong token"},
                       403: {"description": "an API key that is not an admin's"}})
async def metrics(request: Request) -> Response:
    """Queue depth and oldest ready job by type, runs by trigger and stop reason, run
    durations, job endings by type (cancels too), what holds back VACUUM's horizon and for how long, the
    queue tables' dead and live row versions, and the plug-ins' gauges; read at scrape time."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    runtime = request.app.state.runtime
    with database_errors():
        families = await read_metrics(await owner_pool_of(request), runtime.plugins, runtime.settings,
                                      handled_types(runtime.stages))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
