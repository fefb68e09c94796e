"""What a drain looked like from the server while it ran, sampled on a connection of its
own: what the active backends waited for, and how far apart the lanes of one priority
drifted.

CPU time per job says how much work a job costs; it does not say why a drain that leaves
the CPUs partly idle is not faster, nor whether overlapping claims kept the lanes' turns.
`async with Sampler(dsn, job_type) as s: <drain>`, then s.result().
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter

import asyncpg

# the active backends of the drain's database and what each waits for (NULL: running)
WAITS = """
SELECT wait_event_type, wait_event
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend' AND state = 'active'
"""

# per priority being served, how far apart the served counts of its lanes that still have
# work are (committed counts, the journal included: what the claim itself can see; a
# priority whose turn has not come, all at 0, says nothing)
SPREAD = """
SELECT priority, max(served) - min(served) AS spread
FROM job_lane_counts
WHERE type = $1 AND pending > 0
GROUP BY priority
HAVING count(*) > 1 AND max(served) > 0
"""

# wait events by what they mean for a queue: a backend running (cpu), waiting for its
# commit's WAL to be written and flushed (wal), for a page another backend is changing
# (buffer), for a row or transaction another holds (row lock), or anything else
_WAL_EVENTS = {"WALWrite", "WALInsert", "WALBufMapping",                    # LWLocks
               "WalWrite", "WalSync", "WalInitWrite", "WalInitSync"}         # IO


def kind(wait_type: str | None, wait_event: str | None) -> str:
    """The class of one sampled backend's wait."""
    if wait_type is None:
        return "cpu"
    if wait_event in _WAL_EVENTS:
        return "wal"
    if wait_type == "LWLock" and wait_event in ("BufferContent", "BufferMapping"):
        return "buffer"
    if wait_type == "Lock":
        return "row lock" if wait_event in ("transactionid", "tuple") else "lock"
    return "other"


def _quantile(xs: list[int], q: float) -> int:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


class Sampler:
    """Every `every` seconds: the backends' waits, and the spread of `job_type`'s lanes."""

    def __init__(self, dsn: str, job_type: str, every: float = 0.02) -> None:
        self.dsn, self.job_type, self.every = dsn, job_type, every
        self.waits: Counter = Counter()
        self.spreads: list[int] = []
        self.samples = 0
        self._task: asyncio.Task | None = None
        self._conn = None

    async def __aenter__(self) -> "Sampler":
        self._conn = await asyncpg.connect(self.dsn)
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        while True:
            for r in await self._conn.fetch(WAITS):
                self.waits[kind(r["wait_event_type"], r["wait_event"])] += 1
            self.spreads += [r["spread"] for r in await self._conn.fetch(SPREAD, self.job_type)]
            self.samples += 1
            await asyncio.sleep(self.every)

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        await self._conn.close()

    def result(self) -> dict:
        seen = sum(self.waits.values())
        return {
            "samples": self.samples,
            "active_backends_mean": round(seen / self.samples, 2) if self.samples else None,
            "share": {k: round(v / seen, 3) for k, v in self.waits.most_common()} if seen else {},
            # the spread within one priority, in served jobs: median / p90 / max of the samples
            "lane_spread": ({"median": statistics.median(self.spreads), "p90": _quantile(self.spreads, 0.9),
                             "max": max(self.spreads)} if self.spreads else None),
        }


def said(sampled: dict | None) -> str:
    """One line of a result: 'cpu 38% wal 45% ... of 4.8 active; lanes 26/37/52 apart'."""
    if not sampled or not sampled.get("share"):
        return ""
    line = " ".join(f"{k} {v:.0%}" for k, v in sampled["share"].items() if v >= 0.01)
    line += f" of {sampled['active_backends_mean']} active"
    if s := sampled.get("lane_spread"):
        line += f"; lanes of one priority {s['median']:g}/{s['p90']}/{s['max']} jobs apart"
    return line
