"""Every secret stands alone and is long enough to hold against offline guessing.

The red team's attack: the cursor key was derived from CRON_SECRET when CURSOR_SECRET was
unset, so a tenant holding one signed cursor tested guesses of the cron secret offline (a
200,000-word list found it in 0.48 s). Here the attacker holds a real cursor and a word list
with the real cron secret in it; no guess verifies. A short cron secret or metrics token
stops a serving process at start with one line."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from serving_kit import Recorder, free_socket, make_settings, seed

from app.dev import cron_secret, cursor_secret
from app.settings import SECRET_MIN_CHARS, SettingsError, load_settings
from tests.credentials import CRON_SECRET, CURSOR_SECRET

ROOT = Path(__file__).resolve().parents[2]


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _verifies(cursor: str, key: bytes) -> bool:
    body, signature = cursor.split(".")
    return hmac.compare_digest(_unb64(signature), hmac.new(key, _unb64(body), hashlib.sha256).digest()[:16])


async def test_a_signed_cursor_tests_no_guess_of_the_cron_secret(make_client, pool, dsn):
    recorder = Recorder()
    client = await make_client(make_settings(dsn, cursor_secret=None), [recorder.stage])  # CRON_SECRET set, CURSOR_SECRET not
    await seed(pool, 3)
    page = (await client.get("/jobs?limit=1")).json()
    cursor = page["nextCursor"]
    assert cursor and (await client.get(f"/jobs?limit=1&cursor={cursor}")).status_code == 200
    # the attacker's word list, the real secret in it, tried as the old derivation and as the old built-in key
    words = [f"guess-{i}" for i in range(2000)] + [CRON_SECRET]
    candidates = [hashlib.sha256(b"cursor:" + w.encode()).digest() for w in words]
    candidates += [CRON_SECRET.encode(), b"skiplock-cursor-v1"]
    assert not [k for k in candidates if _verifies(cursor, k)]


async def test_the_cursor_key_is_its_own_setting(make_client, pool, dsn):
    """Two deployments that share CURSOR_SECRET read each other's cursors whatever their cron
    secrets; the cron secret changes nothing about cursors."""
    recorder = Recorder()
    one = await make_client(make_settings(dsn, cursor_secret=CURSOR_SECRET), [recorder.stage])
    other = await make_client(make_settings(dsn, cursor_secret=CURSOR_SECRET, cron_secret="z" * 40), [recorder.stage])
    await seed(pool, 3)
    cursor = (await one.get("/jobs?limit=1")).json()["nextCursor"]
    assert _verifies(cursor, CURSOR_SECRET.encode())
    assert (await other.get(f"/jobs?limit=1&cursor={cursor}")).status_code == 200


@pytest.mark.parametrize("name", ["CRON_SECRET", "METRICS_TOKEN", "CURSOR_SECRET", "WEBHOOK_SECRET"])
def test_a_short_secret_is_refused_in_one_line(name):
    with pytest.raises(SettingsError) as refused:
        load_settings(**{name.lower(): "x" * (SECRET_MIN_CHARS - 1)})
    assert str(refused.value).startswith(f"bad setting {name}: is 31 characters")
    assert load_settings(**{name.lower(): "x" * SECRET_MIN_CHARS})  # 32 is enough
    assert getattr(load_settings(**{name.lower(): "  "}), name.lower()) is None  # blank is unset


@pytest.mark.parametrize("name", ["CRON_SECRET", "METRICS_TOKEN"])
def test_a_deployment_with_a_short_secret_does_not_start(name, dsn):
    """uvicorn --factory, as docs/deploy.md serves it: exit 2 with one line, nothing listening."""
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "DATABASE_URL": dsn, name: "s3cret-but-short", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "uvicorn", "--factory", "app.api.main:create_app",
                             "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"error: bad setting {name}: is 16 characters; a secret needs at least 32 "
                     "(make one with: openssl rand -base64 32)"], result.stderr


def test_make_run_keeps_a_cursor_secret_of_its_own(tmp_path):
    settings = load_settings(local_dev=True)
    key, cron = cursor_secret(settings, tmp_path), cron_secret(settings, tmp_path)
    assert len(key) >= SECRET_MIN_CHARS and key != cron
    path = tmp_path / "cursor-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text().strip() == key
    assert cursor_secret(settings, tmp_path) == key  # kept across restarts
    path.write_text("too-short\n")                   # a short one written by hand is replaced
    assert len(cursor_secret(settings, tmp_path)) >= SECRET_MIN_CHARS
    assert cursor_secret(load_settings(local_dev=True, cursor_secret=CURSOR_SECRET), tmp_path) == CURSOR_SECRET
