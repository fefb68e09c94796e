"""Idempotency keys: the stored first answer of a side-effecting request.

A request with a key first claims it (one insert; the one that wins acts), then stores
its answer or, when it has none worth keeping, releases the key. Nothing here knows
HTTP beyond "a status, a few headers and a body"."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from app.engine.queries import statement


@dataclass(frozen=True)
class Stored:
    """What is known about a key someone else claimed."""
    method: str
    path: str
    fingerprint: str
    status: int | None          # None: the first request is still in progress
    headers: dict[str, str]
    body: bytes
    held_seconds: float         # how long the current holder has had it

    @property
    def done(self) -> bool:
        return self.status is not None


async def claim(db, key: str, method: str, path: str, fingerprint: str) -> uuid.UUID | None:
    """A claim token when this request now holds the key; None when someone had it first."""
    token = uuid.uuid4()
    return await db.fetchval(*statement("idempotency_claim").bind(key=key, method=method, path=path,
                                                                  fingerprint=fingerprint, token=token))


async def get(db, key: str) -> Stored | None:
    row = await db.fetchrow(*statement("idempotency_get").bind(key=key))
    if row is None:
        return None
    return Stored(row["method"], row["path"], row["fingerprint"], row["status"],
                  row["headers"] or {}, bytes(row["body"] or b""), row["held_seconds"])


async def take_over(db, key: str, fingerprint: str, older_than_seconds: float) -> uuid.UUID | None:
    """Claim a key whose holder has been in progress too long (it died); None otherwise."""
    token = uuid.uuid4()
    return await db.fetchval(*statement("idempotency_take_over").bind(
        key=key, token=token, fingerprint=fingerprint, older_than_seconds=float(older_than_seconds)))


async def store(db, key: str, token: uuid.UUID, status: int, headers: dict[str, Any], body: bytes) -> bool:
    result = await db.execute(*statement("idempotency_store").bind(key=key, token=token, status=status,
                                                                   headers=headers, body=body))
    return result.endswith(" 1")


async def release(db, key: str, token: uuid.UUID) -> None:
    await db.execute(*statement("idempotency_release").bind(key=key, token=token))


async def expire(db, retention_hours: float, limit: int) -> int:
    """Delete up to `limit` keys older than the retention; returns how many went."""
    result = await db.execute(*statement("idempotency_expire").bind(retention_hours=float(retention_hours),
                                                                    limit=limit))
    return int(result.split()[-1])
