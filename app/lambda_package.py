"""Build the Lambda artifact (`make package`): one zip with the code, the SQL and the
requirements, which serverless.yml deploys as it is (package.artifact). The code is laid
out as the wheel lays it out: sql/ goes in as app/sql/, the package app.sql that
pyproject.toml maps it to, where the code reads it (app/engine/queries.py); a plug-in's
SQL under app/ (app/outreach/sql/) goes in where it is.

    python -m app.lambda_package [--out .build/lambda.zip] [--no-deps]

The requirements are the `dependencies` of pyproject.toml but those Lambda never runs
(LAMBDA_LEAVES_OUT: uvicorn serves the app elsewhere; a Function URL goes through
Mangum), installed by pip as wheels for the Lambda runtime (CPython 3.11, manylinux
x86_64), whatever this machine is. The dev extras never go in. File times are fixed, so
the same input gives the same zip; it prints its size (docs/performance.md keeps it)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACT = Path(".build/lambda.zip")  # serverless.yml: package.artifact
LAMBDA_PYTHON = "3.11"                # serverless.yml: provider.runtime python3.11
LAMBDA_PLATFORM = "manylinux2014_x86_64"  # serverless.yml: provider.architecture x86_64
SKIP_PARTS = {"__pycache__", "bin"}
LAMBDA_LEAVES_OUT = {"uvicorn"}       # distributions Lambda never imports
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject(root: Path) -> dict:
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def requirements(root: Path = ROOT) -> list[str]:
    """pyproject.toml's dependencies, but those in LAMBDA_LEAVES_OUT."""
    listed = _pyproject(root)["project"]["dependencies"]
    return [r for r in listed if _name(r) not in LAMBDA_LEAVES_OUT]


def mapped_folders(root: Path = ROOT) -> dict[str, Path]:
    """Where in the zip each folder pyproject.toml's package-dir maps into app goes, as a
    wheel would put it: {"app/sql": root/"sql"}."""
    mapped = _pyproject(root).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {package.replace(".", "/"): root / folder for package, folder in mapped.items()}


def install_requirements(target: Path, reqs: list[str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--target", str(target), "--platform", LAMBDA_PLATFORM, "--implementation", "cp",
         "--python-version", LAMBDA_PYTHON, "--only-binary=:all:", "--no-compile", *reqs],
        check=True)


def _files(base: Path, pattern: str):
    for path in sorted(base.glob(pattern)):
        if path.is_file() and not SKIP_PARTS.intersection(path.relative_to(base).parts):
            yield path


def _add(zf: zipfile.ZipFile, path: Path, name: str) -> None:
    info = zipfile.ZipInfo(name, FIXED_TIME)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, path.read_bytes())


def build(out: Path, with_deps: bool = True, root: Path = ROOT) -> list[str]:
    """Write the zip; return the names in it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    with tempfile.TemporaryDirectory(prefix="skiplock-lambda-") as tmp:
        site = Path(tmp)
        if with_deps:
            install_requirements(site, requirements(root))
        with zipfile.ZipFile(out, "w") as zf:
            for path in [*_files(root / "app", "**/*.py"), *_files(root / "app", "**/*.sql")]:
                names.append(path.relative_to(root).as_posix())
                _add(zf, path, names[-1])
            for path in _files(root / "app" / "api" / "static", "*"):  # the dashboard's page and assets
                names.append(path.relative_to(root).as_posix())
                _add(zf, path, names[-1])
            for where, folder in mapped_folders(root).items():  # sql/ as app/sql/
                for path in [*_files(folder, "**/*.py"), *_files(folder, "**/*.sql")]:
                    names.append(f"{where}/{path.relative_to(folder).as_posix()}")
                    _add(zf, path, names[-1])
            for path in _files(site, "**/*"):
                names.append(path.relative_to(site).as_posix())
                _add(zf, path, names[-1])
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.lambda_package", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / ARTIFACT)
    p.add_argument("--no-deps", action="store_true", help="code and SQL only (for checks)")
    args = p.parse_args(argv)
    try:
        names = build(args.out, with_deps=not args.no_deps)
    except subprocess.CalledProcessError as exc:
        print(f"error: pip could not install the requirements for Lambda (exit {exc.returncode})",
              file=sys.stderr)
        return 2
    size = args.out.stat().st_size / 1e6
    print(f"{args.out}: {len(names)} files, {size:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
