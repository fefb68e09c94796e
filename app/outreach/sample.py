"""The sample site that ships with the project (app/outreach/sample_site/): a dozen static
pages of a made-up outdoor brand with contacts to find, a broken link, an off-site link,
a same-site redirect (/blog -> /blog/) and a staff area that robots.txt disallows.

    sample_site_app()               an ASGI app serving it at its root (tests, or any port)
    mount_sample_site(app, "/sample")  serve it inside another app (local dev mode), with
                                    the site's robots.txt rules at that app's /robots.txt
    install_demo(app, pool, settings)  local dev mode: both of the above, and a demo
                                    campaign for it when the database has none

Campaigns name the site by a stable alias, http://sample.localhost/sample/, never by the
port `make run` happens to serve on: in local dev mode a fetch of the alias is dialled at
LOCAL_HOST:LOCAL_PORT (app.outreach.sample_alias), so the demo campaign keeps working when
`make run` moves to another port. The alias is no way out of the egress guard: the
dialled address must still be listed in FETCH_ALLOW_PRIVATE (`make run` lists exactly
its own), and outside local dev mode the alias is an ordinary .localhost name, refused.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

from app.outreach.brief import BRIEF
from app.outreach.campaigns import seed_demo
from app.outreach.sample_alias import SAMPLE_PATH, SAMPLE_SITE_URL, sample_site_address
from app.outreach.settings import outreach_settings

# Starlette is imported by the functions that serve the site: the scheduled Lambda path
# loads no web stack.

SITE_DIR = Path(__file__).resolve().parent / "sample_site"

log = logging.getLogger("skiplock.demo")


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


def _site_files():
    """StaticFiles whose directory redirect (/blog -> /blog/) is relative to the request's
    own path. Starlette's names the request's Host header, so `Host: evil.example` made
    this app redirect a browser to evil.example (an open redirect on the API's origin)."""
    from starlette.staticfiles import StaticFiles

    class SiteFiles(StaticFiles):
        async def get_response(self, path: str, scope):
            response = await super().get_response(path, scope)
            if 300 <= response.status_code < 400 and "location" in response.headers:
                raw = scope.get("raw_path") or scope["path"].encode()
                segment = raw.rsplit(b"/", 1)[-1].decode("latin-1")
                query = scope.get("query_string", b"").decode("latin-1")
                # "./" first: a segment with a colon must not read as a scheme (a:b/)
                response.headers["location"] = f"./{segment}/" + (f"?{query}" if query else "")
            return response

    return SiteFiles(directory=SITE_DIR, html=True)


def _robots_route(prefix: str):
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    text = robots_txt(prefix)

    async def robots(request) -> PlainTextResponse:
        return PlainTextResponse(text)
    return Route("/robots.txt", robots, include_in_schema=False)


def sample_site_app():
    """An ASGI app (Starlette) serving the site at its root."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    return Starlette(routes=[_robots_route(""), Mount("/", app=_site_files())])


def mount_sample_site(app, path: str = "/sample") -> None:
    """Serve the sample site at `path` of `app` (a Starlette or FastAPI app), and its
    robots.txt rules at the app's /robots.txt, where crawlers look for them."""
    app.mount(path.rstrip("/"), _site_files(), name="sample_site")
    app.router.routes.append(_robots_route(path))


def allow_sample_site(settings) -> dict[str, str]:
    """`make run`'s settings: FETCH_ALLOW_PRIVATE plus the sample site this process
    serves, which is on loopback and so refused by the egress guard unless listed."""
    own = sample_site_address(settings)
    return {"fetch_allow_private": ",".join(filter(None, [settings.fetch_allow_private.strip(" ,"), own]))}


def sample_site_url(settings) -> str:
    """The sample site as a browser on this machine reaches it in local dev mode."""
    return f"http://{sample_site_address(settings)}{SAMPLE_PATH}/"


async def install_demo(app, pool, settings) -> uuid.UUID | None:
    """Local dev mode: serve the sample site from `app`, and seed one demo campaign for it
    when the database has no campaign, so the first run crawls it with no network."""
    mount_sample_site(app, SAMPLE_PATH)
    url = sample_site_url(settings)  # for people; campaigns name the alias
    stages = getattr(getattr(app.state, "runtime", None), "stages", None)
    if stages is not None and BRIEF not in {s.type for s in stages}:
        log.info("the sample site is at %s; no demo campaign, since PIPELINE_STAGES has no %r stage",
                 url, BRIEF)
        return None
    campaign_id = await seed_demo(pool, SAMPLE_SITE_URL, outreach_settings().default_owner_email)
    if campaign_id is not None:
        log.info("seeded a demo campaign %s for the sample site (%s, served at %s); the next run "
                 "crawls it, then: skiplock contacts %s", campaign_id, SAMPLE_SITE_URL, url, campaign_id)
    return campaign_id
