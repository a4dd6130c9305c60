"""Scalars beyond GraphQL's five, each described with its exact wire format (README: The
GraphQL API, Scalars on the wire).

Long is a 64-bit signed integer sent as a JSON string of its decimal digits: a JSON number
past 2^53 is silently rounded by every client whose numbers are doubles (JavaScript's
JSON.parse reads key 9007199254740993 as ...992, and looking that up finds nothing). As input
it takes the same decimal string or, as a convenience, an integer. PostGraphile's BigInt is
sent the same way. No published scalar specification says this (the ones for Long send a
JSON number), so Long carries a description and no @specifiedBy.

DateTime keeps Strawberry's serializer and parser, described exactly: it sends an RFC 3339
date-time in UTC (@specifiedBy RFC 3339's section 5.6) and reads an ISO 8601 date-time as
dateutil's isoparse does (RFC 3339's among them; a naive one is UTC). RFC 3339's own form,
the one clients send, is read by one regular expression into the value isoparse gives
(`parse_datetime`: isoparse costs 15 us, a third of a known asOf's read); anything else by
Strawberry's parser itself.
It is not the date-time of scalars.graphql.org (andimarek), which sends exactly three
fraction digits and "Z", and refuses a time without an offset or with more digits.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable
from operator import index
from typing import Any, NewType, cast

import strawberry
from dateutil import tz
from graphql import IntValueNode, StringValueNode, ValueNode
from strawberry.schema.types.base_scalars import DateTimeDefinition
from strawberry.types.scalar import ScalarDefinition

Long = NewType("Long", int)

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_DECIMAL = re.compile(r"-?[0-9]{1,19}")  # ASCII digits only: re's [0-9], not \d
_DIGITS = re.compile(r"-?[0-9]+")

LONG_DESCRIPTION = (
    "A 64-bit signed integer (-9223372036854775808 to 9223372036854775807): offsets, counts, "
    'sums, long keys. Sent as a JSON string of its decimal digits, e.g. "9007199254740993", '
    "so that clients whose numbers are doubles (JavaScript) keep every digit. Read from a "
    'decimal string ("-42", "9007199254740993") or, as a convenience, an integer (42); a '
    "boolean, a float, a string that is not decimal digits with an optional leading minus "
    "or a value outside the range is refused."
)

DATETIME_DESCRIPTION = (
    "An instant. Sent as an RFC 3339 date-time in UTC with the offset +00:00, e.g. "
    '"2026-01-01T13:00:00+00:00"; fractional seconds only when not zero, as six digits '
    '("2026-01-01T13:00:00.250000+00:00"). Read from an ISO 8601 date-time, RFC 3339 ones '
    'among them ("2026-01-01T13:00:00Z", "2026-01-01T14:00:00+01:00"); one without an '
    'offset is UTC ("2026-01-01T13:00:00", "2026-01-01" is midnight), and digits finer than '
    "microseconds are cut."
)
RFC_3339 = "https://www.rfc-editor.org/rfc/rfc3339#section-5.6"


def serialize_long(value: Any) -> str:
    """A Long's JSON form: its decimal digits, as a string."""
    if type(value) is not int:
        if isinstance(value, bool):
            raise TypeError(f"Long cannot represent a boolean: {value!r}")
        value = index(value)  # numpy's integers; a float or a string raises TypeError
    if not LONG_MIN <= value <= LONG_MAX:
        raise ValueError(f"Long cannot represent {value}: outside the 64-bit range")
    return str(value)


def parse_long(value: object) -> int:
    """A Long's value from JSON: a decimal string or, as a convenience, an integer."""
    if type(value) is str:
        if _DECIMAL.fullmatch(value) is None:
            shown = value if len(value) <= 40 else f"{value[:20]}...({len(value)} characters)"
            if _DIGITS.fullmatch(value) is not None:
                raise ValueError(f"Long cannot represent {shown}: outside the 64-bit range")
            raise ValueError(
                f"Long cannot represent {shown!r}: expected a string of decimal digits with an "
                'optional leading minus, e.g. "9007199254740993"'
            )
        number = int(value)
    elif type(value) is int:
        number = value
    else:
        kind = "a boolean" if isinstance(value, bool) else type(value).__name__
        raise ValueError(
            f"Long cannot represent {value!r} ({kind}): expected a decimal string such as "
            '"9007199254740993", or an integer'
        )
    if not LONG_MIN <= number <= LONG_MAX:
        raise ValueError(f"Long cannot represent {number}: outside the 64-bit range")
    return number


def parse_long_literal(node: ValueNode, _variables: dict[str, Any] | None = None) -> int:
    """A Long written in a document: an integer literal or a decimal string literal."""
    if isinstance(node, IntValueNode):
        return parse_long(node.value)  # its digits, as GraphQL's grammar wrote them
    if isinstance(node, StringValueNode):
        return parse_long(node.value)
    raise ValueError(
        f"Long cannot represent a {node.kind.replace('_', ' ')}: expected a decimal string "
        'such as "9007199254740993", or an integer'
    )


# RFC 3339's date-time (5.6), with a "T", "Z" upper case, at most microseconds; or naive
_RFC_3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?"
)
# Strawberry's parser: dateutil's isoparse, its refusals worded
_ISOPARSE = cast("Callable[[object], object]", DateTimeDefinition.parse_value)


def parse_datetime(value: object) -> object:
    """A DateTime's value from JSON, as Strawberry's parser (dateutil's isoparse) gives it:
    the same instant, tzinfo and refusals."""
    if type(value) is str:
        found = _RFC_3339.fullmatch(value)
        moment = None if found is None else _moment(found)
        if moment is not None:
            return moment
    return _ISOPARSE(value)


def _moment(found: re.Match[str]) -> dt.datetime | None:
    """The datetime isoparse reads from an RFC 3339 date-time; None where its rules go
    beyond the obvious (an hour of 24, an offset out of range, an invalid date): it reads
    those itself."""
    year, month, day, hour, minute, second, fraction, offset = found.groups()
    zone: dt.tzinfo | None = None
    if offset == "Z":
        zone = tz.UTC
    elif offset is not None:
        hours, minutes = int(offset[1:3]), int(offset[4:6])
        if hours > 23 or minutes > 59:
            return None
        seconds = (hours * 60 + minutes) * 60 * (-1 if offset[0] == "-" else 1)
        zone = tz.UTC if seconds == 0 else tz.tzoffset(None, seconds)
    micro = 0 if fraction is None else int(fraction) * 10 ** (6 - len(fraction))
    try:
        return dt.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, zone
        )
    except ValueError:
        return None


SCALARS: dict[object, ScalarDefinition] = {
    Long: strawberry.scalar(
        name="Long",
        description=LONG_DESCRIPTION,
        serialize=serialize_long,
        parse_value=parse_long,
        parse_literal=parse_long_literal,
    ),
    # Strawberry's own serializer (isoformat); its parser's readings, RFC 3339's read first.
    dt.datetime: dataclasses.replace(
        DateTimeDefinition,
        description=DATETIME_DESCRIPTION,
        specified_by_url=RFC_3339,
        parse_value=parse_datetime,
    ),
}
