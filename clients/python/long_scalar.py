"""Long on the wire, for the generated client: the server sends a Long as a JSON string of
its decimal digits (exact past 2^53) and reads one from the same string. The generated
client copies this file into its package and maps Long to a Python int through it, so every
value stays exact both ways."""

from __future__ import annotations


def parse_long(value: object) -> int:
    """A Long from a response: its decimal string, as an int."""
    if isinstance(value, str):
        return int(value)
    raise ValueError(f"a Long arrives as a decimal string, not {value!r}")


def serialize_long(value: int) -> str:
    """A Long for a request: its decimal string."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a Long is an int, not {value!r}")
    return str(value)
