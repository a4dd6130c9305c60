"""Opaque page cursors: the last (key[, window start]) a page returned, or the last row's
values in a by-value page's order, bound to its store (and order)."""

from __future__ import annotations

from typing import Any

import orjson

from contracts import opaque
from contracts.clock import instant
from contracts.errors import GatewayError
from contracts.partitioner import Key, KeyType
from contracts.project import FieldType, Store
from contracts.snapshot_file import key_columns
from gateway.model.filters import Sort, type_of

_BITS: dict[KeyType, int] = {"int": 32, "long": 64}
MAX_SHOWN = 40  # characters of a cursor's value a message shows


def encode(store: str, last: list[Key]) -> str:
    return opaque.encode({"s": store, "k": last})


def decode(store: str, key_type: KeyType, cursor: str, width: int) -> list[Key]:
    """The (key[, window start]) after which the next page starts; `width` is 1, or 2 for
    windows. BAD_CURSOR, saying what is wrong, when the cursor is malformed or from another
    store or query."""
    last: list[Key] = _body(cursor, store, "k", "it is not a page cursor")["k"]
    if len(last) != width:
        raise _refused(cursor, _misfit(len(last), width))
    if not _is_key(last[0], key_type):
        article = "an" if key_type == "int" else "a"
        raise _refused(cursor, f"its key {_shown(last[0])} is not {article} {key_type} key")
    if width == 2 and not _is_key(last[1], "long"):
        why = f"its window start {_shown(last[1])} is not a whole number of milliseconds"
        raise _refused(cursor, why)
    return last


def decode_window(store: Store, cursor: str, from_ms: int, to_ms: int) -> tuple[Key, int]:
    """The (key, window start) after which a window scan of [from_ms, to_ms] goes on: a
    start one of its pages can have returned (a multiple of the store's advance, inside the
    range), else BAD_CURSOR."""
    key, start = decode(store.name, store.key_type, cursor, 2)
    assert isinstance(start, int)  # decode checked it
    advance = store.window_advance_ms
    if start % advance:
        every = f"they start every {advance} ms from the epoch"
        raise _refused(cursor, f"no window of {store.name} starts at {instant(start)} ({every})")
    if not from_ms <= start <= to_ms:
        bounds = f"[{instant(from_ms)}, {instant(to_ms)}]"
        why = f"its window start {instant(start)} is outside this query's from and to, {bounds}"
        raise _refused(cursor, f"{why}: it is a page of a query with other bounds")
    return key, start


def decode_version(store: Store, cursor: str, key: Key) -> int:
    """The valid_from after which a page of one key's versions goes on, else BAD_CURSOR."""
    last, start = decode(store.name, store.key_type, cursor, 2)
    if last != key:
        raise _refused(cursor, f"it is a page of the versions of {_shown(last)}, not {_shown(key)}")
    assert isinstance(start, int)  # decode checked it
    return start


def encode_ordered(store: str, order: tuple[Sort, ...], last: list[object]) -> str:
    return opaque.encode({"s": store, "o": spelled(order), "v": last})


def decode_ordered(store: Store, order: tuple[Sort, ...], cursor: str) -> tuple[object, ...]:
    """The order values (the key last) after which a by-value page goes on, or BAD_CURSOR:
    a cursor of another store or order, or values that are not the fields' types."""
    body = _body(cursor, store.name, "v", "it is not a cursor of an ordered page")
    last, issued = body["v"], body.get("o")
    if issued != spelled(order):
        raise _refused(cursor, f"it is a page in another order, {_shown(issued)}")
    if len(last) != len(order):
        raise _refused(cursor, f"it holds {len(last)} values, where this order has {len(order)}")
    for sort, value in zip(order, last, strict=True):
        kind = type_of(store, sort.field)
        if not (_is_value(value, kind) or (value is None and sort.field not in key_columns(store))):
            raise _refused(cursor, f"its {sort.field} {_shown(value)} is not a {kind}")
    return tuple(last)


def _body(cursor: str, store: str, field: str, otherwise: str) -> dict[str, Any]:
    """A cursor of `store` whose `field` is a list, or BAD_CURSOR."""
    try:
        body = opaque.decode(cursor)
    except opaque.OpaqueError:
        raise _refused(cursor, "it is not a cursor this gateway issued") from None
    values = body.get(field) if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(values, list):
        raise _refused(cursor, otherwise)
    if body.get("s") != store:
        raise _refused(cursor, f"it belongs to another store, {_shown(body.get('s'))}")
    return body


def spelled(order: tuple[Sort, ...]) -> str:
    return ",".join(f"{s.field} {'desc' if s.descending else 'asc'}" for s in order)


def _is_value(value: object, kind: FieldType) -> bool:
    if kind == "double":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return _is_key(value, kind)


def _refused(cursor: str, why: str) -> GatewayError:
    return GatewayError("BAD_CURSOR", f"cursor {cursor[:40]!r} is not valid here: {why}")


def _misfit(held: int, width: int) -> str:
    if (held, width) == (2, 1):
        return "it is a window scan's cursor, not a key scan's"
    if (held, width) == (1, 2):
        return "it is a key scan's cursor, not a window scan's"
    return f"it holds {held} values, where a cursor of this query holds {width}"


def _shown(value: object) -> str:
    """A value a client's cursor held, in a message: its JSON, at most 40 characters."""
    text = orjson.dumps(value).decode()
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def _is_key(value: object, key_type: KeyType) -> bool:
    if key_type == "string":
        return isinstance(value, str)
    bound = 2 ** (_BITS[key_type] - 1)
    return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
