"""Events as they commit: the WebSocket replays, then streams a change made in another
process (LISTEN/NOTIFY on its own connection); its ways to authenticate; a key revoked
while its stream is busy; and a subscriber too slow for its bounded queue, which gets a
gap instead of more memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import subprocess
import sys

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from app.api import events as events_api
from app.engine import events as store
from app.engine.db import connect as db_connect
from app.events.hub import EventHub
from tests.events.conftest import person_enqueues, pool_getter, revoke

WAIT = 10  # seconds: generous on a loaded machine; the path under test never polls

ENQUEUE_ELSEWHERE = """
import asyncio, sys, asyncpg
async def main():
    conn = await asyncpg.connect(sys.argv[1])
    async with conn.transaction():
        await conn.execute("SELECT set_config('app.current_actor_kind', 'system', true)")
        await conn.execute("INSERT INTO jobs (type, lane) VALUES ('record', $1)", sys.argv[2])
    await conn.close()
asyncio.run(main())
"""


async def _recv(ws) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), WAIT))


async def test_websocket_replays_then_streams_across_processes(pool, dsn, serve, tenants):
    a, b, admin = tenants
    await person_enqueues(pool, a.lane, 3)
    app, host = await serve(events_replay=5)
    room = f"lane:{a.lane}"
    async with connect(f"ws://{host}/events/ws?room={room}&after=1",
                       additional_headers={"Authorization": f"Bearer {a.key}"}) as ws:
        assert [(await _recv(ws))["seq"] for _ in range(2)] == [2, 3]
        assert await _recv(ws) == {"type": "live", "room": room, "seq": 3}
        # another process commits a change: it arrives here through NOTIFY, not a poll
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", ENQUEUE_ELSEWHERE, dsn, str(a.lane)],
                                       capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        event = await _recv(ws)
        assert (event["room"], event["seq"], event["type"]) == (room, 4, "jobs.created")

    # a browser: the key as a subprotocol, never in the URL; the account room, replayed
    # from a cursor older than the window: the gap comes first
    await person_enqueues(pool, a.lane, 3)
    async with connect(f"ws://{host}/events/ws?room=account:{a.user_id}&after=0",
                       subprotocols=["skiplock.events", f"bearer.{a.key}"]) as ws:
        assert ws.subprotocol == "skiplock.events"
        first = await _recv(ws)
        assert first == {"type": "gap", "room": f"account:{a.user_id}", "after": 0, "oldest": 3}
        assert [(await _recv(ws))["seq"] for _ in range(5)] == [3, 4, 5, 6, 7]
    # or the first message
    async with connect(f"ws://{host}/events/ws?room=lane:{b.lane}") as ws:
        await ws.send(json.dumps({"type": "auth", "key": b.key}))
        assert await _recv(ws) == {"type": "live", "room": f"lane:{b.lane}", "seq": 0}

    # refused: one error shape, then a close code saying why
    for url, headers, code, status in [
        (f"/events/ws?room={room}", {"Authorization": "Bearer slk_00000000_nope"}, 4401, "unauthorized"),
        (f"/events/ws?room={room}", {"Authorization": f"Bearer {b.key}"}, 4404, "not_found"),
        ("/events/ws?room=system", {"Authorization": f"Bearer {a.key}"}, 4404, "not_found"),
        (f"/events/ws?room={room}&key={a.key}", {}, 4400, "unknown_parameter"),
    ]:
        async with connect(f"ws://{host}{url}", additional_headers=headers) as ws:
            message = await _recv(ws)
            assert message["type"] == "error" and message["error"]["code"] == status
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WAIT)
            assert ws.close_code == code


async def test_a_revoked_key_stops_its_stream_while_events_flow(pool, serve, tenants, monkeypatch):
    """Live events reach the socket from the hub, not through a query as the tenant, so a
    busy room never asked about the key again: revoked (leaked, say), it kept reading."""
    monkeypatch.setattr(events_api, "RECHECK_SECONDS", 1.0)
    a, _, _ = tenants
    _, host = await serve()
    room = f"lane:{a.lane}"

    async def keep_the_room_busy():
        while True:
            await person_enqueues(pool, a.lane)
            await asyncio.sleep(0.2)

    async with connect(f"ws://{host}/events/ws?room={room}",
                       additional_headers={"Authorization": f"Bearer {a.key}"}) as ws:
        assert (await _recv(ws))["type"] == "live"
        busy = asyncio.create_task(keep_the_room_busy())
        try:
            assert (await _recv(ws))["type"] == "jobs.created"     # streaming
            assert await revoke(pool, a.key)
            revoked_at = asyncio.get_running_loop().time()
            while True:  # events committed before the check may still come; then the refusal
                message = await _recv(ws)
                if message["type"] != "jobs.created":
                    break
                assert asyncio.get_running_loop().time() - revoked_at < WAIT
            assert message["type"] == "error" and message["error"]["code"] == "unauthorized"
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WAIT)
            assert ws.close_code == 4401
        finally:
            busy.cancel()


async def _fill_room(pool, room: str, n: int) -> None:
    """`n` events in `room`, written as the triggers would leave them (a long replay)."""
    await pool.execute("INSERT INTO events (room, seq, type, data) SELECT $1, g, 'test.padding', "
                       "jsonb_build_object('pad', repeat('x', 300)) FROM generate_series(1, $2::int) g", room, n)
    await pool.execute("INSERT INTO event_rooms (room, head_seq) VALUES ($1, $2) "
                       "ON CONFLICT (room) DO UPDATE SET head_seq = excluded.head_seq", room, n)


async def test_a_revoked_key_stops_its_stream_in_the_middle_of_a_replay(pool, serve, tenants, monkeypatch):
    """A client reading slower than its replay never reached the live loop, where the key
    was asked for: revoked, it went on reading for as long as it liked."""
    monkeypatch.setattr(events_api, "RECHECK_SECONDS", 1.0)
    a, _, _ = tenants
    room = f"lane:{a.lane}"
    await _fill_room(pool, room, 3000)  # ~1 MB: more than the sockets hold for a reader that waits
    _, host = await serve(events_replay=5000)
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(tuple_host(host))
    async with connect(f"ws://{host}/events/ws?room={room}&after=0", sock=slow, max_queue=1,
                       additional_headers={"Authorization": f"Bearer {a.key}"}) as ws:
        first = await _recv(ws)
        assert first["seq"] == 1
        assert await revoke(pool, a.key)
        await asyncio.sleep(2.5)  # the server is blocked on the socket, mid-replay
        kinds, last = [], first
        with pytest.raises(ConnectionClosed):
            while True:
                last = await _recv(ws)
                kinds.append(last["type"])
    assert last["type"] == "error" and last["error"]["code"] == "unauthorized"
    assert ws.close_code == 4401
    # cut off in the replay: not all of it, and no false gap (the next page, read as a
    # tenant whose key is gone, looked like a room that had lost its events)
    assert "gap" not in kinds and "live" not in kinds and len(kinds) < 3000


def tuple_host(host: str) -> tuple[str, int]:
    name, port = host.rsplit(":", 1)
    return name, int(port)


async def test_a_socket_gone_before_its_key_is_refused_quietly(pool, serve, tenants, caplog):
    """Closed before the first message that would carry the key: no error and no
    traceback in the server's log (anyone could fill it so)."""
    a, _, _ = tenants
    _, host = await serve()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            async with connect(f"ws://{host}/events/ws?room=lane:{a.lane}"):
                pass  # no Authorization header, no subprotocol: the server waits for a message
        await asyncio.sleep(0.5)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_one_key_holds_at_most_ten_streams_in_a_process(pool, serve, tenants):
    """A thousand sockets on one key, each replaying its room, stalled every other tenant's
    requests for minutes: a key's streams are capped (STREAMS_PER_KEY), other keys unaffected."""
    a, b, _ = tenants
    _, host = await serve()

    def follow(key: str):
        return connect(f"ws://{host}/events/ws?room=account:{a.user_id if key == a.key else b.user_id}",
                       additional_headers={"Authorization": f"Bearer {key}"})

    async with contextlib.AsyncExitStack() as held:
        sockets = [await held.enter_async_context(follow(a.key)) for _ in range(events_api.STREAMS_PER_KEY)]
        for ws in sockets:
            assert (await _recv(ws))["type"] == "live"
        async with follow(a.key) as extra:
            message = await _recv(extra)
            assert message["type"] == "error" and message["error"]["code"] == "too_many_streams"
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(extra.recv(), WAIT)
            assert extra.close_code == 4429
        async with follow(b.key) as other:                          # another key is not held back
            assert (await _recv(other))["type"] == "live"
        await sockets[0].close()
        for _ in range(WAIT * 20):                                  # a closed stream frees its place
            async with follow(a.key) as again:
                if (await _recv(again))["type"] == "live":
                    break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("a closed stream's place was never freed")


