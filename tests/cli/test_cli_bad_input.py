"""`skiplock`'s answers to input and surroundings that used to end in a traceback or in
"database unreachable": settings that cannot work (stopped at load, exit 2), arguments
that are not UTF-8, a stdout that is closed or whose reader left, rows that are not there
(exit 1), and the next page's command, which must continue the same listing."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from pathlib import Path

import pytest

from app.devdb import LocalPostgres, embedded_for_command
from app.settings import SettingsError, get_settings, load_settings
from tests import factories
from tests.cli.test_cli_operator import ok_json, one_line, skiplock

GOOD_DSNS = ["postgresql://u@h1:5432,h2:5433/db", "postgresql:///db?host=/var/run/postgresql",
             "postgres://u:p%40ss%3Aw@127.0.0.1/db", "postgresql://u:pw@db.example.com:6432/db?sslmode=require",
             "postgresql://u@[::1]:5432/db", "postgresql://localhost"]
BAD_DSNS = [("postgresql://x@host:notaport/db", "has a port that is not a number"),
            ("postgresql://x@[::1", "is not a URL like postgresql://"),
            ("notaurl", "must start with postgresql://"),
            ("postgresql://u@h:99999/db", "has a port that is not a number"),
            ("postgresql://u:p@ss@h/db", "write one in the user or password as %40"),
            # a password with / or ? in it, not percent-encoded: read as the port, or the query
            ("postgresql://u:Sup3r/S3cret@h/db", "as %40 %3A %2F %3F %23"),
            ("postgresql://u:Sup3r?S3cret=x&y@h/db", "as %40 %3A %2F %3F %23")]


@pytest.mark.parametrize("url", GOOD_DSNS)
def test_every_dsn_form_asyncpg_reads_is_accepted(url):
    settings = load_settings(database_url=url, database_direct_url=url, tenant_database_url=url)
    assert settings.database_url == settings.database_direct_url == settings.tenant_database_url == url


@pytest.mark.parametrize("variable", ["DATABASE_URL", "DATABASE_DIRECT_URL", "TENANT_DATABASE_URL"])
@pytest.mark.parametrize("bad, needle", BAD_DSNS)
def test_a_malformed_dsn_is_refused_when_settings_load(variable, bad, needle):
    given = {"database_url": "postgresql://u@h/db", variable.lower(): bad}
    with pytest.raises(SettingsError, match=f"^bad setting {variable}: ") as refused:
        load_settings(**given)
    said = str(refused.value)
    assert needle in said and not any(part in said for part in ("ss@h", "Sup3r", "S3cret", "notaport"))  # no part of it


def test_a_malformed_database_url_stops_the_command_in_one_line():
    result = skiplock("run-once", dsn="postgresql://x@host:notaport/db")  # it retried for 30 s
    one_line(result, 2, "bad setting DATABASE_URL: has a port that is not a number")


async def test_a_dotenv_that_is_not_utf8_is_one_line(pool, cli, tmp_path, monkeypatch):
    (tmp_path / ".env").write_bytes(b"DB_POOL_SIZE=5\nFOO=caf\xe9\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SKIPLOCK_ENV_FILE", ".env")  # the suite reads none (tests/__init__.py)
    one_line(await cli("status"), 2, ".env is not UTF-8 text")


@pytest.mark.parametrize("value, needle", [("", "LOCAL_DATA_DIR: is empty"), (" ", "LOCAL_DATA_DIR: is empty"),
                                           (b"/\xff", "LOCAL_DATA_DIR: is not UTF-8 text")])
async def test_local_data_dir_must_name_a_folder_in_utf8(pool, cli, tmp_path, monkeypatch, value, needle):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.setenv("LOCAL_DATA_DIR", os.fsdecode(bytes(tmp_path) + value) if isinstance(value, bytes) else value)
    one_line(await cli("status"), 2, needle)
    assert list(tmp_path.iterdir()) == []  # no cluster in the working directory, nor in the folder


async def test_an_unusable_local_data_dir_is_named(pool, cli, tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL")
    a_file = tmp_path / "file"
    a_file.write_text("")
    for folder, reason in [("/proc/skiplock-nope", "cannot make /proc/skiplock-nope: No such file or directory"),
                           (a_file, f"{a_file} is not a folder"),
                           (a_file / "data", f"cannot make {a_file}/data: Not a directory")]:
        monkeypatch.setenv("LOCAL_DATA_DIR", str(folder))
        get_settings.cache_clear()
        one_line(await cli("status"), 2, f"bad setting LOCAL_DATA_DIR: {reason}")


def test_the_embedded_server_is_stopped_whatever_the_command_raises(tmp_path):
    """Its postmaster.pid names the data directory, which need not be UTF-8: reading it
    failed, the server was never stopped."""
    data = Path(os.fsdecode(bytes(tmp_path) + b"/\xff"))
    try:
        with pytest.raises(ZeroDivisionError):
            with embedded_for_command(data, lambda _: None):
                LocalPostgres(data).start()
                1 / 0
        assert LocalPostgres(data).running_port() is None
    finally:  # without the fix, nothing else stops it
        pidfile = data / "pgdata" / "postmaster.pid"
        if pidfile.exists():
            os.kill(int(pidfile.read_bytes().split()[0]), signal.SIGQUIT)


@pytest.mark.parametrize("args", [["runs", "ls", "--trigger", "\udcff"], ["enqueue", "echo", "--dedupe-key", "\udcff"],
                                  ["user", "add", "\udcff@x.com"], ["key", "revoke", "slk_\udcff"]])
async def test_an_argument_that_is_not_utf8_is_bad_input(pool, cli, args):
    shown = repr(args[-1].encode("utf-8", "surrogateescape"))[1:]
    one_line(await cli(*args), 2, f"argument {len(args)}, {shown}, is not UTF-8 text")


async def test_a_payload_nested_past_the_parser_is_bad_input(pool, cli):
    for depth in (990, 5000):  # json.loads raised RecursionError
        deep = '{"a": ' + "[" * depth + "]" * depth + "}"
        one_line(await cli("enqueue", "echo", "--payload", deep), 2,
                 "--payload does not fit the 'echo' stage: payload: is nested more than 32 levels deep")


async def test_durations_past_any_interval_are_bad_input(pool, cli):
    for since in ("999999999999d", "99999999999999999999999999s", "36501d"):
        one_line(await cli("jobs", "retry", "--failed", "--since", since), 2, f"'{since}' is longer than 36500d")
    ok_json(await cli("jobs", "retry", "--failed", "--since", "36500d", "--json"))
    one_line(await cli("jobs", "retry", "--failed", "--since", "-1h"), 2, "goes as --since=VALUE")
    one_line(await cli("jobs", "ls", "--limit", "\u00b2"), 2, "--limit must be a whole number")  # not "_limit"


async def test_rows_that_are_not_there_exit_1(pool, cli):
    one_line(await cli("key", "create", "nobody@example.com"), 1, "no user nobody@example.com")
    one_line(await cli("key", "revoke", "slk_00000000"), 1, "no live key with prefix 'slk_00000000'")
    one_line(await cli("user", "add", "not-an-address"), 2, "is not an e-mail address")


async def test_a_reader_that_left_is_not_a_database_failure(dsn, pool):
    """`skiplock status | true`: exit quietly, as SIGPIPE would have it."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = skiplock("status", dsn=dsn, stdout=write)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (128 + signal.SIGPIPE, "")


