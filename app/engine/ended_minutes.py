"""The last day's endings, rolled up by minute (migration 0055): the dashboard's reads of
them (the queue card's done, failed and cancelled; a day of trends) read the closed
minutes' rows and only the last few minutes live, rather than a heap row per ending.
Nothing is written as jobs end: the readers roll the minutes up that closed since the
last read (one at a time; a reader that finds another at it reads those minutes live)."""

from __future__ import annotations

from app.engine.queries import statement


async def roll_up_endings(db) -> None:
    """Roll up the minutes that closed since the last call (none: a read of one row)."""
    await db.execute(*statement("job_endings_roll_up").bind())
