"""How `skiplock` prints: aligned tables for people, JSON for scripts (`--json`).

Plain text, no rich: a command starts in a fraction of a second and its output pipes
cleanly into grep, head and a pager."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

Column = tuple[str, str]  # (header, key of the row dict)


def table(rows: Iterable[dict[str, Any]], columns: Sequence[Column], *, empty: str = "(none)") -> str:
    """Rows as columns aligned under their headers; `empty` when there are none."""
    cells = [[cell(row.get(key)) for _, key in columns] for row in rows]
    if not cells:
        return empty
    headers = [h for h, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """One `label: value` line per pair, the values aligned."""
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{label + ':':<{width + 1}} {cell(value)}" for label, value in pairs)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))  # ASCII: every control character escaped
    return printable(str(value))


def printable(text: str, keep: str = "") -> str:
    """`text` safe to put on an operator's terminal. Tenants write much of what is shown
    (dedupe keys, errors from their pages and handlers, what a crawl found), and a raw ESC
    retitles the window, clears the screen or hides text; a CR or line break forges a row;
    U+202E turns the rest of the line around. So every character Python does not call
    printable (controls, format characters such as the bidi overrides, line and paragraph
    separators, NUL) is shown as its escape (\\x1b, \\r, \\u202e), except those in `keep`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else _escaped(c) for c in text)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(c: str) -> str:
    if c in _SHORT:
        return _SHORT[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def ago(iso: str | None) -> str | None:
    """'3m ago' for an ISO time, from a JSON answer."""
    if iso is None:
        return None
    seconds = (datetime.now(timezone.utc) - datetime.fromisoformat(iso)).total_seconds()
    return f"{span(abs(seconds))} ago" if seconds >= 0 else f"in {span(-seconds)}"


def span(seconds: float | None) -> str | None:
    """A duration the way a person reads it: 45s, 12m, 3h, 2d."""
    if seconds is None:
        return None
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds:.2f}s"


class OutputClosed(Exception):
    """stdout's reader has gone (`skiplock status | head -1`)."""


def answer(text: str) -> None:
    """Print the command's answer. A reader that has gone is OutputClosed: BrokenPipeError
    is an OSError, which a command would otherwise take for a lost database."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise OutputClosed from None


def render(data: Any, as_json: bool, human) -> str:
    """JSON (indented, for scripts and jq) or `human(data)`."""
    return json.dumps(data, indent=2, default=str) if as_json else human(data)
