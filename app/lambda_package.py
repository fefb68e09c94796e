"""Build the Lambda artifact (`make package`): one zip with the code, the SQL and the
requirements, which serverless.yml deploys as it is (package.artifact). The code is laid
out as the wheel lays it out: sql/ goes in as app/sql/, the package app.sql that
pyproject.toml maps it to, where the code reads it (app/engine/queries.py); a plug-in's
SQL under app/ (app/outreach/sql/) goes in where it is.

    python -m app.lambda_package [--out .build/lambda.zip] [--no-deps] [--include PATH_OR_MODULE ...]

A team's own code goes in at the zip's root, where Lambda's import path starts: the
top-level module or package of each module:NAME in PIPELINE_STAGES and PIPELINE_PLUGINS
(read as every adapter reads them: the environment, or .env in the current folder), found
as the adapters find it (the import path, then the current folder), and each --include
(a module file, a package folder, or a module name). A name found nowhere stops the build
before anything is written, in one line.

The requirements are the `dependencies` of pyproject.toml but those Lambda never runs
(LAMBDA_LEAVES_OUT: uvicorn serves the app elsewhere; a Function URL goes through
Mangum), installed by pip as wheels for the Lambda runtime (CPython 3.11, manylinux
x86_64), whatever this machine is. The dev extras never go in. File times are fixed, so
the same input gives the same zip; it prints its size (docs/performance.md keeps it)."""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Sequence

from app.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parent.parent
ARTIFACT = Path(".build/lambda.zip")  # serverless.yml: package.artifact
LAMBDA_PYTHON = "3.11"                # serverless.yml: provider.runtime python3.11
LAMBDA_PLATFORM = "manylinux2014_x86_64"  # serverless.yml: provider.architecture x86_64
SKIP_PARTS = {"__pycache__", "bin"}
LAMBDA_LEAVES_OUT = {"uvicorn"}       # distributions Lambda never imports
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
OWN_PACKAGE = "app"                   # Skiplock itself, in the zip already (the example plug-in too)


class TeamCodeError(Exception):
    """The team's code cannot go in as asked (found nowhere, or not a module); one readable line."""


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


def named_modules(settings: Settings) -> list[tuple[str, str]]:
    """(setting, top-level module) for each module:NAME that PIPELINE_STAGES and
    PIPELINE_PLUGINS (comma-separated) name."""
    named = [("PIPELINE_STAGES", settings.pipeline_stages),
             *(("PIPELINE_PLUGINS", item) for item in settings.pipeline_plugins.split(","))]
    found = []
    for setting, spec in named:
        module = spec.strip().partition(":")[0]
        if spec.strip() and not module:
            raise TeamCodeError(f"{setting}={spec.strip()!r} must look like package.module:NAME")
        if module:
            found.append((setting, module.split(".")[0]))
    return found


def _where_imported(top: str, here: Path) -> Path | None:
    """The module file or package folder `import top` would load at run time: from the
    import path, then the current folder (app.pipeline.registry adds it last, too).
    Nothing is imported: the team's module may need settings this build has not."""
    importlib.invalidate_caches()  # a module written since the last look is seen
    spec = importlib.machinery.PathFinder.find_spec(top, [*sys.path, str(here)])
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package (a namespace package: its one folder)
        folders = list(spec.submodule_search_locations)
        return Path(folders[0]) if len(folders) == 1 else None
    return Path(spec.origin) if spec.origin and Path(spec.origin).is_file() else None


def team_code(settings: Settings, include: Sequence[str] = (), here: Path | None = None) -> dict[str, Path]:
    """The team's top-level modules and packages the zip carries at its root, by module
    name: each of `include` (a path to a .py file or a package folder, or a module name),
    then those the settings name, but Skiplock's own. TeamCodeError for one found nowhere."""
    here = Path.cwd() if here is None else here
    code: dict[str, Path] = {}
    for item in include:
        is_path = item.endswith(".py") or "/" in item
        path = (here / item).resolve() if is_path else _where_imported(item, here)
        top = (path.stem if path.suffix == ".py" else path.name) if is_path else item
        if top == OWN_PACKAGE:
            raise TeamCodeError(f"--include {item}: {OWN_PACKAGE!r} is Skiplock's own package, in the zip already")
        if is_path and not (path.is_dir() or (path.is_file() and path.suffix == ".py")):
            raise TeamCodeError(f"--include {item}: no module file or package folder at {path}")
        if path is None:
            raise TeamCodeError(f"--include {item}: no module or package {item!r} on the import path or in {here}")
        code[top] = path
    for setting, top in named_modules(settings):
        if top == OWN_PACKAGE or top in code:
            continue
        path = _where_imported(top, here)
        if path is None:
            raise TeamCodeError(f"{setting} names the module {top!r}, which is neither on the import path nor "
                                f"in {here}: build from the folder that holds it, or pass --include PATH")
        code[top] = path
    return code


def _files(base: Path, pattern: str):
    for path in sorted(base.glob(pattern)):
        if path.is_file() and not SKIP_PARTS.intersection(path.relative_to(base).parts):
            yield path


def _add(zf: zipfile.ZipFile, path: Path, name: str) -> None:
    info = zipfile.ZipInfo(name, FIXED_TIME)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, path.read_bytes())


def build(out: Path, with_deps: bool = True, root: Path = ROOT,
          team: dict[str, Path] | None = None) -> list[str]:
    """Write the zip, with `team` (team_code) at its root; return the names in it."""
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
            for top, source in (team or {}).items():  # at the root, where Lambda's import path starts
                if source.is_file():
                    names.append(source.name)
                    _add(zf, source, names[-1])
                for path in _files(source, "**/*") if source.is_dir() else ():
                    names.append(f"{top}/{path.relative_to(source).as_posix()}")
                    _add(zf, path, names[-1])
            for path in _files(site, "**/*"):
                names.append(path.relative_to(site).as_posix())
                _add(zf, path, names[-1])
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.lambda_package", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / ARTIFACT)
    p.add_argument("--no-deps", action="store_true", help="code and SQL only (for checks)")
    p.add_argument("--include", action="append", default=[], metavar="PATH_OR_MODULE",
                   help="a module file, package folder or module name of the team's to put at the zip's root "
                        "(besides those PIPELINE_STAGES and PIPELINE_PLUGINS name); repeat for more")
    args = p.parse_args(argv)
    try:
        team = team_code(load_settings(), args.include)
    except (SettingsError, TeamCodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        names = build(args.out, with_deps=not args.no_deps, team=team)
    except subprocess.CalledProcessError as exc:
        print(f"error: pip could not install the requirements for Lambda (exit {exc.returncode})",
              file=sys.stderr)
        return 2
    size = args.out.stat().st_size / 1e6
    print(f"{args.out}: {len(names)} files, {size:.1f} MB")
    for top, source in team.items():
        print(f"  with {top} from {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
