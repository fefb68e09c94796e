"""A Retry-After header (RFC 9110: seconds, or an HTTP date) as a delay, for every
client that honours one (the crawler, the LLM client, webhooks). Capped, so a hostile or
broken server cannot park a job for centuries or overflow a date."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

from app.whole_numbers import ascii_digits, whole_number

RETRY_AFTER_MAX = timedelta(days=1)


def retry_after(value: str | None, now: datetime | None = None) -> timedelta | None:
    """The delay a Retry-After header asks for, between 1 s and a day; None when absent
    or unreadable."""
    if not value:
        return None
    now = now or datetime.now(timezone.utc)
    value = value.strip()
    if ascii_digits(value):
        seconds = whole_number(value, max_digits=9)  # past a day, its size does not matter
        if seconds is None or seconds > RETRY_AFTER_MAX.total_seconds():
            return RETRY_AFTER_MAX
        delay = timedelta(seconds=seconds)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        delay = when - now
    return max(timedelta(seconds=1), min(delay, RETRY_AFTER_MAX))
