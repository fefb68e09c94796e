"""/docs and /redoc load nothing from elsewhere, under a CSP as strict as the dashboard's.

The red team's finding: FastAPI's pages loaded unpinned scripts from a public CDN on the
dashboard's origin, where admin keys live in sessionStorage. Here the pages' every asset is
this origin's (the pinned fastapi-offline package's files, byte for byte), and in a real
browser no request leaves the origin, an injected inline or foreign script does not run,
and a deployment can turn the pages off."""

from __future__ import annotations

import re
import shutil
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from serving_kit import make_settings, start_uvicorn

from app.api import create_app
from app.api.dashboard import CSP as DASHBOARD_CSP
from app.api.docs import ASSETS, SWAGGER_CSP, _package_static

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")


def _pin() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [dep] = [d for d in deps if d.lower().startswith(("fastapi-offline", "fastapi_offline"))]
    assert "==" in dep, f"{dep}: pin the package that serves the docs' scripts"
    return dep.split("==")[1]


def test_the_docs_package_is_pinned_and_installed():
    assert version("fastapi-offline") == _pin()


async def test_every_asset_is_this_origins_and_the_packages(make_client):
    client = await make_client(api_key=False)
    for path in ("/docs", "/redoc"):
        page = await client.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        # as strict as the dashboard's: scripts from this origin only, nothing inline
        assert "script-src 'self';" in csp and "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
        assert set(DASHBOARD_CSP.split("; ")) - {"style-src 'self'"} <= set(csp.split("; "))
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "//" not in re.sub(r"<!doctype html>", "", page.text)  # no URL of another origin
        for src in re.findall(r'(?:src|href)="([^"]+)"', page.text):
            asset = await client.get(f"/{src}")
            assert asset.status_code == 200, src
            name = src.rsplit("/", 1)[1]
            if ASSETS[name][0] == "package":
                assert asset.content == (_package_static() / name).read_bytes(), name
    assert (await client.get("/docs")).headers["content-security-policy"] == SWAGGER_CSP
    nonces = {re.search(r"'nonce-([^']+)'", (await client.get("/redoc")).headers["content-security-policy"])[1]
              for _ in range(3)}
    assert len(nonces) == 3  # drawn for each answer
    assert (await client.get("/docs/assets/..%2Fdocs.py")).status_code == 404
    assert (await client.get("/docs/assets/core.py")).status_code == 404


async def test_a_deployment_can_turn_the_docs_off(make_client, dsn):
    client = await make_client(make_settings(dsn, api_docs=False), api_key=False)
    for path in ("/docs", "/redoc", "/docs/assets/swagger-ui-bundle.js", "/docs/assets/docs-redoc.js"):
        assert (await client.get(path)).status_code == 404, path
    assert (await client.get("/openapi.json")).status_code == 200


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium (make test does it)")
async def test_in_a_browser_nothing_leaves_the_origin_and_no_injected_script_runs(dsn):
    from playwright.async_api import async_playwright

    app = create_app(make_settings(dsn))
    server, task, sock = await start_uvicorn(app)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            context = await browser.new_context()
            left: list[str] = []  # every request that reached the network for another origin

            async def outside(route):
                left.append(route.request.url)
                await route.abort()
            await context.route(re.compile(r"^(?!" + re.escape(base) + r")(https?|wss?)://"), outside)
            for path, rendered in (("/docs", ".opblock-summary-path"), ("/redoc", "h1")):
                page = await context.new_page()
                problems: list[str] = []
                page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: problems.append(str(e)))
                await page.goto(f"{base}{path}")
                await page.locator(rendered).first.wait_for(timeout=15_000)
                assert await page.locator("text=Enqueue a job").count() > 0, path
                # the attack: a script put on the page inline, and one from another origin
                for tag in ({"content": "window.pwned = 1"}, {"url": "https://cdn.example.test/x.js"}):
                    with pytest.raises(Exception):
                        await page.add_script_tag(**tag)
                assert await page.evaluate("window.pwned") is None
                # the one thing the pages may try is ReDoc's footer logo; the CSP stops it
                assert [m for m in problems if "cdn.redoc.ly" not in m and "x.js" not in m
                        and "inline script" not in m.lower()] == [], problems
            await browser.close()
        assert left == [], left
    finally:
        server.should_exit = True
        await task
        sock.close()
        await app.state.runtime.close()
