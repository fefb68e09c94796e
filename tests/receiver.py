"""A real HTTP server on 127.0.0.1 for tests: records what it receives and answers
from a script of statuses (the last one repeats), with an empty body, or one that never
ends (`endless_body`: a hostile receiver); `delay`: seconds it takes to answer (a slow one)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=lambda: [200])
    extra_headers: dict[str, str] = field(default_factory=dict)
    endless_body: bool = False
    delay: float = 0.0
    received: list[Received] = field(default_factory=list)

    def __enter__(self) -> "Receiver":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                owner.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                time.sleep(owner.delay)
                status = owner.statuses[min(len(owner.received), len(owner.statuses)) - 1]
                self.send_response(status)
                for k, v in owner.extra_headers.items():
                    self.send_header(k, v)
                if not owner.endless_body:
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.end_headers()
                try:
                    while True:  # until the client hangs up
                        self.wfile.write(b"\0" * 65536)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
