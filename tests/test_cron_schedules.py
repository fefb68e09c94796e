"""Periodic stages on a cron expression in a time zone (Stage(cron=, tz=)), and the catch-up
of periods missed while no run started (catch_up=). The nights the clocks change are
replayed against the real tick and jobs tables, a scheduler every few minutes."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from app import Stage
from app.pipeline.loop import Pipeline
from app.pipeline.maintenance import periodic_schedules, schedule_periodic
from app.settings import load_settings

BERLIN = ZoneInfo("Europe/Berlin")
UTC = timezone.utc


async def noop(job, ctx):
    pass


def stage(**schedule) -> Stage:
    return Stage(type="report", handler=noop, **schedule)


def berlin(*args) -> datetime:
    return datetime(*args, tzinfo=BERLIN)


async def replay(pool, s: Stage, start: datetime, end: datetime, step=timedelta(minutes=10)) -> list[datetime]:
    """A scheduler starting every `step` from start to end, each job done before the next
    one starts; the periods enqueued, in the order they were."""
    at = start.astimezone(UTC)  # steps of real time (on Berlin's clock, 02:50 + 10 min is 03:00)
    while at <= end:
        await schedule_periodic(pool, [s], at=at)
        await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE status = 'pending'")
        at += step
    return await enqueued(pool)


async def enqueued(pool) -> list[datetime]:
    rows = await pool.fetch("SELECT payload ->> 'period' AS period FROM jobs WHERE type = 'report' ORDER BY id")
    return [datetime.fromisoformat(r["period"]).astimezone(UTC) for r in rows]


def local(periods: list[datetime]) -> list[str]:
    return [p.astimezone(BERLIN).isoformat() for p in periods]


async def test_weekdays_at_three_in_berlin_skip_the_weekend_and_follow_the_clock_change(pool):
    got = await replay(pool, stage(cron="0 3 * * MON-FRI", tz="Europe/Berlin"),
                       berlin(2027, 3, 25, 12), berlin(2027, 3, 30, 12), step=timedelta(minutes=30))
    # the first scheduler enqueues the current period (Thursday's); Friday at 03:00 CET,
    # Saturday and Sunday none, Monday and Tuesday at 03:00 CEST
    assert local(got) == ["2027-03-25T03:00:00+01:00", "2027-03-26T03:00:00+01:00",
                          "2027-03-29T03:00:00+02:00", "2027-03-30T03:00:00+02:00"]
    assert [p.hour for p in got] == [2, 2, 1, 1]  # UTC


async def test_a_time_the_clock_skips_fires_once_when_it_jumps(pool):
    """2027-03-28 in Berlin: 02:00 CET becomes 03:00 CEST, so 02:30 does not exist."""
    got = await replay(pool, stage(cron="30 2 * * *", tz="Europe/Berlin"),
                       berlin(2027, 3, 27, 2, 30), berlin(2027, 3, 29, 12), step=timedelta(minutes=20))
    assert local(got) == ["2027-03-27T02:30:00+01:00", "2027-03-28T03:00:00+02:00", "2027-03-29T02:30:00+02:00"]


async def test_a_time_the_clock_passes_twice_fires_once(pool):
    """2027-10-31 in Berlin: 03:00 CEST becomes 02:00 CET, so 02:30 happens twice."""
    got = await replay(pool, stage(cron="30 2 * * *", tz="Europe/Berlin"),
                       berlin(2027, 10, 30, 2, 30), berlin(2027, 11, 1, 12), step=timedelta(minutes=10))
    assert local(got) == ["2027-10-30T02:30:00+02:00", "2027-10-31T02:30:00+02:00", "2027-11-01T02:30:00+01:00"]


@pytest.mark.parametrize("start, end", [
    (berlin(2027, 3, 27, 23), berlin(2027, 3, 28, 5)),     # springs forward at 02:00
    (berlin(2027, 10, 30, 23), berlin(2027, 10, 31, 5)),   # falls back at 03:00
], ids=["spring", "autumn"])
async def test_every_thirty_minutes_is_every_thirty_minutes_of_real_time_across_the_change(pool, start, end):
    got = await replay(pool, stage(cron="*/30 * * * *", tz="Europe/Berlin"), start, end)
    assert got[0] == start and got[-1] == end.astimezone(UTC)
    assert {b - a for a, b in zip(got, got[1:])} == {timedelta(minutes=30)}
    assert len(set(got)) == len(got)
    if start.month == 3:
        assert not [t for t in local(got) if "T02:" in t]  # the hour that does not exist
    else:
        # the hour that happens twice, each half hour of it in both offsets
        assert [t for t in local(got) if "T02:" in t] == [
            "2027-10-31T02:00:00+02:00", "2027-10-31T02:30:00+02:00",
            "2027-10-31T02:00:00+01:00", "2027-10-31T02:30:00+01:00"]


async def test_the_zone_defaults_to_utc(pool):
    got = await replay(pool, stage(cron="0 3 * * *"), datetime(2027, 3, 27, 3, tzinfo=UTC),
                       datetime(2027, 3, 29, 4, tzinfo=UTC), step=timedelta(hours=1))
    assert got == [datetime(2027, 3, d, 3, tzinfo=UTC) for d in (27, 28, 29)]


async def test_missed_periods_are_caught_up_each_with_its_own_job_at_most_catch_up_of_them(pool):
    s = stage(cron="0 * * * *", catch_up=3)
    assert await schedule_periodic(pool, [s], at=datetime(2027, 5, 1, 10, 5, tzinfo=UTC)) == ["report"]
    # down from 10:05 to 17:05: 11:00 to 16:00 were missed; the last three come with 17:00,
    # though the 10:00 job is still open
    assert await schedule_periodic(pool, [s], at=datetime(2027, 5, 1, 17, 5, tzinfo=UTC)) == ["report"] * 4
    assert [p.hour for p in await enqueued(pool)] == [10, 14, 15, 16, 17]
    keys = await pool.fetch("SELECT DISTINCT dedupe_key FROM jobs WHERE type = 'report'")
    assert len(keys) == 5
    # a run a moment later has nothing left to add
    assert await schedule_periodic(pool, [s], at=datetime(2027, 5, 1, 17, 20, tzinfo=UTC)) == []


async def test_a_new_stage_with_catch_up_starts_at_the_current_period(pool):
    s = stage(every=3600, catch_up=5)
    assert await schedule_periodic(pool, [s], at=datetime(2027, 5, 1, 10, 5, tzinfo=UTC)) == ["report"]
    assert await enqueued(pool) == [datetime(2027, 5, 1, 10, tzinfo=UTC)]


async def test_without_catch_up_missed_periods_stay_missed(pool):
    s = stage(cron="0 * * * *")
    await replay(pool, s, datetime(2027, 5, 1, 10, 5, tzinfo=UTC), datetime(2027, 5, 1, 10, 5, tzinfo=UTC))
    assert await replay(pool, s, datetime(2027, 5, 1, 17, 5, tzinfo=UTC),
                        datetime(2027, 5, 1, 17, 5, tzinfo=UTC)) == [
        datetime(2027, 5, 1, 10, tzinfo=UTC), datetime(2027, 5, 1, 17, tzinfo=UTC)]


async def test_overlapping_schedulers_enqueue_each_missed_period_once(pool):
    s = stage(cron="*/15 * * * *", tz="Europe/Berlin", catch_up=4)
    await schedule_periodic(pool, [s], at=datetime(2027, 5, 1, 9, 0, tzinfo=UTC))
    at = datetime(2027, 5, 1, 12, 1, tzinfo=UTC)
    made = await asyncio.gather(*(schedule_periodic(pool, [s], at=at) for _ in range(10)))
    assert sum(map(len, made)) == 5
    got = await enqueued(pool)
    assert got == sorted(set(got)) and len(got) == 6
    assert got[1:] == [at.replace(minute=0) - timedelta(minutes=15 * k) for k in (4, 3, 2, 1, 0)]


async def test_overlapping_runs_starting_at_once_run_each_period_once(pool):
    """Five whole runs start together: the current year's period and the two missed before
    it (the last enqueued was 2020's) are each run once."""
    seen = []

    async def yearly(job, ctx):
        seen.append(job.payload["period"])

    stages = [Stage(type="yearly", handler=yearly, cron="0 0 1 1 *", catch_up=2)]
    await pool.execute("INSERT INTO recurring_ticks (task, period) VALUES ('stage:yearly', '2020-01-01Z')")
    year = (await pool.fetchval("SELECT now()")).year
    settings = load_settings(database_url="postgresql://unused")
    results = await asyncio.gather(*(Pipeline(pool, stages, settings).run("cron") for _ in range(5)))
    assert sorted(datetime.fromisoformat(p).year for p in seen) == [year - 2, year - 1, year]
    assert sum(r.summary["counts"].get("periodic_enqueued", 0) for r in results) == 3


async def test_each_schedule_says_what_it_is_and_when_it_last_and_next_begins(pool):
    stages = [Stage(type="weekdays", handler=noop, cron="0 3 * * MON-FRI", tz="Europe/Berlin"),
              Stage(type="hourly", handler=noop, every=3600, catch_up=2),
              Stage(type="plain", handler=noop)]
    before = await periodic_schedules(pool, stages)
    assert set(before) == {"weekdays", "hourly"}
    assert before["weekdays"]["cron"] == "0 3 * * MON-FRI" and before["weekdays"]["timezone"] == "Europe/Berlin"
    assert before["weekdays"]["everySeconds"] is None and before["weekdays"]["lastPeriod"] is None
    next_run = datetime.fromisoformat(before["weekdays"]["nextPeriod"]).astimezone(BERLIN)
    assert (next_run.hour, next_run.minute) == (3, 0) and next_run.weekday() < 5
    assert before["hourly"]["everySeconds"] == 3600 and before["hourly"]["catchUp"] == 2
    await schedule_periodic(pool, stages)
    after = await periodic_schedules(pool, stages)
    last = datetime.fromisoformat(after["hourly"]["lastPeriod"])
    assert datetime.fromisoformat(after["hourly"]["nextPeriod"]) - last == timedelta(hours=1)
    assert 0 <= after["hourly"]["lastEnqueuedSecondsAgo"] < 60


@pytest.mark.parametrize("schedule, message", [
    (dict(cron="0 3 * *"), "is not a cron expression"),
    (dict(cron="61 * * * *"), "is not a cron expression"),
    (dict(cron="0 0 31 2 *"), "is not a cron expression"),
    (dict(cron=""), "is not a cron expression"),
    (dict(cron="0 3 * * *", tz="Europe/Nowhere"), "is not a time zone"),
    (dict(cron="0 3 * * *", tz="../../etc/passwd"), "is not a time zone"),
    (dict(cron="0 3 * * *", every=60), "not both"),
    (dict(every=60, tz="Europe/Berlin"), "tz= is the time zone of a cron= schedule"),
    (dict(catch_up=1), "catch_up= is for a periodic stage"),
    (dict(cron="0 3 * * *", catch_up=-1), "catch_up must be a whole number"),
    (dict(cron="0 3 * * *", catch_up=True), "catch_up must be a whole number"),
])
def test_a_schedule_that_cannot_be_one_is_refused_where_the_stage_is_written(schedule, message):
    with pytest.raises(ValueError, match=message) as err:
        Stage(type="report", handler=noop, **schedule)
    assert str(err.value).startswith("stage 'report': ")


async def test_a_period_is_enqueued_once_though_its_jobs_end_while_others_schedule_it(pool):
    """The tick decides, not the open job: a scheduler that read the stage's last period
    before another enqueued this one, and writes after that job has ended, adds none."""
    s = stage(cron="*/15 * * * *", catch_up=3)
    await schedule_periodic(pool, [s], at=datetime(2027, 5, 1, 9, 0, tzinfo=UTC))
    at = datetime(2027, 5, 1, 10, 1, tzinfo=UTC)
    scheduling = True

    async def finish_each_job_at_once():
        while scheduling:
            await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE status = 'pending'")

    async def scheduler():
        for _ in range(20):
            await schedule_periodic(pool, [s], at=at)

    finisher = asyncio.create_task(finish_each_job_at_once())
    await asyncio.gather(*(scheduler() for _ in range(8)))
    scheduling = False
    await finisher
    got = await enqueued(pool)
    assert sorted(got) == [datetime(2027, 5, 1, 9, 0, tzinfo=UTC)] + [
        datetime(2027, 5, 1, 9, 15, tzinfo=UTC) + timedelta(minutes=15 * k) for k in range(4)]
