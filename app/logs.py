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
from functools import lru_cache
from typing import IO
from urllib.parse import quote, quote_plus, unquote

from app.cli.output import printable

_RESERVED = ("ts", "level", "logger")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        message = redacted(record.getMessage())
        fields = _json_object(message)
        if fields is None:
            line["message"] = message
        else:
            line.update({k: v for k, v in fields.items() if k not in _RESERVED})
        if record.exc_info or record.exc_text:
            line["exc"] = redacted(record.exc_text or self.formatException(record.exc_info))
        return json.dumps(line, default=str)


# -- secrets never reach a log line ----------------------------------------------------
# A credential put in a URL by mistake (`/events/ws?authorization=slk_...` is refused, but
# uvicorn logs the request line first), a header dumped in an error, a DSN with its
# password: redacted by name and by value in every record of every logger of the process
# (install_redaction: the record factory, so uvicorn's access log and any handler or
# formatter get the record already clean).

REDACTED = "[redacted]"
# A parameter or field is a credential when its name, percent-decoded, lower-cased and
# without - _ . and spaces, is one of these or ends like one (x-api-key, auth_token,
# client_secret, ke%79 ...).
_SECRET_NAMES = frozenset({"key", "auth", "authorization", "bearer", "cookie", "setcookie", "signature", "sig",
                           "session", "sessionid", "credential", "credentials", "privatekey", "pwd", "pass"})
_SECRET_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "accesskey", "privatekey")
_PARAM = re.compile(r"([?&;])([^=&;\s\"'#?]{1,100})=([^&;\s\"'\\#]*)")
_FIELD = re.compile(r"""(?<![\w.\-])(["']?)([\w.\-]{1,100})\1(\s*[:=]\s*)(["'])([^"'\\\n]*)\4""")
# An API key (slk_ + 8 hex + _ + the secret part), in plain or percent-encoded spelling:
# the prefix stays (it is the key's public name, shown in listings), the rest goes.
_API_KEY = re.compile(r"slk(?:_|%5[fF])([0-9a-fA-F]{8})(?:_|%5[fF])[A-Za-z0-9_\-%]{4,}")
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic)(\s+|\.)[A-Za-z0-9._~+/=\-%]{8,}")
_DSN_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]*:)[^/\s@]+@")
_known: set[str] = set()
_known_pattern: re.Pattern | None = None


@lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    plain = re.sub(r"[\s._\-]", "", unquote(name).lower())
    return plain in _SECRET_NAMES or plain.endswith(_SECRET_ENDINGS)


def redact_values(*values: str | None) -> None:
    """Also redact these exact values (the cron secret, METRICS_TOKEN ...) wherever they appear,
    plain or percent-encoded. Values under 8 characters are left out: they would redact words."""
    global _known_pattern
    new = {v for value in values if value and len(value.strip()) >= 8
           for v in (value.strip(), quote(value.strip(), safe=""), quote_plus(value.strip(), safe=""))}
    if new - _known:
        _known.update(new)
        _known_pattern = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


def redacted(text: str) -> str:
    """`text` with every credential it names replaced by [redacted]."""
    if _known_pattern is not None:
        text = _known_pattern.sub(REDACTED, text)
    if "slk" in text:
        text = _API_KEY.sub(lambda m: f"slk_{m.group(1)}_{REDACTED}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if "://" in text:
        text = _DSN_PASSWORD.sub(rf"\1{REDACTED}@", text)
    if "=" in text:
        text = _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}" if secret_name(m.group(2))
                          and m.group(3) else m.group(0), text)
    if ":" in text or "=" in text:
        text = _FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}"
                          f"{m.group(4)}" if secret_name(m.group(2)) and m.group(5) else m.group(0), text)
    return text


def _redact_arg(value):
    return redacted(value) if isinstance(value, str) else value


def redact_record(record: logging.LogRecord) -> None:
    """Clean a record in place. Its args stay args where they can (uvicorn's access
    formatter unpacks them); anything else becomes the redacted message."""
    if isinstance(record.msg, str):
        record.msg = redacted(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: let the handler report it as before
        message = None
    if message is not None and redacted(message) != message:  # an arg's str() held one
        record.msg, record.args = redacted(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redacted(record.exc_text)
    if record.stack_info:
        record.stack_info = redacted(record.stack_info)


def install_redaction() -> None:
    """Every log record this process makes is redacted as it is made (idempotent)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacts", False):
        return

    def make(*args, **kwargs) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        redact_record(record)
        return record
    make.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)


def _redacted(message: str) -> str:
    return redacted(message)


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
    uvicorn's loggers propagate to it; every record is redacted (install_redaction). Safe
    to call more than once."""
    install_redaction()
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
            f" | {event.get('jobsDone')} done, {event.get('jobsFailed')} failed, {event.get('jobsRetried')} retried, {event.get('jobsDeferred')} deferred")
    return line + (f" | error: {printable(str(event['error']))}" if event.get("error") else "")


def configure_cli_logging(level: str = "INFO", stream: IO[str] | None = None,
                          budget_seconds: float | None = None) -> logging.Handler:
    """The command line's logging, on stderr (stdout keeps the command's answer): a
    live progress line on a terminal, JSON lines (one per batch and per run) otherwise."""
    stream = stream or sys.stderr
    return configure_logging(level, stream, ProgressLine(stream, budget_seconds) if stream.isatty() else None)
