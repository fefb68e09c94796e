"""`skiplock stages …`: the stages this deployment runs, and an operator's pause of one for
every lane (as PATCH /stages/{type}), in a transaction audited as `system`/`cli`."""

from __future__ import annotations

import argparse

from app.cli.jobs import _json_arg, acting_as_cli
from app.cli.output import render, table
from app.engine import stages as engine
from app.json_values import stage_json
from app.runtime import user_stages

STAGE_COLUMNS = [("STAGE", "type"), ("BATCH", "batch"), ("CONCURRENCY", "concurrency"),
                 ("MAX ATTEMPTS", "maxAttempts"), ("STATE", "state")]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stages", help="the stages this deployment runs; pause or resume one for every lane")
    ssub = p.add_subparsers(dest="stages_command", required=True)
    ls = ssub.add_parser("ls", help="the stages, earliest first, and which are paused")
    _json_arg(ls)
    ls.set_defaults(run=stages_ls)
    for name, paused, help_ in (("pause", True, "claim nothing of this stage, in any lane, until it is resumed"),
                                ("resume", False, "claim this stage's work again")):
        cmd = ssub.add_parser(name, help=help_)
        cmd.add_argument("type", help="the stage's job type")
        _json_arg(cmd)
        cmd.set_defaults(run=stage_pause, paused=paused)


def _state(stage: dict) -> str:
    return f"paused since {stage['pausedAt']}" if stage["paused"] else "running"


async def stages_ls(args, cli) -> str:
    async with acting_as_cli(cli.dsn) as db:
        paused = await engine.paused_stages(db)
    data = [stage_json(s, paused) for s in user_stages(cli.stages)]
    return render({"data": data}, args.json, lambda page: table(
        [{**s, "state": _state(s)} for s in page["data"]], STAGE_COLUMNS, empty="(no stages loaded)"))


async def stage_pause(args, cli) -> str:
    stage = next((s for s in user_stages(cli.stages) if s.type == args.type), None)
    if stage is None:
        raise cli.bad_input(f"no stage {args.type!r} runs here (skiplock stages ls lists them)")
    async with acting_as_cli(cli.dsn) as db:
        await (engine.pause_stage if args.paused else engine.resume_stage)(db, stage.type)
        paused = await engine.paused_stages(db)
    return render(stage_json(stage, paused), args.json, lambda s: f"stage {s['type']}: {_state(s)}")
