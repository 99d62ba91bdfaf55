"""The one reader of integers from untrusted input (pure): JSON values (health reports, failure
records, checkpoint manifests, a stored status), spec fields and environment variables.

Callers keep their own error types and messages: ``IntegerError.out_of_range`` tells a value
of the wrong kind from one outside the bounds.
"""

from __future__ import annotations


class IntegerError(ValueError):
    """Not an integer, or (``out_of_range``) an integer outside the bounds asked for."""

    def __init__(self, message: str, *, out_of_range: bool) -> None:
        super().__init__(message)
        self.out_of_range = out_of_range


def bounded_int(
    value: object, low: int | None = None, high: int | None = None, *, text: bool = False
) -> int:
    """``value`` as an ``int`` with ``low <= value <= high`` (a bound of ``None``: none).

    Accepted: an ``int`` but never a ``bool`` (JSON's ``true`` is no count); with ``text``,
    also a string of ASCII decimal digits after an optional ``-`` (none of the other spellings
    ``int()`` takes: no spaces, ``+`` or ``_``). Anything else raises ``IntegerError``.
    """
    if text and isinstance(value, str):
        digits = value[1:] if value.startswith("-") else value
        if not (digits.isascii() and digits.isdigit()):
            raise IntegerError(f"must be an integer, got {_show(value)}", out_of_range=False)
        try:
            number = int(value)
        except ValueError:  # more digits than Python converts
            raise IntegerError(
                f"must be an integer, got {_show(value)}", out_of_range=False
            ) from None
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise IntegerError(f"must be an integer, got {_show(value)}", out_of_range=False)
    if low is not None and number < low:
        raise IntegerError(f"must be >= {low}, got {_show(number)}", out_of_range=True)
    if high is not None and number > high:
        raise IntegerError(f"must be <= {high}, got {_show(number)}", out_of_range=True)
    return number


def _show(value: object) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python prints
        return "an integer too long to show"
    return text if len(text) <= 80 else text[:77] + "..."
