"""Log output as JSON lines, for the processes that serve: `make run`, uvicorn, Lambda.

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
import sys
from datetime import datetime, timezone
from typing import IO

_RESERVED = ("ts", "level", "logger")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        message = record.getMessage()
        fields = _json_object(message)
        if fields is None:
            line["message"] = message
        else:
            line.update({k: v for k, v in fields.items() if k not in _RESERVED})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def _json_object(text: str) -> dict | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def configure_logging(level: str = "INFO", stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record of this process, as one JSON line, to `stream` (stdout).

    Replaces the root logger's handlers (Lambda's runtime installs its own) and lets
    uvicorn's loggers propagate to it. Safe to call more than once."""
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
