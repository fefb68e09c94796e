"""Whole numbers written by someone else (a header, an argument, a setting): ASCII digits
only. str.isdigit says yes to '²' (which int() refuses) and to '٣' (which int() reads as
3), and int() of thousands of digits is slow, then refused."""

from __future__ import annotations


def ascii_digits(text: str) -> bool:
    """One or more of 0-9, nothing else."""
    return text.isascii() and text.isdigit()


def whole_number(text: str, max_digits: int = 18) -> int | None:
    """The number `text` writes in ASCII digits, leading zeros aside at most `max_digits`
    of them; None otherwise."""
    if not ascii_digits(text):
        return None
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= max_digits else None
