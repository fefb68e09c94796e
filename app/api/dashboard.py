"""The dashboard: one server-rendered page (/dashboard), its script and style sheet
(/dashboard/assets/...), and the summary it reads (GET /stats).

No build step and nothing from elsewhere: the page is HTML from app/api/static/, its
script plain JavaScript, its chart inline SVG. The API key is typed into the page and
kept in the tab's sessionStorage; every read goes to the JSON routes with it, so a
tenant sees its own work and an admin everything (row-level security, as everywhere).
The page follows the tenant's account room (an admin: 'system') over the WebSocket, or
polls GET /events where there is none (Lambda), and refetches /stats when events come."""

from __future__ import annotations

import html
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from app.api.deps import pool_of
from app.api.errors import ApiError
from app.api.job_bulk import BULK_MAX
from app.api.jobs import STATUSES
from app.api.params import only_params
from app.engine import events as store
from app.engine import lanes as lanes_engine
from app.engine import queue_stats
from app.engine import runs as run_log
from app.engine import stages as stages_engine
from app.engine.queries import statement
from app.json_values import iso, stage_limits_json
from app.pipeline.maintenance import periodic_schedules
from app.runtime import handled_types, run_json, user_stages

router = APIRouter(tags=["dashboard"])        # tenant routes: GET /stats
page_router = APIRouter(include_in_schema=False)  # the page and its assets: no key needed to load them

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"dashboard.js": "text/javascript", "dashboard-trends.js": "text/javascript",
          "dashboard-batch.js": "text/javascript", "dashboard.css": "text/css"}
# Everything from this origin; the WebSocket too ('self' covers ws: on the same host).
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
LANES_SHOWN = 8
RUNS_SHOWN = 10
CHART_RUNS = 300
FAILED_SHOWN = 10
BATCHES_SHOWN = 8


def _live_mode() -> str:
    """'poll' on Lambda (a Function URL holds no WebSocket), else 'ws'."""
    return "poll" if os.environ.get("AWS_LAMBDA_FUNCTION_NAME") else "ws"


