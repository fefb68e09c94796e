"""`skiplock status`: the queue on one screen. Depth per stage (pending, paused, running,
the oldest ready job's wait), what the last day's runs ended per stage, the last runs,
whether the recurring maintenance runs somewhere, each periodic stage's schedule (its
interval or cron expression and zone, when it was last enqueued, the next period), the
plug-ins' gauges (the example's quota left), and, once something has held back VACUUM's
horizon for a minute, who and the queue tables' dead row versions. The same cheap reads
as /metrics."""

from __future__ import annotations

import argparse
from typing import Any

from app.cli.jobs import RUN_COLUMNS, _json_arg, _run_line, acting_as_cli
from app.cli.output import fields, render, span, table
from app.engine import queue_stats
from app.engine import runs as run_log
from app.engine import stages as stages_engine
from app.json_values import stage_limits_json
from app.pipeline.maintenance import periodic_schedules
from app.runtime import handled_types, run_json, user_stages

RECENT_SECONDS = 24 * 3600
LAST_RUNS = 5


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="the queue on one screen: depth, waits, last runs, quota")
    _json_arg(p)
    p.set_defaults(run=status)


async def read_status(db, cli) -> dict[str, Any]:
    depth = {r["type"]: r for r in await queue_stats.queue_depth(db)}
    # done, failed and cancelled: the jobs' own statuses (as the dashboard counts them); retried: the
    # failed attempts the last day's runs tried again
    ended = {r["type"]: r for r in await queue_stats.jobs_by_type(db, own_lanes=False)}
    recent = {r["type"]: r for r in await queue_stats.endings_by_type(db, RECENT_SECONDS)}
    stopped = await stages_engine.paused_stages(db)
    stages = []
    for type_ in dict.fromkeys([*depth, *ended, *recent]):
        d, e, r = depth.get(type_, {}), ended.get(type_, {}), recent.get(type_, {})
        stages.append({"type": type_, "pending": d.get("pending", 0), "paused": d.get("paused", 0),
                       "running": d.get("running", 0), "oldestReadySeconds": d.get("oldest_ready_seconds"),
                       "doneLastDay": e.get("done", 0), "failedLastDay": e.get("failed", 0),
                       "cancelledLastDay": e.get("cancelled", 0),
                       "retriedLastDay": r.get("retried", 0), "stagePaused": type_ in stopped})
    runs = await run_log.list_runs(db, stop_reason=None, trigger=None, after=None, limit=LAST_RUNS)
    tick = await queue_stats.last_maintenance_tick(db)
    schedules = await periodic_schedules(db, cli.stages)
    gauges = [{"plugin": p.name, "name": g.name, "help": g.help, "value": g.value, "labels": dict(g.labels)}
              for p in cli.plugins if p.metrics is not None for g in await p.metrics(db, cli.settings)]
    return {"stages": stages, "lastRuns": [run_json(r) for r in runs],
            "maintenance": {"lastTickSecondsAgo": tick, "scheduledHere": cli.settings.run_scheduler},
            "periodic": [{"type": type_, **schedule} for type_, schedule in schedules.items()],
            "plugins": gauges, "horizon": await queue_stats.horizon(db),
            "limits": [{"type": st.type, **stage_limits_json(st)} for st in user_stages(cli.stages)
                       if st.lease_terms.limited],
            "unhandled": queue_stats.unhandled(list(depth.values()), handled_types(cli.stages))}


