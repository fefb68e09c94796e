"""The built wheel is the whole program: it carries the SQL (sql/, installed as the package
app.sql, and the example plug-in's app/outreach/sql/) and runs from an environment that
cannot see this checkout. `skiplock migrate` and a run go through it against a fresh
database; so does the example plug-in's SQL."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def _builds_wheels_here() -> bool:
    """Whether this environment's setuptools makes wheels itself (bdist_wheel is in
    setuptools from 70.1, in the `wheel` package before): then no build download."""
    import setuptools
    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy of what the build reads, so the checkout gets no build/ folder and
    # nothing stale left in one can reach the wheel.
    source = tmp_path_factory.mktemp("source")
    for item in ROOT.iterdir():
        if item.is_file():
            shutil.copy2(item, source / item.name)
    for folder in ("app", "sql"):
        shutil.copytree(ROOT / folder, source / folder, ignore=SKIP)
    out = tmp_path_factory.mktemp("dist")
    isolation = ["--no-build-isolation"] if _builds_wheels_here() else []  # else pip fetches setuptools
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                           "--disable-pip-version-check", *isolation, "-w", str(out), str(source)],
                          capture_output=True, text=True, timeout=180)
    unfetched = "satisfies the requirement setuptools" in proc.stdout + proc.stderr
    if proc.returncode != 0 and not isolation and unfetched:
        pytest.skip("pip could not fetch setuptools to build the wheel (offline?); "
                    "`.venv/bin/pip install wheel` lets this environment build it itself")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [built] = out.glob("skiplock-*.whl")
    return built


@pytest.fixture(scope="module")
def python(wheel, tmp_path_factory) -> Path:
    """A Python with the wheel installed and this environment's dependencies, but no
    editable install: a bare venv, the wheel unpacked into its site-packages, and a .pth
    naming this environment's site-packages after it (a .pth line adds the folder only;
    the editable install's own .pth there, which maps app/ to the checkout, is not run)."""
    env = tmp_path_factory.mktemp("env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=60)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    zipfile.ZipFile(wheel).extractall(site)
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return env / "bin" / "python"


def test_the_wheel_holds_the_code_and_all_the_sql(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sql = {f"app/sql/{p.relative_to(ROOT / 'sql').as_posix()}" for p in (ROOT / "sql").rglob("*.sql")}
    sql |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "app").rglob("*.sql")}  # plug-ins' own
    code = {p.relative_to(ROOT).as_posix() for p in (ROOT / "app").rglob("*.py")
            if "__pycache__" not in p.parts}
    assert sql - names == set(), "SQL files the wheel lacks"
    assert code - names == set(), "modules the wheel lacks (is their package found by setup.py?)"
    assert "app/sql/__init__.py" in names
    assert any(n.startswith("app/outreach/sql/queries/") for n in names)  # the example plug-in's
    assert any(n.startswith("app/outreach/sql/migrations/") for n in names)
    assert any(n.startswith("app/sql/migrations/legacy/") for n in names)
    assert not any(n.startswith(("sql/", "tests/")) for n in names)


async def test_migrate_and_run_from_the_wheel(python, new_database, tmp_path):
    def skiplock(*args: str, plugins: str | None = "") -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIPELINE_STAGES")}
        env["DATABASE_URL"] = url
        if plugins is None:
            env.pop("PIPELINE_PLUGINS", None)  # the default: the example plug-in
        else:
            env["PIPELINE_PLUGINS"] = plugins
        # run from elsewhere: the checkout must not be on sys.path
        return subprocess.run([str(python), "-m", "app", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)

    url = await new_database()
    where = subprocess.run([str(python), "-c", "import app; print(app.__file__)"], cwd=tmp_path,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                           capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(python.parent.parent), "app came from elsewhere"

    queue = sorted(p.stem for p in (ROOT / "sql" / "migrations").glob("[0-9]*.sql"))
    migrated = skiplock("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert json.loads(migrated.stdout)["applied"] == queue

    run = skiplock("run-once", "--budget", "5")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["stopReason"] == "no_work"

    # the example plug-in's migrations come out of the wheel too
    example = sorted(f"outreach/{p.stem}" for p in (ROOT / "app" / "outreach" / "sql" / "migrations").glob("[0-9]*.sql"))
    migrated = skiplock("migrate", plugins=None)
    assert migrated.returncode == 0, migrated.stderr
    assert json.loads(migrated.stdout)["applied"] == example
    run = skiplock("run-once", "--budget", "5", plugins=None)
    assert run.returncode == 0, run.stderr
