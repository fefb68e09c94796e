"""One process's window on new events: a single LISTEN connection, fanned out in memory.

The triggers NOTIFY 'skiplock_events' after commit with "<room> <first> <last>" lines,
for the rooms some listener registered in event_watch (the hub does, on its LISTEN
connection, for each room its subscribers follow; a dead listener's rows are cleared).
The hub reads the announced ranges once (for the rooms someone here subscribes to, all
of one notice in one statement) and offers them to those subscribers. Each subscriber
holds at most `queue` events; one that falls further behind is marked `behind` and its
holder catches up from the database under the replay rule (a gap when it fell further
than EVENTS_REPLAY), so a slow client costs a bounded amount of memory, never more. The
same happens to everyone when the LISTEN connection is lost: notices sent meanwhile are
gone, the database is not.

The pipeline parks what it settles, unnumbered (migration 0032). While somebody here
follows a lane or a batch, the hub runs a numbering pass every NUMBER_EVERY_SECONDS (one statement,
which finds nothing to do at once when nothing is parked); the events it writes come back
as ordinary notices.

Notices are handled one at a time, in arrival order (commit order). A subscriber may
still see a seq twice or a hole (it subscribed while a range was being read): it drops
what it already has and fills holes from the database."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Awaitable, Callable

import asyncpg

from app.engine import events as store
from app.engine.events import Event
from app.engine.queries import statement

log = logging.getLogger("skiplock.events")

RECONNECT_SECONDS = 1.0
NUMBER_EVERY_SECONDS = 0.25  # live within a second, one pass for many settling statements
_LOST = object()  # the LISTEN connection went away


class Subscription:
    """One client's place in one room: a bounded queue of events newer than `cursor`."""

    def __init__(self, room: str, cursor: int, limit: int) -> None:
        self.room = room
        self.cursor = cursor          # the last seq handed to the client
        self.limit = limit
        self.behind = False           # events were dropped: catch up from the database
        self._queue: deque[Event] = deque()
        self._wake = asyncio.Event()

    def offer(self, events: list[Event]) -> None:
        if self.behind:
            return
        for event in events:
            if event.seq <= self.cursor or (self._queue and event.seq <= self._queue[-1].seq):
                continue
            if len(self._queue) >= self.limit:
                self.fell_behind()
                return
            self._queue.append(event)
        if self._queue:
            self._wake.set()

    def fell_behind(self) -> None:
        self.behind = True
        self._queue.clear()
        self._wake.set()

    async def wait(self) -> list[Event] | None:
        """The queued events in order; None when the holder must catch up from the
        database first (it fell behind, or the next queued event is not cursor + 1)."""
        await self._wake.wait()
        self._wake.clear()
        if self.behind:
            self.behind = False
            return None
        batch = [e for e in self._queue if e.seq > self.cursor]
        self._queue.clear()
        if batch and batch[0].seq != self.cursor + 1:
            return None
        return batch


