"""Opaque strings handed to clients (consistency tokens, page cursors): URL-safe base64 of
compact JSON, without padding. Clients send them back; only this module reads them."""

from __future__ import annotations

import base64
import binascii

import orjson


class OpaqueError(ValueError):
    """A string that is not one this module encoded."""


def encode(value: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


def decode(text: str) -> object:
    try:
        return orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
        # the decoder's own words name its internals (surrogates, padding), not the text's fault
        raise OpaqueError("it is not base64url-encoded JSON") from exc
