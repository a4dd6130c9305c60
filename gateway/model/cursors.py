"""Opaque page cursors: the last (key[, window start]) a page returned, bound to its store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from contracts import opaque
from contracts.errors import GatewayError
from contracts.partitioner import Key, KeyType
from contracts.project import Store

_BITS: dict[KeyType, int] = {"int": 32, "long": 64}
MAX_SHOWN = 40  # characters of a cursor's value a message shows
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode(store: str, last: list[Key]) -> str:
    return opaque.encode({"s": store, "k": last})


def decode(store: str, key_type: KeyType, cursor: str, width: int) -> list[Key]:
    """The (key[, window start]) after which the next page starts; `width` is 1, or 2 for
    windows. BAD_CURSOR, saying what is wrong, when the cursor is malformed or from another
    store or query."""
    try:
        body = opaque.decode(cursor)
    except opaque.OpaqueError:
        raise _refused(cursor, "it is not a cursor this gateway issued") from None
    last = body.get("k") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(last, list):
        raise _refused(cursor, "it is not a page cursor")
    if body.get("s") != store:
        raise _refused(cursor, f"it belongs to another store, {_shown(body.get('s'))}")
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
        raise _refused(cursor, f"no window of {store.name} starts at {_instant(start)} ({every})")
    if not from_ms <= start <= to_ms:
        bounds = f"[{_instant(from_ms)}, {_instant(to_ms)}]"
        why = f"its window start {_instant(start)} is outside this query's from and to, {bounds}"
        raise _refused(cursor, f"{why}: it is a page of a query with other bounds")
    return key, start


def _refused(cursor: str, why: str) -> GatewayError:
    return GatewayError("BAD_CURSOR", f"cursor {cursor[:40]!r} is not valid here: {why}")


def _misfit(held: int, width: int) -> str:
    if (held, width) == (2, 1):
        return "it is a window scan's cursor, not a key scan's"
    if (held, width) == (1, 2):
        return "it is a key scan's cursor, not a window scan's"
    return f"it holds {held} values, where a cursor of this query holds {width}"


def _instant(ms: int) -> str:
    """A window start as the API writes it (RFC 3339, UTC), else in ms past the datetime range."""
    try:
        moment = EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms"
    return moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")


def _shown(value: object) -> str:
    """A value a client's cursor held, in a message: its JSON, at most 40 characters."""
    text = orjson.dumps(value).decode()
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def _is_key(value: object, key_type: KeyType) -> bool:
    if key_type == "string":
        return isinstance(value, str)
    bound = 2 ** (_BITS[key_type] - 1)
    return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
