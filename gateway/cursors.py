"""Opaque page cursors: the last (key[, window start]) a page returned, bound to its store."""

from __future__ import annotations

from contracts import opaque
from contracts.errors import GatewayError
from contracts.partitioner import Key, KeyType


def encode(store: str, last: list[Key]) -> str:
    return opaque.encode({"s": store, "k": last})


def decode(store: str, key_type: KeyType, cursor: str, width: int) -> list[Key]:
    """The (key[, window start]) after which the next page starts; `width` is 1, or 2 for
    windows. BAD_CURSOR when the cursor is malformed or from another store or query."""
    try:
        body = opaque.decode(cursor)
        if not isinstance(body, dict) or body.get("s") != store:
            raise ValueError("it belongs to another store")
        last = body.get("k")
        if not isinstance(last, list) or len(last) != width:
            raise ValueError("it does not fit this query")
        if not _is_key(last[0], key_type) or (width == 2 and not _is_key(last[1], "long")):
            raise ValueError(f"it does not hold a {key_type} key")
        return last
    except ValueError as exc:  # OpaqueError is a ValueError
        raise GatewayError(
            "BAD_CURSOR", f"cursor {cursor[:40]!r} is not valid here: {exc}"
        ) from exc


def _is_key(value: object, key_type: KeyType) -> bool:
    if key_type == "string":
        return isinstance(value, str)
    return isinstance(value, int) and not isinstance(value, bool)
