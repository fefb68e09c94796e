"""The sample site that ships with the project (app/stages/sample_site/): a dozen static
pages of a made-up outdoor brand with contacts to find, a broken link, an off-site link,
a same-site redirect (/blog -> /blog/) and a staff area that robots.txt disallows.

    sample_site_app()               an ASGI app serving it at its root (tests, or any port)
    mount_sample_site(app, "/sample")  serve it inside another app (local dev mode), with
                                    the site's robots.txt rules at that app's /robots.txt
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

SITE_DIR = Path(__file__).resolve().parent / "sample_site"


def robots_txt(prefix: str = "") -> str:
    """The site's robots.txt, its paths moved under `prefix` (where the site is mounted)."""
    prefix = prefix.rstrip("/")
    lines = []
    for line in (SITE_DIR / "robots.txt").read_text().splitlines():
        field, sep, value = line.partition(":")
        if sep and field.strip().lower() in ("allow", "disallow") and value.strip().startswith("/"):
            line = f"{field}: {prefix}{value.strip()}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _robots_route(prefix: str) -> Route:
    text = robots_txt(prefix)

    async def robots(request: Request) -> PlainTextResponse:
        return PlainTextResponse(text)
    return Route("/robots.txt", robots, include_in_schema=False)


def sample_site_app() -> Starlette:
    return Starlette(routes=[_robots_route(""),
                             Mount("/", app=StaticFiles(directory=SITE_DIR, html=True))])


def mount_sample_site(app, path: str = "/sample") -> None:
    """Serve the sample site at `path` of `app` (a Starlette or FastAPI app), and its
    robots.txt rules at the app's /robots.txt, where crawlers look for them."""
    app.mount(path.rstrip("/"), StaticFiles(directory=SITE_DIR, html=True), name="sample_site")
    app.router.routes.append(_robots_route(path))