class EventHub:
    """Owned by the app: `subscribe` starts the listener on first use; `close` stops it."""

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]],
                 pool: Callable[[], Awaitable[asyncpg.Pool]], queue: int) -> None:
        self._connect = connect
        self._pool = pool
        self._queue_limit = queue
        self._rooms: dict[str, set[Subscription]] = {}
        self._notices: asyncio.Queue = asyncio.Queue(maxsize=10_000)  # payloads, _LOST, None: stop
        self._closing = False
        self._lost = False
        self._conn_lock = asyncio.Lock()  # the LISTEN connection also registers watched rooms
        self._task: asyncio.Task | None = None
        self._numbering: asyncio.Task | None = None
        self._conn: asyncpg.Connection | None = None
        self.listening = asyncio.Event()

    @contextlib.asynccontextmanager
    async def subscribe(self, room: str, cursor: int):
        """A subscription to `room` whose cursor starts at `cursor`; registered before
        the holder's first read from the database, so nothing committed afterwards is missed."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="skiplock-event-hub")
        sub = Subscription(room, cursor, self._queue_limit)
        first = room not in self._rooms
        self._rooms.setdefault(room, set()).add(sub)
        try:
            await asyncio.wait_for(self.listening.wait(), timeout=10)
            if first:
                await self._watch("event_watch_add", room)
            if self._follows_numbered_rooms() and (self._numbering is None or self._numbering.done()):
                self._numbering = asyncio.create_task(self._number_settled(), name="skiplock-event-numbering")
            yield sub
        finally:
            subs = self._rooms.get(room)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._rooms[room]
                    with contextlib.suppress(Exception):
                        await self._watch("event_watch_remove", room)

    async def _watch(self, name: str, room: str) -> None:
        """Register (or drop) `room` as followed by this listener: only followed rooms
        NOTIFY (migration 0021, event_watch)."""
        async with self._conn_lock:
            if self._conn is not None and not self._conn.is_closed():
                await self._conn.execute(*statement(name).bind(room=room))

    def _on_notify(self, conn, pid, channel, payload) -> None:
        try:
            self._notices.put_nowait(payload)
        except asyncio.QueueFull:
            self._everyone_behind()  # the hub itself cannot keep up: everyone rereads

    def _everyone_behind(self) -> None:
        for subs in self._rooms.values():
            for sub in subs:
                sub.fell_behind()

    async def _listen(self) -> None:
        self._lost = False
        conn = await self._connect()
        conn.add_termination_listener(self._on_lost)
        await conn.add_listener(store.NOTIFY_CHANNEL, self._on_notify)
        async with self._conn_lock:
            self._conn = conn
            await conn.execute(*statement("event_watch_forget_gone").bind())
            for room in list(self._rooms):  # after a reconnect: the rooms followed already
                await conn.execute(*statement("event_watch_add").bind(room=room))
        self.listening.set()

    def _on_lost(self, conn) -> None:
        self._lost = True
        with contextlib.suppress(asyncio.QueueFull):
            self._notices.put_nowait(_LOST)

    async def _run(self) -> None:
        while not self._closing:
            try:
                await self._listen()
                while True:
                    payload = await self._notices.get()
                    if payload is None:
                        return
                    if payload is _LOST or self._lost:
                        raise ConnectionError("the LISTEN connection was closed")
                    await self._deliver(payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # notices sent while we were away are lost: every subscriber rereads
                self.listening.clear()
                log.warning("event listener lost (%s: %s); reconnecting", type(exc).__name__, exc)
                self._everyone_behind()
                await self._drop_connection()
                await asyncio.sleep(RECONNECT_SECONDS)

    async def _deliver(self, payload: str) -> None:
        wanted = [(room, first, last) for room, first, last in store.parse_notice(payload)
                  if self._rooms.get(room)]
        if not wanted:
            return
        pool = await self._pool()
        # one more than a queue holds is enough to know a subscriber fell behind
        read = await store.read_between(pool, wanted, self._queue_limit + 1)
        for room, events in read.items():
            for sub in list(self._rooms.get(room, ())):
                sub.offer(events)

    def _follows_numbered_rooms(self) -> bool:
        return any(room.startswith(store.NUMBERED_IN_PASSES) for room in self._rooms)

    async def _number_settled(self) -> None:
        """Numbering passes while a lane's or a batch's room is followed here. A failure is
        logged once until a pass succeeds again (the database may be away for a while)."""
        failing = False
        while self._follows_numbered_rooms():
            await asyncio.sleep(NUMBER_EVERY_SECONDS)
            try:
                await store.number_settled(await self._pool())
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next pass, a reader or the run's heartbeat numbers it
                if not failing:
                    log.warning("numbering settled counts failed (%s: %s)", type(exc).__name__, exc)
                failing = True

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, timeout=5)
            self._task = None
        if self._numbering is not None:
            self._numbering.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._numbering
            self._numbering = None
        self.listening.clear()
        await self._drop_connection()