async def test_sockets_waiting_for_their_key_are_capped_in_a_process(pool, serve, tenants, monkeypatch):
    """Anyone may open a socket without a key: it waits up to AUTH_WAIT_SECONDS for a first
    message to carry one. Thousands of them held thousands of sockets and tasks; past
    KEYLESS_WAITING_MAX the next is refused at once, and a socket with its key in a header
    is never held back by them."""
    a, _, _ = tenants
    monkeypatch.setattr(events_api, "KEYLESS_WAITING_MAX", 3)
    _, host = await serve()
    url = f"ws://{host}/events/ws?room=lane:{a.lane}"
    async with contextlib.AsyncExitStack() as held:
        waiting = [await held.enter_async_context(connect(url)) for _ in range(3)]
        await asyncio.sleep(0.2)                                    # all three are waiting now
        async with connect(url) as extra:
            message = await _recv(extra)
            assert message["type"] == "error" and message["error"]["code"] == "too_many_waiting"
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(extra.recv(), WAIT)
            assert extra.close_code == 4429
        async with connect(url, additional_headers={"Authorization": f"Bearer {a.key}"}) as keyed:
            assert (await _recv(keyed))["type"] == "live"
        await waiting[0].send(json.dumps({"type": "auth", "key": a.key}))   # one stops waiting
        assert (await _recv(waiting[0]))["type"] == "live"
        async with connect(url) as next_one:                        # and frees its place
            await next_one.send(json.dumps({"type": "auth", "key": a.key}))
            assert (await _recv(next_one))["type"] == "live"


