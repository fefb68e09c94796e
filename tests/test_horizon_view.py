"""What holds back VACUUM's horizon, as the operator sees it: a REPEATABLE READ snapshot
held on another connection is named (pid, application_name, how long, how many xids
behind) by the named query, /metrics, `skiplock status` and the dashboard's GET /stats
and page, with the dead row versions VACUUM could not remove behind it; once it ends the
gauge drops and VACUUM removes them. A prepared transaction and a logical slot are named
too (a server of the test's own, with both switched on), and so is the slot of a real
hot standby with hot_standby_feedback whose held snapshot keeps the primary's VACUUM
from removing rows. The alert rules in docs/alerts
pass `promtool check rules`, and the two horizon alerts fire after their wait (`promtool test rules`)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import asyncpg
import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.api.main import create_app
from app.cli import main as cli_main
from app.cli.status import horizon_text
from app.devdb import SYSTEM_USER, _bin_dir, _free_port
from app.engine import queue_stats
from app.engine.db import connect
from app.settings import get_settings, load_settings
from tests import factories
from tests.events.test_dashboard_browser import CHROMIUM, Served, _open, browser  # noqa: F401 (a fixture)
from tests.own_server import migrated_server, pg_ctl
from tests.sample_stages import STAGES
from tests.tenant_login import tenant_login_url

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "alerts" / "skiplock.rules.yml"
PROMTOOL = shutil.which("promtool")
APP_NAME = "horizon-report"
TOKEN = "metrics-token-for-tests-0123456789ab"  # 32+: a shorter one is refused (tests/credentials.py)
DELETED = 50


@asynccontextmanager
async def held_snapshot(dsn: str):
    """A report's connection: REPEATABLE READ, its snapshot taken by a first SELECT and
    held until the block ends. Yields its pid."""
    conn = await asyncpg.connect(dsn, server_settings={"application_name": APP_NAME})
    try:
        tr = conn.transaction(isolation="repeatable_read", readonly=True)
        await tr.start()
        await conn.fetchval("SELECT count(*) FROM jobs")
        yield conn.get_server_pid()
        await tr.rollback()
    finally:
        await conn.close()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, tuple], float]:
    answer = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    return samples(answer.text)


async def status(dsn: str, monkeypatch, *args: str) -> str:
    """`skiplock status ARGS`, in-process as the installed script runs it; its stdout."""
    monkeypatch.setenv("DATABASE_URL", dsn)
    monkeypatch.setenv("PIPELINE_PLUGINS", "")
    monkeypatch.setenv("PIPELINE_STAGES", "tests.sample_stages:STAGES")
    get_settings.cache_clear()

    def call() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli_main(["status", *args]) == 0
        return out.getvalue()
    try:
        return await asyncio.to_thread(call)
    finally:
        get_settings.cache_clear()


async def stats(client: httpx.AsyncClient, key: str):
    answer = await client.get("/stats", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return answer.json()["horizon"]


async def dead_after_vacuum(pool) -> int:
    """VACUUM jobs, then its dead row versions: those it could not remove."""
    await pool.execute("VACUUM jobs")
    return await pool.fetchval("SELECT n_dead_tup FROM pg_stat_user_tables "
                               "WHERE schemaname = current_schema() AND relname = 'jobs'")


async def test_a_held_snapshot_is_named_and_its_gauge_drops_when_it_ends(dsn, pool, admin_key, monkeypatch):
    tenant_key = await factories.api_key(pool, "ann@example.com")
    app = create_app(load_settings(database_url=dsn, tenant_database_url=tenant_login_url(dsn),
                                   pipeline_plugins="", metrics_token=TOKEN), STAGES)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        async with held_snapshot(dsn) as pid:
            # work done behind the snapshot: its xids put the horizon behind, and VACUUM
            # may remove none of the rows deleted
            await factories.jobs(pool, "echo", DELETED)
            await pool.execute("DELETE FROM jobs")
            assert await dead_after_vacuum(pool) >= DELETED
            await asyncio.sleep(1.1)

            [holder, *_] = await queue_stats.horizon_holders(pool)
            assert (holder["kind"], holder["pid"], holder["name"]) == ("session", pid, APP_NAME)
            assert holder["state"] == "idle in transaction" and holder["query"] == "SELECT count(*) FROM jobs"
            assert holder["seconds"] >= 1 and holder["xid_age"] >= 2

            held = await scrape(client)
            assert held[("skiplock_oldest_snapshot_age_seconds", ())] >= 1
            assert held[("skiplock_oldest_snapshot_xid_age", ())] == holder["xid_age"]
            assert held[("skiplock_dead_tuples", (("table", "jobs"),))] >= DELETED
            existing = {r[0] for r in await pool.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename = ANY($1)",
                list(queue_stats.QUEUE_TABLES))}
            assert existing == set(queue_stats.QUEUE_TABLES)
            assert {dict(k[1])["table"] for k in held if k[0] == "skiplock_live_tuples"} == existing

            # status: in --json always; as text only once held past the threshold
            as_json = json.loads(await status(dsn, monkeypatch, "--json"))["horizon"]
            assert as_json["holders"][0]["pid"] == pid and as_json["holders"][0]["name"] == APP_NAME
            assert not as_json["heldTooLong"]
            assert "oldest snapshot" not in await status(dsn, monkeypatch)
            monkeypatch.setattr(queue_stats, "HORIZON_WARN_SECONDS", 1.0)
            text = await status(dsn, monkeypatch)
            section = text[text.index("oldest snapshot:"):].split("\n\n")[0]
            assert f"held by:           session {pid} ({APP_NAME}, role " in section
            assert re.search(r"for: +\d+s, \d+ transaction ids behind, idle in transaction", section), section
            assert "query:             SELECT count(*) FROM jobs" in section
            assert int(re.search(r"dead row versions: .*\bjobs (\d+) \(live", section).group(1)) >= DELETED

            # the dashboard reads as skiplock_admin: another role's session shows its pid,
            # name and xids, and how long only once that role may read every statistic
            shown = await stats(client, admin_key)
            assert shown["deadTuples"] >= DELETED
            assert (shown["holders"][0]["pid"], shown["holders"][0]["name"]) == (pid, APP_NAME)
            assert shown["holders"][0]["who"].startswith(f"session {pid} ({APP_NAME}, role ")
            assert shown["holders"][0]["seconds"] is None and shown["holders"][0]["query"] is None
            assert not shown["heldTooLong"]  # how long unknown, and far from HORIZON_WARN_XIDS behind
            await pool.execute("GRANT pg_read_all_stats TO skiplock_admin")
            try:
                granted = await stats(client, admin_key)
            finally:
                await pool.execute("REVOKE pg_read_all_stats FROM skiplock_admin")
            assert granted["heldTooLong"] and granted["holders"][0]["pid"] == pid
            assert granted["holders"][0]["seconds"] >= 1
            assert granted["holders"][0]["query"] == "SELECT count(*) FROM jobs"
            assert await stats(client, tenant_key) is None  # the database's state is the operator's

        after = await scrape(client)
        assert pid not in [h["pid"] for h in await queue_stats.horizon_holders(pool)]
        assert after[("skiplock_oldest_snapshot_age_seconds", ())] < held[("skiplock_oldest_snapshot_age_seconds", ())]
        assert await dead_after_vacuum(pool) == 0
    await app.state.runtime.close()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium (make test does it)")
async def test_the_dashboard_panel_names_the_holder(dsn, pool, admin_key, browser):
    from playwright.async_api import expect
    served = Served(dsn)
    await served.start()
    try:
        async with held_snapshot(dsn) as pid:
            await factories.jobs(pool, "echo", DELETED)
            await pool.execute("DELETE FROM jobs")
            await pool.execute("VACUUM jobs")
            page, problems, foreign = await _open(browser, served, admin_key)
            card = page.locator("#horizon")
            await expect(card.get_by_role("heading", name="Oldest snapshot")).to_be_visible()
            await expect(card).to_have_attribute("data-pid", str(pid))
            await expect(page.locator("#h-who")).to_contain_text(f"session {pid} ({APP_NAME}, role ")
            await expect(page.locator("#h-for")).to_have_text("unknown")  # skiplock_admin: not granted
            await expect(page.locator("#horizon-note")).to_contain_text("GRANT pg_read_all_stats TO skiplock_admin")
            dead = page.locator('#horizon-table tr[data-table="jobs"] td').first
            assert int(await dead.inner_text()) >= DELETED
            await page.set_viewport_size({"width": 390, "height": 1000})
            assert await page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
            tenants_page, *_ = await _open(browser, served, await factories.api_key(pool, "ann@example.com"))
            await expect(tenants_page.locator("#horizon-note")).to_have_text(
                "The database's snapshots are the operator's: an admin key shows them.")
        await page.get_by_role("button", name="Refresh").click()
        await expect(card).not_to_have_attribute("data-pid", str(pid), timeout=5_000)
        assert problems == [] and foreign == []
    finally:
        await served.stop()


@pytest.fixture(scope="module")
async def two_phase_server():
    """A server of its own with prepared transactions and logical decoding switched on
    (both need a restart)."""
    async with migrated_server("skiplock-horizon-view-", []) as (srv, dsn, port):
        admin = await asyncpg.connect(dsn)
        await admin.execute("ALTER SYSTEM SET max_prepared_transactions = 4")
        await admin.execute("ALTER SYSTEM SET wal_level = logical")
        await admin.close()
        await asyncio.to_thread(pg_ctl, srv, "restart")
        yield dsn


async def test_a_prepared_transaction_and_a_slot_are_named(two_phase_server, monkeypatch):
    db = await asyncpg.connect(two_phase_server)
    forgotten = await asyncpg.connect(two_phase_server)
    try:
        await db.execute("SELECT pg_create_logical_replication_slot('stale_cdc', 'pgoutput')")
        await forgotten.execute("BEGIN; SELECT txid_current(); PREPARE TRANSACTION 'forgotten-1'")
        await db.execute("SELECT txid_current()")  # an xid after both
        await asyncio.sleep(0.2)
        h = await queue_stats.horizon(db)
        kinds = {x["kind"]: x for x in h["holders"]}
        assert kinds["prepared"]["who"] == "prepared transaction 'forgotten-1' (role postgres, database postgres)"
        assert kinds["prepared"]["seconds"] > 0 and kinds["prepared"]["xidAge"] >= 1
        assert kinds["slot"]["who"] == "replication slot stale_cdc (logical, inactive, catalog_xmin)"
        assert kinds["slot"]["xidAge"] >= 1
        if await db.fetchval("SELECT current_setting('server_version_num')::int") >= 170000:
            assert kinds["slot"]["seconds"] > 0  # inactive_since, from PostgreSQL 17
        monkeypatch.setattr(queue_stats, "HORIZON_WARN_SECONDS", 0.1)
        h = await queue_stats.horizon(db)
        assert h["heldTooLong"]
        assert f"held by:           {h['holders'][0]['who']}" in horizon_text(h)
    finally:
        await db.execute("ROLLBACK PREPARED 'forgotten-1'")
        await db.execute("SELECT pg_drop_replication_slot('stale_cdc')")
        await forgotten.close()
    try:
        assert await queue_stats.horizon_holders(db) == []
    finally:
        await db.close()


@asynccontextmanager
async def replica_of(primary_dsn: str, slot: str):
    """A hot standby of the primary, streaming through `slot` with hot_standby_feedback on:
    the DSN of its own. A real pg_basebackup and a second server, stopped afterwards."""
    url = urlsplit(primary_dsn)
    folder = Path(tempfile.mkdtemp(prefix="skiplock-replica-"))  # not tmp_path: the server's user must reach it
    run_as = {"user": SYSTEM_USER} if os.geteuid() == 0 else {}
    if run_as:
        shutil.chown(folder, SYSTEM_USER)
    pgdata = folder / "pgdata"
    port = _free_port()
    try:
        await asyncio.to_thread(subprocess.run, [
            str(_bin_dir() / "pg_basebackup"), "-D", str(pgdata), "-R", "-S", slot, "-X", "stream", "-c", "fast",
            "-h", url.hostname, "-p", str(url.port), "-U", url.username],
            env={**os.environ, "PGPASSWORD": unquote(url.password)}, check=True, capture_output=True, **run_as)
        # a hot standby needs max_connections as high as its primary's (LocalPostgres: 200)
        started = await asyncio.to_thread(subprocess.run, [
            str(_bin_dir() / "pg_ctl"), "-D", str(pgdata), "-l", str(folder / "server.log"), "-w", "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' -c max_connections=200 "
            "-c hot_standby_feedback=on -c wal_receiver_status_interval=1", "start"],
            capture_output=True, **run_as)
        assert started.returncode == 0, (folder / "server.log").read_text()[-2000:]
        yield urlunsplit(url._replace(netloc=f"{url.username}:{url.password}@127.0.0.1:{port}"))
    finally:
        await asyncio.to_thread(subprocess.run, [str(_bin_dir() / "pg_ctl"), "-D", str(pgdata), "-m", "fast",
                                                 "-w", "stop"], capture_output=True, **run_as)
        shutil.rmtree(folder, ignore_errors=True)


async def wait_for(predicate, seconds: float = 15.0):
    """Poll the async `predicate` until it returns something true; that value."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not (found := await predicate()):
        assert asyncio.get_running_loop().time() < deadline, "not within the time"
        await asyncio.sleep(0.2)
    return found


