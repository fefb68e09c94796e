"""`skiplock enqueue --after` (repeatable) and `--run-anyway`: a job that waits, as POST /jobs
makes it, and one readable line for bad input."""

from __future__ import annotations

import uuid

import pytest

from tests.cli.test_cli_operator import ok_json, one_line


async def test_a_job_waits_for_every_job_named(pool, cli):
    a = ok_json(await cli("enqueue", "echo"))["job"]["id"]
    b = ok_json(await cli("enqueue", "echo"))["job"]["id"]
    child = ok_json(await cli("enqueue", "echo", "--after", a, "--after", b, "--run-anyway"))
    assert child["job"]["status"] == "waiting"
    row = await pool.fetchrow("SELECT parents, run_anyway, parents_left FROM jobs WHERE id = $1",
                              uuid.UUID(child["job"]["id"]))
    assert sorted(row["parents"]) == sorted([uuid.UUID(a), uuid.UUID(b)]) and row["run_anyway"] and row["parents_left"] == 2
    listed = ok_json(await cli("jobs", "ls", "--status", "waiting", "--json"))
    assert [j["id"] for j in listed["data"]] == [child["job"]["id"]]


@pytest.mark.parametrize("args, needle", [
    (["--after", "not-a-job"], "--after 'not-a-job' is not a job id"),
    (["--after", "00000000-0000-0000-0000-0000000000aa"], "--after names no job to wait for: "
                                                          "00000000-0000-0000-0000-0000000000aa"),
    (["--run-anyway"], "run_anyway says what to do"),
])
async def test_bad_parents_are_one_line(pool, cli, args, needle):
    one_line(await cli("enqueue", "echo", *args), 2, needle)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