async def test_a_closed_stdout_is_refused_before_the_command_acts(dsn, pool, cli):
    ok_json(await cli("user", "add", "ann@example.com"))
    one_line(skiplock("key", "create", "ann@example.com", dsn=dsn, stdout=None, preexec_fn=lambda: os.close(1)),
             2, "stdout is closed")
    assert await pool.fetchval("SELECT count(*) FROM api_keys") == 0  # no key nobody saw


async def _follow(cli, *args) -> tuple[list[list[str]], list[str]]:
    """The table rows of a listing and of the page its `more:` line prints; that line's words."""
    first = await cli(*args)
    assert first.returncode == 0, first.stderr
    *rows, more = first.stdout.splitlines()
    words = shlex.split(more.removeprefix("more: "))
    assert words[0] == "skiplock", more
    second = await cli(*words[1:])
    assert second.returncode == 0, second.stderr
    return [r.split() for r in rows[1:] + second.stdout.splitlines()[1:]], words


async def test_the_next_page_command_continues_the_same_listing(pool, cli):
    await factories.jobs(pool, "echo", 3)
    await factories.jobs(pool, "notify", 3)
    rows, words = await _follow(cli, "jobs", "ls", "--type", "echo", "--status", "pending", "--limit", "2")
    assert [r[1] for r in rows] == ["echo"] * 3 and words.count("--limit") == 1

    runs = {trigger: [await factories.run(pool, trigger) for _ in range(2)] for trigger in ("cron", "worker")}
    rows, _ = await _follow(cli, "runs", "ls", "--trigger", "worker", "--limit", "1")
    assert [(r[0], r[1]) for r in rows] == [(str(i), "worker") for i in reversed(runs["worker"])]
    # a value that looks like an option (run-once --trigger takes any text) stays the filter's
    odd = [await factories.run(pool, "-x") for _ in range(2)]
    rows, _ = await _follow(cli, "runs", "ls", "--trigger=-x", "--limit", "1")
    assert [(r[0], r[1]) for r in rows] == [(str(i), "-x") for i in reversed(odd)]


@pytest.mark.parametrize("args", [["run-once"], ["jobs", "ls"], ["runs", "ls"], ["status"], ["enqueue", "echo"]])
async def test_an_unmigrated_database_says_to_migrate(new_database, args):
    """Not 'unreachable': the database answered, it only has no tables yet."""
    out = await asyncio.to_thread(skiplock, *args, dsn=await new_database())
    assert (out.returncode, out.stderr) == (
        1, "error: the database has no Skiplock tables yet: run `skiplock migrate` first\n")


def test_help_is_given_with_a_bad_setting():
    """Help is what one reads to fix a setting: it is not refused for one."""
    env = {"DB_POOL_SIZE": "abc"}
    helped = skiplock("jobs", "ls", "--help", dsn=None, env=env)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: skiplock jobs ls")
    assert helped.stderr.startswith("error: bad setting DB_POOL_SIZE")
    refused = skiplock("jobs", "ls", dsn=None, env=env)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith("error: bad setting DB_POOL_SIZE") and refused.stderr.count("\n") == 1


@pytest.mark.parametrize("key, needle", [("k" * 201, "(got 201)"), ("", "(got 0)"),
                                         (os.urandom(10_000).hex(), "1 to 200 characters")])
async def test_enqueue_takes_the_dedupe_keys_post_jobs_takes(pool, cli, key, needle):
    """A key longer than POST /jobs takes was sent to the index, which refused the random one
    as 'database unreachable or failing: index row requires … bytes' (exit 1)."""
    one_line(await cli("enqueue", "echo", f"--dedupe-key={key}"), 2, needle)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    assert ok_json(await cli("enqueue", "echo", "--dedupe-key", "k" * 200))["created"] is True
