"""Users and API keys.

A key looks like `slk_<8 hex>_<secret>`. Its first part, the prefix, is stored in clear to
find and recognise it; the whole key only as a SHA-256 digest (keys are long random
strings, so a fast digest is enough), and it is shown once, when created."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import uuid
from dataclasses import dataclass

import asyncpg

from app.engine.queries import statement
from app.engine.tenancy import Actor, KeyProof

KEY_SHAPE = re.compile(r"^(slk_[0-9a-f]{8})_[A-Za-z0-9_-]{32,64}$")
_EMAIL = re.compile(r"^[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]{1,255}$")


class AccountError(Exception):
    """A readable reason the account change cannot happen."""


@dataclass(frozen=True)
class NewKey:
    key: str      # the whole key: shown once, never stored
    prefix: str
    admin: bool


def check_email(email: str) -> str:
    """The address, trimmed and lower-cased; AccountError if it is not one."""
    email = (email or "").strip().lower()
    if not _EMAIL.match(email) or len(email) > 320:
        raise AccountError(f"{email!r} is not an e-mail address")
    return email


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def make_key() -> tuple[str, str]:
    prefix = f"slk_{secrets.token_hex(4)}"
    return f"{prefix}_{secrets.token_urlsafe(32)}", prefix


async def add_user(conn, email: str) -> uuid.UUID:
    """Create the user (or find them). Call inside an actor's transaction. (Plans and the
    like are a plug-in's: the example keeps them in its own subscriptions table.)"""
    row = await conn.fetchrow(*statement("user_ensure").bind(email=email))
    return row["id"]


async def create_key(conn, email: str, admin: bool = False) -> NewKey:
    user = await conn.fetchrow(*statement("user_by_email").bind(email=email))
    if user is None:
        raise AccountError(f"no user {email}; add one first: skiplock user add {email}")
    key, prefix = make_key()
    await conn.fetchrow(*statement("api_key_insert").bind(user_id=user["id"], prefix=prefix,
                                                          digest=digest(key), admin=admin))
    return NewKey(key, prefix, admin)


async def revoke_key(conn, prefix: str) -> bool:
    return await conn.fetchval(*statement("api_key_revoke").bind(prefix=prefix)) is not None


async def authenticate(db, key: str) -> Actor | None:
    """The actor a presented key stands for, or None (malformed, unknown or revoked)."""
    shape = KEY_SHAPE.match(key or "")
    if shape is None:
        return None
    row: asyncpg.Record | None = await db.fetchrow(*statement("api_key_lookup").bind(prefix=shape.group(1)))
    presented = digest(key)
    if row is None or not hmac.compare_digest(row["hash"], presented):
        return None
    return Actor("admin" if row["admin"] else "user", str(row["user_id"]), row["user_id"], row["email"],
                 KeyProof(shape.group(1), presented))
