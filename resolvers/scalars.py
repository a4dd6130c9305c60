"""Scalars beyond GraphQL's five: Long for 64-bit keys and offsets."""

from __future__ import annotations

from typing import NewType

import strawberry
from strawberry.types.scalar import ScalarDefinition

Long = NewType("Long", int)


def _parse_long(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"Long cannot represent {value!r}")
    number = int(value)
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"Long cannot represent {value!r}: outside 64-bit range")
    return number


SCALARS: dict[object, ScalarDefinition] = {
    Long: strawberry.scalar(
        name="Long",
        description="A 64-bit signed integer (Kafka offsets, Long keys).",
        serialize=int,
        parse_value=_parse_long,
    )
}
