"""Numbers others write: only ASCII digits count, and a long run of them is refused
before int() reads it."""

import pytest

from app.whole_numbers import ascii_digits, whole_number


@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("42", 42), ("007", 7), ("0" * 500 + "9", 9),   # leading zeros are not digits that count
    ("999999999999999999", 999_999_999_999_999_999),
])
def test_plain_digits_read(text, expected):
    assert whole_number(text) == expected


@pytest.mark.parametrize("text", [
    "", " 1", "1 ", "-1", "+1", "1.0", "1e3", "0x10", "1_000",
    "²", "٣", "１２",          # digits to str.isdigit: int() refuses the first and reads the others
    "1" * 19,                  # more than 18 digits
    "9" * 5000,                # int() would refuse it (4,300 digits), slowly
])
def test_anything_else_is_none(text):
    assert whole_number(text) is None


def test_the_digit_bound_is_a_parameter():
    assert whole_number("65536", max_digits=5) == 65536
    assert whole_number("100000", max_digits=5) is None
    assert ascii_digits("1" * 5000) and not ascii_digits("²")
