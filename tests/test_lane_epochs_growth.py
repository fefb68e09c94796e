"""Each fold writes a lane's row into the next epoch and deletes the journal lines it folded,
and a held snapshot keeps every version and line. The statements that look a lane's row up
by its key (the fold, and the count that runs in every claim, ending and enqueue) read it
newest first off job_lanes_pkey, and the fold takes each lane's lines from its mark, however
many folds lie behind (migration 0063)."""

from __future__ import annotations

from app.engine import jobs as q
from app.engine.db import connect
from app.engine.jobs import NewJob
from bench.explain import buffers_read, explain


async def _buffers(pool, sql: str, *args) -> int:
    """The statement, rolled back: the buffers it and every statement inside it read."""
    async with pool.acquire() as conn:
        return buffers_read(await explain(conn, sql, args, options="ANALYZE, BUFFERS, FORMAT JSON"))


async def test_a_lanes_row_is_found_newest_first_after_hundreds_of_folds_with_a_snapshot_held(pool, dsn):
    holder = await connect(dsn)
    try:
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jobs")
        lanes = [r[0] for r in await pool.fetch(
            "INSERT INTO lanes (id) SELECT gen_random_uuid() FROM generate_series(1, 20) RETURNING id")]

        async def folds(n: int) -> None:
            for _ in range(n):
                await q.enqueue_many(pool, [NewJob(type="t", lane=lane) for lane in lanes])
                await pool.execute("SELECT job_lanes_fold()")

        async def measured() -> tuple[int, int]:
            # as autovacuum would: statistics that see a live row per lane and a few lines
            await pool.execute("ANALYZE")
            await q.enqueue_many(pool, [NewJob(type="t", lane=lane) for lane in lanes])
            fold = await _buffers(pool, "SELECT job_lanes_fold()")
            n = len(lanes)
            count = await _buffers(
                pool, "SELECT job_lanes_count($1, $2, $3, $3, t, t, t, t, false) "
                      "FROM array_fill(NULL::timestamptz, ARRAY[$4::int]) AS t",
                ["t"] * n, lanes, [0] * n, n)
            return fold, count

        await folds(10)
        few = await measured()
        await folds(400)
        many = await measured()
        assert many[0] <= 2 * few[0] + 20 and many[1] <= 2 * few[1] + 20, (few, many)
    finally:
        await holder.close()
