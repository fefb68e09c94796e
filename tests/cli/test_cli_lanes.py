"""`skiplock lanes`: the busiest lanes, and an operator pausing, resuming and ranking one
against the real database, audited as system/cli, with one-line errors."""

from __future__ import annotations

import uuid

from app import Stage
from app.engine.jobs import NewJob, enqueue_many
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests.cli.test_cli_operator import ok_json, one_line
from tests.sample_stages import STAGES


async def _lanes_with_work(pool, sizes: list[int]) -> list[uuid.UUID]:
    lanes = [uuid.uuid4() for _ in sizes]
    await enqueue_many(pool, [NewJob(type="echo", lane=lane) for lane, n in zip(lanes, sizes) for _ in range(n)])
    return lanes


async def test_ls_shows_the_busiest_lanes_first_with_their_counts(pool, cli):
    small, big, middle = await _lanes_with_work(pool, [1, 5, 3])
    await pool.execute("UPDATE jobs SET status = 'running', attempts = 1, locked_at = now() "
                       "WHERE id = (SELECT id FROM jobs WHERE lane = $1 LIMIT 1)", big)
    page = ok_json(await cli("lanes", "ls", "--json"))
    assert [(r["lane"], r["pending"], r["running"]) for r in page["data"]] == [
        (str(big), 4, 1), (str(middle), 3, 0), (str(small), 1, 0)]
    assert ok_json(await cli("lanes", "ls", "--limit", "1", "--json"))["data"][0]["lane"] == str(big)
    text = await cli("lanes", "ls")
    assert text.returncode == 0 and text.stdout.splitlines()[0].split() == \
        ["LANE", "PENDING", "RUNNING", "PRIORITY", "PAUSED", "OWNER"]
    assert text.stdout.splitlines()[1].split()[:3] == [str(big), "4", "1"]


async def test_a_paused_lane_is_not_claimed_until_it_is_resumed(dsn, pool, cli):
    held, other = await _lanes_with_work(pool, [3, 2])
    priority = await pool.fetchval("SELECT priority FROM lanes WHERE id = $1", held)
    paused = ok_json(await cli("lanes", "pause", str(held), "--json"))
    assert paused == {"id": str(held), "ownerId": None, "priority": priority, "paused": True}
    settings = load_settings(database_url=dsn, pipeline_plugins="")
    first = await Pipeline(pool, STAGES, settings).run("cron")
    assert first.jobs_done == 2
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE lane = $1 AND status = 'pending'", held) == 3
    assert ok_json(await cli("lanes", "ls", "--json"))["data"][0] == {
        "lane": str(held), "pending": 3, "running": 0, "priority": priority, "paused": True, "ownerId": None}
    resumed = await cli("lanes", "resume", str(held))
    assert resumed.returncode == 0 and resumed.stdout.strip() == f"lane {held}: priority {priority}, not paused"
    assert (await Pipeline(pool, STAGES, settings).run("cron")).jobs_done == 3
    # both changes are in the audit log as the CLI's
    audit = await pool.fetch("SELECT actor_kind, actor_id, new_row ->> 'paused' AS paused FROM audit_log "
                             "WHERE table_name = 'lanes' AND row_id = $1 ORDER BY id", str(held))
    assert [(a["actor_kind"], a["actor_id"], a["paused"]) for a in audit][-2:] == [
        ("system", "cli", "true"), ("system", "cli", "false")]


async def test_a_higher_priority_lane_is_claimed_first(dsn, pool, cli):
    older, newer = await _lanes_with_work(pool, [2, 2])
    ranked = ok_json(await cli("lanes", "priority", str(newer), "7", "--json"))
    assert ranked["priority"] == 7 and ranked["paused"] is False
    claimed = []

    async def note(job, ctx):
        claimed.append(job.lane)
    await Pipeline(pool, [Stage(type="echo", handler=note, batch=1)],
                   load_settings(database_url=dsn, pipeline_plugins="")).run("cron")
    assert claimed[:2] == [newer, newer] and sorted(map(str, claimed[2:])) == [str(older)] * 2
    assert ok_json(await cli("lanes", "priority", str(newer), "-3", "--json"))["priority"] == -3


async def test_bad_input_and_unknown_lanes_are_one_line(cli):
    lane = uuid.UUID(int=7)
    one_line(await cli("lanes", "pause", "nope"), 2, "lane id 'nope' is not a uuid")
    one_line(await cli("lanes", "priority", str(lane), "high"), 2, "priority 'high' must be a whole number")
    one_line(await cli("lanes", "priority", str(lane), "2000000"), 2, "from -1000000 to 1000000")
    one_line(await cli("lanes", "priority", str(lane), "\u00b2"), 2, "must be a whole number")
    one_line(await cli("lanes", "ls", "--limit", "0"), 2, "--limit must be a whole number from 1 to 1000")
    one_line(await cli("lanes", "resume", str(lane)), 1, f"no lane {lane}")
