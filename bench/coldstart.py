"""Cold start of the Lambda handler (python -m bench --only coldstart).

Each figure is a fresh interpreter (as a cold Lambda container is), the median of
`repeats`, the kinds interleaved so that a busy moment hits them all alike:

- `import fastapi` and `import app.lambda_handler`, by `python -X importtime` (the
  cumulative microseconds of the top-level import): the issue's target is the handler
  costing no more than fastapi;
- the first scheduled invocation's set-up (the runtime: settings, plug-ins, stages; no
  FastAPI app is built for it), with the example plug-in and with none;
- the first HTTP invocation's set-up (the FastAPI app and Mangum on top of that).

Then the Lambda zip (app/lambda_package.py): its size with the dependencies, when pip
can fetch the Lambda wheels, and without them."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app import lambda_package

ROOT = Path(__file__).resolve().parent.parent

# Run in a fresh interpreter: the seconds each step of a cold invocation takes (no database
# is touched: the pool opens on the first run, which is not a cold-start cost of the code).
_FIRST_INVOCATIONS = """
import time
t0 = time.perf_counter()
import app.lambda_handler as h
t1 = time.perf_counter()
lam = h.LambdaApp()
t2 = time.perf_counter()
lam.mangum
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def _import_us(module: str) -> int:
    """`python -X importtime -c 'import module'`: the module's cumulative microseconds."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stderr
    for line in reversed(err.splitlines()):
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module:
            return int(parts[1])
    raise RuntimeError(f"no importtime line for {module}")


def _first_invocations(plugins: str | None) -> list[float]:
    env = {**os.environ, "DATABASE_URL": "postgresql://bench@127.0.0.1:1/none"}  # never connected
    if plugins is not None:
        env["PIPELINE_PLUGINS"] = plugins
    done = subprocess.run([sys.executable, "-c", _FIRST_INVOCATIONS], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the handler could not start: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return [float(x) for x in done.stdout.split()]


def _zip_mb(with_deps: bool) -> float | None:
    with tempfile.TemporaryDirectory(prefix="skiplock-coldstart-") as tmp:
        out = Path(tmp) / "lambda.zip"
        try:
            lambda_package.build(out, with_deps=with_deps)
        except subprocess.CalledProcessError:
            return None  # no network for pip
        return round(out.stat().st_size / 1e6, 2)


def run(repeats: int = 7, log=print) -> dict:
    samples: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    for _ in range(repeats):
        add("import fastapi (ms)", _import_us("fastapi") / 1000)
        add("import app.lambda_handler (ms)", _import_us("app.lambda_handler") / 1000)
        for label, plugins in (("example plug-in", None), ("no plug-in", "")):
            _, scheduled, http = _first_invocations(plugins)
            add(f"first scheduled event, runtime set-up, {label} (ms)", scheduled * 1000)
            add(f"first HTTP event, app and Mangum on top, {label} (ms)", http * 1000)
    medians = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    for name, value in medians.items():
        log(f"  {name:<62} {value:>8.1f}")
    fastapi_ms, handler_ms = medians["import fastapi (ms)"], medians["import app.lambda_handler (ms)"]
    started = time.monotonic()
    sizes = {"code_and_sql_mb": _zip_mb(False), "with_dependencies_mb": _zip_mb(True),
             "left_out": sorted(lambda_package.LAMBDA_LEAVES_OUT)}
    log(f"  Lambda zip: {sizes['with_dependencies_mb']} MB with the dependencies "
        f"({sizes['code_and_sql_mb']} MB code and SQL; {', '.join(sizes['left_out'])} left out; "
        f"built in {time.monotonic() - started:.0f} s)")
    target = {"target": "import app.lambda_handler <= import fastapi", "value": handler_ms,
              "fastapi": fastapi_ms, "met": handler_ms <= fastapi_ms}
    log(f"  target: handler import {handler_ms} ms <= fastapi {fastapi_ms} ms: "
        f"{'met' if target['met'] else 'NOT met'}")
    return {"repeats": repeats, "medians_ms": medians, "all_ms": samples, "zip": sizes, "target": target}


if __name__ == "__main__":
    run()
