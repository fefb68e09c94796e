"""`skiplock jobs cancel` on a running job: the cancel is asked of the run that holds it
(the job stays running until that run ends it), said in one line, and audited as the CLI."""

from __future__ import annotations

import json

from app.engine import jobs as q
from tests import factories


async def test_cancelling_a_running_job_asks_its_run(pool, cli):
    [job_id] = await factories.jobs(pool, "echo", 1)
    run_id = await factories.run(pool)
    await q.claim(pool, factories.lease("echo"), run_id, 1)

    asked = await cli("jobs", "cancel", str(job_id))
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == (f"job {job_id} is running (run {run_id}): asked to cancel; its run stops it "
                                    "within about 2 s")
    again = json.loads((await cli("jobs", "cancel", str(job_id), "--json")).stdout)
    assert again["status"] == "running" and again["cancelRequestedAt"] is not None
    row = await factories.job_row(pool, job_id)
    assert (row["status"], row["run_id"]) == ("running", run_id) and row["cancel_requested_at"] is not None
    shown = json.loads((await cli("jobs", "show", str(job_id), "--json")).stdout)
    assert shown["cancelRequestedAt"] == again["cancelRequestedAt"]

    audit = await pool.fetch("SELECT actor_kind, actor_id, new_row->>'cancel_requested_at' AS asked "
                             "FROM audit_log WHERE table_name = 'jobs' AND row_id = $1", str(job_id))
    assert [(a["actor_kind"], a["actor_id"]) for a in audit] == [("system", "cli")]  # the second changed nothing
    assert audit[0]["asked"] is not None
