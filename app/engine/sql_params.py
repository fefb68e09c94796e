"""Named parameters in SQL: a statement file writes `:name`, asyncpg wants `$n` by position.

translate() rewrites the text once, when the file is loaded; Statement.bind() then turns
keyword arguments into asyncpg's positional ones, in the order the text was numbered, so
neither side depends on where a value sits in the other's list."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
_POSITIONAL = re.compile(r"\$[0-9]+")
_WORD_CHAR = re.compile(r"[A-Za-z0-9_$]")


@dataclass(frozen=True)
class Statement:
    """One SQL statement in asyncpg's form: `sql` with $1..$n, `names[i]` the value of $i+1."""
    sql: str
    names: tuple[str, ...]
    _expected: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_expected", frozenset(self.names))

    def bind(self, **values: Any) -> tuple[Any, ...]:
        """(sql, value of $1, value of $2, ...): spread it into fetch/fetchrow/execute."""
        if values.keys() != self._expected:
            self._refuse(values)
        return (self.sql, *[values[n] for n in self.names])

    def _refuse(self, values: dict[str, Any]) -> None:
        missing = [n for n in self.names if n not in values]
        unknown = sorted(set(values) - set(self.names))
        problems = []
        if missing:
            problems.append("missing " + ", ".join(missing))
        if unknown:
            problems.append("unknown " + ", ".join(unknown))
        raise TypeError(f"statement parameters: {'; '.join(problems)} "
                        f"(it takes {', '.join(self.names) or 'none'})")


def translate(text: str, source: str = "statement") -> Statement:
    """`:name` -> `$n` outside string literals, quoted identifiers, comments and dollar
    quotes, and not right after a word (an array slice); `::type` casts stay. A name used
    twice is one `$n`. A `$n` of its own is refused: a statement names its parameters.
    `source` names the text in errors."""
    out: list[str] = []
    names: list[str] = []
    i, n = 0, len(text)
    start = 0  # text[start:i] is copied unchanged

    def skip_to(end_marker: str, at: int) -> int:
        end = text.find(end_marker, at)
        return n if end < 0 else end + len(end_marker)

    while i < n:
        c = text[i]
        if c == "'":
            escapes = i > 0 and text[i - 1] in "eE" and (i < 2 or not _WORD_CHAR.match(text[i - 2]))
            i = _end_of_quoted(text, i, "'", backslash=escapes)
        elif c == '"':
            i = _end_of_quoted(text, i, '"', backslash=False)
        elif text.startswith("--", i):
            i = skip_to("\n", i)
        elif text.startswith("/*", i):
            i = _end_of_block_comment(text, i)
        elif c == "$":
            tag = _DOLLAR_TAG.match(text, i)
            if tag and not (i > 0 and _WORD_CHAR.match(text[i - 1])):
                i = skip_to(tag.group(), tag.end())
            elif (positional := _POSITIONAL.match(text, i)) and not (i > 0 and _WORD_CHAR.match(text[i - 1])):
                raise ValueError(f"{source}: positional parameter {positional.group()}; "
                                 "write :name instead")
            else:
                i += 1
        elif c == ":":
            if text.startswith("::", i):
                i += 2
            # never right after a word: arr[lo:hi] is a slice, not a parameter
            elif (name := _NAME.match(text, i + 1)) and not (i > 0 and _WORD_CHAR.match(text[i - 1])):
                if name.group() not in names:
                    names.append(name.group())
                out.append(text[start:i])
                out.append(f"${names.index(name.group()) + 1}")
                i = start = name.end()
            else:
                i += 1
        else:
            i += 1
    out.append(text[start:])
    return Statement("".join(out), tuple(names))


def _end_of_quoted(text: str, i: int, quote: str, *, backslash: bool) -> int:
    """The index after the literal opening at i; a doubled quote stays inside it."""
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if backslash and c == "\\":
            j += 2
        elif c == quote:
            if j + 1 < n and text[j + 1] == quote:
                j += 2
            else:
                return j + 1
        else:
            j += 1
    return n


def _end_of_block_comment(text: str, i: int) -> int:
    """The index after the /* */ comment opening at i; Postgres nests them."""
    depth, j, n = 0, i, len(text)
    while j < n:
        if text.startswith("/*", j):
            depth += 1
            j += 2
        elif text.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    return n
