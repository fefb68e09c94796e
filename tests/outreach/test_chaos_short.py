"""`make chaos`, scaled to seconds: the same harness (bench/chaos.py) with every fault at
once — kill -9 of run-once invocations, a PostgreSQL restart, Redis killed and revived, a
site and an LLM that fail, hang and answer 429 — and every invariant read back from the
database afterwards. It runs on a PostgreSQL, Redis and HTTP servers of its own, through
the public entry points (python -m app run-once / worker, uvicorn), as a subprocess, with
the example plug-in loaded: its stages fetch the failing site and ask the failing LLM."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("redis-server") is None,
                    reason="redis-server is not installed (make test installs it: apt-get install redis-server)")
def test_short_chaos_run_keeps_every_invariant(tmp_path):
    out = tmp_path / "chaos.json"
    done = subprocess.run([sys.executable, "-m", "bench.chaos", "--short", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    # the harness's own lines (chaos: ...) say how far it got, and why it stopped
    assert out.exists(), "\n".join(line for line in done.stderr.splitlines()
                                    if line.startswith("chaos:") or "Error" in line)[-3000:]
    result = json.loads(out.read_text())
    broken = {name: n for name, n in result["invariants"].items() if n}
    assert not broken, (broken, result.get("api_5xx"), result.get("invocation_errors"))
    assert done.returncode == 0, done.stderr[-3000:]
    # the faults really happened
    faults = result["faults"]
    assert faults.get("kill -9 of a run-once", 0) >= 1
    assert faults.get("PostgreSQL restart (fast)") == 1
    assert faults.get("Redis killed") == 1 and faults.get("Redis revived") == 1
    assert faults.get("site 500", 0) + faults.get("site 429", 0) + faults.get("site hang", 0) > 0, faults
    assert result["worker_died"] is None, result["worker_died"]  # the worker outlives every fault
    assert result["open_after_drain"] == 0 and result["figures"]["done"] > 0
    assert result["api_changes"] > 0  # the API did change things, and each change was audited