async def test_a_replicas_query_holds_the_primarys_horizon_through_its_slot(two_phase_server):
    """hot_standby_feedback: a snapshot held on the replica keeps the primary's VACUUM from
    removing what it may see, and the replica's slot is named as the holder."""
    primary = await connect(two_phase_server)
    await primary.execute("SELECT pg_create_physical_replication_slot('reports_replica')")
    try:
        async with replica_of(two_phase_server, "reports_replica") as replica_dsn:
            report = await wait_for(lambda: _connect_or_none(replica_dsn))
            tr = report.transaction(isolation="repeatable_read", readonly=True)
            await tr.start()
            await report.fetchval("SELECT count(*) FROM jobs")

            async def slot_holds():
                return [h for h in await queue_stats.horizon_holders(primary, 10)
                        if h["kind"] == "slot" and h["name"] == "reports_replica"]
            await factories.jobs(primary, "echo", DELETED)
            await primary.execute("DELETE FROM jobs")
            [slot] = await wait_for(slot_holds)
            assert slot["state"] == "physical, active, xmin" and slot["pid"] is not None
            assert slot["seconds"] is None and slot["xid_age"] >= 2  # an active slot: how long is unknown
            assert await dead_after_vacuum(primary) >= DELETED
            await tr.rollback()
            await report.close()

            async def let_go():  # the replica's next feedback moves the slot's xmin on
                await primary.execute("SELECT txid_current()")
                return await dead_after_vacuum(primary) == 0
            await wait_for(let_go)
    finally:
        await primary.execute("SELECT pg_drop_replication_slot('reports_replica')")
        await primary.close()


