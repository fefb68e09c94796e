"""What a job payload may be, checked where people enqueue (the API and the CLI; the
pipeline's own enqueues are its code, not input).

Every payload is a JSON object that jsonb can store and the audit log can afford:

- at most `max_bytes` of compact JSON (MAX_PAYLOAD_BYTES), nested at most MAX_DEPTH deep;
- no NUL character in any key or string (jsonb cannot hold one), no lone surrogate
  (not UTF-8), no NaN or Infinity (not JSON).

Then the stage's own declaration, `Stage(payload=Model)`: the payload must validate
against the model, and what is stored is the model's JSON (the fields the sender set,
in their declared types). The model's validators get `context={"settings": ...}`."""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Any, Iterator

from pydantic import BaseModel, ValidationError


MAX_DEPTH = 32
MAX_PROBLEMS = 20

Location = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    location: Location  # inside the payload; () is the payload itself
    message: str


class PayloadRefused(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{'.'.join(map(str, p.location)) or 'payload'}: {p.message}"
                                   for p in problems))


def check_payload(payload: Any, model: type[BaseModel] | None, *, max_bytes: int,
                  context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The payload to store, or PayloadRefused naming every problem (up to MAX_PROBLEMS)."""
    if not isinstance(payload, dict):
        raise PayloadRefused([Problem((), "must be a JSON object")])
    problems = list(islice(_storage_problems(payload), MAX_PROBLEMS))
    if not problems:
        size = json_size(payload)
        if size > max_bytes:
            problems.append(Problem((), f"is {size} bytes of JSON; at most {max_bytes} are accepted"))
    if problems:
        raise PayloadRefused(problems)
    if model is None:
        return payload
    try:
        value = model.model_validate(payload, context=context or {})
    except ValidationError as exc:
        raise PayloadRefused([Problem(tuple(e["loc"]), e["msg"]) for e in exc.errors()[:MAX_PROBLEMS]]) from None
    return value.model_dump(mode="json", exclude_unset=True)


def json_size(value: Any) -> int:
    """Bytes of the value as compact UTF-8 JSON."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains the NUL character (\\u0000), which PostgreSQL cannot store"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not UTF-8 text)"
    return None


def _shown(key: str) -> str:
    """A key as it can be named in an answer: escaped when it is not plain text."""
    return key if _text_problem(key) is None else key.encode("unicode_escape").decode("ascii")


def _storage_problems(payload: dict[str, Any]) -> Iterator[Problem]:
    """Breadth first and without recursion, so no nesting can exhaust the stack."""
    queue: deque[tuple[Location, Any, int]] = deque([((), payload, 1)])
    while queue:
        loc, value, depth = queue.popleft()
        if isinstance(value, (dict, list)) and depth > MAX_DEPTH:
            yield Problem(loc, f"is nested more than {MAX_DEPTH} levels deep")
            continue
        if isinstance(value, dict):
            for key, item in value.items():
                where = loc + (_shown(key),)
                why = _text_problem(key)
                if why:
                    yield Problem(where, f"key {why}")
                queue.append((where, item, depth + 1))
        elif isinstance(value, list):
            queue.extend((loc + (i,), item, depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            why = _text_problem(value)
            if why:
                yield Problem(loc, why)
        elif isinstance(value, float) and not math.isfinite(value):
            yield Problem(loc, "must be a finite number (JSON has no NaN or Infinity)")