async def test_slow_subscriber_gets_a_gap_not_memory(pool, dsn, tenants):
    a, _, _ = tenants
    hub = EventHub(lambda: db_connect(dsn), pool_getter(pool), queue=3)
    room = f"lane:{a.lane}"
    try:
        async with hub.subscribe(room, 0) as sub:
            await person_enqueues(pool, a.lane, 2)
            seen = []
            while len(seen) < 2:                               # a reader that keeps up gets each event
                batch = await asyncio.wait_for(sub.wait(), WAIT)
                seen += [e.seq for e in batch]
                sub.cursor = seen[-1]
            assert seen == [1, 2]
            await person_enqueues(pool, a.lane, 8)             # then it stops reading: 8 > its queue of 3
            for _ in range(WAIT * 20):
                if sub.behind:
                    break
                await asyncio.sleep(0.05)
            assert sub.behind and len(sub._queue) == 0        # dropped, not kept
            assert await sub.wait() is None                    # the holder must catch up from the database
            page = await store.read_after(pool, room, sub.cursor, 5, 100)
            assert page.gap == {"type": "gap", "room": room, "after": 2, "oldest": 6}
            assert [e.seq for e in page.events] == [6, 7, 8, 9, 10] and page.cursor == 10
    finally:
        await hub.close()


async def test_a_websocket_on_a_refused_tenant_login_is_closed_not_served(pool, dsn, serve, tenants, unfit_login):
    a, _, admin = tenants
    _, host = await serve(tenant_database_url=await unfit_login("IN ROLE skiplock_api, skiplock_admin"))
    async with connect(f"ws://{host}/events/ws?room=lane:{a.lane}",
                       additional_headers={"Authorization": f"Bearer {a.key}"}) as ws:
        message = await _recv(ws)
        assert message["type"] == "error" and message["error"]["code"] == "tenant_login_refused"
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT)
        assert ws.close_code == 1011
    # the operator's key is served on the owner's login meanwhile
    async with connect(f"ws://{host}/events/ws?room=system",
                       additional_headers={"Authorization": f"Bearer {admin.key}"}) as ws:
        assert (await _recv(ws))["type"] in ("live", "gap", "jobs.created", "run.started")


@pytest.mark.parametrize("locked", ["lanes", "event_rooms"])  # the room check; the replay
async def test_a_stream_held_on_a_lock_is_cut_at_the_tenant_statement_limit(pool, serve, tenants, locked):
    """A stream's reads are a tenant's statements too: they ran with no limit, so a
    socket held on a lock kept its tenant connection for as long as the lock lasted (ten
    per key), where every HTTP route is cut at TENANT_STATEMENT_TIMEOUT_SECONDS."""
    a, _, _ = tenants
    await person_enqueues(pool, a.lane)
    _, host = await serve(tenant_statement_timeout_seconds=0.2)
    follow = f"ws://{host}/events/ws?room=lane:{a.lane}"
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute(f"LOCK TABLE {locked} IN ACCESS EXCLUSIVE MODE")
        async with connect(follow, additional_headers={"Authorization": f"Bearer {a.key}"}) as ws:
            message = json.loads(await asyncio.wait_for(ws.recv(), 3))  # not for as long as the lock
            assert message["type"] == "error" and message["error"]["code"] == "statement_timeout", message
            assert "0.2 s a statement" in message["error"]["message"]
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WAIT)
            assert ws.close_code == 1011
    async with connect(follow, additional_headers={"Authorization": f"Bearer {a.key}"}) as ws:
        assert (await _recv(ws))["seq"] == 1  # the lock gone, the same stream replays