def horizon_text(h: dict[str, Any]) -> str:
    """The section naming what holds the horizon, for how long, and the dead row versions
    behind it."""
    holder = h["holders"][0]
    if holder["seconds"] is not None:
        held = span(holder["seconds"])
    elif holder["kind"] == "session":
        held = "unknown (GRANT pg_read_all_stats TO the role that reads this, to see it)"
    else:
        held = "unknown"
    state = f", {holder['state']}" if holder["kind"] == "session" and holder["state"] else ""
    dead = sorted((t for t in h["tables"] if t["dead"]), key=lambda t: -t["dead"])
    facts = [("held by", holder["who"]),  # fields() escapes what other sessions wrote
             ("for", f"{held}, {holder['xidAge']} transaction ids behind{state}")]
    if holder["query"]:
        facts.append(("query", " ".join(holder["query"].split())))
    facts.append(("dead row versions", ", ".join(
        f"{t['table']} {t['dead']} (live {t['live']}, autovacuum "
        + ("never" if t["autovacuumSecondsAgo"] is None else f"{span(t['autovacuumSecondsAgo'])} ago") + ")"
        for t in dead) or "none"))
    return ("oldest snapshot: VACUUM removes no row version it may still see "
            "(docs/operations.md#a-long-transaction-pins-the-horizon)\n" + fields(facts))


def schedule_text(p: dict[str, Any]) -> str:
    """A periodic stage's schedule on one line: what it is, the period last enqueued, the next."""
    what = f"every {span(p['everySeconds'])}" if p["cron"] is None else f"cron {p['cron']} ({p['timezone']})"
    if p["catchUp"]:
        what += f", catching up at most {p['catchUp']} missed"
    last = ("never" if p["lastPeriod"] is None
            else f"{p['lastPeriod']} ({span(p['lastEnqueuedSecondsAgo'])} ago)")
    return f"{what}, last enqueued {last}, next {p['nextPeriod'] or 'never'}"


def limits_text(lim: dict[str, Any]) -> str:
    """A stage's limits across every run on one line: "at most 3 held at once, 5 starts per 2s,
    per payload.account_id"."""
    parts = []
    if lim["globalConcurrency"] is not None:
        parts.append(f"at most {lim['globalConcurrency']} held at once")
    if lim["rate"] is not None:
        parts.append(f"{lim['rate']['starts']} starts per {lim['rate']['perSeconds']:g}s")
    if lim["limitBy"] is not None:
        parts.append(f"per {lim['limitBy']}")
    return ", ".join(parts)


def status_text(s: dict[str, Any]) -> str:
    stages = table([{**r, "wait": span(r["oldestReadySeconds"])} for r in s["stages"]],
                   [("STAGE", "type"), ("PENDING", "pending"), ("PAUSED", "paused"), ("RUNNING", "running"),
                    ("OLDEST READY", "wait"), ("DONE 24H", "doneLastDay"), ("FAILED 24H", "failedLastDay"),
                    ("CANCELLED 24H", "cancelledLastDay"), ("RETRIED 24H", "retriedLastDay")],
                   empty="(no jobs waiting or running, no runs in the last day)")
    m = s["maintenance"]
    tick = "never" if m["lastTickSecondsAgo"] is None else f"{span(m['lastTickSecondsAgo'])} ago"
    facts = [("maintenance", f"last enqueued {tick}; RUN_SCHEDULER {'on' if m['scheduledHere'] else 'off'} here")]
    facts += [(f"periodic {p['type']}", schedule_text(p)) for p in s["periodic"]]
    facts += [(f"limits {lim['type']}", limits_text(lim)) for lim in s["limits"]]
    facts += [(f"{g['plugin']} {g['name']}", g["value"]) for g in s["plugins"]]
    sections = [stages, fields(facts)]
    stopped = [r["type"] for r in s["stages"] if r["stagePaused"]]
    if stopped:
        sections.append("paused stages (nothing of them is claimed; `skiplock stages resume TYPE`): "
                        + ", ".join(stopped))
    if s["unhandled"]:
        sections.append("waiting for a stage that is not loaded here (a typo in an INSERT, or a plug-in left "
                        "out: PIPELINE_STAGES, PIPELINE_PLUGINS):\n"
                        + table(s["unhandled"], [("TYPE", "type"), ("PENDING", "pending")]))
    if s["horizon"]["heldTooLong"]:
        sections.append(horizon_text(s["horizon"]))
    return "\n\n".join([*sections, "last runs:\n" + table([_run_line(r) for r in s["lastRuns"]], RUN_COLUMNS)])


async def status(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        return render(await read_status(db, cli), args.json, status_text)
