"""When a periodic stage's periods begin: every `every` seconds since the Unix epoch, or at
the times a cron expression names on a time zone's clock.

A period is named by the instant it begins (UTC), so it is the same period for every
scheduler whatever its own zone. Cron expressions are read by cronsim as Debian's cron
reads them, daylight-saving changes included: a time the clock skips (02:30 the night it
springs forward) fires when the clock jumps, a fixed time the clock passes twice (02:30 the
night it falls back) fires once, and an expression finer than an hour (*/30) keeps firing
through both, every 30 minutes of real time."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Each missed period is a job of its own: past this many, a backlog is not a schedule.
MAX_CATCH_UP = 1000
# cronsim's reverse walk starts strictly before the instant it is given
JUST_AFTER = timedelta(microseconds=1)


@dataclass(frozen=True)
class Every:
    """Periods `seconds` long, starting on multiples of it since the Unix epoch (UTC)."""
    seconds: float

    def starts_back(self, now: datetime) -> Iterator[datetime]:
        """The starts of the period holding `now` and of each one before it, newest first."""
        k = self._index(now)
        while True:
            yield EPOCH + timedelta(seconds=k * self.seconds)
            k -= 1

    def next_after(self, now: datetime) -> datetime:
        return EPOCH + timedelta(seconds=(self._index(now) + 1) * self.seconds)

    def _index(self, now: datetime) -> int:
        """Which period since the epoch holds `now`."""
        return math.floor((now - EPOCH).total_seconds() / self.seconds)

    def on_clock(self, instant: datetime | None) -> datetime | None:
        return instant.astimezone(timezone.utc) if instant is not None else None

    def describe(self) -> dict[str, Any]:
        return {"everySeconds": self.seconds, "cron": None, "timezone": None}


@dataclass(frozen=True)
class Cron:
    """Periods that begin at each time `expression` names on `zone`'s clock."""
    expression: str
    zone: ZoneInfo

    def starts_back(self, now: datetime) -> Iterator[datetime]:
        for start in CronSim(self.expression, (now + JUST_AFTER).astimezone(self.zone), reverse=True):
            yield start.astimezone(timezone.utc)

    def next_after(self, now: datetime) -> datetime | None:
        start = next(iter(CronSim(self.expression, now.astimezone(self.zone))), None)
        return start.astimezone(timezone.utc) if start is not None else None

    def on_clock(self, instant: datetime | None) -> datetime | None:
        """The instant as the zone's clock reads it (its offset that day)."""
        return instant.astimezone(self.zone) if instant is not None else None

    def describe(self) -> dict[str, Any]:
        return {"everySeconds": None, "cron": self.expression, "timezone": self.zone.key}


Schedule = Every | Cron


def parse(stage: str, every: float | None, cron: str | None, tz: str | None, catch_up: Any) -> Schedule | None:
    """A stage's schedule from what its author wrote (every: seconds already); a ValueError
    naming the stage for anything that cannot be one."""
    if not isinstance(catch_up, int) or isinstance(catch_up, bool) or not 0 <= catch_up <= MAX_CATCH_UP:
        raise ValueError(f"stage {stage!r}: catch_up must be a whole number from 0 to {MAX_CATCH_UP}")
    if every is not None and cron is not None:
        raise ValueError(f"stage {stage!r}: give every= or cron=, not both")
    if tz is not None and cron is None:
        raise ValueError(f"stage {stage!r}: tz= is the time zone of a cron= schedule (every= counts "
                         f"from the Unix epoch, UTC)")
    if catch_up and every is None and cron is None:
        raise ValueError(f"stage {stage!r}: catch_up= is for a periodic stage (every= or cron=)")
    if every is not None:
        if not (1 <= every < math.inf):  # NaN too
            raise ValueError(f"stage {stage!r}: every must be at least one second, and finite")
        return Every(every)
    if cron is None:
        return None
    if not isinstance(cron, str):
        raise ValueError(f"stage {stage!r}: cron must be a cron expression (a string such as \"0 3 * * MON-FRI\")")
    zone = _zone(stage, "UTC" if tz is None else tz)
    try:
        CronSim(cron, datetime.now(zone))
    except CronSimError as exc:
        raise ValueError(f"stage {stage!r}: cron {cron!r} is not a cron expression: {exc}") from None
    schedule = Cron(cron, zone)
    if schedule.next_after(datetime.now(timezone.utc)) is None:
        raise ValueError(f"stage {stage!r}: cron {cron!r} names no time in the next 50 years")
    return schedule


def _zone(stage: str, name: Any) -> ZoneInfo:
    try:
        if not isinstance(name, str):
            raise ValueError
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"stage {stage!r}: tz {name!r} is not a time zone (an IANA name such as "
                         f"\"Europe/Berlin\" or \"UTC\")") from None


def due_periods(schedule: Schedule, now: datetime, last: datetime | None, catch_up: int) -> list[datetime]:
    """The periods to enqueue now, oldest first: the current one unless `last` (the newest
    period enqueued) is it, and up to `catch_up` periods missed between the two. A stage
    never enqueued catches nothing up: it had no periods to miss."""
    due = []
    for start in itertools.islice(schedule.starts_back(now), 1 + (catch_up if last is not None else 0)):
        if last is not None and start <= last:
            break
        due.append(start)
    return due[::-1]
