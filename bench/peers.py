"""Optional: the peer pgqueuer benchmark on the same server in the same sitting.

Runs bench_pgqueuer.py from --peers-dir (the peer scripts are not part of this
repository; skipped when they are not there) with pgqueuer 1.6.0
installed into a throwaway venv under /tmp (never into the project's), against the
server the rest of the benchmark used: its scripts connect as `postgres` on
127.0.0.1:$PGPORT. Variants: `unlimited` (library defaults, no concurrency cap: the
3,300 jobs/s reference) and `ep10` (entrypoint concurrency_limit=10). Then the bare
SKIP LOCKED loop (raw_sql_drain.py) for the ceiling on this server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

VENV = Path(tempfile.gettempdir()) / "skiplock-bench-peers-venv"
REQUIREMENTS = ["pgqueuer==1.6.0", "asyncpg==0.32.0", "uvloop==0.23.0"]


def _venv_python() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    check = subprocess.run([str(py), "-c", "import pgqueuer, uvloop, asyncpg"], capture_output=True)
    if check.returncode != 0:
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        *REQUIREMENTS], check=True)
    return py


def _peer_env(admin_dsn: str, port: int, results: Path) -> dict[str, str]:
    """The peers' scripts name no password; libpq's PGPASSWORD (asyncpg reads it too)
    carries the server's, as the embedded server has one."""
    env = {**os.environ, "PGPORT": str(port), "BENCH_RESULTS": str(results)}
    password = urlparse(admin_dsn).password
    if password:
        env["PGPASSWORD"] = password
    return env


def _port(admin_dsn: str) -> int | None:
    u = urlparse(admin_dsn)
    if u.hostname not in ("127.0.0.1", "localhost") or (u.username or "postgres") != "postgres":
        return None
    return u.port or 5432


async def _prepare(server) -> tuple[Path, int] | str:
    """The peers' venv python and the server's port, or why the peers cannot run."""
    port = _port(server.admin_dsn)
    if port is None:
        return "the peer scripts need user postgres on 127.0.0.1"
    try:
        return await asyncio.to_thread(_venv_python), port
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"could not prepare the peer venv: {exc}"


async def run(server, *, peers_dir: Path, variants: list[str], n: int, concurrency: int,
              repeats: int, cap: float, bare: bool = True, log=print) -> dict:
    script = peers_dir / "bench_pgqueuer.py"
    if not script.exists():
        return {"skipped": f"{script} not found"}
    ready = await _prepare(server)
    if isinstance(ready, str):
        return {"skipped": ready}
    py, port = ready
    out: dict = {"library": "pgqueuer 1.6.0", "venv": str(VENV), "event_loop": "uvloop",
                 "variants": {}}
    for variant in variants:
        results = Path(tempfile.mkstemp(prefix="skiplock-peers-", suffix=".jsonl")[1])
        env = _peer_env(server.admin_dsn, port, results)
        proc = await asyncio.create_subprocess_exec(
            str(py), str(script), "--n", str(n), "--concurrency", str(concurrency),
            "--runs", str(repeats), "--variant", variant, cwd=str(peers_dir), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            stdout, _ = await asyncio.wait_for(proc.communicate(), timeout=cap)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            out["variants"][variant] = {"error": f"over the {cap:.0f} s cap"}
            continue
        rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
        results.unlink(missing_ok=True)
        summary = next((r["summary"] for r in rows if "summary" in r), None)
        if summary is None:
            out["variants"][variant] = {"error": stdout.decode(errors="replace")[-1500:]}
            continue
        out["variants"][variant] = summary
        log(f"  pgqueuer {variant:9s}: drain {summary.get('process_jobs_s_median', 0):7,.0f} jobs/s"
            f"  enqueue {summary.get('enqueue_jobs_s_median', 0):7,.0f} jobs/s"
            f"  ({summary.get('ok_runs')}/{summary.get('runs')} runs ok)")
    if bare:
        out["raw_sql"] = await _raw_sql(py, peers_dir, server.admin_dsn, port, n, concurrency, repeats, cap, log)
    return out


async def pgqueuer_warm(server, *, peers_dir: Path, n: int, concurrency: int, cap: float) -> float | dict:
    """One pgqueuer uncapped drain by a worker that has been up for a while: two runs in
    the script's one process, the second counted (a first run in a fresh process was the
    slowest of three in three sittings of four). Its jobs/s, or a dict saying why none."""
    got = await run(server, peers_dir=peers_dir, variants=["unlimited"], n=n, concurrency=concurrency,
                    repeats=2, cap=cap, bare=False, log=lambda _: None)
    if "skipped" in got:
        return {"skipped": got["skipped"]}
    runs = got["variants"]["unlimited"].get("process_jobs_s_all") or []
    if len(runs) < 2:
        return {"error": got["variants"]["unlimited"].get("error", "pgqueuer gave no figure")}
    return runs[-1]


async def bare_loop(server, *, peers_dir: Path, n: int, concurrency: int, repeats: int, cap: float,
                    batches: tuple[str, ...], log) -> dict:
    """The bare SKIP LOCKED loop alone (for rounds that set it beside other drains)."""
    ready = await _prepare(server)
    if isinstance(ready, str):
        return {"skipped": ready}
    py, port = ready
    return await _raw_sql(py, peers_dir, server.admin_dsn, port, n, concurrency, repeats, cap, log, batches)


async def _raw_sql(py: Path, peers_dir: Path, admin_dsn: str, port: int, n: int, concurrency: int, repeats: int,
                   cap: float, log, batches: tuple[str, ...] = ("25", "100")) -> dict:
    """The bare SKIP LOCKED ceiling (raw_sql_drain.py): no fairness, no pipeline, a
    partial index in claim order; claim B then complete, for each B of `batches`."""
    script = peers_dir / "raw_sql_drain.py"
    if not script.exists():
        return {"skipped": f"{script} not found"}
    results = Path(tempfile.mkstemp(prefix="skiplock-peers-", suffix=".jsonl")[1])
    env = _peer_env(admin_dsn, port, results)
    proc = await asyncio.create_subprocess_exec(
        str(py), str(script), "--n", str(n), "--concurrency", str(concurrency), "--runs", str(repeats),
        "--batches", *batches, "--index", "partial", cwd=str(peers_dir), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        stdout, _ = await asyncio.wait_for(proc.communicate(), timeout=cap)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"error": f"over the {cap:.0f} s cap"}
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    results.unlink(missing_ok=True)
    row = next((r for r in rows if r.get("lib") == "raw_sql_asyncpg"), None)
    if row is None:
        return {"error": stdout.decode(errors="replace")[-1500:]}
    for b, r in row.get("drain", {}).items():
        log(f"  bare SKIP LOCKED loop {b:6s}: drain {r['median_jobs_s']:7,} jobs/s")
    return row
