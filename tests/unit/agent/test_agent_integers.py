"""bounded_int: the one reader of integers from untrusted input."""

from __future__ import annotations

import pytest
from elasticjob_agent.protocol.integers import IntegerError, bounded_int

ACCEPTED: list[tuple[object, int | None, int | None, bool, int]] = [
    (0, None, None, False, 0),
    (-7, None, None, False, -7),
    (5, 5, 5, False, 5),
    (2**53, 0, 2**53, False, 2**53),
    ("42", 0, None, True, 42),
    ("-3", -5, 5, True, -3),
    ("007", None, None, True, 7),
    (9, 0, 10, True, 9),
]


@pytest.mark.parametrize("value,low,high,text,expected", ACCEPTED)
def test_accepted(
    value: object, low: int | None, high: int | None, text: bool, expected: int
) -> None:
    assert bounded_int(value, low, high, text=text) == expected


NOT_INTEGERS: list[object] = [
    (True, False),
    (False, True),
    (1.0, False),
    (None, False),
    ("3", False),  # text only when asked for
    ("", True),
    ("-", True),
    (" 3", True),
    ("+3", True),
    ("1_000", True),
    ("\uff13", True),  # a digit, but not ASCII
    ("1e3", True),
    pytest.param("9" * 5000, True, id="5000-digits"),  # more than int() converts
]


@pytest.mark.parametrize("value,text", NOT_INTEGERS)
def test_not_an_integer(value: object, text: bool) -> None:
    with pytest.raises(IntegerError, match="must be an integer") as info:
        bounded_int(value, text=text)
    assert not info.value.out_of_range
    assert len(str(info.value)) < 120


@pytest.mark.parametrize(
    "value,low,high,message",
    [
        (-1, 0, None, "must be >= 0, got -1"),
        (11, 0, 10, "must be <= 10, got 11"),
        ("-1", 0, None, "must be >= 0, got -1"),
        pytest.param(10**5000, None, 0, "must be <= 0, got an integer too long to show", id="huge"),
    ],
)
def test_out_of_range(value: object, low: int | None, high: int | None, message: str) -> None:
    with pytest.raises(IntegerError, match=message) as info:
        bounded_int(value, low, high, text=True)
    assert info.value.out_of_range
