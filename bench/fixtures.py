"""Accounts and campaigns for the benchmarks: users on each plan, one campaign each."""

from __future__ import annotations

import uuid


async def campaigns(conn, n: int) -> list[uuid.UUID]:
    """n active campaigns, each owned by its own user; plans cycle through PLANS
    (free, standard, pro, free, ...). Returns the campaign ids in that order."""
    # imported here: the bench's arithmetic (bench/shapes.py, tested without the example
    # plug-in) imports this module and must not load the example
    from app.outreach.plans import PLANS

    plans = list(PLANS)
    users = [uuid.uuid4() for _ in range(n)]
    ids = [uuid.uuid4() for _ in range(n)]
    async with conn.transaction():
        # the audit trigger on accounts wants to know who acts (ignored where there is none)
        await conn.execute("SELECT set_config('app.current_actor_kind', 'system', true), "
                           "set_config('app.current_actor_id', 'bench', true)")
        await conn.execute(
            "INSERT INTO users (id, email) SELECT u, 'bench-' || u || '@example.invalid' "
            "FROM unnest($1::uuid[]) AS u", users)
        await conn.execute(
            "INSERT INTO subscriptions (user_id, plan) SELECT * FROM unnest($1::uuid[], $2::text[])",
            users, [plans[i % len(plans)] for i in range(n)])
        await conn.execute(
            "INSERT INTO campaigns (id, user_id, name) "
            "SELECT c, u, 'bench' FROM unnest($1::uuid[], $2::uuid[]) AS x(c, u)", ids, users)
    return ids
