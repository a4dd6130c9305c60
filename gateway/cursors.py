"""Opaque page cursors: the last (key[, window start]) a page returned, bound to its store."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from gateway.errors import GatewayError


def encode(store: str, last: list[Any]) -> str:
    raw = orjson.dumps({"s": store, "k": last})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(store: str, cursor: str, width: int) -> list[Any]:
    """The position after which the next page starts; `width` is 1, or 2 for windows."""
    try:
        body = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(body, dict) or body.get("s") != store:
            raise ValueError("it belongs to another store")
        last = body["k"]
        if not isinstance(last, list) or len(last) != width:
            raise ValueError("it does not fit this query")
        return last
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise GatewayError(
            "BAD_CURSOR", f"cursor {cursor[:40]!r} is not valid here: {exc}"
        ) from exc
