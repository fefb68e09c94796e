"""The live progress `run-once` and `worker` draw on a terminal (app.logs.ProgressLine):
what it prints of a run's error and of other log records never carries a raw escape."""

from __future__ import annotations

import io
import json
import logging

from app.logs import ProgressLine

HOSTILE = "upstream said: \x1b]0;pwned\x07\x1b[2J\r\u202e"


def _emit(handler: logging.Handler, message: str, exc_info=None) -> None:
    handler.emit(logging.LogRecord("skiplock.pipeline", logging.ERROR, __file__, 1, message, None, exc_info))


def test_the_progress_line_escapes_what_tenants_wrote():
    out = io.StringIO()
    line = ProgressLine(out)
    _emit(line, json.dumps({"event": "run", "runId": "a8455eb4", "trigger": "manual", "stopReason": "error",
                            "jobsDone": 0, "jobsFailed": 0, "jobsDeferred": 0, "error": HOSTILE}))
    try:
        raise RuntimeError(HOSTILE)
    except RuntimeError as exc:
        _emit(line, "run %s failed" % "a8455eb4", exc_info=(type(exc), exc, exc.__traceback__))
    text = out.getvalue()
    assert "error: upstream said: \\x1b]0;pwned\\x07\\x1b[2J\\r\\u202e" in text
    assert "RuntimeError: upstream said: \\x1b]0;pwned" in text  # the traceback's lines stay lines
    assert not {"\x1b", "\x07", "\r", "\u202e"} & set(text), repr(text)
