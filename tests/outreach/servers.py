"""Real HTTP servers on 127.0.0.1 for the example pipeline's tests: uvicorn in a thread
of its own (its own event loop), on a port the OS picks. Each records the requests it
got, in order, so tests can say what was (and was not) fetched."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route


class ServerThread:
    """Serve an ASGI app on 127.0.0.1 from a thread; `.url` is its base URL."""

    def __init__(self, app) -> None:
        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@dataclass
class Recorder:
    hits: list[str] = field(default_factory=list)

    def count(self, path: str) -> int:
        return self.hits.count(path)

    def clear(self) -> None:
        self.hits.clear()


def _page(title: str, body: str, description: str = "") -> HTMLResponse:
    return HTMLResponse(f"""<!doctype html><html lang="en"><head><title>{title}</title>
<meta name="description" content="{description}"></head><body>{body}</body></html>""")


HOME_LINKS = ["/contacts", "/missing", "/limited", "/busy", "/broken", "/slow", "/moved", "/old",
              "/away", "/private/secret", "/big", "/logo.png", "https://elsewhere.example/partners",
              "mailto:owner@site.test", "#top"]


def site_app() -> tuple[Starlette, Recorder]:
    """A site with one path for each outcome the crawl must get right."""
    rec = Recorder()

    async def record(request: Request) -> None:
        rec.hits.append(request.url.path)

    async def robots(request):
        await record(request)
        return PlainTextResponse("User-agent: *\nDisallow: /private/\n")

    async def home(request):
        await record(request)
        links = "".join(f'<li><a href="{h}">{h}</a></li>' for h in HOME_LINKS)
        return _page("Acme Trail Supply", f"<h1>Acme</h1><ul>{links}</ul>",
                     "Ultralight trail gear for long walks.")

    async def contacts(request):
        await record(request)
        return _page("Contacts", """<p>Write to <a href="mailto:press@acme.test">press</a>
            or sam@acme.test.</p><a href="https://www.youtube.com/@AcmeTrail">YouTube</a>
            <a href="/">home</a>""")

    async def new_page(request):
        await record(request)
        return _page("New home of the old page", '<p>Moved here: <a href="https://www.tiktok.com/@acmetok">tt</a></p>')

    def status(code: int, headers: dict[str, str] | None = None):
        async def endpoint(request):
            await record(request)
            return PlainTextResponse(f"status {code}", status_code=code, headers=headers)
        return endpoint

    async def slow(request):
        await record(request)
        await asyncio.sleep(2)
        return _page("Slow", "finally")

    async def redirect(request):
        await record(request)
        target = {"/moved": "/contacts", "/old": "/new", "/away": "http://offsite.invalid/page"}[request.url.path]
        return RedirectResponse(target, status_code=301 if request.url.path != "/away" else 302)

    async def private(request):
        await record(request)
        return _page("Staff", "insider@acme.test")

    async def big(request):
        await record(request)
        return _page("Big", "<p>" + "x" * 5000 + " big@acme.test</p>")

    async def png(request):
        await record(request)
        return Response(b"\x89PNG....", media_type="image/png")

    async def fair(request):
        await record(request)
        return _page("Fair", "<p>nothing here</p>")

    routes = [
        Route("/robots.txt", robots), Route("/", home), Route("/contacts", contacts),
        Route("/new", new_page),
        Route("/limited", status(429, {"Retry-After": "120"})),
        Route("/busy", status(503, {"Retry-After": "30"})),
        Route("/broken", status(500)),
        Route("/slow", slow),
        Route("/moved", redirect), Route("/old", redirect), Route("/away", redirect),
        Route("/private/secret", private), Route("/big", big), Route("/logo.png", png),
        Route("/fair/{tag}/{i}", fair),
    ]

    async def not_found(request, exc):
        await record(request)
        return PlainTextResponse("not found", status_code=404)

    return Starlette(routes=routes, exception_handlers={404: not_found}), rec


@dataclass
class FakeLlm:
    """An OpenAI-compatible chat completions endpoint. `script` holds the statuses to
    answer with, in order (the last one repeats); 200 answers a completion."""
    script: list[int] = field(default_factory=lambda: [200])
    requests: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)

    def reset(self, *script: int) -> None:
        self.script = list(script) or [200]
        self.requests.clear()
        self.headers.clear()

    def app(self) -> Starlette:
        async def completions(request: Request):
            body = await request.json()
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            status = self.script[min(len(self.requests), len(self.script)) - 1]
            if status == 429:
                return JSONResponse({"error": {"message": "slow down"}}, status_code=429,
                                    headers={"Retry-After": "90"})
            if status != 200:
                return JSONResponse({"error": {"message": "boom"}}, status_code=status)
            who = body["messages"][-1]["content"].split("Contact: ", 1)[1].split(" ", 1)[0]
            return JSONResponse({
                "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"Hello {who}, from the model."}}],
                "usage": {"prompt_tokens": 100 + len(self.requests), "completion_tokens": 20,
                          "total_tokens": 120 + len(self.requests)},
            })
        return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def dumps(x) -> str:
    return json.dumps(x, default=str)
