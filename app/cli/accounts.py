"""`skiplock user ...` and `skiplock key ...`: accounts and API keys.

Changes are made as the actor `system`/`cli`, so the audit log says where they came from."""

from __future__ import annotations

import argparse
import json

from app.plugin import CommandError, CommandFailed
from app.engine import accounts
from app.engine.db import connect
from app.engine.tenancy import Actor, act_as

CLI_ACTOR = Actor("system", "cli")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    u = sub.add_parser("user", help="users (the tenants API keys belong to)")
    usub = u.add_subparsers(dest="user_command", required=True)
    ua = usub.add_parser("add", help="add a user (nothing changes if they exist)")
    ua.add_argument("email")
    k = sub.add_parser("key", help="API keys")
    ksub = k.add_subparsers(dest="key_command", required=True)
    kc = ksub.add_parser("create", help="create an API key for a user; it is shown once")
    kc.add_argument("email")
    kc.add_argument("--admin", action="store_true", help="the key sees every tenant")
    kr = ksub.add_parser("revoke", help="revoke an API key by its prefix (slk_xxxxxxxx)")
    kr.add_argument("prefix")


async def run(args, dsn: str) -> str:
    """The command's output line; a bad e-mail is bad input (exit 2), no such user or key a
    failure (exit 1), as `jobs show` with no such job."""
    conn = await connect(dsn)
    try:
        async with conn.transaction():
            await act_as(conn, CLI_ACTOR)
            if args.command == "user":
                try:
                    email = accounts.check_email(args.email)
                except accounts.AccountError as exc:
                    raise CommandError(str(exc)) from None
                user_id = await accounts.add_user(conn, email)
                return json.dumps({"id": str(user_id), "email": email})
            if args.key_command == "create":
                try:
                    key = await accounts.create_key(conn, args.email.strip().lower(), args.admin)
                except accounts.AccountError as exc:  # no such user
                    raise CommandFailed(str(exc)) from None
                return json.dumps({"key": key.key, "prefix": key.prefix, "admin": key.admin,
                                   "note": "shown once: store it now"})
            if not await accounts.revoke_key(conn, args.prefix):
                raise CommandFailed(f"no live key with prefix {args.prefix!r}")
            return json.dumps({"revoked": args.prefix})
    finally:
        await conn.close()
