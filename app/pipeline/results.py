"""What a handler may return as its job's result: None (no result), or a JSON value of at
most MAX_RESULT_BYTES of compact JSON that PostgreSQL's jsonb can hold. The result is kept
on the job (GET /jobs/{id} shows it) and read by the jobs that wait for it
(`ctx.parent_results()`). Anything else fails the job for good, with the reason: the same
return value would be refused on every retry."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_RESULT_BYTES = 64 * 1024

# an escaped NUL in JSON text (not a backslash followed by "u0000")
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class ResultRefused(ValueError):
    pass


def checked_result(value: Any) -> str:
    """`value` as the JSON text to keep; ResultRefused saying why it cannot be kept."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultRefused(f"the handler returned {type(value).__name__}, which is not JSON ({exc}); "
                            "return None, or a JSON value (dict, list, str, number, bool)") from None
    if _NUL.search(text):
        raise ResultRefused("the handler's result contains the NUL character (\\u0000), which PostgreSQL "
                            "cannot store")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ResultRefused("the handler's result contains a lone surrogate (not UTF-8 text)") from None
    if size > MAX_RESULT_BYTES:
        raise ResultRefused(f"the handler's result is {size} bytes of JSON; at most {MAX_RESULT_BYTES} are kept")
    return text
