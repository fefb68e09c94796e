"""`skiplock lanes …`: the lanes as an operator sees and ranks them, over the engine
functions behind the dashboard's busiest lanes and PATCH /lanes/{id} (app.engine.lanes),
in a transaction audited as `system`/`cli`.

`ls` shows the lanes with the most open work first: what an operator looks for when one
tenant's work crowds the queue, before pausing its lane or lowering its priority. A
plug-in that ranks lanes from its own data (the example, from plans and campaign status)
keeps an operator's pause; a priority set by hand lasts until the plug-in ranks the lane
again."""

from __future__ import annotations

import argparse

from app.cli.jobs import DEFAULT_LIMIT, MAX_LIMIT, _json_arg, _limit, _uuid, acting_as_cli, signed_whole
from app.cli.output import render, table
from app.engine import lanes
from app.json_values import lane_json

LANE_COLUMNS = [("LANE", "lane"), ("PENDING", "pending"), ("RUNNING", "running"), ("PRIORITY", "priority"),
                ("PAUSED", "pausedMark"), ("OWNER", "ownerId")]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lanes", help="the busiest lanes; pause, resume or rank one (as PATCH /lanes/{id})")
    lsub = p.add_subparsers(dest="lanes_command", required=True)
    ls = lsub.add_parser("ls", help="the lanes with the most open work (pending + running), busiest first")
    ls.add_argument("--limit", type=_limit, default=DEFAULT_LIMIT,
                    help=f"how many lanes (1-{MAX_LIMIT}, default {DEFAULT_LIMIT})")
    _json_arg(ls)
    ls.set_defaults(run=lanes_ls)
    for name, paused, help_ in (("pause", True, "claim nothing of this lane until it is resumed"),
                                ("resume", False, "claim this lane's work again (lifts an operator's pause)")):
        cmd = lsub.add_parser(name, help=help_)
        cmd.add_argument("lane", type=_uuid("lane id"))
        _json_arg(cmd)
        cmd.set_defaults(run=lane_rank, priority=None, paused=paused)
    prio = lsub.add_parser("priority", help="set a lane's priority (higher is claimed first)")
    prio.add_argument("lane", type=_uuid("lane id"))
    prio.add_argument("priority", type=signed_whole("priority", -lanes.PRIORITY_LIMIT, lanes.PRIORITY_LIMIT))
    _json_arg(prio)
    prio.set_defaults(run=lane_rank, paused=None)


async def lanes_ls(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        rows = await lanes.busiest_lanes(db, args.limit, False)
    data = [{"lane": str(r["lane"]), "pending": r["pending"], "running": r["running"],
             "priority": r["priority"], "paused": r["paused"],
             "ownerId": str(r["owner_id"]) if r["owner_id"] else None} for r in rows]
    return render({"data": data}, args.json, lambda page: table(
        [{**r, "pausedMark": "paused" if r["paused"] else "", "ownerId": r["ownerId"] or "-"}
         for r in page["data"]],
        LANE_COLUMNS, empty="(no lane has work waiting or running)"))


async def lane_rank(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        row = await lanes.rank_lane(db, args.lane, args.priority, args.paused)
    if row is None:
        raise cli.failure(f"no lane {args.lane}")
    lane = lane_json(row)
    return render(lane, args.json, lambda l: f"lane {l['id']}: priority {l['priority']}"
                  + (", paused" if l["paused"] else ", not paused"))
