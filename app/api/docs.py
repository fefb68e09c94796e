"""The OpenAPI document's viewers, /docs (Swagger UI) and /redoc (ReDoc), with nothing from
elsewhere.

FastAPI's own pages load unpinned scripts from a public CDN, on the dashboard's origin,
where admin keys live in sessionStorage: whoever serves that CDN path could read them.
These pages load only this origin's files: Swagger UI and ReDoc from the pinned PyPI
package fastapi-offline (its static folder, byte for byte), and two short scripts of ours
that start them (inline scripts would need 'unsafe-inline'). The CSP is the dashboard's:
scripts and styles from this origin only; ReDoc writes its styles into <style> elements,
so its page allows those by a nonce drawn for each answer, never 'unsafe-inline'.

API_DOCS=false serves neither page nor their assets (404); /openapi.json stays."""

from __future__ import annotations

import html
import secrets
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse

from app.api.errors import ApiError
from app.api.params import only_params

STATIC = Path(__file__).resolve().parent / "static"


def _package_static() -> Path:
    import fastapi_offline  # the pinned package: pyproject.toml

    return Path(fastapi_offline.__file__).resolve().parent / "static"


# name -> (folder, media type): the package's files, and our starters
ASSETS = {
    "swagger-ui-bundle.js": ("package", "text/javascript"),
    "swagger-ui.css": ("package", "text/css"),
    "redoc.standalone.js": ("package", "text/javascript"),
    "favicon.png": ("package", "image/png"),
    "docs-swagger.js": ("ours", "text/javascript"),
    "docs-redoc.js": ("ours", "text/javascript"),
}
_BASE = ("default-src 'none'; script-src 'self'; img-src 'self' data:; connect-src 'self'; "
         "form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
SWAGGER_CSP = f"{_BASE}; style-src 'self'"


# Two <style> elements the pinned ReDoc bundle writes before it knows the nonce (an empty
# one, and its own stylesheet), allowed by their exact content; a new pin that writes others
# shows as CSP violations in tests/api/test_docs_pages.py.
REDOC_STYLE_HASHES = ("'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",
                      "'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc='")


def redoc_csp(nonce: str) -> str:
    return f"{_BASE}; style-src 'self' 'nonce-{nonce}' {' '.join(REDOC_STYLE_HASHES)}"


def _page(text: str, csp: str) -> HTMLResponse:
    return HTMLResponse(text, headers={"Content-Security-Policy": csp, "Cache-Control": "no-store",
                                       "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


# Relative URLs: right under a root_path too (/docs and /redoc sit at the top, as the assets' folder).
_SWAGGER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - Swagger UI</title>
<link rel="icon" href="docs/assets/favicon.png"><link rel="stylesheet" href="docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui" data-openapi="{openapi}"></div>
<script src="docs/assets/swagger-ui-bundle.js"></script><script src="docs/assets/docs-swagger.js"></script>
</body></html>
"""
_REDOC = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - ReDoc</title>
<link rel="icon" href="docs/assets/favicon.png"></head>
<body><div id="redoc" data-openapi="{openapi}" data-nonce="{nonce}"></div>
<script src="docs/assets/redoc.standalone.js"></script><script src="docs/assets/docs-redoc.js"></script>
</body></html>
"""


def install(app: FastAPI, enabled: bool) -> None:
    """The two pages and their assets, when `enabled` (API_DOCS); the app is built with
    FastAPI's own pages off (docs_url=None, redoc_url=None) either way."""
    if not enabled:
        return
    router = APIRouter(include_in_schema=False)
    openapi = html.escape((app.openapi_url or "/openapi.json").lstrip("/"))
    title = html.escape(app.title)

    @router.get("/docs")
    async def swagger(request: Request) -> HTMLResponse:  # its query string is ignored, as FastAPI's was
        return _page(_SWAGGER.format(title=title, openapi=openapi), SWAGGER_CSP)

    @router.get("/redoc")
    async def redoc(request: Request) -> HTMLResponse:
        nonce = secrets.token_urlsafe(16)
        return _page(_REDOC.format(title=title, openapi=openapi, nonce=nonce), redoc_csp(nonce))

    @router.get("/docs/assets/{name}")
    async def asset(name: str, request: Request) -> FileResponse:
        only_params()(request)
        if name not in ASSETS:
            raise ApiError(404, "not_found", f"no docs asset {name[:80]!r}")
        where, media_type = ASSETS[name]
        folder = _package_static() if where == "package" else STATIC
        return FileResponse(folder / name, media_type=media_type,
                            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    app.include_router(router)
