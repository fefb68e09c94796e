"""Log output as JSON lines, for the processes that serve: `make run`, uvicorn, Lambda;
and, for a person at a terminal, the pipeline's progress as a live line (ProgressLine).

The pipeline already logs one JSON object per batch and per run (logger
`skiplock.pipeline`); this formatter lifts such an object into the line itself, so
a log search sees `runId`, `stage`, `stopReason` and the counts as fields:

    {"ts": "...", "level": "info", "logger": "skiplock.pipeline", "event": "run", "runId": ...}

Any other record becomes {"ts", "level", "logger", "message"}, plus "exc" with the
traceback when there is one (logs are for operators; HTTP answers never carry it).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from datetime import datetime, timezone
from typing import IO

from app.cli_output import printable

_RESERVED = ("ts", "level", "logger")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        message = _redacted(record.getMessage())
        fields = _json_object(message)
        if fields is None:
            line["message"] = message
        else:
            line.update({k: v for k, v in fields.items() if k not in _RESERVED})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


# A credential put in a URL by mistake (`/events/ws?key=...` is refused, but uvicorn logs
# the request line first): its value never reaches the log.
_CREDENTIAL_IN_URL = re.compile(r"(?i)([?&](?:key|api_key|apikey|token|access_token|secret|password)=)[^&\s\"']*")


def _redacted(message: str) -> str:
    return _CREDENTIAL_IN_URL.sub(r"\1[redacted]", message) if "=" in message else message


def _json_object(text: str) -> dict | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def configure_logging(level: str = "INFO", stream: IO[str] | None = None,
                      handler: logging.Handler | None = None) -> logging.Handler:
    """Send every log record of this process, as one JSON line, to `stream` (stdout), or
    to `handler` when given.

    Replaces the root logger's handlers (Lambda's runtime installs its own) and lets
    uvicorn's loggers propagate to it. Safe to call more than once."""
    if handler is None:
        handler = logging.StreamHandler(stream or sys.stdout)
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uv = logging.getLogger(name)
        uv.handlers.clear()
        uv.propagate = True
    return handler


class ProgressLine(logging.Handler):
    """For a person at a terminal (`skiplock run-once`, `worker`, `make run`'s ticks): the
    pipeline's `batch` events as one live line (jobs done/failed/deferred, rate, time left
    in the budget, the stage just worked), and each `run` event as a line that stays.
    Any other record is printed as a plain line above the live one."""

    def __init__(self, stream: IO[str], budget_seconds: float | None = None) -> None:
        super().__init__()
        self.stream = stream
        self.budget = budget_seconds
        self._run: str | None = None
        self._started = time.time()  # a run starts when the last one ended (or now)
        self._counts = {"done": 0, "failed": 0, "deferred": 0}
        self._live = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = _json_object(record.getMessage()) or {}
            if event.get("event") == "batch":
                self._batch(event, record.created)
            elif event.get("event") == "run":
                self._write(_run_line(event) + "\n", live=False)
                self._run, self._started = None, record.created
            else:
                text = f"{record.levelname.lower()} {record.name}: {_redacted(record.getMessage())}"
                if record.exc_info:
                    text += "\n" + logging.Formatter().formatException(record.exc_info)
                self._write(printable(text, keep="\n") + "\n", live=False)  # a terminal: no raw escapes
        except Exception:  # a broken terminal must not break the run
            self.handleError(record)

    def _batch(self, event: dict, at: float) -> None:
        if event.get("runId") != self._run:  # a new run (a worker runs one after another)
            self._run = event.get("runId")
            self._counts = dict.fromkeys(self._counts, 0)
        for key in self._counts:
            self._counts[key] += int(event.get(key) or 0)
        elapsed = max(at - self._started, 1e-3)
        c = self._counts
        line = (f"run {str(self._run)[:8]}: {c['done']} done, {c['failed']} failed, {c['deferred']} deferred"
                f" | {c['done'] / elapsed:.1f} jobs/s | stage {event.get('stage')}")
        if self.budget is not None:
            line += f" | {max(0.0, self.budget - elapsed):.0f}s left"
        self._write("\r" + line + "\x1b[K", live=True)

    def _write(self, text: str, *, live: bool) -> None:
        if self._live and not live:
            text = "\r\x1b[K" + text  # the live line makes way
        self.stream.write(text)
        self.stream.flush()
        self._live = live


def _run_line(event: dict) -> str:
    line = (f"run {str(event.get('runId'))[:8]} ({event.get('trigger')}) stopped: {event.get('stopReason')}"
            f" | {event.get('jobsDone')} done, {event.get('jobsFailed')} failed, {event.get('jobsDeferred')} deferred")
    return line + (f" | error: {printable(str(event['error']))}" if event.get("error") else "")


def configure_cli_logging(level: str = "INFO", stream: IO[str] | None = None,
                          budget_seconds: float | None = None) -> logging.Handler:
    """The command line's logging, on stderr (stdout keeps the command's answer): a
    live progress line on a terminal, JSON lines (one per batch and per run) otherwise."""
    stream = stream or sys.stderr
    return configure_logging(level, stream, ProgressLine(stream, budget_seconds) if stream.isatty() else None)
