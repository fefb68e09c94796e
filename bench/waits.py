"""What the server's backends were doing during a drain: sampled from pg_stat_activity.

CPU time per job says how much work a job costs; it does not say why a drain that leaves
the CPUs partly idle is not faster. This sampler answers that: every `every` seconds it
reads the active backends of the drain's database (its own connection left out) and counts
each one under what it is waiting for, so a drain can be called CPU-bound, WAL-bound
(commits waiting for the log to reach the disk) or lock-bound from the figures.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg

SAMPLE = """
SELECT wait_event_type, wait_event
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend' AND state = 'active'
"""

# wait events by what they mean for a queue: a backend running (cpu), waiting for its
# commit's WAL to be written and flushed (wal), for a page another backend is changing
# (buffer), for a row or transaction another holds (row lock), or anything else
_WAL_EVENTS = {"WALWrite", "WalSync", "WALInsert", "WalWrite", "WalInitWrite", "WalInitSync",
               "WALBufMapping", "WALSync"}


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


class WaitSampler:
    """`async with WaitSampler(dsn) as w: ...`, then w.result(): the share of sampled
    active backends in each class, and how many were active on average."""

    def __init__(self, dsn: str, every: float = 0.02) -> None:
        self.dsn, self.every = dsn, every
        self.counts: Counter = Counter()
        self.samples = 0
        self._task: asyncio.Task | None = None
        self._conn = None

    async def __aenter__(self) -> "WaitSampler":
        self._conn = await asyncpg.connect(self.dsn)
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        while True:
            for r in await self._conn.fetch(SAMPLE):
                self.counts[kind(r["wait_event_type"], r["wait_event"])] += 1
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
        seen = sum(self.counts.values())
        return {"samples": self.samples,
                "active_backends_mean": round(seen / self.samples, 2) if self.samples else None,
                "share": {k: round(v / seen, 3) for k, v in self.counts.most_common()} if seen else {}}


def said(waits: dict | None) -> str:
    """One line of a result: 'cpu 38% wal 45% buffer 10% ... of 4.8 active'."""
    if not waits or not waits.get("share"):
        return ""
    parts = " ".join(f"{k} {v:.0%}" for k, v in waits["share"].items() if v >= 0.01)
    return f"{parts} of {waits['active_backends_mean']} active"
