"""Values as they travel in GraphQL responses. A Long (offsets, counts, sums, long keys) is a
JSON string of decimal digits (resolvers/schema/scalars.py): these read it back, and fail the test
when a Long arrives as anything else, a JSON number above all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.project import Store


def long(value: Any) -> int:
    """A Long from a response."""
    assert type(value) is str, f"a Long must arrive as a decimal string, not {value!r}"
    return int(value)


def maybe_long(value: Any) -> int | None:
    return None if value is None else long(value)


def field(field_type: str, value: Any) -> Any:
    """A value of a store's column or key of `field_type` (contracts/project.py's names)."""
    return maybe_long(value) if field_type == "long" else value


def offsets(position: list[dict[str, Any]]) -> dict[str, int]:
    """[{topic, offset}] -> {topic: offset}."""
    return {o["topic"]: long(o["offset"]) for o in position}


def sent(value: int | None) -> str | None:
    """How an expected Long looks in a response: its decimal string (None stays None)."""
    return None if value is None else str(value)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


def millis(text: str) -> int:
    """A DateTime as whole milliseconds, exactly (no float on the way)."""
    return (datetime.fromisoformat(text) - EPOCH) // MILLISECOND


def iso(ms: int) -> str:
    return (EPOCH + ms * MILLISECOND).isoformat()


def selection(store: Store) -> str:
    window = ["windowStart", "windowEnd"] if store.kind == "window" else []
    return " ".join(["key", *window, *store.columns])


def as_row(store: Store, record: dict[str, Any]) -> tuple:
    window = [millis(record["windowStart"])] if store.kind == "window" else []
    if store.kind == "window":
        assert millis(record["windowEnd"]) - window[0] == store.window_size_ms
    key = field(store.key_type, record["key"])
    return (key, *window, *(field(t, record[c]) for c, t in store.columns.items()))
