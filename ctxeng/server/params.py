"""Whole-number query parameters (`?limit=`, `?offset=`, `?from=`, `?to=`), read one way everywhere.

A query value is text a person or a fuzzer typed: `str.isdigit()` says yes to `²` and `٣` (which
`int()` refuses or reads as 3), `int()` says yes to ` 7 `, `+7` and `1_000`, and neither bounds
the value, so `?limit=999999999999999999999` reached the database as an out-of-range bigint (500).
`whole_number` accepts ASCII digits only, within the bounds the caller gives (which the database
can hold), and otherwise raises `BadParameter` with `name: what was expected, got '...'`: the API
answers it with 400 JSON (`ctxeng.server.rest.query_int`), the dashboard with its 400 page.

No Django import (the engine's limits only): the message is the same on every surface.
"""

from __future__ import annotations

from ctxeng.engine.limits import MAX_INT32

# What a row offset or a revision number may be: an integer column's range (PostgreSQL's `integer`)
# is far beyond any table here, and far inside `bigint`, where LIMIT and OFFSET are evaluated.
MAX_QUERY_INT = MAX_INT32


class BadParameter(ValueError):
    """A query parameter that is not a whole number within its bounds; str() is `name: message`."""


def whole_number(value: str, *, name: str, minimum: int = 0, maximum: int = MAX_QUERY_INT) -> int:
    """`value` as an int in [minimum, maximum], or BadParameter naming `name`."""
    digits = value if isinstance(value, str) else ""
    # Longer than the maximum's digits is out of range whatever they are: no int() of 5,000 digits.
    if digits.isascii() and digits.isdigit() and len(digits) <= len(str(maximum)):
        number = int(digits)
        if minimum <= number <= maximum:
            return number
    shown = value if len(value) <= 24 else f"{value[:12]}... ({len(value)} characters)"
    raise BadParameter(f"{name}: expected a whole number from {minimum} to {maximum}, got {shown!r}")