@page_router.get("/dashboard")
async def dashboard_page(request: Request) -> HTMLResponse:
    only_params()(request)
    settings = request.app.state.runtime.settings
    text = (STATIC / "dashboard.html").read_text()
    text = (text.replace("{{live}}", _live_mode())
                .replace("{{replay}}", str(settings.events_replay))
                .replace("{{plugins}}", html.escape(", ".join(p.name for p in request.app.state.runtime.plugins)
                                                    or "none")))
    return HTMLResponse(text, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store",
                                       "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


@page_router.get("/dashboard/assets/{name}")
async def dashboard_asset(name: str, request: Request) -> FileResponse:
    only_params()(request)
    if name not in ASSETS:
        raise ApiError(404, "not_found", f"no dashboard asset {name[:80]!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name],
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


def _queue_json(rows) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    # ready and waiting are counted up to queue_stats.OPEN_COUNT_CAP: readyMore / waitingMore, there are more
    queue = [{"type": r["type"], "ready": r["ready"], "readyMore": r["ready_more"], "waiting": r["waiting"],
              "waitingMore": r["waiting_more"], "running": r["running"],
              "done": r["done"], "failed": r["failed"], "cancelled": r["cancelled"],
              "oldestReadySeconds": r["oldest_ready_seconds"]}
             for r in rows]
    totals = {k: sum(q[k] for q in queue) for k in ("ready", "waiting", "running", "done", "failed", "cancelled")}
    totals |= {k: any(q[k] for q in queue) for k in ("readyMore", "waitingMore")}
    ages = [q["oldestReadySeconds"] for q in queue if q["oldestReadySeconds"] is not None]
    totals["oldestReadySeconds"] = max(ages) if ages else None
    return queue, totals


@router.get("/stats", summary="What the dashboard shows, in one answer",
            dependencies=[], responses={200: {"description": "queue, lanes, runs, failed jobs, batches, panels, "
                                                          "the oldest snapshot"}})
async def stats(request: Request) -> JSONResponse:
    """The queue per type and status (done, failed and cancelled: the last day), the oldest ready
    job's age, the busiest lanes, the last runs and a day of per-run counts (admins: runs
    are the operator's), failed, retrying and running jobs, batches with progress, the plug-ins' panels,
    `horizon` (admins; null for a tenant): what holds back VACUUM's horizon, for how long,
    and the queue tables' dead row versions, `unhandled`: the types waiting that no stage
    loaded here handles (they would wait for ever), and
    `room` / `head`: the event room this key follows and its last seq when this was read
    (read first, so any later change arrives as an event), and for the Jobs view:
    `jobStatuses` (GET /jobs's status filter), `bulkLimit` (jobs a bulk action takes) and
    `pageSizeMax` (the largest page a list gives)."""
    only_params()(request)
    runtime = request.app.state.runtime
    actor = request.state.actor
    db = await pool_of(request)
    room = store.SYSTEM_ROOM if actor.is_admin else f"account:{actor.user_id}"
    head = await store.room_head(db, room)
    own_lanes = not actor.is_admin  # a tenant's rows come lane by lane from its own lanes
    queue, totals = _queue_json(await queue_stats.jobs_by_type(db, own_lanes))
    lanes = [{"lane": str(r["lane"]), "pending": r["pending"], "running": r["running"],
              "priority": r["priority"], "paused": r["paused"],
              "owner": str(r["owner_id"]) if r["owner_id"] else None}
             for r in await lanes_engine.busiest_lanes(db, LANES_SHOWN, own_lanes)]
    runs = [run_json(r) for r in await run_log.list_runs(db, stop_reason=None, trigger=None, after=None,
                                                          limit=RUNS_SHOWN)]
    chart = [{"run": str(r["id"]), "startedAt": iso(r["started_at"]), "done": r["jobs_done"],
              "failed": r["jobs_failed"], "retried": r["jobs_retried"], "deferred": r["jobs_deferred"],
              "stopReason": r["stop_reason"]}
             for r in reversed(await db.fetch(*statement("dashboard_runs_chart").bind(limit=CHART_RUNS)))]
    trouble = [{"id": str(r["id"]), "type": r["type"], "status": r["status"], "attempts": r["attempts"],
                "lastError": r["last_error"], "runAfter": iso(r["run_after"]),
                "finishedAt": iso(r["finished_at"]), "lane": str(r["lane"]), "lockedAt": iso(r["locked_at"]),
                "cancelRequestedAt": iso(r["cancel_requested_at"])}
               for r in await db.fetch(*statement("dashboard_trouble").bind(limit=FAILED_SHOWN,
                                                                            own_lanes=own_lanes))]
    batches = [{"id": str(r["id"]), "status": r["status"], "createdAt": iso(r["created_at"]),
                "finishedAt": iso(r["finished_at"]), "jobs": r["jobs"], "done": r["done"], "failed": r["failed"],
                "total": r["total"], "progress": r["progress"]}
               for r in await db.fetch(*statement("dashboard_batches").bind(limit=BATCHES_SHOWN,
                                                                            own_lanes=own_lanes))]
    panels: list[dict[str, Any]] = []
    for plugin in runtime.plugins:
        if plugin.dashboard is not None:
            panels.extend(await plugin.dashboard(db, actor, runtime.settings))
    # the database's state is the operator's; read as skiplock_admin, which sees another
    # role's session's start and query only when granted pg_read_all_stats
    horizon = await queue_stats.horizon(db) if actor.is_admin else None
    paused = await stages_engine.paused_stages(db)
    schedules = await periodic_schedules(db, runtime.stages)
    stages = [{"type": s.type, "paused": s.type in paused, "pausedAt": iso(paused.get(s.type)),
               "schedule": schedules.get(s.type), **stage_limits_json(s)} for s in user_stages(runtime.stages)]
    unhandled = queue_stats.unhandled([{"type": q["type"], "pending": q["ready"] + q["waiting"]} for q in queue],
                                      handled_types(runtime.stages))
    return JSONResponse({
        "at": datetime.now(timezone.utc).isoformat(), "admin": actor.is_admin,
        "account": str(actor.user_id) if actor.user_id else None, "email": actor.email,
        "room": room, "head": head, "replay": runtime.settings.events_replay,
        "queue": queue, "totals": totals, "lanes": lanes, "runs": runs, "chart": chart,
        "trouble": trouble, "batches": batches, "panels": panels, "horizon": horizon, "unhandled": unhandled,
        "stages": stages, "jobStatuses": list(STATUSES), "bulkLimit": BULK_MAX,
        "pageSizeMax": runtime.settings.page_size_max,
    }, headers={"Cache-Control": "no-store"})
