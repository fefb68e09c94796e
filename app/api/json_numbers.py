"""Integers in a JSON body, as JSON Schema counts them: a number with no fraction (5 and
5.0 alike), never a string ("5") or a boolean (true)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _whole(value: Any) -> Any:
    """JSON has one number type: 5.0 is the integer 5 to JSON Schema, so it is to us."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Give the field strict=True (or its model strict mode): that refuses "5" and true
JsonInt = Annotated[int, BeforeValidator(_whole)]