async def _connect_or_none(dsn: str):
    try:
        return await asyncpg.connect(dsn)
    except (OSError, asyncpg.CannotConnectNowError):
        return None


# -- the alert rules -------------------------------------------------------------------

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (make test installs it: apt-get install prometheus)")


@needs_promtool
def test_the_alert_rules_pass_promtool():
    checked = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_the_horizon_alerts_fire_after_their_wait(tmp_path):
    rules = {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    target = {"instance": "a", "job": "skiplock"}

    def fired(name: str, summary: str, **labels) -> list[dict]:
        return [{"exp_labels": {**target, **rules[name]["labels"], **labels},
                 "exp_annotations": {"summary": summary, "description": rules[name]["annotations"]["description"]}}]

    series = 'instance="a", job="skiplock"'
    case = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            # a snapshot taken at 0 and held: its age grows with the clock
            {"series": f"skiplock_oldest_snapshot_age_seconds{{{series}}}", "values": "0+60x40"},
            {"series": f'skiplock_dead_tuples{{{series}, table="jobs"}}', "values": "0+10000x40"},
            {"series": f'skiplock_live_tuples{{{series}, table="jobs"}}', "values": "1000x40"},
            {"series": f'skiplock_dead_tuples{{{series}, table="runs"}}', "values": "200000x40"},
            {"series": f'skiplock_live_tuples{{{series}, table="runs"}}', "values": "150000x40"},
        ],
        "alert_rule_test": [
            # past 300 s at 6m, and 5 minutes more
            {"eval_time": "10m", "alertname": "SkiplockHorizonHeld", "exp_alerts": []},
            {"eval_time": "11m", "alertname": "SkiplockHorizonHeld", "exp_alerts": fired(
                "SkiplockHorizonHeld", "A transaction, prepared transaction or slot has held back VACUUM for 11m 0s")},
            # jobs past 100,000 dead at 11m, and 30 minutes more; runs has fewer than twice its live rows
            {"eval_time": "40m", "alertname": "SkiplockDeadTuplesPiling", "exp_alerts": []},
            {"eval_time": "41m", "alertname": "SkiplockDeadTuplesPiling", "exp_alerts": fired(
                "SkiplockDeadTuplesPiling", "jobs has held over 100,000 dead row versions for 30 minutes",
                table="jobs")},
        ],
    }]}
    (tmp_path / "horizon_test.yml").write_text(json.dumps(case))  # JSON is YAML
    tested = subprocess.run([PROMTOOL, "test", "rules", "horizon_test.yml"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
