"""Limits on a stage's claims across every run, worker and process: how many of its jobs
are held at once (global_concurrency), how many start in any window (rate), each for the
stage as a whole or per key taken from the job (limit_by).

Claims of a limited stage take turns (a transaction-scoped lock per type), so each one
sees every claim committed before it and takes no more than the limits leave room for.
A job held back stays pending and uses no attempt. Stages without limits never come here:
their claim is claim.sql alone."""

from __future__ import annotations

import math
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, AsyncIterator, Callable

import asyncpg

from app.engine.queries import statement

_TURN = statement("claim_limit_turn")
_ROOM = statement("claim_limit_room")
_KEYED = statement("claim_keyed")
_STARTED = statement("claim_limit_started")

# A start counts this much longer than its window: it is stamped when the claim ends, and
# its handler begins a commit and a hand-over later. Without it, a claim a moment past the
# window of an earlier one could see that one's handlers start inside its own window.
START_SLACK_SECONDS = 0.2


@dataclass(frozen=True)
class Rate:
    """At most `starts` of a stage's jobs (or of one key's) start in any `per_seconds`."""
    starts: int
    per_seconds: float

    @classmethod
    def of(cls, value: Any) -> "Rate":
        """A stage's rate=(N, per_seconds): N a whole number >= 1, per_seconds a positive
        number of seconds or a timedelta. ValueError otherwise."""
        try:
            starts, per = value
        except (TypeError, ValueError):
            raise ValueError("rate must be (N, per_seconds): at most N starts in any per_seconds") from None
        if isinstance(per, timedelta):
            per = per.total_seconds()
        if not isinstance(starts, int) or isinstance(starts, bool) or starts < 1:
            raise ValueError("rate's N (starts per window) must be a whole number >= 1")
        if not isinstance(per, (int, float)) or isinstance(per, bool) or not 0 < per < math.inf:
            raise ValueError("rate's per_seconds must be a positive, finite number of seconds (or a timedelta)")
        return cls(starts, float(per))

    @property
    def window_seconds(self) -> float:
        return self.per_seconds + START_SLACK_SECONDS


@dataclass(frozen=True)
class LimitKey:
    """Where a job's limit key comes from: limit_by="lane", or "payload.<field>" (dots go
    into nested objects: "payload.account.id"). A string rather than a function: the key is
    counted inside the claim, in SQL, and shown as written by GET /stages and the CLI."""
    by_lane: bool
    path: tuple[str, ...] = ()

    @classmethod
    def of(cls, limit_by: Any) -> "LimitKey":
        if limit_by == "lane":
            return cls(by_lane=True)
        if isinstance(limit_by, str) and limit_by.startswith("payload."):
            path = tuple(limit_by.removeprefix("payload.").split("."))
            if all(path):
                return cls(by_lane=False, path=path)
        raise ValueError(f'limit_by must be "lane" or "payload.<field>" (e.g. "payload.account_id"), '
                         f'not {limit_by!r}')


ClaimUpTo = Callable[[int], tuple]  # n -> claim.sql bound to claim up to n jobs


async def claim_within_limits(db, lease, run_id: uuid.UUID, limit: int,
                              claim_up_to: ClaimUpTo) -> tuple[asyncpg.Record, list[asyncpg.Record]]:
    """Write the endings claim_up_to carries and claim up to `limit` jobs of a limited
    stage, in one transaction that holds the type's turn: (the row with the endings'
    counts, the claimed rows). `lease` is the engine's Lease of the stage."""
    if limit == 0:  # endings alone: they take no turn
        return (await db.fetch(*claim_up_to(0)))[0], []
    rate = lease.rate
    async with _one_connection(db) as conn, conn.transaction():
        await conn.execute(*_TURN.bind(type=lease.type))
        if lease.limit_by is None:
            room = await conn.fetchval(*_ROOM.bind(
                type=lease.type, lease_seconds=float(lease.lease_seconds), concurrency=lease.global_concurrency,
                rate=rate and rate.starts, window_seconds=rate.window_seconds if rate else 0.0))
            rows = await conn.fetch(*claim_up_to(min(limit, room)))
            first, claimed = rows[0], [r for r in rows if r["id"] is not None]
            keys = [""] * len(claimed)
        else:
            key = LimitKey.of(lease.limit_by)
            first = (await conn.fetch(*claim_up_to(0)))[0]  # the endings alone
            claimed = await conn.fetch(*_KEYED.bind(
                type=lease.type, run_id=run_id, limit=limit,
                lease_seconds=float(lease.lease_seconds), max_attempts=lease.max_attempts,
                by_lane=key.by_lane, path=list(key.path), concurrency=lease.global_concurrency,
                rate=rate and rate.starts, window_seconds=rate.window_seconds if rate else 0.0))
            keys = [r["limit_key"] for r in claimed]
        if rate is not None and keys:
            await conn.execute(*_STARTED.bind(type=lease.type, keys=keys, window_seconds=rate.window_seconds))
        return first, claimed


@asynccontextmanager
async def _one_connection(db) -> AsyncIterator[asyncpg.Connection]:
    """db's connection: a pool's (or the run's, OneConnection's) for the block, or db itself."""
    if hasattr(db, "acquire"):
        async with db.acquire() as conn:
            yield conn
    else:
        yield db
