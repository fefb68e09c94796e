"""GET /stages, PATCH /stages/{type} and the dashboard's /stats show each periodic stage's
schedule: its interval or cron expression and zone, the period last enqueued, the next.
A tenant's key reads them too (its requests run in its own role)."""

from __future__ import annotations

from datetime import datetime, timedelta

from app import Stage
from app.pipeline.maintenance import schedule_periodic
from tests import factories as f


async def noop(job, ctx):
    pass


STAGES = [Stage(type="plain", handler=noop),
          Stage(type="hourly", handler=noop, every=3600),
          Stage(type="weekdays", handler=noop, cron="0 3 * * MON-FRI", tz="Europe/Berlin", catch_up=2)]


def schedules(stages: list[dict]) -> dict[str, dict | None]:
    """Each stage's schedule, its times read (2027-01-01T00:00:00Z is ...+00:00), but for
    its age in seconds, which moves between two reads."""
    def read(schedule: dict) -> dict:
        return {**{k: v for k, v in schedule.items() if k != "lastEnqueuedSecondsAgo"},
                **{k: datetime.fromisoformat(schedule[k]) for k in ("lastPeriod", "nextPeriod")}}
    return {s["type"]: s["schedule"] and read(s["schedule"]) for s in stages}


async def test_each_periodic_stage_shows_its_schedule_last_and_next_period(make_client, pool, admin_headers):
    client = await make_client(stages=STAGES, api_key=False)
    tenant = {"Authorization": f"Bearer {await f.api_key(pool, 'ann@example.com')}"}
    await schedule_periodic(pool, STAGES)

    for headers in (tenant, admin_headers):
        answer = await client.get("/stages", headers=headers)
        assert answer.status_code == 200, answer.text
        plain, hourly, weekdays = (s["schedule"] for s in answer.json()["data"])
        assert plain is None
        assert hourly["everySeconds"] == 3600 and hourly["cron"] is None and hourly["catchUp"] == 0
        last, upcoming = (datetime.fromisoformat(hourly[k]) for k in ("lastPeriod", "nextPeriod"))
        assert upcoming - last == timedelta(hours=1) and 0 <= hourly["lastEnqueuedSecondsAgo"] < 60
        assert (weekdays["everySeconds"], weekdays["cron"], weekdays["timezone"], weekdays["catchUp"]) == (
            None, "0 3 * * MON-FRI", "Europe/Berlin", 2)
        upcoming = datetime.fromisoformat(weekdays["nextPeriod"])
        assert (upcoming.hour, upcoming.minute) == (3, 0) and upcoming.weekday() < 5
        assert upcoming.utcoffset() in (timedelta(hours=1), timedelta(hours=2))  # on Berlin's clock

        stats = await client.get("/stats", headers=headers)
        assert stats.status_code == 200, stats.text
        assert schedules(stats.json()["stages"]) == schedules(answer.json()["data"])

    paused = await client.patch("/stages/weekdays", json={"paused": True}, headers=admin_headers)
    assert paused.status_code == 200 and paused.json()["schedule"]["cron"] == "0 3 * * MON-FRI"
