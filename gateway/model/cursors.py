"""Opaque page cursors: the last (key[, window start]) a page returned, bound to its store."""

from __future__ import annotations

from contracts import opaque
from contracts.errors import GatewayError
from contracts.partitioner import Key, KeyType
from contracts.project import Store

_BITS: dict[KeyType, int] = {"int": 32, "long": 64}


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
        raise _refused(cursor, str(exc)) from exc


def decode_window(store: Store, cursor: str, from_ms: int, to_ms: int) -> tuple[Key, int]:
    """The (key, window start) after which a window scan of [from_ms, to_ms] goes on: a
    start one of its pages can have returned (a multiple of the store's advance, inside the
    range), else BAD_CURSOR."""
    key, start = decode(store.name, store.key_type, cursor, 2)
    assert isinstance(start, int)  # decode checked it
    advance = store.window_advance_ms
    if start % advance:
        raise _refused(cursor, f"window start {start} is not a multiple of {advance} ms")
    if not from_ms <= start <= to_ms:
        raise _refused(cursor, f"window start {start} is outside [{from_ms}, {to_ms}]")
    return key, start


def _refused(cursor: str, why: str) -> GatewayError:
    return GatewayError("BAD_CURSOR", f"cursor {cursor[:40]!r} is not valid here: {why}")


def _is_key(value: object, key_type: KeyType) -> bool:
    if key_type == "string":
        return isinstance(value, str)
    bound = 2 ** (_BITS[key_type] - 1)
    return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
