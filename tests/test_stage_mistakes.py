"""Stage mistakes caught early: a handler or hook that is not async is refused where the
stage is made, and a handler that blocks the event loop past its timeout is timed out,
not done."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import subprocess
import sys
import time

import pytest

from app import Stage
from app.pipeline.loop import Pipeline
from app.settings import load_settings
from tests import factories as f

SETTINGS = load_settings(database_url="postgresql://unused")


def send_invoice(job, ctx):  # the mistake: a plain def
    pass


async def honest(job, ctx):
    await asyncio.sleep(0)


@pytest.mark.parametrize("hook", ["handler", "batch_handler", "gave_up", "cancelled", "accepts"])
def test_a_plain_def_is_refused_when_the_stage_is_made(hook):
    given = {"handler": honest} if hook != "handler" and hook != "batch_handler" else {}
    with pytest.raises(ValueError) as refused:
        Stage(type="invoice", **given, **{hook: send_invoice})
    assert str(refused.value) == (
        f"stage 'invoice': {hook} tests.test_stage_mistakes.send_invoice is not an async function: "
        f"make it `async def` (and call blocking work inside it with `await asyncio.to_thread(...)`)")


def test_a_lambda_and_a_partial_of_a_plain_def_are_refused_too():
    for handler in (lambda job, ctx: None, functools.partial(send_invoice)):
        with pytest.raises(ValueError, match="is not an async function: make it `async def`"):
            Stage(type="invoice", handler=handler)


class AsyncCall:
    async def __call__(self, job, ctx):
        pass


def keeps_wrapped(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)  # the coroutine, as it is
    return wrapper


@pytest.mark.parametrize("handler", [
    honest, functools.partial(honest), AsyncCall(), functools.partial(AsyncCall()), keeps_wrapped(honest)],
    ids=["async def", "partial", "async __call__", "partial of async __call__", "functools.wraps"])
def test_whatever_returns_an_awaitable_is_accepted(handler):
    Stage(type="t", handler=handler, gave_up=handler, cancelled=handler)


def test_a_stage_module_with_a_plain_def_is_one_line_from_the_command(tmp_path):
    (tmp_path / "badstages.py").write_text(
        "from app import Stage\n"
        "def send(job, ctx):\n"
        "    pass\n"
        "STAGES = [Stage(type='invoice', handler=send)]\n")
    env = {**os.environ, "PIPELINE_STAGES": "badstages:STAGES", "PYTHONPATH": f"{tmp_path}:{os.getcwd()}"}
    env.pop("DATABASE_URL", None)  # said before any database is looked for
    result = subprocess.run([sys.executable, "-m", "app", "status"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "error: PIPELINE_STAGES: cannot import 'badstages': stage 'invoice': handler badstages.send is "
        "not an async function: make it `async def` (and call blocking work inside it with "
        "`await asyncio.to_thread(...)`)")


async def test_a_handler_that_blocks_past_its_timeout_is_timed_out_not_done(pool, caplog):
    async def blocks(job, ctx):
        time.sleep(2)  # the mistake: the loop is held, no timer can cut it

    [job_id] = await f.jobs(pool, "blocks", 1)
    with caplog.at_level(logging.WARNING, logger="skiplock.pipeline"):
        result = await Pipeline(pool, [Stage(type="blocks", handler=blocks, timeout=1)], SETTINGS).run("manual")
    row = await f.job_row(pool, job_id)
    assert result.jobs_done == 0 and result.jobs_retried == 1
    # as a handler that overran asynchronously: pending for a retry, the same last_error
    assert (row["status"], row["attempts"], row["last_error"]) == ("pending", 1, "timed out after 1s")
    assert await pool.fetchval("SELECT run_after > now() + interval '1 minute' FROM jobs WHERE id = $1", job_id)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "stage 'blocks'" in warning.getMessage() and "asyncio.to_thread" in warning.getMessage()


async def test_on_its_last_attempt_it_fails_and_a_blocking_batch_handler_is_timed_out_too(pool):
    async def blocks(job, ctx):
        time.sleep(0.4)

    async def blocks_batch(jobs, ctx):
        time.sleep(0.4)

    [one] = await f.jobs(pool, "one", 1)
    many = await f.jobs(pool, "many", 2)
    stages = [Stage(type="one", handler=blocks, timeout=0.2, max_attempts=1),
              Stage(type="many", batch_handler=blocks_batch, timeout=0.2)]
    await Pipeline(pool, stages, SETTINGS).run("manual")
    row = await f.job_row(pool, one)
    assert (row["status"], row["last_error"]) == ("failed", "timed out after 0.2s")
    for job_id in many:
        row = await f.job_row(pool, job_id)
        assert (row["status"], row["last_error"]) == ("pending", "timed out after 0.2s")


async def test_an_honest_handler_under_its_timeout_is_done(pool, caplog):
    async def waits(job, ctx):
        await asyncio.sleep(0.1)
        await asyncio.to_thread(time.sleep, 0.1)  # blocking work, off the loop

    ids = await f.jobs(pool, "honest", 3)
    with caplog.at_level(logging.WARNING, logger="skiplock.pipeline"):
        result = await Pipeline(pool, [Stage(type="honest", handler=waits, timeout=1, concurrency=3)],
                                SETTINGS).run("manual")
    assert result.jobs_done == 3 and result.jobs_failed == 0
    assert {(await f.job_row(pool, i))["status"] for i in ids} == {"done"}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
