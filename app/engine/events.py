"""Live events as the database keeps them: rooms, the replay rule, the gap, pruning.

The triggers of migration 0021 write an event in the transaction of the change it
describes, numbered per room (seq 1, 2, 3 ...). Reading follows one rule: only a room's
last EVENTS_REPLAY events are replayed. A reader whose cursor is older than that (or
not a seq the room has reached) gets a gap first,

    {"type": "gap", "room": R, "after": N, "oldest": M}

then the events from M on: it refetches the current state and carries on from there.
The rule is applied here, on every read, whether or not maintenance has pruned the rows
yet. A cursor only ever moves to a seq that was handed to the reader."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.engine.queries import statement
from app.whole_numbers import whole_number

SYSTEM_ROOM = "system"
ROOM_HELP = "account:<user id>, lane:<lane id>, batch:<batch id> or system"
_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
ROOM_PATTERN = rf"^(system|(account|lane|batch):{_UUID})$"
_ROOM = re.compile(ROOM_PATTERN)
NOTIFY_CHANNEL = "skiplock_events"
# the rooms the pipeline's settled counts and batch progress go to, numbered in passes
# (migration 0032)
NUMBERED_IN_PASSES = ("lane:", "batch:")


class BadRoom(ValueError):
    """Not a room name; the message says what one looks like."""


def parse_room(raw: str) -> str:
    """The room's canonical name (ids as lower-case UUIDs), or BadRoom."""
    if not _ROOM.fullmatch(raw or ""):
        raise BadRoom(f"room must be {ROOM_HELP}, ids as UUIDs like 3f2c0e5a-8c1b-4c9e-9f55-0d6a5b8f1e27 "
                      f"(got {raw[:80]!r})")
    kind, _, rest = raw.partition(":")
    return raw if raw == SYSTEM_ROOM else f"{kind}:{uuid.UUID(rest)}"


def oldest_replayable(head: int, window: int) -> int:
    """The first seq the replay rule still serves in a room whose last seq is `head`."""
    return max(1, head - window + 1)


@dataclass(frozen=True)
class Event:
    room: str
    seq: int
    type: str
    data: Any
    at: datetime

    def json(self) -> dict[str, Any]:
        return {"room": self.room, "seq": self.seq, "type": self.type, "data": self.data,
                "at": self.at.isoformat()}


def gap(room: str, after: int, oldest: int) -> dict[str, Any]:
    return {"type": "gap", "room": room, "after": after, "oldest": oldest}


@dataclass(frozen=True)
class Page:
    """What a read hands over: a gap (or None), the events, the cursor to read after
    next time (the last seq handed over; `after` unchanged when nothing was), the head."""
    gap: dict[str, Any] | None
    events: list[Event]
    cursor: int
    head: int

    def items(self) -> list[dict[str, Any]]:
        return ([self.gap] if self.gap else []) + [e.json() for e in self.events]


async def read_after(db, room: str, after: int, window: int, limit: int) -> Page:
    """Up to `limit` events of `room` after seq `after`, under the replay rule. `db` may
    be a tenant transaction: a room it cannot read reads as empty (use room_readable
    to tell the two apart). What the pipeline parked is numbered first, so a reader
    polling a lane sees its settled counts now, not at the run's next heartbeat."""
    await number_settled(db)
    rows = await db.fetch(*statement("events_after").bind(room=room, after=after, window=window,
                                                          limit=limit))
    head = rows[0]["head_seq"] if rows else 0
    oldest = oldest_replayable(head, window)
    missed = (after < oldest - 1) if head else False
    if after > head:
        missed = True  # a cursor this room never reached (another database, a reset)
    events = [Event(room, r["seq"], r["type"], r["data"], r["at"]) for r in rows if r["seq"] is not None]
    cursor = events[-1].seq if events else (oldest - 1 if missed else after)
    return Page(gap(room, after, oldest) if missed else None, events, cursor, head)


async def number_settled(db) -> int:
    """One numbering pass over the settled counts the pipeline parked (migration 0032):
    one 'jobs.settled' per lane and type, one 'batch.progress' per batch; how many events
    it wrote."""
    return await db.fetchval(*statement("events_number_settled").bind())


async def read_between(db, ranges: list[tuple[str, int, int]], limit: int) -> dict[str, list[Event]]:
    """The events of each (room, first seq, last seq), at most `limit` a room, in one
    statement: each room's list in order (a room with none left out)."""
    if not ranges:
        return {}
    rooms, firsts, lasts = (list(column) for column in zip(*ranges))
    rows = await db.fetch(*statement("events_between").bind(rooms=rooms, firsts=firsts, lasts=lasts,
                                                            limit=limit))
    out: dict[str, list[Event]] = {}
    for r in rows:
        out.setdefault(r["room"], []).append(Event(r["room"], r["seq"], r["type"], r["data"], r["at"]))
    return out


async def room_readable(db, room: str) -> bool:
    """Whether the transaction's tenant may read `room` (an admin: any)."""
    return bool(await db.fetchval(*statement("event_room_readable").bind(room=room)))


async def prune(db, window: int, batch: int) -> int:
    """Delete up to `batch` events past the replay window; how many went."""
    status = await db.execute(*statement("events_prune").bind(window=window, limit=batch))
    return int(status.split()[-1])


def parse_notice(payload: str) -> list[tuple[str, int, int]]:
    """A NOTIFY payload of the triggers: (room, first seq, last seq) per line."""
    out = []
    for line in payload.splitlines():
        room, _, rest = line.partition(" ")
        first, _, last = rest.partition(" ")
        first_seq, last_seq = whole_number(first, 19), whole_number(last, 19)  # bigints
        if room and first_seq is not None and last_seq is not None:
            out.append((room, first_seq, last_seq))
    return out


async def room_head(db, room: str) -> int:
    """The room's last seq (0: none yet)."""
    return await db.fetchval(*statement("event_room_head").bind(room=room))
