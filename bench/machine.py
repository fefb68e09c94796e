"""What the numbers were measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def code() -> dict | None:
    """The commit measured, and whether the engine's files (app/, sql/) differed from it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.rstrip()
    try:
        return {"commit": git("rev-parse", "HEAD"),
                "subject": git("log", "-1", "--format=%s"),
                "engine_files_changed": git("status", "--porcelain", "--", "app", "sql").splitlines()}
    except (OSError, subprocess.SubprocessError):
        return None


def facts() -> dict:
    import asyncpg

    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "asyncpg": asyncpg.__version__,
        "event_loop": "asyncio (stdlib)",
        "load_average_at_start": load(),
        "code": code(),
    }


# Who used the CPUs during a measurement. The box is shared, so next to each figure the
# run records the share of all CPUs that other processes used meanwhile: everything
# busy in /proc/stat minus this process (and the children it waited for) and the
# PostgreSQL server's processes (postmaster, its live children, and those it reaped).

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # from field 3 (state) on


def _own_jiffies(pid: int, children: bool) -> int:
    f = _stat_fields(pid)
    if f is None:
        return 0
    n = int(f[11]) + int(f[12])  # utime, stime
    return n + (int(f[13]) + int(f[14]) if children else 0)  # cutime, cstime: reaped children


class CpuMeter:
    """snapshot() now and later; share(a, b) says what fraction of all CPUs went to us,
    to the server, to other processes, and to the hypervisor (steal) in between."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid

    def snapshot(self) -> dict | None:
        try:
            cpu = open("/proc/stat").readline().split()[1:]
        except OSError:
            return None
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in cpu[:8])
        server = 0
        if self.server_pid:
            server = _own_jiffies(self.server_pid, True)
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    f = _stat_fields(int(entry))
                    if f is not None and f[1] == str(self.server_pid):
                        server += int(f[11]) + int(f[12])
        return {"t": time.monotonic(), "busy": user + nice + system + irq + softirq, "steal": steal,
                "client": _own_jiffies(os.getpid(), True), "server": server}

    @staticmethod
    def share(a: dict | None, b: dict | None) -> dict | None:
        if not a or not b or b["t"] <= a["t"]:
            return None
        whole = (b["t"] - a["t"]) * _HZ * (os.cpu_count() or 1)
        d = {k: b[k] - a[k] for k in ("busy", "steal", "client", "server")}
        others = max(0, d["busy"] - d["client"] - d["server"])
        return {"client": round(d["client"] / whole, 3), "server": round(d["server"] / whole, 3),
                "others": round(others / whole, 3), "steal": round(d["steal"] / whole, 3),
                # CPU seconds (1/CLK_TCK resolution): what the work cost, whatever the neighbours did
                "client_s": d["client"] / _HZ, "server_s": d["server"] / _HZ, "others_s": others / _HZ}


def parent_pid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f else None
