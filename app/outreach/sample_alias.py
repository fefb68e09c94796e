"""The sample site's stable name, http://sample.localhost/sample/, and where local dev mode
dials it: LOCAL_HOST:LOCAL_PORT, wherever `make run` happens to serve. Campaigns name the
alias, so the demo campaign keeps working when `make run` moves to another port.

The web client reads the alias from here, not from the demo site (app.outreach.sample),
which seeds a campaign through the stages that use the client."""

from __future__ import annotations

SAMPLE_PATH = "/sample"
SAMPLE_HOST = "sample.localhost"  # .localhost (RFC 6761): never a name on the internet
SAMPLE_SITE_URL = f"http://{SAMPLE_HOST}{SAMPLE_PATH}/"


def sample_site_address(settings) -> str:
    """host:port where local dev mode serves the sample site: LOCAL_HOST:LOCAL_PORT."""
    host = settings.local_host
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"  # listening everywhere: reach it on loopback
    elif ":" in host:
        host = f"[{host}]"
    return f"{host}:{settings.local_port}"


def sample_site_aliases(settings) -> dict[str, str]:
    """For the web client: the alias's host:port -> where to dial it; in local dev mode only."""
    return {f"{SAMPLE_HOST}:80": sample_site_address(settings)} if settings.local_dev else {}
