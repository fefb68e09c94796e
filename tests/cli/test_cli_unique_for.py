"""`skiplock enqueue --unique-for` and `--replace`: the answers POST /jobs gives, and one
readable line for bad input."""

from __future__ import annotations

import uuid

import pytest

from tests.cli.test_cli_operator import ok_json, one_line


async def test_a_window_holds_the_key_and_replace_debounces(pool, cli):
    first = ok_json(await cli("enqueue", "echo", "--dedupe-key", "digest", "--unique-for", "3600"))
    assert (first["created"], first["replaced"]) == (True, False)
    await pool.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1",
                       uuid.UUID(first["job"]["id"]))
    inside = ok_json(await cli("enqueue", "echo", "--dedupe-key", "digest"))
    assert (inside["created"], inside["job"]["id"], inside["job"]["status"]) == (False, first["job"]["id"], "done")

    pending = ok_json(await cli("enqueue", "echo", "--dedupe-key", "sync", "--payload", '{"message": "a"}'))
    replaced = ok_json(await cli("enqueue", "echo", "--dedupe-key", "sync", "--payload", '{"message": "b"}',
                                 "--in", "600", "--replace"))
    assert (replaced["created"], replaced["replaced"]) == (False, True)
    assert replaced["job"]["id"] == pending["job"]["id"] and replaced["job"]["payload"] == {"message": "b"}
    assert replaced["job"]["runAfter"] > pending["job"]["runAfter"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2


@pytest.mark.parametrize("args, needle", [
    (["--unique-for", "60"], "dedupe key"),
    (["--replace"], "dedupe key"),
    (["--dedupe-key", "k", "--unique-for", "-1"], "--unique-for must be 0 to"),
    (["--dedupe-key", "k", "--unique-for", "nan"], "--unique-for must be 0 to"),
    (["--dedupe-key", "k", "--unique-for", "an-hour"], "--unique-for"),
])
async def test_bad_windows_are_one_line(pool, cli, args, needle):
    one_line(await cli("enqueue", "echo", *args), 2, needle)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
